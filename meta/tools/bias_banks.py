"""Shared-memory wavefronts of the CuTe kernel's 16-bit bias loads, by arithmetic (lab tool).

    python3 meta/tools/bias_banks.py

A consumer warp's band body loads one 16-bit bias value a score, 64 loads a thread a tile. Load
(``i``, ``k``, ``bit``) of lane ``l`` reads tile row ``8 i + l / 4`` of the warp's 16 at column
``2 (l % 4) + 8 k + bit`` (the wgmma accumulator's layout), element ``q_abs - n0 - c - d0`` of that
row of the staged buffer (``d0``: the slice start, ``cute_fwd_sm90._slice_start``; with boxes of
several tokens, the box's first token's). A load takes as many wavefronts as the most distinct
32-bit words any of the 32 banks holds among its lanes' addresses. This prints the mean over the
64 loads and over the 16 roundings of ``q_abs`` for each group ``G`` and layout: one token a box
(rows ``tma_bias_width(128, G)`` wide) and 8-row boxes (``bias_box_rows=8``).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lab  # noqa: E402,F401  (the repository root on sys.path)

from inkling_ops.kernels.cute_fwd_sm90 import CHUNK, tma_bias_width  # noqa: E402

TILE_N = 128


def wavefronts(group: int, width: int, box_rows: int, q_first: int) -> float:
    """Mean wavefronts of a warp's 64 bias loads (warp 0, ``n0 = 0``, its first token at ``q_first``)."""
    tokens_per_box = max(box_rows, group) // group
    total = 0
    for i in range(2):
        for k in range(TILE_N // 8):
            for bit in range(2):
                banks: dict[int, set[int]] = {}
                for lane in range(32):
                    row = 8 * i + lane // 4
                    tok = row // group
                    q_abs = q_first + tok
                    q_box = q_first + tok - tok % tokens_per_box
                    d0 = (q_box - TILE_N + 1) & ~(CHUNK - 1)
                    element = q_abs - (2 * (lane % 4) + 8 * k + bit) - d0
                    if not 0 <= element < width:
                        raise ValueError(f"G {group}, width {width}: element {element} outside the row")
                    word = (row * width + element) // 2
                    banks.setdefault(word % 32, set()).add(word)
                total += max(len(words) for words in banks.values())
    return total / (2 * (TILE_N // 8) * 2)


def main() -> int:
    print("G   layout            width  wavefronts a load (mean, min, max over q_abs % 16)")
    for group in (1, 2, 4, 8, 16):
        for box_rows, name in ((0, "one token a box"), (8, "8-row boxes")):
            if box_rows and group >= 8:
                continue
            width = tma_bias_width(TILE_N, group, box_rows=box_rows)
            means = [wavefronts(group, width, box_rows, TILE_N + q) for q in range(16)]
            print(f"{group:<3} {name:<17} {width:<6} {sum(means) / len(means):.2f} {min(means):.2f} {max(means):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
