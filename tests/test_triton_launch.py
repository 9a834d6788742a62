"""CachedLauncher's keys, against a stand-in for a ``triton.jit`` kernel (no GPU, no compiler).

The stand-in "compiles" once per distinct Triton specialization (constexpr values, pointer dtype
and 16-byte alignment, int type and for specialized ints whether 1 / a multiple of 16) and
records every launch, so the tests can see which compiled variant each call ran.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from inkling_ops.kernels.triton_launch import CachedLauncher


@dataclass
class Param:
    name: str
    is_constexpr: bool = False
    do_not_specialize: bool = False


def _spec(param: Param, arg):
    """What Triton specializes on, for one argument."""
    if param.is_constexpr:
        return ("c", arg)
    if isinstance(arg, torch.Tensor):
        return ("t", arg.dtype, arg.data_ptr() % 16 == 0)
    if isinstance(arg, bool) or not isinstance(arg, int):
        return ("o", type(arg))
    fits = -(2**31) <= arg < 2**31
    if param.do_not_specialize:
        return ("i", fits)
    return ("i", fits, arg == 1, arg % 16 == 0)


class FakeCompiled:
    def __init__(self, spec, launches):
        self.spec, self.launches = spec, launches
        self.function = object()

    def run(self, *args):  # pragma: no cover - only its presence matters
        raise AssertionError

    def __getitem__(self, grid):
        assert len(grid) == 3
        return lambda *args: self.launches.append((self.spec, args))


class FakeKernel:
    params = [
        Param("x_ptr"), Param("y_ptr"), Param("scale"), Param("n", do_not_specialize=True), Param("stride_x"),
        Param("BLOCK", is_constexpr=True),
    ]  # fmt: skip

    def __init__(self):
        self.compiled: dict[tuple, FakeCompiled] = {}
        self.launches: list = []
        self.slow_calls = 0

    def run(self, *args):  # pragma: no cover - only its presence matters
        raise AssertionError

    def __getitem__(self, grid):
        def launch(*args, num_warps, num_stages, **options):
            self.slow_calls += 1
            spec = (num_warps, num_stages, tuple(sorted(options.items()))) + tuple(
                _spec(p, a) for p, a in zip(self.params, args)
            )
            compiled = self.compiled.setdefault(spec, FakeCompiled(spec, self.launches))
            self.launches.append((spec, args))
            return compiled

        return launch


def _args(x, y, scale=0.5, n=7, stride=16, block=64):
    return (x, y, scale, n, stride, block)


@pytest.fixture
def tensors():
    base = torch.zeros(64)
    return base[:32], base[:16], base[1:17]  # two 16-byte aligned views, one not


def _run(launcher, args, **kw):
    kw = dict(num_warps=4, num_stages=2) | kw
    launcher((1,), args, **kw)
    return launcher.kernel.launches[-1][0]


def test_same_call_launches_the_cached_variant_without_triton(tensors):
    x, y, _ = tensors
    kernel = FakeKernel()
    launcher = CachedLauncher(kernel)
    first = _run(launcher, _args(x, y))
    for n in (7, 8, 1000):  # an unspecialized int may change freely
        assert _run(launcher, _args(x, y, n=n)) == first
    assert kernel.slow_calls == 1 and len(kernel.compiled) == 1


@pytest.mark.parametrize(
    "change",
    [
        dict(block=128),  # a constexpr
        dict(stride=1),  # a specialized int becomes 1
        dict(stride=24),  # ... or stops being a multiple of 16
        dict(n=2**40),  # an unspecialized int no longer fits int32
        dict(scale=1),  # a float argument given as an int
        dict(stride=True),  # a bool where an int was
    ],
    ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()),
)
def test_a_new_specialization_is_never_served_from_the_cache(tensors, change):
    x, y, _ = tensors
    kernel = FakeKernel()
    launcher = CachedLauncher(kernel)
    base = _run(launcher, _args(x, y))
    changed = _run(launcher, _args(x, y, **change))
    assert changed == _spec_of(kernel, _args(x, y, **change))
    assert changed != base
    assert _run(launcher, _args(x, y)) == base  # and the first variant is still there


def _spec_of(kernel, args, num_warps=4, num_stages=2):
    return (num_warps, num_stages, ()) + tuple(_spec(p, a) for p, a in zip(kernel.params, args))


def test_pointer_alignment_and_dtype_select_the_variant(tensors):
    x, y, misaligned = tensors
    kernel = FakeKernel()
    launcher = CachedLauncher(kernel)
    aligned = _run(launcher, _args(x, y))
    assert _run(launcher, _args(x, misaligned)) == _spec_of(kernel, _args(x, misaligned)) != aligned
    half = torch.zeros(32, dtype=torch.float16)
    assert _run(launcher, _args(x, half)) == _spec_of(kernel, _args(x, half)) != aligned
    assert _run(launcher, _args(x, y)) == aligned


def test_launch_options_are_part_of_the_key(tensors):
    x, y, _ = tensors
    kernel = FakeKernel()
    launcher = CachedLauncher(kernel)
    plain = _run(launcher, _args(x, y))
    assert _run(launcher, _args(x, y), num_warps=8) != plain
    assert _run(launcher, _args(x, y), maxnreg=128) != plain
    assert _run(launcher, _args(x, y)) == plain


def test_a_non_tensor_pointer_or_tensor_value_falls_back_to_the_exact_key(tensors):
    x, y, _ = tensors
    kernel = FakeKernel()
    launcher = CachedLauncher(kernel)
    # a tensor where a scalar is expected: never keyed by object identity
    args = (x, y, 0.5, 7, torch.zeros(2), 64)
    first = _run(launcher, args)
    assert _run(launcher, args) == first
    assert not launcher._by_fast_key  # nothing was keyed by value


def test_the_fast_key_table_is_bounded(tensors, monkeypatch):
    x, y, _ = tensors
    kernel = FakeKernel()
    launcher = CachedLauncher(kernel)
    monkeypatch.setattr(CachedLauncher, "MAX_FAST_KEYS", 4)
    for stride in range(16, 16 * 20, 16):  # one Triton variant, many values
        _run(launcher, _args(x, y, stride=stride))
    assert len(launcher._by_fast_key) <= 4 and len(kernel.compiled) == 1


@pytest.mark.parametrize("first,second", [(dict(scale=1.0), dict(scale=1)), (dict(stride=1), dict(stride=True))])
def test_equal_values_of_another_type_are_another_variant(tensors, first, second):
    """1.0 == 1 == True in Python (and hash alike), but Triton types them fp32, i32 and i1."""
    x, y, _ = tensors
    kernel = FakeKernel()
    launcher = CachedLauncher(kernel)
    a = _run(launcher, _args(x, y, **first))
    b = _run(launcher, _args(x, y, **second))
    assert a == _spec_of(kernel, _args(x, y, **first)) and b == _spec_of(kernel, _args(x, y, **second))
    assert a != b
