"""Does a TMA box load of rel_logits work on the H200, and in which form? (lab tool, not the product)

    python3 meta/tools/bias_tma_probe.py --compile-only            # CPU: compile every variant for sm_90a
    python3 meta/tools/bias_tma_probe.py --variant NAME            # H200: run one variant, check it
    python3 meta/tools/bias_tma_probe.py --triton NAME             # H200: the same boxes by Triton's TMA
    for v in $(python3 meta/tools/bias_tma_probe.py --list); do
        python3 meta/tools/bias_tma_probe.py --variant $v; done      # one process each (a fault poisons it)

The CuTe kernel's first bias by TMA (8a85f3c-44ce870) raised "illegal instruction" at its first
copy and was deleted without a cause. This probe runs the copy alone: one CTA per token ``t`` of a
``(T, Hq, E)`` bf16 tensor loads one box of ``width`` distances from ``d_start[t]`` by ``G`` query
heads from ``head0`` into shared memory, with an mbarrier's transaction count, and writes it out;
the result is checked against ``rel[t, head0 + h, d_start[t] + j]`` (zero where the distance is
outside ``[0, E)``, TMA's out-of-bounds fill).

Variants (``--list``): the view of rel_logits the descriptor is made from, ``3d`` (E, Hq, T), as
the deleted code had it, or ``2d`` (E, T * Hq), rows of G heads of one token being G consecutive
rows, both with the unit-stride mode first and an unswizzled box; ``rows``: (T * Hq, E) with a
row-major (G, width) box, the mode order of the K/V pages' TMA; ``rows_sw``: the same with the
128-byte swizzle those pages use (64 distances a box); the box width (128, 64 or 136 distances);
and the starts: ``edges`` (some below 0, some past E - width, as the band tiles' are, most not a
multiple of 8), ``inside`` (random, inside ``[0, E)``) or ``aligned`` (multiples of 8, at the
edges and inside). Controls: ``kvpage`` loads a 128 x 128 page of rel_logits' memory seen as a K
cache, as the kernel's K/V TMA loads one; ``rows_static`` / ``rows_sw_static`` give E a
compile-time 1024.

What the H200 said (``meta/TUNING.md``, "sixth day"): every variant whose box starts are not
multiples of 16 bytes raised "illegal instruction" (the 13 first ones, ``rows_static_w128_edges``,
and Triton's TMA on the same boxes); every ``aligned`` variant and ``kvpage`` passed, zeros
outside ``[0, E)`` included. A TMA box's innermost start must be 16-byte aligned; the kernel's
``bias_tma`` starts its boxes at the same 8-distance-aligned ``d0`` its bulk copies use.
"""


import argparse
import sys

VARIANTS = {
    f"{view}_w{width}_{starts}": (view, width, starts)
    for view in ("3d", "2d", "rows", "rows_sw")
    for width in (128, 64)
    for starts in ("inside", "edges")
    if view != "rows_sw" or width == 64
}
# the control: rel_logits' memory seen as a K cache of pages of 128 x 128, one page loaded as the
# kernel's K/V TMA loads it (its mode order, its swizzled layout, two 64-column boxes)
VARIANTS["kvpage"] = ("kvpage", 128, "inside")
# the kernel's K/V view has a static innermost extent (head_dim), rel_logits' views above a dynamic
# one (E); these two give the (T * Hq, E) view a static E
VARIANTS["rows_static_w128_edges"] = ("rows_static", 128, "edges")
VARIANTS["rows_sw_static_w64_edges"] = ("rows_sw_static", 64, "edges")
# the third suspect: a box's innermost start not a multiple of 16 bytes (Triton's interpreter refuses
# such a descriptor load; tile-ai/tilelang#2527 reports "illegal instruction" for one); "aligned"
# starts are multiples of 8 distances, at the edges and inside, and 136 is the width a band row needs
# when its start is rounded down to one
for _view, _width in (("rows", 128), ("rows", 136), ("3d", 128), ("rows_sw", 64), ("2d", 128)):
    VARIANTS[f"{_view}_w{_width}_aligned"] = (_view, _width, "aligned")
T, HQ, E, G, HEAD0 = 96, 8, 1024, 8, 0
KV_PAGES = T * HQ * E // (128 * 128)  # the kvpage control's pages of 128 x 128
ROW_MAJOR = ("rows", "rows_sw", "rows_static", "rows_sw_static", "kvpage")  # boxes (rows, distances)
SWIZZLED = ("rows_sw", "rows_sw_static", "kvpage")  # boxes in the 128-byte swizzle


def build(view: str, width: int):
    """The jit function of one variant: ``(rel (T, Hq, E), out (T, G, width), starts (T,))``."""
    import cutlass
    import cutlass.cute as cute
    from cutlass import Int64
    from cutlass.cute.nvgpu import cpasync, warpgroup
    from cutlass.tensor_utils import LayoutEnum
    import cutlass.utils.hopper_helpers as hopper

    class Probe:
        @cute.jit
        def __call__(self, mRel: cute.Tensor, mOut: cute.Tensor, mStarts: cute.Tensor, stream):
            rows = mRel.shape[0] * mRel.shape[1]
            if cutlass.const_expr(view == "kvpage"):
                cache = cute.make_tensor(mRel.iterator, cute.make_layout((KV_PAGES, 128, 1, 128), stride=(128 * 128, 128, 128, 1)))
                rel = cute.make_tensor(cache.iterator, cute.select(cache.layout, mode=[1, 3, 2, 0]))
            elif cutlass.const_expr(view == "3d"):
                rel = cute.make_tensor(mRel.iterator, cute.select(mRel.layout, mode=[2, 1, 0]))
            elif cutlass.const_expr(view == "2d"):
                # (E, T * Hq): row t * Hq + h is token t's head h (rel_logits contiguous over heads)
                rel = cute.make_tensor(mRel.iterator, cute.make_layout((mRel.shape[2], rows), stride=(1, mRel.stride[1])))
            elif cutlass.const_expr(view in ("rows_static", "rows_sw_static")):
                rel = cute.make_tensor(mRel.iterator, cute.make_layout((rows, E), stride=(E, 1)))
            else:
                rel = cute.make_tensor(mRel.iterator, cute.make_layout((rows, mRel.shape[2]), stride=(mRel.stride[1], 1)))
            # the box (tiler) and its shared-memory layout
            tiler = (128, 128) if view == "kvpage" else (G, width) if view in ROW_MAJOR else (width, G)
            if cutlass.const_expr(view in SWIZZLED):
                sw_atom = warpgroup.make_smem_layout_atom(
                    hopper.get_smem_layout_atom(LayoutEnum.ROW_MAJOR, mRel.element_type, tiler[1]), mRel.element_type)
                box = cute.tile_to_shape(sw_atom, tiler, order=(0, 1))
            else:
                box = cute.make_layout(tiler, stride=(tiler[1], 1) if view in ROW_MAJOR else (1, tiler[0]))
            atom, tRel = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), rel, box, tiler)

            @cute.struct
            class Storage:
                mbar: cute.struct.MemRange[Int64, 1]
                buf: cute.struct.Align[cute.struct.MemRange[mRel.element_type, tiler[0] * tiler[1]], 1024]

            self.kernel(atom, tRel, mOut, mStarts, box, Storage).launch(
                grid=[mStarts.shape[0], 1, 1], block=[128, 1, 1], stream=stream
            )

        @cute.kernel
        def kernel(self, atom: cute.CopyAtom, tRel: cute.Tensor, mOut: cute.Tensor, mStarts: cute.Tensor,
                   box: cute.Layout | cute.ComposedLayout, Storage: cutlass.Constexpr):  # fmt: skip
            tidx, _, _ = cute.arch.thread_idx()
            tok, _, _ = cute.arch.block_idx()
            warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
            if warp == 0:
                cpasync.prefetch_descriptor(atom)
            storage = cutlass.memory.SmemAllocator().allocate(Storage)
            if cutlass.const_expr(view in SWIZZLED):
                sBuf = storage.buf.get_tensor(box.outer, swizzle=box.inner)
            else:
                sBuf = storage.buf.get_tensor(box)
            mbar = storage.mbar.data_ptr()
            if tidx == 0:
                cute.arch.mbarrier_init(mbar, 1)
            cute.arch.mbarrier_init_fence()
            cute.arch.sync_threads()
            d_start = mStarts[tok]
            if warp == 0:
                if cutlass.const_expr(view == "kvpage"):
                    gX = cute.local_tile(tRel[None, None, 0, None], (128, 128), (0, 0, None))
                    sX_tma, gX_tma = cpasync.tma_partition(
                        atom, 0, cute.make_layout(1), cute.group_modes(sBuf, 0, 2), cute.group_modes(gX, 0, 2)
                    )
                    with cute.arch.elect_one():
                        cute.arch.mbarrier_arrive_and_expect_tx(mbar, 128 * 128 * 2)
                    cute.copy(atom, gX_tma[None, tok % KV_PAGES], sX_tma, tma_bar_ptr=mbar)
                elif cutlass.const_expr(view == "3d"):
                    gB = cute.domain_offset((d_start, HEAD0, tok), tRel)
                    gBox = cute.local_tile(gB[None, None, 0], (width, G), (0, 0))
                elif cutlass.const_expr(view == "2d"):
                    gB = cute.domain_offset((d_start, tok * HQ + HEAD0), tRel)
                    gBox = cute.local_tile(gB, (width, G), (0, 0))
                else:
                    gB = cute.domain_offset((tok * HQ + HEAD0, d_start), tRel)
                    gBox = cute.local_tile(gB, (G, width), (0, 0))
                if cutlass.const_expr(view != "kvpage"):
                    sBox, gBox_tma = cpasync.tma_partition(
                        atom, 0, cute.make_layout(1), cute.group_modes(sBuf, 0, 2), cute.group_modes(gBox, 0, 2)
                    )
                    with cute.arch.elect_one():
                        cute.arch.mbarrier_arrive_and_expect_tx(mbar, width * G * 2)
                    cute.copy(atom, gBox_tma, sBox, tma_bar_ptr=mbar)
            cute.arch.mbarrier_wait(mbar, 0)
            for k in cutlass.range_constexpr((width * G + 127) // 128):
                e = tidx + k * 128
                if e < width * G:
                    if cutlass.const_expr(view in ROW_MAJOR):
                        mOut[tok, e // width, e % width] = sBuf[e // width, e % width]
                    else:
                        mOut[tok, e // width, e % width] = sBuf[e % width, e // width]

    return Probe()


def compile_variant(name: str, arch: str | None = None):
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

    from inkling_ops.kernels import cute_runtime

    view, width, _ = VARIANTS[name]
    tokens, heads, extent = cute.sym_int32(), cute.sym_int32(), cute.sym_int32(divisibility=8)
    rel = make_fake_tensor(cutlass.BFloat16, (tokens, heads, extent),
                           (cute.sym_int64(divisibility=8), cute.sym_int32(divisibility=8), 1), assumed_align=16)  # fmt: skip
    out = make_fake_tensor(cutlass.BFloat16, (tokens, G, width), (G * width, width, 1), assumed_align=64)
    starts = make_fake_tensor(cutlass.Int32, (tokens,), (1,), assumed_align=4)
    stream = make_fake_stream(use_tvm_ffi_env_stream=True)
    probe = build(view, width)
    kwargs = {"arch": arch} if arch else {}
    return cute_runtime.compile_with(lambda flags: cute.compile(probe, rel, out, starts, stream, options=flags),
                                     ptx=True, name=name, **kwargs)  # fmt: skip


def inputs(name: str, device: str = "cuda"):
    """``(rel (T, Hq, E), starts (T,), out (T, G, width) of NaN)`` on ``device``, seeded."""
    import torch

    _, width, starts_kind = VARIANTS[name]
    gen = torch.Generator().manual_seed(0)
    rel = torch.randn(T, HQ, E, generator=gen).to(torch.bfloat16).to(device)
    if starts_kind == "inside":
        starts = torch.randint(0, E - width + 1, (T,), generator=gen, dtype=torch.int32)
    elif starts_kind == "aligned":  # multiples of 8: below 0, straddling 0, at 0, inside, straddling E, past E
        starts = torch.tensor([(-width - 8, -width + 8, -48, 0, 8, (E - width) // 8 * 8, E - 48, E + 8)[t % 8] for t in range(T)], dtype=torch.int32)
    else:  # below 0, straddling 0, straddling E, past E, inside
        starts = torch.tensor([(-width - 5, -width + 3, -47, 0, 5, E - width, E - 47, E + 3)[t % 8] for t in range(T)], dtype=torch.int32)
    out = torch.full((T, G, width), float("nan"), dtype=torch.bfloat16, device=device)
    return rel, starts.to(device), out


def check(name: str, rel, starts, out, label: str | None = None) -> bool:
    """Compare ``out`` with what variant ``name`` should have loaded; print PASS / FAIL."""
    import torch

    view, width, _ = VARIANTS[name]
    rel, starts, out = rel.cpu(), starts.cpu(), out.cpu()
    if view == "kvpage":  # the first G rows of page t % KV_PAGES
        pages = rel.reshape(-1, 128, 128)
        want = torch.stack([pages[t % KV_PAGES][:G] for t in range(T)])
    else:
        d = starts[:, None] + torch.arange(width)[None, :]  # (T, width)
        inside = (d >= 0) & (d < E)
        want = torch.zeros(T, G, width, dtype=torch.bfloat16)
        for t in range(T):
            cols = inside[t].nonzero().flatten()
            want[t][:, cols] = rel[t, HEAD0:HEAD0 + G][:, d[t, cols]]
    ok = torch.equal(out, want)
    bad = (out != want).sum().item()
    print(f"{label or name}: {'PASS' if ok else 'FAIL'} ({bad} of {want.numel()} elements differ)")
    return ok


def run_variant(name: str) -> bool:
    import torch

    compiled = compile_variant(name)
    rel, starts, out = inputs(name)
    compiled.function(rel, out, starts)
    torch.cuda.synchronize()
    return check(name, rel, starts, out)


def run_triton(name: str, device: str = "cuda") -> bool:
    """The same boxes loaded by a Triton kernel through a host-built TMA descriptor (rows views):
    whether TMA reads rel_logits on this GPU at all, outside the DSL."""
    import torch
    import triton
    import triton.language as tl
    from triton.tools.tensor_descriptor import TensorDescriptor

    view, width, _ = VARIANTS[name]
    if view == "kvpage" or width & (width - 1):
        raise ValueError(f"--triton {name}: expected a variant of distance boxes with a power-of-two width "
                         "(Triton's blocks), not the kvpage control or a 136-wide box")  # fmt: skip

    @triton.jit
    def load_boxes(desc, out_ptr, starts_ptr, HQ_: tl.constexpr, HEAD0_: tl.constexpr, G_: tl.constexpr, W: tl.constexpr):
        t = tl.program_id(0)
        box = desc.load([t * HQ_ + HEAD0_, tl.load(starts_ptr + t)])
        rows = tl.arange(0, G_)[:, None]
        cols = tl.arange(0, W)[None, :]
        tl.store(out_ptr + t * G_ * W + rows * W + cols, box)

    rel, starts, out = inputs(name, device)
    desc = TensorDescriptor.from_tensor(rel.view(T * HQ, E), [G, width])
    load_boxes[(T,)](desc, out, starts, HQ, HEAD0, G, width)
    if device == "cuda":
        torch.cuda.synchronize()
    return check(name, rel, starts, out, label=f"{name} (Triton TMA)")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--list", action="store_true", help="print the variant names")
    p.add_argument("--compile-only", action="store_true", help="compile every variant for sm_90a (no GPU)")
    p.add_argument("--variant", choices=sorted(VARIANTS), help="run this variant on the GPU and check it")
    p.add_argument("--triton", choices=sorted(VARIANTS), help="load this variant's boxes by Triton's TMA instead (GPU)")
    args = p.parse_args(argv)
    if args.list:
        print(" ".join(VARIANTS))
        return 0
    if args.compile_only:
        for name in VARIANTS:
            ptx = compile_variant(name, arch="sm_90a").ptx
            copies = [line.strip() for line in ptx.splitlines() if "cp.async.bulk.tensor" in line]
            print(f"{name}: {len(copies)} bulk tensor copies; {copies[0][:110] if copies else ''}")
        return 0
    if args.variant:
        return 0 if run_variant(args.variant) else 1
    if args.triton:
        return 0 if run_triton(args.triton) else 1
    p.error("give --list, --compile-only, --variant or --triton")
    return 2


if __name__ == "__main__":
    sys.path.insert(0, ".")
    raise SystemExit(main())
