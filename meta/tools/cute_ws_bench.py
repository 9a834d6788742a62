"""H200 timing of the CuTe kernel's schedule variants against Triton and flash-attn-4 (no bias).

    python3 meta/tools/cute_ws_bench.py --out DIR [--variants a,b] [--cases a,b]
    python3 meta/tools/cute_ws_bench.py --probe VARIANT      # one small call against the reference
    python3 meta/tools/cute_ws_bench.py --profile CASE[:VARIANT|:fa4]   # a few calls, for ncu

For each case: ``cute`` (the backend, default variant), each extra variant of
``RelAttnFwdSm90`` (compiled here and called directly, checked equal in tolerance to the
default), ``triton``, and ``fa4_nobias`` (``flash_attn.cute.flash_attn_varlen_func`` on the
same paged cache, no bias: the ceiling issue 17 measures against). ``triton.testing.do_bench``
medians; writes ``cute_ws_bench.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

import torch

sys.path.insert(0, os.getcwd())
import inkling_ops  # noqa: E402
from inkling_ops.testing import make_case  # noqa: E402

CASES = {
    "prefill8k_global_page128": dict(q_lens=[8192], kv_lens=[8192], num_heads=8, num_kv_heads=1, rel_extent=1024, page_size=128),
    "prefill8k_global_page16": dict(q_lens=[8192], kv_lens=[8192], num_heads=8, num_kv_heads=1, rel_extent=1024, page_size=16),
    "prefill8k_sliding_page128": dict(q_lens=[8192], kv_lens=[8192], num_heads=8, num_kv_heads=2, rel_extent=512, window_left=511, page_size=128),
    "chunk2k_on16k_x4_page16": dict(q_lens=[2048] * 4, kv_lens=[16384] * 4, num_heads=8, num_kv_heads=1, rel_extent=1024, page_size=16),
    "decode64_8k_global_page16": dict(q_lens=[1] * 64, kv_lens=[8192] * 64, num_heads=8, num_kv_heads=1, rel_extent=1024, page_size=16),
    # serving-shaped: one prefill chunk and many decodes in one call (issue 17's "serving-shaped batches")
    "serving_chunk2k_decodes63_global_page16": dict(q_lens=[2048] + [1] * 63, kv_lens=[8192] * 64, num_heads=8, num_kv_heads=1, rel_extent=1024, page_size=16),
    "serving_chunk2k_decodes63_sliding_page16": dict(q_lens=[2048] + [1] * 63, kv_lens=[8192] * 64, num_heads=8, num_kv_heads=2, rel_extent=512, window_left=511, page_size=16),
    "prefill32k_global_page128": dict(q_lens=[32768], kv_lens=[32768], num_heads=8, num_kv_heads=1, rel_extent=1024, page_size=128),
    # the sliding classes of the default rule: pure prefill and serving-shaped batches at both page sizes
    "prefill8k_sliding_page16": dict(q_lens=[8192], kv_lens=[8192], num_heads=8, num_kv_heads=2, rel_extent=512, window_left=511, page_size=16),
    "serving_chunk2k_decodes63_sliding_page128": dict(q_lens=[2048] + [1] * 63, kv_lens=[8192] * 64, num_heads=8, num_kv_heads=2, rel_extent=512, window_left=511, page_size=128),
    "chunk2k_on16k_x4_sliding_page128": dict(q_lens=[2048] * 4, kv_lens=[16384] * 4, num_heads=8, num_kv_heads=2, rel_extent=512, window_left=511, page_size=128),
    "serving_chunk2k_decodes63_global_page128": dict(q_lens=[2048] + [1] * 63, kv_lens=[8192] * 64, num_heads=8, num_kv_heads=1, rel_extent=1024, page_size=128),
    # what splitting each decode's keys in two would buy on the serving batch, bounded without a
    # split kernel: the 63 decodes at 8K as 126 at 4K (the same keys a decode, twice the CTAs at
    # half the walk; each half here stages its own band, a real split's lower half none, and
    # there is no merge). docs/cute_kernels.md, "Decodes inside serving batches".
    "serving_chunk2k_decodes126at4k_global_page16": dict(q_lens=[2048] + [1] * 126, kv_lens=[8192] + [4096] * 126, num_heads=8, num_kv_heads=1, rel_extent=1024, page_size=16),
    "serving_chunk2k_decodes126at4k_global_page128": dict(q_lens=[2048] + [1] * 126, kv_lens=[8192] + [4096] * 126, num_heads=8, num_kv_heads=1, rel_extent=1024, page_size=128),
    # serving batches of 256 requests (vLLM's default max_num_seqs): the compact grid's request scan grows with them
    "serving_chunk2k_decodes255at2k_global_page16": dict(q_lens=[2048] + [1] * 255, kv_lens=[4096] + [2048] * 255, num_heads=8, num_kv_heads=1, rel_extent=1024, page_size=16),
    "serving_chunk2k_decodes255_sliding_page128": dict(q_lens=[2048] + [1] * 255, kv_lens=[8192] * 256, num_heads=8, num_kv_heads=2, rel_extent=512, window_left=511, page_size=128),
    # page 64 (K/V gathered, as at page 16; one bias buffer): cute forced against Triton forced;
    # the default rule's page-64 classes since 46f6f43's run
    "prefill8k_global_page64": dict(q_lens=[8192], kv_lens=[8192], num_heads=8, num_kv_heads=1, rel_extent=1024, page_size=64),
    "prefill8k_sliding_page64": dict(q_lens=[8192], kv_lens=[8192], num_heads=8, num_kv_heads=2, rel_extent=512, window_left=511, page_size=64),
    "chunk2k_on16k_x4_page64": dict(q_lens=[2048] * 4, kv_lens=[16384] * 4, num_heads=8, num_kv_heads=1, rel_extent=1024, page_size=64),
    "serving_chunk2k_decodes63_global_page64": dict(q_lens=[2048] + [1] * 63, kv_lens=[8192] * 64, num_heads=8, num_kv_heads=1, rel_extent=1024, page_size=64),
    "serving_chunk2k_decodes63_sliding_page64": dict(q_lens=[2048] + [1] * 63, kv_lens=[8192] * 64, num_heads=8, num_kv_heads=2, rel_extent=512, window_left=511, page_size=64),
    # the 8K sliding prefill's window swept (meta/tools/window_fit.py fits time = CTA cost + tile
    # cost x tiles a CTA walks): E = window + 1 makes every walked tile a band tile; E 512 with a
    # wider window adds plain tiles to the same band
    "sliding_w255e256_page128": dict(q_lens=[8192], kv_lens=[8192], num_heads=8, num_kv_heads=2, rel_extent=256, window_left=255, page_size=128),
    "sliding_w1023e1024_page128": dict(q_lens=[8192], kv_lens=[8192], num_heads=8, num_kv_heads=2, rel_extent=1024, window_left=1023, page_size=128),
    "sliding_w2047e2048_page128": dict(q_lens=[8192], kv_lens=[8192], num_heads=8, num_kv_heads=2, rel_extent=2048, window_left=2047, page_size=128),
    "sliding_w1023e512_page128": dict(q_lens=[8192], kv_lens=[8192], num_heads=8, num_kv_heads=2, rel_extent=512, window_left=1023, page_size=128),
    "sliding_w2047e512_page128": dict(q_lens=[8192], kv_lens=[8192], num_heads=8, num_kv_heads=2, rel_extent=512, window_left=2047, page_size=128),
}  # fmt: skip
#: the variants timed on each case (besides the default). The variants measured at 58f8ec6
#: (bias_stages, tiles_per_cta, bias_tiles, debug_all_plain) belong to that commit's kernel; see
#: meta/TUNING.md, "CuTe backend".
VARIANT_CASES = {
    "prefill8k_global_page128": ("allplain", "bias_nostage"),
    "prefill8k_global_page16": ("allplain", "bias_nostage"),
    "prefill8k_sliding_page128": ("allplain", "bias_nostage"),
    "prefill32k_global_page128": ("allplain", "bias_nostage"),
}  # fmt: skip

#: each a change to cute_fwd_sm90.schedule(config) (what the backend builds: "cute" in the table)
VARIANTS = {
    # the build itself (schedule(config)), compiled and called as the variants are: the harness's control
    "default": {},
    # the schedule measured at 46a147e (RelAttnFwdSm90's keyword defaults)
    "old": dict(bias_per_wg=False, band_split=False, bias_only_past_e=False, late_rescale=False, smem_epilogue=False, stmatrix_epilogue=False, fence_gathered_only=False, fresh_scores=False, page_reuse=False, release_per_warp=False, tma_kv=False, producer_regs=24,
                consumer_regs=240),
    "no_fresh": dict(fresh_scores=False),
    "no_pagereuse": dict(page_reuse=False, producer_regs=24, consumer_regs=240),
    "no_warprelease": dict(release_per_warp=False),
    "nofence": dict(consumer_fence=False),
    "nopingpong": dict(pingpong=False),
    "allplain": dict(debug_all_plain=True),
    # every CTA walks no key tile: its start and end alone (timing only; window_fit.py's per-CTA cost)
    "emptywalk": dict(debug_empty_walk=True),
    # the consumers' floor of a producer-converted float32 bias in the accumulator's order: band
    # tiles load 16 LDS.128 a thread into the QK accumulator before the GEMM and add no bias in
    # the softmax (timing only; "unmasked": band_split's unmasked tiles, masked ones as the build;
    # "band": every staged tile, masked ones only mask)
    "acc_unmasked": dict(debug_acc_bias="unmasked"),
    "acc_band": dict(debug_acc_bias="band"),
    # acc_band with nothing copied into the bias buffer: what is left is the masks, the waits and
    # the probe's own loads
    "acc_band_nostage": dict(debug_acc_bias="band", debug_skip_bias_copies=True),
    # acc_band_nostage split further: without its loads (the bias hand-off and the masks), without
    # the masks' select (the hand-off and the loads), without both (the hand-off alone)
    "abn_noload": dict(debug_acc_bias="band_noload", debug_skip_bias_copies=True),
    "abn_nomask": dict(debug_acc_bias="band", debug_skip_bias_copies=True, debug_no_masks=True),
    "abn_handoff": dict(debug_acc_bias="band_noload", debug_skip_bias_copies=True, debug_no_masks=True),
    # one token's G rows a bias box (the build before bias_box_rows=8: 144 distances a row at G 4,
    # about 2 shared-memory wavefronts a 16-bit bias load there against the build's 1.5)
    "box_token": dict(bias_box_rows=0),
    # G 8 without odd_rows_paired (the build before a2c221e's adoption: 64 16-bit bias loads a
    # band tile a thread, not 16 32-bit ones and 32 16-bit ones)
    "unpaired": dict(odd_rows_paired=False),
    # the build with the masked tiles' select dropped (timing only): the masks' share in the build,
    # as abn_nomask gives it over acc_band_nostage
    "nomask": dict(debug_no_masks=True),
    # the band tiles' bias buffer committed with nothing copied into it: the staging's cost, by
    # difference with the build (and allplain's, the consumers' bias work)
    "bias_nostage": dict(debug_skip_bias_copies=True),
    # one TMA box a token's G bias rows (32 / G copies a producer warp; zeros outside [0, E) by
    # the TMA unit's fill) instead of one bulk copy a row
    "bias_tma": dict(bias_tma=True),
    # band tiles where d crosses E through the masked body (the build: the body without masks,
    # their staged zeros past E standing for the select)
    "no_bias_only_past_e": dict(bias_only_past_e=False),
    # the bias rows by 17 cp.async each (the build: one bulk copy, the TMA unit's 1-D copy, a row);
    # lean_mask, whose zeros ride on the bulk copy, off with it
    "no_bias_bulk": dict(bias_bulk=False, lean_mask=False, bias_only_past_e=False),
    # masked tiles also test each key against kv_len (the build tests d only)
    "kv_len_mask": dict(kv_len_mask=True),
    # masked tiles select the bias away at d >= E (the build adds it unselected, over zeros the
    # producer writes past E and a row of zeros outside the band)
    "no_lean": dict(lean_mask=False, bias_only_past_e=False),
    # the grid, a field of the configuration (CONFIG_FIELDS) that the plan chooses per call: one
    # block a real M tile, numbered across requests, or max_seqlen_q's M tiles x requests
    "compact": dict(compact_grid=True),
    "dense": dict(compact_grid=False),
    # the producer warpgroup's registers, which cute_fwd_sm90.schedule sets per grid (dense 32,
    # compact 40 since c0df9b3's A/B; TUNING "compact_grid"): each grid at the other's figure
    "dense_producer40": dict(compact_grid=False, producer_regs=40),
    "compact_producer32": dict(compact_grid=True, producer_regs=32),
    # K/V gathered at every page size (the build loads whole tiles by TMA at page_size == tile_n)
    "no_tma_kv": dict(tma_kv=False),
    "no_split": dict(band_split=False, bias_only_past_e=False),
    "no_smem_epi": dict(smem_epilogue=False, stmatrix_epilogue=False),
    # the proxy fence after every K/V stage, TMA-loaded ones too (the build fences gathered stages only)
    "fence_all": dict(fence_gathered_only=False),
    # the bias buffer's halves refilled per consumer warpgroup
    "bias_per_wg": dict(bias_per_wg=True),
    # one bias buffer at every page size (the build splits it per warpgroup at page_size == tile_n)
    "no_bias_per_wg": dict(bias_per_wg=False),
    "no_late": dict(late_rescale=False),
    # the exact running maximum as every row's softmax offset and the running O rescaled every
    # tile (the build keeps an offset until a tile passes it by more than 8, in log2 units)
    "no_rescale_threshold": dict(rescale_threshold=0.0),
    # the epilogue's O into the Q tile one 2-byte store an element (the build: stmatrix)
    "no_stmatrix_epilogue": dict(stmatrix_epilogue=False),
}  # fmt: skip
#: variant keys that are CuteFwdConfig fields (the rest are RelAttnFwdSm90 options over cute_fwd_sm90.schedule(config))
CONFIG_FIELDS = {"compact_grid"}
#: variants whose output is not the op's (not checked against the reference)
UNCHECKED = {"allplain", "emptywalk", "nomask", "bias_nostage", "acc_unmasked", "acc_band", "acc_band_nostage", "abn_noload", "abn_nomask", "abn_handoff"}
_COMPILED: dict = {}


#: the head_dim of every case (CUTE_WS_HEAD_DIM=64 times the kernel at 64; the backend must take it)
HEAD_DIM = int(os.environ.get("CUTE_WS_HEAD_DIM", "128"))


def _case(kw):
    return make_case(**kw, head_dim=HEAD_DIM, dtype=torch.bfloat16, device="cuda", extra_tokens=3)


def _bench(fn) -> float:
    from triton.testing import do_bench

    fn()
    torch.cuda.synchronize()
    return round(do_bench(fn, warmup=50, rep=300, return_mode="median"), 4)


def _variant_fn(name, case):
    """(variant ``name`` compiled for ``case``, the seconds its compile took, the kernel's window
    argument for the case as the backend passes it)."""
    from inkling_ops.backends import cute_backend
    from inkling_ops.kernels import cute_fwd_sm90

    # the grid the backend's plan picks for this case, unless the variant names one
    grid = cute_backend.compact_grid(case.problem())
    fields = {"compact_grid": grid, **{k: v for k, v in VARIANTS[name].items() if k in CONFIG_FIELDS}}
    options = {k: v for k, v in VARIANTS[name].items() if k not in CONFIG_FIELDS}
    config = cute_fwd_sm90.CuteFwdConfig(
        dtype="bfloat16", head_dim=HEAD_DIM, q_per_kv=case.q.shape[1] // case.key_cache.shape[2], **fields
    )
    t0 = time.perf_counter()
    if (name, config) not in _COMPILED:
        _COMPILED[name, config] = cute_fwd_sm90.compile_fwd(config, options="--enable-tvm-ffi --gpu-arch sm_90a", **options)
    # the window argument as the backend passes it
    return _COMPILED[name, config], time.perf_counter() - t0, cute_backend.kernel_window(case.window_size[0])


def _fa4_fn(case, out_shape):
    from flash_attn.cute import flash_attn_varlen_func

    window = case.window_size[0]

    def fn():
        return flash_attn_varlen_func(
            case.q, case.key_cache, case.value_cache, cu_seqlens_q=case.cu_seqlens_q, max_seqlen_q=case.max_seqlen_q,
            seqused_k=case.cache_seqlens, page_table=case.block_table, softmax_scale=case.softmax_scale, causal=True,
            window_size=(window, 0) if window >= 0 else (None, None), num_splits=1,
        )  # fmt: skip

    return fn


def _check(row, key, got, want) -> None:
    if want is None:
        return
    row[f"{key}_max_abs_err"] = round(float((got.float() - want).abs().max()), 5)
    row[f"{key}_ok"] = bool(torch.isfinite(got).all()) and bool(torch.allclose(got.float(), want, atol=2e-2, rtol=2e-2))


def run_case(name, kw, variants) -> dict:
    """The build ("cute"), each of ``variants`` (None: the case's VARIANT_CASES), Triton and
    flash-attn-4 without the bias on case ``name``."""
    case = _case(kw)
    n = sum(case.q_lens)
    row = dict(case=name)
    out = torch.zeros_like(case.q)
    call = lambda: inkling_ops.rel_attn(*case.args(), **case.kwargs(), backend="cute", out=out)  # noqa: E731
    # the fp32 reference materialises (q_len, kv_len) scores per head: only up to 8K x 16K
    want = case.reference_fp32()[:n] if max(case.q_lens) * max(case.kv_lens) <= 8192 * 16384 else None
    try:
        row["cute_ms"] = _bench(call)
        _check(row, "cute", out[:n], want)
    except Exception:  # noqa: BLE001
        row["cute_error"] = traceback.format_exc()[-1500:]
    for v in VARIANT_CASES.get(name, ()) if variants is None else variants:
        try:
            fn, compile_s, window = _variant_fn(v, case)
            vout = torch.zeros_like(case.q)
            args = (case.q, case.key_cache, case.value_cache, vout, case.block_table, case.cache_seqlens,
                    case.cu_seqlens_q, case.rel_logits, case.softmax_scale, window, case.max_seqlen_q)  # fmt: skip
            row[f"{v}_ms"] = _bench(lambda: fn(*args))
            if v not in UNCHECKED:
                _check(row, v, vout[:n], want)
            row[f"{v}_compile_s"] = round(compile_s, 1)
        except Exception:  # noqa: BLE001
            row[f"{v}_error"] = traceback.format_exc()[-1500:]
    try:
        row["triton_ms"] = _bench(lambda: inkling_ops.rel_attn(*case.args(), **case.kwargs(), backend="triton", out=out))
    except Exception:  # noqa: BLE001
        row["triton_error"] = traceback.format_exc()[-800:]
    try:
        row["fa4_nobias_ms"] = _bench(_fa4_fn(case, out.shape))
    except Exception:  # noqa: BLE001
        row["fa4_error"] = traceback.format_exc()[-800:]
    if "cute_ms" in row:
        for peer in ("triton", "fa4_nobias"):
            if f"{peer}_ms" in row:
                row[f"cute_vs_{peer}"] = round(row[f"{peer}_ms"] / row["cute_ms"], 3)
    return row


def probe(variant) -> bool:
    """The direct checks of cute_gpu_check.py (ragged batches, decodes, windows, packed K/V, NaN
    in unused pages) with ``variant`` called directly, against the fp32 reference; a case whose
    group the variant's options do not apply to is reported as refused and skipped."""
    sys.path.insert(0, os.path.join(os.getcwd(), "meta", "tools"))
    from cute_gpu_check import CHECKS

    ok, checked = True, 0
    for name, kw in CHECKS:
        case = _case(kw)
        n = sum(case.q_lens)
        try:
            fn, _, window = _variant_fn(variant, case)
        except ValueError as e:
            # the kernel refusing one of the variant's own options at this case's group: skipped
            if not any(key in str(e) for key in VARIANTS[variant]):
                raise
            print(json.dumps(dict(probe=variant, case=name, refused=str(e))), flush=True)
            continue
        checked += 1
        out = torch.full_like(case.q, 7.0)
        fn(case.q, case.key_cache, case.value_cache, out, case.block_table, case.cache_seqlens, case.cu_seqlens_q,
           case.rel_logits, case.softmax_scale, window, case.max_seqlen_q)  # fmt: skip
        torch.cuda.synchronize()
        row = dict(probe=variant, case=name)
        _check(row, variant, out[:n], case.reference_fp32()[:n])
        row["tail_untouched"] = bool(torch.all(out[n:] == 7.0))
        ok = ok and row[f"{variant}_ok"] and row["tail_untouched"]
        print(json.dumps(row), flush=True)
    ok = ok and checked > 0
    print(json.dumps({f"probe_{variant}": ok, "cases_checked": checked}), flush=True)
    return ok


def profile(spec) -> None:
    """A few calls of ``CASE`` (the backend), ``CASE:VARIANT`` (a variant called directly) or
    ``CASE:fa4`` (flash-attn-4 without the bias), for ncu."""
    name, _, variant = spec.partition(":")
    case = _case(CASES[name])
    out = torch.zeros_like(case.q)
    if variant == "fa4":
        fn = _fa4_fn(case, out.shape)
    elif variant:
        vfn, _, window = _variant_fn(variant, case)
        args = (case.q, case.key_cache, case.value_cache, out, case.block_table, case.cache_seqlens,
                case.cu_seqlens_q, case.rel_logits, case.softmax_scale, window, case.max_seqlen_q)  # fmt: skip
        fn = lambda: vfn(*args)  # noqa: E731
    else:
        fn = lambda: inkling_ops.rel_attn(*case.args(), **case.kwargs(), backend="cute", out=out)  # noqa: E731
    for _ in range(3):
        fn()
    torch.cuda.synchronize()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    p.add_argument("--variants", default=None, help="variants timed on every case (default: each case's VARIANT_CASES)")
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--profile", default=None)
    p.add_argument("--probe", default=None)
    ns = p.parse_args()
    if ns.probe:
        probe(ns.probe)
        return
    if ns.profile:
        profile(ns.profile)
        return
    os.makedirs(ns.out, exist_ok=True)
    print(torch.cuda.get_device_name(), "torch", torch.__version__, "head_dim", HEAD_DIM, flush=True)
    variants = None if ns.variants is None else [v for v in ns.variants.split(",") if v]
    unknown = sorted(set(variants or ()) - set(VARIANTS))
    if unknown:
        raise SystemExit(f"--variants: unknown {unknown}; expected some of {sorted(VARIANTS)}")
    rows = []
    for name in ns.cases.split(","):
        rows.append(run_case(name, CASES[name], variants))
        print(json.dumps(rows[-1]), flush=True)
    with open(os.path.join(ns.out, "cute_ws_bench.json"), "w") as f:
        json.dump(rows, f, indent=1)
    shown = variants if variants is not None else sorted({v for vs in VARIANT_CASES.values() for v in vs})
    keys = ["cute_ms"] + [f"{v}_ms" for v in shown] + ["triton_ms", "fa4_nobias_ms"]
    print("\ncase | " + " | ".join(keys) + " | cute/triton speed | cute/fa4 speed")
    for r in rows:
        print(r["case"], "|", " | ".join(str(r.get(k, "-")) for k in keys), "|", r.get("cute_vs_triton", "-"), "|",
              r.get("cute_vs_fa4_nobias", "-"))  # fmt: skip


if __name__ == "__main__":
    main()
