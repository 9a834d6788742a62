"""rel_attn forward for Hopper (sm_90a), written with the CuTe DSL (nvidia-cutlass-dsl).

One CTA computes one M tile of packed query rows of one request and one KV head: the
``q_per_kv`` query heads that read that KV head are packed into the tile (packed row
``r = token * q_per_kv + head_in_group``), so K and V tiles are loaded once for all of them.
Two warpgroups each own 64 of the tile's 128 rows; both multiply with ``wgmma``:
``S = Q K^T`` with Q and K in shared memory, ``O += P V`` with P straight from registers.

Per CTA the key tiles that hold visible keys (causal, and ``d <= window`` for a sliding layer)
are computed up front and walked from the diagonal downwards; nothing else is loaded. The key
tiles split into *band* tiles (a diagonal, window-edge or bias tile: some element is masked or
has ``0 <= d < E``) and *plain* tiles (every element visible and ``d >= E``). Plain tiles run
the bias-free loop body, with ``softmax_scale * log2(e)`` folded into the exp2 multiply-add.
For a band tile that meets ``0 <= d < E`` the CTA stages, in shared memory, the slice of
``rel_logits`` that the tile's rows can reach (per row: ``tile_n + 8`` distances, aligned down
to 16 bytes), issued with ``cp.async`` before the QK GEMM so the loads overlap it; the softmax
then reads one shared-memory element per score.

K and V are gathered through the block table with ``cp.async`` (16 bytes a copy, rows past the
request's length zero-filled), double-buffered: the loads of the next key tile are in flight
while the current one is multiplied. Q is gathered the same way (its packed rows are not a
box a tensor copy can express for every group size).

Shapes (T tokens, B requests, Hq / Hkv heads, D = head_dim, E = rel_extent):
q, out (T, Hq, D); key_cache, value_cache (num_blocks, page_size, Hkv, D); block_table
(B, max_blocks) int32; cache_seqlens (B,) int32; cu_seqlens_q (B + 1,) int32; rel_logits (T, Hq, E).

Equivalent PyTorch: ``inkling_ops.reference.rel_attn_reference(q, key_cache, value_cache,
block_table, cache_seqlens, cu_seqlens_q, rel_logits, out, softmax_scale=..., window_left=...)``
(window -1 for none), which writes ``out``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as hopper
from cutlass import Float32, Int32, Int64, const_expr
from cutlass.cute.nvgpu import cpasync, warpgroup
from cutlass.tensor_utils import LayoutEnum

LOG2_E = math.log2(math.e)
#: elements of one 16-byte copy (16-bit types)
CHUNK = 8


@dataclass(frozen=True)
class CuteFwdConfig:
    """The code-shaping facts of one compiled kernel (everything else is a runtime argument)."""

    dtype: str  # "bfloat16" or "float16"
    head_dim: int
    q_per_kv: int
    tile_m: int = 128
    tile_n: int = 128

    @property
    def num_threads(self) -> int:
        return 128 * (self.tile_m // 64)

    @property
    def bias_width(self) -> int:
        """Distances staged per row of a band tile: the tile's ``tile_n`` plus 16 bytes of slop."""
        return self.tile_n + CHUNK

    def smem_bytes(self) -> int:
        elem = 2
        q = self.tile_m * self.head_dim * elem
        kv = 2 * 2 * self.tile_n * self.head_dim * elem
        bias = self.tile_m * self.bias_width * elem
        return q + kv + bias


def _cutlass_dtype(name: str):
    return {"bfloat16": cutlass.BFloat16, "float16": cutlass.Float16}[name]


def _acc_mn_layout(acc_layout: cute.Layout) -> cute.Layout:
    """The (rows, cols) view of a wgmma accumulator layout ``((2, 2, N/8), MMA_M, MMA_N)``:
    mode 0[1] (rows r and r + 8) with MMA_M, mode 0[0] (two adjacent columns) with 0[2] and MMA_N."""
    flat = cute.make_layout(acc_layout.shape)
    shape = ((flat.shape[0][1], flat.shape[1]), (flat.shape[0][0], flat.shape[0][2], flat.shape[2]))
    stride = ((flat.stride[0][1], flat.stride[1]), (flat.stride[0][0], flat.stride[0][2], flat.stride[2]))
    return cute.composition(acc_layout, cute.make_layout(shape, stride=stride))


def _acc_as_operand_a(acc_layout: cute.Layout) -> cute.Layout:
    """The accumulator of ``S = Q K^T`` seen as the register A operand of ``O += P V``:
    ``((2, 2, N/8), M, 1)`` -> ``((2, 2, 2), M, N/16)``: each k16 slice of P takes two of the
    accumulator's 8-column groups."""
    split = cute.logical_divide(acc_layout, ((None, None, 2), None, None))
    shape = (
        (split.shape[0][0], split.shape[0][1], split.shape[0][2][0]),
        split.shape[1],
        (split.shape[0][2][1], split.shape[2]),
    )
    stride = (
        (split.stride[0][0], split.stride[0][1], split.stride[0][2][0]),
        split.stride[1],
        (split.stride[0][2][1], split.stride[2]),
    )
    return cute.make_layout(shape, stride=stride)


class RelAttnFwdSm90:
    """The kernel of one :class:`CuteFwdConfig`; ``__call__`` is the host launch (``cute.jit``)."""

    def __init__(self, config: CuteFwdConfig):
        if config.head_dim % 64 != 0 or config.head_dim > 128:
            raise ValueError(f"head_dim is {config.head_dim}; this kernel supports 64 and 128")
        if config.tile_m != 128 or config.tile_n not in (64, 128):
            raise ValueError(f"tile {config.tile_m}x{config.tile_n} is not supported")
        self.config = config
        self.dtype = _cutlass_dtype(config.dtype)
        self.tile_m, self.tile_n, self.head_dim = config.tile_m, config.tile_n, config.head_dim
        self.group = config.q_per_kv
        self.num_threads = config.num_threads
        self.bias_width = config.bias_width
        # threads per row of a 16-byte-chunked (rows, head_dim) tile copy
        self.copy_cols = self.head_dim // CHUNK
        self.copy_rows = self.num_threads // self.copy_cols

    # ---------------------------------------------------------------------------------------------
    # host side
    # ---------------------------------------------------------------------------------------------

    def _smem_layout(self, rows: int, stages: int | None):
        atom = warpgroup.make_smem_layout_atom(
            hopper.get_smem_layout_atom(LayoutEnum.ROW_MAJOR, self.dtype, self.head_dim), self.dtype
        )
        shape = (rows, self.head_dim) if stages is None else (rows, self.head_dim, stages)
        order = (0, 1) if stages is None else (0, 1, 2)
        return cute.tile_to_shape(atom, shape, order=order)

    @cute.jit
    def __call__(
        self,
        mQ: cute.Tensor,
        mK: cute.Tensor,
        mV: cute.Tensor,
        mO: cute.Tensor,
        mBlockTable: cute.Tensor,
        mSeqlens: cute.Tensor,
        mCuSeqlensQ: cute.Tensor,
        mRel: cute.Tensor,
        softmax_scale: Float32,
        window: Int32,
        max_seqlen_q: Int32,
        stream,
    ):
        tiled_mma_qk = hopper.make_trivial_tiled_mma(
            self.dtype, self.dtype, cute.nvgpu.OperandMajorMode.K, cute.nvgpu.OperandMajorMode.K, Float32,
            atom_layout_mnk=(self.tile_m // 64, 1, 1), tiler_mn=(64, self.tile_n),
        )  # fmt: skip
        tiled_mma_pv = hopper.make_trivial_tiled_mma(
            self.dtype, self.dtype, cute.nvgpu.OperandMajorMode.K, cute.nvgpu.OperandMajorMode.MN, Float32,
            atom_layout_mnk=(self.tile_m // 64, 1, 1), tiler_mn=(64, self.head_dim),
            a_source=warpgroup.OperandSource.RMEM,
        )  # fmt: skip
        sQ_layout = self._smem_layout(self.tile_m, None)
        sKV_layout = self._smem_layout(self.tile_n, 2)
        sB_layout = cute.make_layout((self.tile_m, self.bias_width), stride=(self.bias_width, 1))

        @cute.struct
        class SharedStorage:
            sQ: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(sQ_layout)], 1024]
            sK: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(sKV_layout)], 1024]
            sV: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(sKV_layout)], 1024]
            sB: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(sB_layout)], 128]

        copy_atom = cute.make_copy_atom(
            cpasync.CopyG2SOp(cache_mode=cpasync.LoadCacheMode.GLOBAL), self.dtype, num_bits_per_copy=128
        )
        thr_layout = cute.make_ordered_layout((self.copy_rows, self.copy_cols), order=(1, 0))
        tiled_copy = cute.make_tiled_copy_tv(copy_atom, thr_layout, cute.make_layout((1, CHUNK)))

        num_kv_heads = mK.shape[2]
        num_reqs = mSeqlens.shape[0]
        grid_m = (max_seqlen_q * self.group + self.tile_m - 1) // self.tile_m
        scale_log2 = softmax_scale * LOG2_E
        self.kernel(
            mQ, mK, mV, mO, mBlockTable, mSeqlens, mCuSeqlensQ, mRel, scale_log2, window,
            sQ_layout, sKV_layout, sB_layout, tiled_mma_qk, tiled_mma_pv, tiled_copy, copy_atom, SharedStorage,
        ).launch(grid=[grid_m, num_kv_heads, num_reqs], block=[self.num_threads, 1, 1], stream=stream)  # fmt: skip

    # ---------------------------------------------------------------------------------------------
    # device side
    # ---------------------------------------------------------------------------------------------

    @cute.kernel
    def kernel(
        self,
        mQ: cute.Tensor,
        mK: cute.Tensor,
        mV: cute.Tensor,
        mO: cute.Tensor,
        mBlockTable: cute.Tensor,
        mSeqlens: cute.Tensor,
        mCuSeqlensQ: cute.Tensor,
        mRel: cute.Tensor,
        scale_log2: Float32,
        window: Int32,
        sQ_layout: cute.ComposedLayout,
        sKV_layout: cute.ComposedLayout,
        sB_layout: cute.Layout,
        tiled_mma_qk: cute.TiledMma,
        tiled_mma_pv: cute.TiledMma,
        tiled_copy: cute.TiledCopy,
        copy_atom: cute.CopyAtom,
        SharedStorage: cutlass.Constexpr,
    ):
        tile_m, tile_n, G = self.tile_m, self.tile_n, self.group
        tidx, _, _ = cute.arch.thread_idx()
        m_rev, kv_head, req = cute.arch.block_idx()

        # the metadata clamped as inkling_ops/metadata.py says (no change when it is valid)
        num_tokens = mQ.shape[0]
        q_start = cutlass.min(cutlass.max(mCuSeqlensQ[req], 0), num_tokens)
        q_end = cutlass.min(cutlass.max(mCuSeqlensQ[req + 1], q_start), num_tokens)
        q_len = q_end - q_start
        page_size = mK.shape[1]
        capacity = mBlockTable.shape[1] * page_size
        kv_len = cutlass.min(cutlass.max(mSeqlens[req], 0), capacity)
        num_m = (q_len * G + tile_m - 1) // tile_m
        if m_rev < num_m:
            # the last M tile of a request (most keys under causality) gets the lowest block index
            m_block = num_m - 1 - m_rev
            smem = cutlass.memory.SmemAllocator()
            storage = smem.allocate(SharedStorage)
            sQ = storage.sQ.get_tensor(sQ_layout.outer, swizzle=sQ_layout.inner)
            sK = storage.sK.get_tensor(sKV_layout.outer, swizzle=sKV_layout.inner)
            sV = storage.sV.get_tensor(sKV_layout.outer, swizzle=sKV_layout.inner)
            sB = storage.sB.get_tensor(sB_layout)
            # V seen as the (head_dim, tile_n) B operand of O += P V
            sVt = cute.composition(
                sV, cute.make_ordered_layout((self.head_dim, tile_n, 2), order=(1, 0, 2))
            )

            # -------- tile ranges (uniform over the CTA) --------
            offset = kv_len - q_len  # q_abs = offset + token
            tok_lo = m_block * tile_m // G
            tok_hi = cutlass.min((m_block * tile_m + tile_m - 1) // G, q_len - 1)
            qa_lo = offset + tok_lo
            qa_hi = offset + tok_hi
            rel_extent = mRel.shape[2]
            n_end = cutlass.min((qa_hi + 1 + tile_n - 1) // tile_n, (kv_len + tile_n - 1) // tile_n)
            n_end = cutlass.max(n_end, 0)
            n_begin = cutlass.max(qa_lo - window, 0) // tile_n
            plain_lo = (cutlass.max(qa_hi - window, 0) + tile_n - 1) // tile_n
            # plain tiles: every d >= E (so no bias, and visible under causality), inside the window
            plain_hi = cutlass.min(cutlass.max(qa_lo - rel_extent + 1, 0) // tile_n, n_end)
            plain_lo = cutlass.max(plain_lo, n_begin)

            # -------- MMA partitions --------
            wg_idx = tidx // 128
            wg_layout = cute.make_layout(tile_m // 64, stride=128)
            thr_mma_qk = tiled_mma_qk.get_slice(tidx)
            wg_mma_qk = tiled_mma_qk.get_slice(wg_layout(wg_idx))
            wg_mma_pv = tiled_mma_pv.get_slice(wg_layout(wg_idx))
            tSrQ = wg_mma_qk.make_fragment_A(wg_mma_qk.partition_A(sQ))
            tSrK = wg_mma_qk.make_fragment_B(wg_mma_qk.partition_B(sK))
            tOrVt = wg_mma_pv.make_fragment_B(wg_mma_pv.partition_B(sVt))
            acc_O = cute.make_rmem_tensor(tiled_mma_pv.partition_shape_C((tile_m, self.head_dim)), Float32)
            acc_O.fill(0.0)
            acc_S_shape = tiled_mma_qk.partition_shape_C((tile_m, tile_n))
            # the (row, col) of each score this thread holds
            cS = cute.make_identity_tensor((tile_m, tile_n))
            tScS = thr_mma_qk.partition_C(cS)
            tScS_mn = cute.make_tensor(tScS.iterator, _acc_mn_layout(tScS.layout))
            num_rows = cute.size(tScS_mn, mode=[0])
            row_max = cute.make_rmem_tensor(num_rows, Float32)
            row_sum = cute.make_rmem_tensor(num_rows, Float32)
            row_max.fill(-Float32.inf)
            row_sum.fill(0.0)
            # q_abs of each of this thread's rows, and its staged-bias column of distance d = q_abs - n0
            row_qabs = cute.make_rmem_tensor(num_rows, Int32)
            for i in cutlass.range_constexpr(num_rows):
                row_qabs[i] = offset + (m_block * tile_m + tScS_mn[i, 0][0]) // G

            # -------- loads --------
            thr_copy = tiled_copy.get_slice(tidx)
            cT = cute.make_identity_tensor((tile_n, self.head_dim))
            tTcT = thr_copy.partition_S(cT)
            cQ = cute.make_identity_tensor((tile_m, self.head_dim))
            tQcQ = thr_copy.partition_S(cQ)
            tQsQ = thr_copy.partition_D(sQ)
            q_head0 = kv_head * G
            for m in cutlass.range_constexpr(cute.size(tQsQ, mode=[1])):
                row = m_block * tile_m + tQcQ[0, m, 0][0]
                tok = row // G
                col = tQcQ[0, m, 0][1]
                dst = tQsQ[None, m, 0]
                if tok < q_len:
                    src = self._gmem_chunk(mQ, (q_start + tok, q_head0 + row % G, col), dst)
                    cute.copy(copy_atom, src, dst)
                else:
                    dst.fill(0.0)

            block_row = mBlockTable[req, None]
            num_blocks = mK.shape[0]

            n_tiles = cutlass.max(n_end - n_begin, 0)
            if n_tiles > 0:
                self._load_kv(mK, mV, sK, sV, block_row, num_blocks, page_size, kv_head, kv_len, n_end - 1, 0,
                              thr_copy, tTcT, copy_atom)  # fmt: skip
            cute.arch.cp_async_commit_group()

            for it in cutlass.range(n_tiles, unroll=1):
                n = n_end - 1 - it
                stage = it % 2
                cute.arch.cp_async_wait_group(0)
                cute.arch.fence_view_async_shared()
                cute.arch.sync_threads()
                is_plain = n >= plain_lo and n < plain_hi
                n0 = n * tile_n
                # the tile meets the bias band 0 <= d < E (d_min < E; d_max >= 0 holds below n_end)
                in_band = (not is_plain) and qa_lo - (n0 + tile_n - 1) < rel_extent
                if in_band:
                    self._load_bias(mRel, sB, q_start, q_len, q_head0, offset, m_block, n0, rel_extent, tidx,
                                    copy_atom)  # fmt: skip
                cute.arch.cp_async_commit_group()
                if it + 1 < n_tiles:
                    self._load_kv(mK, mV, sK, sV, block_row, num_blocks, page_size, kv_head, kv_len, n - 1, 1 - stage,
                                  thr_copy, tTcT, copy_atom)  # fmt: skip
                cute.arch.cp_async_commit_group()

                # S = Q K^T
                acc_S = cute.make_rmem_tensor(acc_S_shape, Float32)
                self._gemm(tiled_mma_qk, acc_S, tSrQ, tSrK[None, None, None, stage], True)
                acc_S_mn = cute.make_tensor(acc_S.iterator, _acc_mn_layout(acc_S.layout))
                acc_O_mn = cute.make_tensor(acc_O.iterator, _acc_mn_layout(acc_O.layout))

                if is_plain:
                    self._softmax_step(acc_S_mn, acc_O_mn, row_max, row_sum, scale_log2)
                else:
                    if in_band:
                        cute.arch.cp_async_wait_group(1)
                        cute.arch.sync_threads()
                    # scores in log2 units, masked and biased
                    for i in cutlass.range_constexpr(num_rows):
                        qa = row_qabs[i]
                        r = tScS_mn[i, 0][0]
                        # column of distance d = qa - n0 in this row's staged slice
                        base = qa - n0 - ((qa - n0 - tile_n + 1) & ~(CHUNK - 1))
                        for j in cutlass.range_constexpr(cute.size(tScS_mn, mode=[1])):
                            c = tScS_mn[0, j][1]
                            d = qa - n0 - c
                            # always in bounds of the staged slice; unstaged distances are selected away
                            bias = sB[r, base - c].to(Float32) * LOG2_E
                            s = acc_S_mn[i, j] * scale_log2 + cutlass.select_(d < rel_extent, bias, Float32(0.0))
                            visible = d >= 0 and d <= window and n0 + c < kv_len
                            acc_S_mn[i, j] = s if visible else -Float32.inf
                    self._softmax_step(acc_S_mn, acc_O_mn, row_max, row_sum, Float32(1.0))

                # O += P V, P from registers
                rP = cute.make_rmem_tensor(_acc_as_operand_a(acc_S.layout).shape, self.dtype)
                rP_as_acc = cute.make_tensor(rP.iterator, _acc_as_operand_a(acc_S.layout))
                rP_flat = cute.make_tensor(rP.iterator, cute.make_layout(cute.size(rP)))
                acc_flat = cute.make_tensor(acc_S.iterator, cute.make_layout(cute.size(acc_S)))
                del rP_as_acc
                rP_flat.store(acc_flat.load().to(self.dtype))
                self._gemm(tiled_mma_pv, acc_O, rP, tOrVt[None, None, None, stage], False)

            # -------- epilogue: O / row_sum, rows of this request only --------
            acc_O_mn = cute.make_tensor(acc_O.iterator, _acc_mn_layout(acc_O.layout))
            cO = cute.make_identity_tensor((tile_m, self.head_dim))
            thr_mma_pv = tiled_mma_pv.get_slice(tidx)
            tOcO = thr_mma_pv.partition_C(cO)
            tOcO_mn = cute.make_tensor(tOcO.iterator, _acc_mn_layout(tOcO.layout))
            for i in cutlass.range_constexpr(num_rows):
                total = cute.arch.warp_reduction_sum(row_sum[i], threads_in_group=4)
                inv = Float32(0.0)
                if total > 0.0:
                    inv = 1.0 / total
                row = m_block * tile_m + tOcO_mn[i, 0][0]
                tok = row // G
                if tok < q_len:
                    out_row = mO[q_start + tok, q_head0 + row % G, None]
                    for j in cutlass.range_constexpr(cute.size(tOcO_mn, mode=[1])):
                        out_row[tOcO_mn[0, j][1]] = (acc_O_mn[i, j] * inv).to(self.dtype)

    @cute.jit
    def _gmem_chunk(self, mX: cute.Tensor, coord, like: cute.Tensor) -> cute.Tensor:
        """The 16-byte chunk of ``mX`` that starts at ``coord``, laid out as ``like``."""
        offset = cute.crd2idx(coord, mX.layout)
        address = (mX.iterator + offset).toint()
        ptr = cute.make_ptr(mX.element_type, address, cute.AddressSpace.gmem, assumed_align=16)
        return cute.make_tensor(ptr, like.layout)

    @cute.jit
    def _load_kv(self, mK, mV, sK, sV, block_row, num_blocks, page_size, kv_head, kv_len, n, stage, thr_copy, tTcT,
                 copy_atom):  # fmt: skip
        """cp.async the K and V rows of key tile ``n`` into ``stage``; rows past ``kv_len`` are
        zero-filled; page ids are clamped into the cache, as inkling_ops/metadata.py says."""
        tKsK = thr_copy.partition_D(sK[None, None, stage])
        tVsV = thr_copy.partition_D(sV[None, None, stage])
        for m in cutlass.range_constexpr(cute.size(tKsK, mode=[1])):
            j = n * self.tile_n + tTcT[0, m, 0][0]
            col = tTcT[0, m, 0][1]
            page = Int32(0)
            valid = j < kv_len
            if valid:
                page = cutlass.min(cutlass.max(block_row[j // page_size], 0), num_blocks - 1)
            slot = j % page_size
            dk = tKsK[None, m, 0]
            dv = tVsV[None, m, 0]
            if valid:
                cute.copy(copy_atom, self._gmem_chunk(mK, (page, slot, kv_head, col), dk), dk)
                cute.copy(copy_atom, self._gmem_chunk(mV, (page, slot, kv_head, col), dv), dv)
            else:
                dk.fill(0.0)
                dv.fill(0.0)

    @cute.jit
    def _load_bias(self, mRel, sB, q_start, q_len, q_head0, offset, m_block, n0, rel_extent, tidx, copy_atom):
        """cp.async, per packed row of the tile, the distances ``[d0, d0 + bias_width)`` of its
        rel_logits row, ``d0 = (q_abs - n0 - tile_n + 1)`` aligned down to 8: the slice key tile
        ``n0`` can reach. 16-byte chunks outside ``[0, E)`` are skipped (the softmax never reads them)."""
        chunks_per_row = self.bias_width // CHUNK
        total = self.tile_m * chunks_per_row
        for i in cutlass.range_constexpr((total + self.num_threads - 1) // self.num_threads):
            idx = tidx + i * self.num_threads
            r = idx // chunks_per_row
            k = idx % chunks_per_row
            row = m_block * self.tile_m + r
            tok = row // self.group
            qa = offset + tok
            d = ((qa - n0 - self.tile_n + 1) & ~(CHUNK - 1)) + k * CHUNK
            ok = idx < total and tok < q_len and d >= 0 and d < rel_extent
            if ok:
                address = (sB.iterator + (r * self.bias_width + k * CHUNK)).toint()
                dst_ptr = cute.make_ptr(self.dtype, address, cute.AddressSpace.smem, assumed_align=16)
                dst = cute.make_tensor(dst_ptr, cute.make_layout(CHUNK))
                src = self._gmem_chunk(mRel, (q_start + tok, q_head0 + row % self.group, d), dst)
                cute.copy(copy_atom, src, dst)

    @cute.jit
    def _gemm(self, tiled_mma, acc, tA, tB, zero_init: cutlass.Constexpr):
        """acc (+)= A B over the K blocks, one warpgroup MMA batch, waited for."""
        warpgroup.fence()
        atom = cute.make_mma_atom(tiled_mma.op)
        atom.set(warpgroup.Field.ACCUMULATE, not zero_init)
        for k in cutlass.range_constexpr(cute.size(tA.shape[2])):
            cute.gemm(atom, acc, tA[None, None, k], tB[None, None, k], acc)
            atom.set(warpgroup.Field.ACCUMULATE, True)
        warpgroup.commit_group()
        warpgroup.wait_group(0)

    @cute.jit
    def _softmax_step(self, s_mn, o_mn, row_max, row_sum, scale):
        """Online softmax over one tile of scores ``s_mn`` (rows, cols), in place (scores become
        probabilities); ``scale`` turns a score into log2 units (1 when it already is)."""
        for i in cutlass.range_constexpr(cute.size(s_mn, mode=[0])):
            tile_max = s_mn[i, 0]
            for j in cutlass.range_constexpr(1, cute.size(s_mn, mode=[1])):
                tile_max = cute.arch.fmax(tile_max, s_mn[i, j])
            tile_max = cute.arch.warp_reduction_max(tile_max, threads_in_group=4)
            new_max = cute.arch.fmax(row_max[i], tile_max * scale)
            # a row with nothing visible yet keeps offset 0 (exp2(-inf) = 0, no NaN)
            safe_max = new_max
            if new_max == -Float32.inf:
                safe_max = Float32(0.0)
            correction = cute.math.exp2(row_max[i] - safe_max, fastmath=True)
            row_max[i] = new_max
            partial = Float32(0.0)
            for j in cutlass.range_constexpr(cute.size(s_mn, mode=[1])):
                p = cute.math.exp2(s_mn[i, j] * scale - safe_max, fastmath=True)
                s_mn[i, j] = p
                partial += p
            row_sum[i] = row_sum[i] * correction + partial
            for j in cutlass.range_constexpr(cute.size(o_mn, mode=[1])):
                o_mn[i, j] = o_mn[i, j] * correction


def compile_fwd(config: CuteFwdConfig, *, options: str = "--enable-tvm-ffi"):
    """Compile the kernel of ``config`` for ``CUTE_DSL_ARCH`` (set it, e.g. to ``sm_90a``, on a
    machine without that GPU) from fake tensors: no GPU and no tensors needed. Returns the DSL's
    compiled function (with TVM-FFI: callable with torch tensors, on torch's current stream).

    Call signature of the result: ``(q, key_cache, value_cache, out, block_table, cache_seqlens,
    cu_seqlens_q, rel_logits, softmax_scale: float, window: int, max_seqlen_q: int)``; ``window``:
    keys at distance ``d <= window`` are visible (a huge value, e.g. ``2**30``, for no window).
    """
    from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

    dtype = _cutlass_dtype(config.dtype)
    D = config.head_dim

    def sym(div=1, wide=False):
        return cute.sym_int64(divisibility=div) if wide else cute.sym_int32(divisibility=div)

    tokens, heads, kv_heads, blocks, reqs = sym(), sym(), sym(), sym(), sym()
    q = make_fake_tensor(dtype, (tokens, heads, D), (sym(8, True), sym(8), 1), assumed_align=16)
    o = make_fake_tensor(dtype, (tokens, heads, D), (sym(8, True), sym(8), 1), assumed_align=16)
    kv_shape = (blocks, sym(), kv_heads, D)
    k = make_fake_tensor(dtype, kv_shape, (sym(8, True), sym(8, True), sym(8), 1), assumed_align=16)
    v = make_fake_tensor(dtype, kv_shape, (sym(8, True), sym(8, True), sym(8), 1), assumed_align=16)
    table = make_fake_tensor(Int32, (reqs, sym()), (sym(), 1), assumed_align=4)
    seqlens = make_fake_tensor(Int32, (reqs,), (1,), assumed_align=4)
    cu = make_fake_tensor(Int32, (sym(),), (1,), assumed_align=4)
    rel = make_fake_tensor(dtype, (tokens, heads, sym(8)), (sym(8, True), sym(8), 1), assumed_align=16)
    stream = make_fake_stream(use_tvm_ffi_env_stream=True)
    kernel = RelAttnFwdSm90(config)
    return cute.compile(
        kernel, q, k, v, o, table, seqlens, cu, rel, Float32(1.0), Int32(-1), Int32(1), stream, options=options
    )


__all__ = ["CuteFwdConfig", "RelAttnFwdSm90", "compile_fwd", "LOG2_E", "Int64"]
