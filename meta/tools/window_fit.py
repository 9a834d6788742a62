"""Split 8K sliding prefill's time into a per-CTA part and a per-tile part (lab tool, not the product).

    python3 meta/tools/cute_ws_bench.py --out DIR --variants allplain \\
        --cases prefill8k_sliding_page128,sliding_w255e256_page128,...   # on the GPU
    python3 meta/tools/window_fit.py DIR/cute_ws_bench.json [--sms 132]

The 8K sliding layer's CTAs walk about five key tiles each, so what a CTA costs once (its start,
the pipeline's fill and drain, the epilogue) weighs more there than at 8K global. Timing the
same layer at several windows changes the tiles a CTA walks and nothing else: 512 CTAs (32
tokens of a KV head each at ``G`` 4). This tool counts, for each ``sliding_w{W}e{E}`` case (and
``prefill8k_sliding``, window 511 and E 512) the tiles a CTA walks as the kernel's tile ranges
give them (:func:`walk`), then fits, for each timed column (the build ``cute_ms`` and the
variants ``nopingpong_ms``, ``bias_nostage_ms``, ``allplain_ms``; ``fa4_nobias_ms`` counted
with our tiles, an approximation), ``time = CTAs an SM x (per_cta + per_tile x tiles a CTA)``
over the cases whose walked tiles are all band tiles (E = window + 1). The cases with E 512
and a wider window are printed beside it: their extra tiles are plain, so the fit's residual
there is what a plain tile costs less than a band tile.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass

#: the kernel's tile (rows of the M tile, keys of a key tile) and the sweep's layer
TILE_M, TILE_N = 128, 128
TOKENS, GROUP, KV_HEADS = 8192, 4, 2
COLUMNS = ("cute_ms", "nopingpong_ms", "bias_nostage_ms", "allplain_ms", "fa4_nobias_ms")
#: a column of CTAs that walk no tile (``debug_empty_walk``): its time an SM, over the CTAs an SM,
#: is what a CTA's start and end cost alone
EMPTY = "emptywalk_ms"


@dataclass(frozen=True)
class Walk:
    """Tiles a CTA walks, averaged over the layer's CTAs."""

    ctas: int
    tiles: float
    band: float
    masked: float


def walk(window: int, rel_extent: int, tokens: int = TOKENS, group: int = GROUP, kv_heads: int = KV_HEADS) -> Walk:
    """The tile counts of a causal sliding prefill (q_len == kv_len == ``tokens``) by the ranges
    ``RelAttnFwdSm90.kernel`` computes: walked tiles ``[n_begin, n_end)``, band tiles (those
    that stage bias) and masked tiles (not wholly below the diagonal and inside the window).
    Pure."""
    rows_per_tok = TILE_M // group
    blocks = (tokens * group + TILE_M - 1) // TILE_M
    tiles = band = masked = 0
    for m in range(blocks):
        qa_lo = m * rows_per_tok
        qa_hi = min(qa_lo + rows_per_tok - 1, tokens - 1)
        n_end = min((qa_hi + TILE_N) // TILE_N, (tokens + TILE_N - 1) // TILE_N)
        n_begin = max(qa_lo - window, 0) // TILE_N
        lowest = qa_lo - rel_extent - TILE_N + 1
        n_band = lowest // TILE_N + 1 if lowest >= 0 else 0
        in_window_lo = (max(qa_hi - window, 0) + TILE_N - 1) // TILE_N
        below_diag_hi = (qa_lo + 1) // TILE_N  # tiles n < this hold keys <= qa_lo only
        tiles += n_end - n_begin
        band += max(n_end - max(n_band, n_begin), 0)
        masked += sum(1 for n in range(n_begin, n_end) if not (in_window_lo <= n < below_diag_hi))
    return Walk(blocks * kv_heads, tiles / blocks, band / blocks, masked / blocks)


def case_walk(name: str) -> Walk | None:
    """The walk of a sweep case by name (``sliding_w{W}e{E}_page*``, ``prefill8k_sliding_page*``)."""
    if name.startswith("prefill8k_sliding_"):
        return walk(511, 512)
    found = re.match(r"sliding_w(\d+)e(\d+)_", name)
    return walk(int(found[1]), int(found[2])) if found else None


def fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least squares of ``y = a + b x`` over ``(x, y)`` points (two or more distinct x)."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if n < 2 or sxx == 0:
        raise ValueError(f"a line needs two or more distinct tile counts; got {points}")
    b = sum((x - mx) * (y - my) for x, y in points) / sxx
    return my - b * mx, b


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("json", help="cute_ws_bench.json of a run over the sweep's cases")
    p.add_argument("--sms", type=int, default=132, help="SMs of the GPU (H100 SXM and H200: 132)")
    ns = p.parse_args(argv)
    if ns.sms < 1:
        p.error(f"--sms is {ns.sms}; expected a positive number of SMs")
    with open(ns.json) as f:
        rows = [r for r in json.load(f) if case_walk(r["case"]) is not None]
    if not rows:
        print(f"{ns.json}: no sweep case (sliding_w*e*, prefill8k_sliding)", file=sys.stderr)
        return 2
    print("case | CTAs | tiles/CTA | band | masked | " + " | ".join(COLUMNS))
    for r in rows:
        w = case_walk(r["case"])
        print(f"{r['case']} | {w.ctas} | {w.tiles:.2f} | {w.band:.2f} | {w.masked:.2f} | "
              + " | ".join(str(r.get(c, "-")) for c in COLUMNS))
    all_band = [r for r in rows if abs(case_walk(r["case"]).band - case_walk(r["case"]).tiles) < 1e-9]
    print(f"\nfit over the all-band cases ({len(all_band)}), per SM: time = CTAs/SM x (per_cta + per_tile x tiles)")
    for c in COLUMNS:
        pts = [(case_walk(r["case"]).tiles, r[c] * 1000) for r in all_band if c in r]
        if len({x for x, _ in pts}) < 2:
            print(f"{c}: fewer than two cases timed")
            continue
        ctas_per_sm = case_walk(all_band[0]["case"]).ctas / ns.sms
        a, b = fit(pts)
        per_cta, per_tile = a / ctas_per_sm, b / ctas_per_sm
        at511 = walk(511, 512).tiles
        share = per_cta / (per_cta + per_tile * at511)
        resid = ", ".join(f"{r['case']} {r[c] * 1000 - (a + b * case_walk(r['case']).tiles):+.1f}" for r in rows if c in r)
        print(f"{c}: per CTA {per_cta:.2f} us, per tile {per_tile:.3f} us; at window 511 the CTA part is "
              f"{share:.0%}; residuals (us): {resid}")
    empty = [r[EMPTY] * 1000 for r in rows if EMPTY in r]
    if empty:
        ctas_per_sm = case_walk(rows[0]["case"]).ctas / ns.sms
        print(f"{EMPTY}: a CTA's start and end alone (no tile walked) {min(empty) / ctas_per_sm:.2f}-"
              f"{max(empty) / ctas_per_sm:.2f} us over the {len(empty)} cases")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
