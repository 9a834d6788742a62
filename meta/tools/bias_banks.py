"""Shared-memory wavefronts of the CuTe kernel's bias loads, by arithmetic (lab tool).

    python3 meta/tools/bias_banks.py

A consumer warp's band body reads one bias value a score, 64 a thread a tile: lane ``l`` holds
tile rows ``8 i + l / 4`` (``i`` 0, 1) of the warp's 16 and columns ``2 (l % 4) + 8 k + b``
(``k`` < 16, ``b`` 0, 1; the wgmma accumulator's layout), and the value of row ``r``, column ``c``
is element ``q_abs - n0 - c - d0`` of that row of the staged buffer (``d0``: the slice start,
``RelAttnFwdSm90._slice_start``; with boxes of several tokens, the box's first token's). A load
instruction takes as many wavefronts as the most distinct 32-bit words any of the 32 banks holds
among its lanes' addresses. Per layout this prints the load instructions and wavefronts of one
warp's band tile, the mean over the 16 roundings of ``q_abs``:

- one token a box (rows ``tma_bias_width(128, G)`` wide), 16-bit loads;
- 8-row boxes (``bias_box_rows=8``), 16-bit loads;
- at ``G`` 8, ``odd_rows_paired``: rows ``i = 0`` hold the odd-``q_abs`` token and read each column
  pair as one 32-bit word, rows ``i = 1`` 16-bit loads as before;
- at ``G`` 4, the same pairing with rows ``i = 0`` holding two tokens of one parity ``t`` and
  ``t + 2`` (one 8-row box of both from ``t``'s start, rows ``tma_bias_width`` wide for 3 tokens'
  reach), rows ``i = 1`` the other two: not built, modelled to show it gains nothing (the two are
  one word apart);
- at ``G`` 4, ``odd_rows_paired`` as tried (twelfth day; slower on the GPU, fourteenth day, and
  removed from the kernel): rows ``i = 0`` hold ``t`` and ``t + 8``, one token a box (144 wide),
  the second token's box starting 8 distances lower.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lab  # noqa: E402,F401  (the repository root on sys.path)

from inkling_ops.kernels.cute_fwd_sm90 import CHUNK, tma_bias_width  # noqa: E402

TILE_N = 128


def _wavefronts(words_of_lanes: list[tuple[int, int]]) -> int:
    """Wavefronts of one load instruction: ``(lane, word)`` pairs -> the most distinct words a bank holds."""
    banks: dict[int, set[int]] = {}
    for _, word in words_of_lanes:
        banks.setdefault(word % 32, set()).add(word)
    return max(len(words) for words in banks.values())


def tile(group: int, width: int, row_token, box_first, paired_rows: tuple[int, ...], q_first: int,
         row_shift=lambda r: 0) -> tuple[int, int]:  # fmt: skip
    """(load instructions, wavefronts) of warp 0's band tile at ``n0 = 0``. ``row_token(r)``: the token
    (from the warp's first, whose ``q_abs`` is ``q_first``) of tile row ``r``; ``box_first(r)``: the
    token whose slice start row ``r``'s box took; ``paired_rows``: the ``i`` whose rows read 32-bit
    words (their ``q_abs`` must be odd); ``row_shift(r)``: distances row ``r``'s box starts below
    that slice start (a multiple of 8)."""
    loads = waves = 0
    for i in range(2):
        for k in range(TILE_N // 8):
            for b in range(1 if i in paired_rows else 2):
                lanes = []
                for lane in range(32):
                    row = 8 * i + lane // 4
                    q_abs = q_first + row_token(row)
                    d0 = ((q_first + box_first(row) - TILE_N + 1) & ~(CHUNK - 1)) - row_shift(row)
                    element = q_abs - (2 * (lane % 4) + 8 * k + b) - d0
                    if i in paired_rows:
                        if q_abs % 2 == 0:
                            raise ValueError(f"row {row}: a paired row needs an odd q_abs, it has {q_abs}")
                        element -= 1  # the word of columns c and c + 1: elements e - 1 and e
                    if not 0 <= element < width - (i in paired_rows):
                        raise ValueError(f"G {group}, width {width}: element {element} outside the row")
                    lanes.append((lane, (row * width + element) // 2))
                loads += 1
                waves += _wavefronts(lanes)
    return loads, waves


def layouts():
    """(name, group, width, row_token, box_first, paired_rows, q_firsts[, row_shift]) of each modelled
    layout."""
    for group in (1, 2, 4, 8, 16):
        tokens_per_box = max(8, group) // group

        def token(r, g=group):
            return r // g

        def own(r, g=group):
            return r // g

        def box(r, g=group, t=tokens_per_box):
            return (r // g) - (r // g) % t

        yield "one token a box", group, tma_bias_width(TILE_N, group), token, own, (), range(16)
        if group < 8:
            yield "8-row boxes", group, tma_bias_width(TILE_N, group, box_rows=8), token, box, (), range(16)
    # G 8, odd_rows_paired: the warp's first token's q_abs odd (the swap makes it so)
    yield "odd_rows_paired", 8, tma_bias_width(TILE_N, 8), lambda r: r // 8, lambda r: r // 8, (0,), range(1, 16, 2)
    # G 4, a pairing by parity: rows 0-3 token 0, 4-7 token 2 (both odd), 8-11 token 1, 12-15 token 3
    order = (0, 2, 1, 3)
    width = tma_bias_width(TILE_N, 4, box_rows=8) + CHUNK  # 137 distances and more: 144

    def g4_token(r):
        return order[r // 4]

    def g4_box(r):
        return 0 if r < 8 else 1

    yield "parity pairs (model)", 4, width, g4_token, g4_box, (0,), range(1, 16, 2)
    # G 4, odd_rows_paired as tried: rows 0-3 token 0, 4-7 token 8 (both odd), 8-11 token 1, 12-15 token 9;
    # one token a box (144 wide), the boxes of tokens 8 and 9 starting 8 distances below their
    # slice start, so their values sit 4 words (16 banks' worth of the rows' 8-bank pitch) along
    order8 = (0, 8, 1, 9)

    def g4p_token(r):
        return order8[r // 4]

    def g4p_shift(r):
        return CHUNK * ((r // 4) % 2)

    yield ("paired (tried, lost)", 4, tma_bias_width(TILE_N, 4), g4p_token, g4p_token, (0,), range(1, 16, 2),
           g4p_shift)  # fmt: skip


def main() -> int:
    print("G   layout                 width  loads  wavefronts  (one warp, one band tile; mean over q_abs)")
    for name, group, width, row_token, box_first, paired_rows, q_firsts, *shift in layouts():
        results = [tile(group, width, row_token, box_first, paired_rows, q, *shift) for q in q_firsts]
        loads = results[0][0]
        waves = sum(w for _, w in results) / len(results)
        print(f"{group:<3} {name:<22} {width:<6} {loads:<6} {waves:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
