"""tests/matrix.py: the default run keeps every value of every axis of a rotated product."""

import math

import pytest

from matrix import rotated


def _default(params):
    return [p for p in params if not any(m.name == "slow" for m in p.marks)]


@pytest.mark.parametrize("sizes, every", [((9, 3, 2), 3), ((9, 5, 1), 3), ((2, 4), 2), ((3, 3), 1)])
def test_every_value_of_every_axis_is_in_the_default_run(sizes, every):
    axes = [[(f"a{k}v{i}", (k, i)) for i in range(n)] for k, n in enumerate(sizes)]
    params = rotated(*axes, every=every)
    assert len(params) == len(set(p.id for p in params)) == math.prod(sizes)
    kept = _default(params)
    for k, n in enumerate(sizes):
        assert {p.values[k][1] for p in kept} == set(range(n)), f"axis {k} loses a value"
    # the rest is in the slow suite, not dropped
    assert len(kept) < len(params) or every == 1


def test_interpreter_matrices_keep_every_case_and_option():
    """The real axes of tests/test_triton_interpret.py (its collection, without running it)."""
    interpret = pytest.importorskip("test_triton_interpret")
    for name in ("test_band_options_match_reference", "test_tile_schedules_match_reference"):
        marker = next(m for m in getattr(interpret, name).pytestmark if m.name == "parametrize")
        kept = _default(marker.args[1])
        assert {p.id.split("-")[0] for p in kept} == {c[0] for c in interpret.BAND_CASES}, name
        options = interpret.BAND_OPTIONS if "band" in name else interpret.SCHEDULE_OPTIONS
        assert {tuple(sorted(p.values[1])) for p in kept} == {tuple(sorted(o)) for o in options}, name
