"""Prototype, not part of the package: single-token sliding decode where each warp owns its keys.

    python3 scripts/proto_warp_keys_decode.py     # on a GPU: times it against the product kernel
    TRITON_INTERPRET=1 python3 scripts/proto_warp_keys_decode.py   # on CPU: checks it on a small case

The W warps are the batch dimension of a 3D ``tl.dot``: warp ``w`` takes keys ``j0 + w*BN`` to
``j0 + (w+1)*BN`` of every ``W*BN``-key step and keeps its own softmax state (m, l, acc), so no
tile needs a cross-warp reduction; the W states merge once at the end. The question it answers:
is that structure, written plainly in Triton, faster than the product kernel on the anchor case
(64 x 8K, window 511 inside E 512)? (H200, at 53c121f: no, 26.9-36.6 us against 21.3-21.5 unsplit;
meta/logs/proto_warp_keys_decode_53c121f.log.) Paged K/V with per-key block ids, the bias
gathered at its tile, 64-bit addresses: none of the product kernel's refinements.
"""

import sys

import torch
import triton
import triton.language as tl

@triton.jit
def proto_kernel(q_ptr, k_ptr, v_ptr, rel_ptr, bt_ptr, seq_ptr, out_ptr, qk_scale,
                 sq_t, sq_h, skb, skp, skh, svb, svp, svh, sr_t, sr_h, so_t, so_h, sbt, max_blocks,
                 G: tl.constexpr, D: tl.constexpr, HKV: tl.constexpr, PAGE: tl.constexpr, E: tl.constexpr,
                 WINDOW: tl.constexpr, W: tl.constexpr, BN: tl.constexpr, BLOCK_M: tl.constexpr):
    pid = tl.program_id(0)
    req = pid // HKV
    kvh = pid % HKV
    kv_len = tl.load(seq_ptr + req)
    q_pos = kv_len - 1
    rows = tl.arange(0, BLOCK_M)
    valid = rows < G
    head = kvh * G + rows
    d = tl.arange(0, D)
    qt = tl.load(q_ptr + req.to(tl.int64) * sq_t + head[:, None] * sq_h + d[None, :], mask=valid[:, None], other=0.0)
    q3 = tl.broadcast_to(qt[None, :, :], (W, BLOCK_M, D))
    STEP: tl.constexpr = W * BN
    lo = tl.maximum(q_pos - WINDOW, 0)
    lo_tile = (lo // STEP) * STEP
    offs = tl.arange(0, W)[:, None] * BN + tl.arange(0, BN)[None, :]  # [W, BN]
    acc = tl.zeros([W, BLOCK_M, D], dtype=tl.float32)
    m = tl.full([W, BLOCK_M], float("-inf"), dtype=tl.float32)
    l = tl.zeros([W, BLOCK_M], dtype=tl.float32)
    rel_row = rel_ptr + req.to(tl.int64) * sr_t + head * sr_h  # [BLOCK_M]
    bt_row = bt_ptr + req.to(tl.int64) * sbt
    for j0 in range(lo_tile, kv_len, STEP):
        keys = j0 + offs
        kok = keys < kv_len
        blk = tl.load(bt_row + tl.minimum(keys // PAGE, max_blocks - 1))
        rowk = blk.to(tl.int64) * skb + (keys % PAGE) * skp + kvh * skh
        rowv = blk.to(tl.int64) * svb + (keys % PAGE) * svp + kvh * svh
        kt = tl.load(k_ptr + rowk[:, :, None] + d[None, None, :], mask=kok[:, :, None], other=0.0)  # [W, BN, D]
        vt = tl.load(v_ptr + rowv[:, :, None] + d[None, None, :], mask=kok[:, :, None], other=0.0)
        s = tl.dot(q3, tl.trans(kt, (0, 2, 1)))  # [W, BLOCK_M, BN]
        dd = q_pos - keys  # [W, BN]
        vis = (dd >= 0) & (dd <= WINDOW)
        bmask = valid[None, :, None] & (vis & (dd < E))[:, None, :]
        bias = tl.load(rel_row[None, :, None] + dd[:, None, :], mask=bmask, other=0.0)
        s = s * qk_scale + bias.to(tl.float32) * 1.4426950408889634
        s = tl.where(vis[:, None, :] & valid[None, :, None], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 2))
        mb = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(s - mb[:, :, None])
        alpha = tl.exp2(m - mb)
        l = l * alpha + tl.sum(p, 2)
        acc = acc * alpha[:, :, None] + tl.dot(p.to(vt.dtype), vt)
        m = m_new
    M = tl.max(m, 0)
    Mb = tl.where(M == float("-inf"), 0.0, M)
    wgt = tl.exp2(m - Mb[None, :])
    L = tl.sum(l * wgt, 0)
    O = tl.sum(acc * wgt[:, :, None], 0) / tl.where(L > 0, L, 1.0)[:, None]
    tl.store(out_ptr + req.to(tl.int64) * so_t + head[:, None] * so_h + d[None, :], O.to(out_ptr.dtype.element_ty), mask=valid[:, None])


def run(case, out, W=4, BN=16, num_warps=4, num_stages=3):
    q, kc, vc, rel = case.q, case.key_cache, case.value_cache, case.rel_logits
    hq, D = q.shape[1], q.shape[2]
    nb, page, hkv, _ = kc.shape
    G = hq // hkv
    nreq = case.cache_seqlens.shape[0]
    proto_kernel[(nreq * hkv,)](q, kc, vc, rel, case.block_table, case.cache_seqlens, out, case.softmax_scale * 1.4426950408889634,
        q.stride(0), q.stride(1), kc.stride(0), kc.stride(1), kc.stride(2), vc.stride(0), vc.stride(1), vc.stride(2),
        rel.stride(0), rel.stride(1), out.stride(0), out.stride(1), case.block_table.stride(0), case.block_table.shape[1],
        G=G, D=D, HKV=hkv, PAGE=page, E=rel.shape[2], WINDOW=case.window_size[0], W=W, BN=BN, BLOCK_M=16,
        num_warps=num_warps, num_stages=num_stages)


if __name__ == "__main__":
    from inkling_ops.testing import make_case
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    if dev == "cpu":
        case = make_case(q_lens=[1] * 3, kv_lens=[100, 37, 5], num_heads=8, num_kv_heads=2, rel_extent=64, window_left=40,
                         head_dim=16, page_size=16, dtype=torch.float32)
        out = torch.zeros_like(case.q)
        run(case, out, W=2, BN=16)
        import inkling_ops

        ref = inkling_ops.rel_attn(*case.args(), **case.kwargs(), backend="reference")
        err = (out - ref).abs().max().item()
        print("max abs error against the reference", err)
        sys.exit(0 if err < 1e-4 else 1)
    from inkling_ops.tuning import tuning_case, default_output, DECODE_CASES
    from inkling_ops.benchmark import TimingConfig, time_cuda_graph
    cfg = TimingConfig(warmup_ms=10, rep_ms=30, graph_reps=100)
    for page in (16, 128):
        case = tuning_case(DECODE_CASES["decode_b64_8k_local"], page)
        ref = default_output(case)
        base = torch.zeros_like(case.q)
        t_base = time_cuda_graph(lambda: case.run_triton(base, num_splits=1, config=case.triton_config()), cfg, torch.device("cuda"))
        print(f"p{page} product default (unsplit) {t_base*1e3:.1f} us", flush=True)
        for W, BN, nw, ns in [(4, 16, 4, 2), (4, 16, 4, 3), (4, 32, 4, 2), (4, 32, 4, 3), (8, 16, 8, 2), (8, 16, 8, 3), (4, 64, 4, 2), (2, 32, 2, 3)]:
            out = torch.zeros_like(case.q)
            try:
                run(case, out, W, BN, nw, ns)
                torch.cuda.synchronize()
            except Exception as e:
                print(f"p{page} W{W} BN{BN} w{nw} s{ns}: FAILED {str(e)[:200]}", flush=True); continue
            err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
            t = time_cuda_graph(lambda: run(case, out, W, BN, nw, ns), cfg, torch.device("cuda"))
            print(f"p{page} W{W} BN{BN} w{nw} s{ns}: {t*1e3:.1f} us  err {err:.1e}", flush=True)
