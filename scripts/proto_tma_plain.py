"""Prototype, not part of the package: the plain pass of the global prefill with TMA loads, with
and without Triton's automatic warp specialization.

    python3 scripts/proto_tma_plain.py --offline   # CPU: compile for sm_90, report what Triton made
    python3 scripts/proto_tma_plain.py             # GPU: check and time against our pass 1

The question it answers: does Triton 3.6 give the plain tiles (no bias, no mask; pass 1 of the
page-128 global prefill) a producer warp and consumer warpgroups when K/V come through tensor
descriptors (TMA), and is that faster than our pass 1 (pointer loads through cp.async)? The
kernel is the plain online-softmax loop over one request's page-128 K/V (a key tile is one
page, so one TMA box of 128 x D); 8 query heads share the single KV head and their rows are
packed token-major, as in our kernel. Rows of a program see key tiles that end at least ``E``
before its first token (what pass 1 runs). No window, no split, one KV head: nothing of the
product kernel's generality. Results: meta/TUNING.md (2026-11-30, TMA prototype).
"""

from __future__ import annotations

import sys

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634


@triton.jit
def plain_tma_kernel(q_desc, k_desc, v_desc, out_ptr, block_table_ptr, qk_scale,
                     G: tl.constexpr, E: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     D: tl.constexpr, WARP_SPECIALIZE: tl.constexpr, STAGES: tl.constexpr):  # fmt: skip
    """q_desc: (T * G, D) rows, k_desc / v_desc: (num_blocks * BLOCK_N, D) rows (page = BLOCK_N),
    out (T * G, D). Equivalent PyTorch, for the rows r of a program and n its plain keys:
    ``out[r] = softmax(q[r] @ K[:n].T * scale) @ V[:n]`` (0 where n is 0)."""
    pid = tl.num_programs(0) - 1 - tl.program_id(0)  # longest rows first
    row0 = pid * BLOCK_M
    first_token = row0 // G
    q = q_desc.load([row0, 0])
    num_plain = tl.maximum(0, (first_token - E + 1) // BLOCK_N)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    for j in tl.range(0, num_plain, num_stages=STAGES, warp_specialize=WARP_SPECIALIZE):
        key_row = tl.load(block_table_ptr + j) * BLOCK_N
        k = k_desc.load([key_row, 0])
        s = tl.dot(q, k.T) * qk_scale
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = v_desc.load([key_row, 0])
        acc = acc * alpha[:, None] + tl.dot(p.to(tl.bfloat16), v)
        m_i = m_new
    l_i = tl.where(l_i > 0, l_i, 1.0)
    rows = row0 + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, D)
    tl.store(out_ptr + rows[:, None] * D + cols[None, :], (acc / l_i[:, None]).to(tl.bfloat16))


#: (warp_specialize, num_warps, block_m, stages). With warp specialization Triton adds a
#: producer warpgroup to the 4 warps asked for (12 warps: producer + 2 consumer warpgroups).
#: 128-row programs with warp specialization are left out: at 3 stages they need 246 KB of
#: shared memory (the H200 has 227), and at 2 stages the first GPU run hung in them.
VARIANTS = ((False, 8, 128, 3), (False, 4, 64, 3), (True, 4, 64, 3), (True, 4, 64, 2))


def offline() -> None:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    for ws, num_warps, block_m, stages in VARIANTS:
        signature = {
            "q_desc": f"tensordesc<bf16[{block_m}, 128]>", "k_desc": "tensordesc<bf16[128, 128]>",
            "v_desc": "tensordesc<bf16[128, 128]>", "out_ptr": "*bf16", "block_table_ptr": "*i32",
            "qk_scale": "fp32", "G": "constexpr", "E": "constexpr", "BLOCK_M": "constexpr",
            "BLOCK_N": "constexpr", "D": "constexpr", "WARP_SPECIALIZE": "constexpr", "STAGES": "constexpr",
        }  # fmt: skip
        constexprs = dict(G=8, E=1024, BLOCK_M=block_m, BLOCK_N=128, D=128, WARP_SPECIALIZE=ws, STAGES=stages)
        source = ASTSource(fn=plain_tma_kernel, signature=signature, constexprs=constexprs)
        compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=num_warps, num_stages=stages))
        ttgir, ptx = compiled.asm["ttgir"], compiled.asm["ptx"]
        print(
            f"ws={int(ws)} warps={num_warps} {block_m}x128 stages={stages}: launched warps {compiled.metadata.num_warps}, "
            f"smem {compiled.metadata.shared // 1024} KiB, warp_specialize ops {ttgir.count('ttg.warp_specialize')}, "
            f"TMA loads {ptx.count('cp.async.bulk.tensor')}, wgmma {ptx.count('wgmma.mma_async')}",
            flush=True,
        )


def on_gpu() -> None:
    from triton.tools.tensor_descriptor import TensorDescriptor

    from inkling_ops.kernels.triton_fwd import launch_rel_attn_fwd
    from inkling_ops.tuning import tuning_case

    for tokens in (8192, 32768):
        case = tuning_case(dict(q_lens=[tokens], kv_lens=[tokens], num_heads=8, num_kv_heads=1, rel_extent=1024), 128)
        q_rows = case.q.reshape(tokens * 8, 128)
        k_rows = case.key_cache.reshape(-1, 128)
        v_rows = case.value_cache.reshape(-1, 128)
        pages = case.block_table[0, : tokens // 128].long()
        block_table = case.block_table[0].to(torch.int32).contiguous()
        k_desc = TensorDescriptor.from_tensor(k_rows, [128, 128])
        v_desc = TensorDescriptor.from_tensor(v_rows, [128, 128])
        # The request's keys and values in order, gathered once for the reference.
        k_dense = case.key_cache[pages].reshape(-1, 128).float()
        v_dense = case.value_cache[pages].reshape(-1, 128).float()

        def expected(row0: int, block_m: int):
            keys = max(0, (row0 // 8 - 1024 + 1) // 128) * 128
            scores = q_rows[row0 : row0 + block_m].float() @ k_dense[:keys].T * case.softmax_scale
            return torch.softmax(scores, -1) @ v_dense[:keys]

        for ws, num_warps, block_m, stages in VARIANTS:
            name = f"tma ws={int(ws)} warps={num_warps} {block_m}x128 stages={stages}"
            q_desc = TensorDescriptor.from_tensor(q_rows, [block_m, 128])
            out = torch.full_like(q_rows, float("nan"))
            grid = (tokens * 8 // block_m,)

            def run(ws=ws, num_warps=num_warps, block_m=block_m, stages=stages, q_desc=q_desc, out=out, grid=grid):
                plain_tma_kernel[grid](q_desc, k_desc, v_desc, out, block_table, case.softmax_scale * LOG2E, G=8, E=1024,
                                       BLOCK_M=block_m, BLOCK_N=128, D=128, WARP_SPECIALIZE=ws, STAGES=stages,
                                       num_warps=num_warps, num_stages=stages)  # fmt: skip

            run()
            torch.cuda.synchronize()
            errors = []
            for row0 in (tokens * 8 - block_m, tokens * 4, 2048 * 8 + 3 * block_m):
                ref = expected(row0, block_m)
                errors.append(((out[row0 : row0 + block_m].float() - ref).norm() / ref.norm()).item())
            t = triton.testing.do_bench(run, warmup=10, rep=50, return_mode="median")
            print(f"{tokens // 1024}K {name}: {t * 1e3:.1f} us, relative errors {', '.join(f'{e:.1e}' for e in errors)}", flush=True)

        config = case.triton_config()
        out = torch.empty_like(case.q)
        lse = torch.empty(case.q.shape[0], case.q.shape[1], dtype=torch.float32, device="cuda")
        args = (case.q, case.key_cache, case.value_cache, case.rel_logits, case.block_table, case.cache_seqlens,
                case.cu_seqlens_q, out)  # fmt: skip
        common = dict(softmax_scale=case.softmax_scale, window_left=-1, max_seqlen_q=case.max_seqlen_q, num_splits=1)

        def pass1():
            launch_rel_attn_fwd(*args, **common, config=config.plain, part_lse=lse, fwd_pass=1)

        pass1()
        t = triton.testing.do_bench(pass1, warmup=10, rep=50, return_mode="median")
        print(f"{tokens // 1024}K ours, pass 1 {config.plain}: {t * 1e3:.1f} us", flush=True)


if __name__ == "__main__":
    offline() if "--offline" in sys.argv else on_gpu()
