"""kernels/triton_launch.py without a GPU: what a KernelSpec specialises, and how a Launcher calls a
compiled kernel (against a stand-in for Triton's CompiledKernel)."""

from __future__ import annotations

import pytest
import torch

from inkling_ops.kernels import triton_launch
from inkling_ops.kernels.triton_launch import Launcher, KernelSpec, cuda_target, make_spec, next_pow2, triton_type

pytest.importorskip("triton")


def toy_kernel(x_ptr, y_ptr, scale, n, stride_x, stride_u, BLOCK):
    pass


class _Fn:
    """A stand-in for a jit kernel: only its function's name and parameters matter to make_spec."""

    fn = staticmethod(toy_kernel)


def _spec(**kw) -> KernelSpec:
    args = dict(
        pointers=dict(x_ptr="*bf16", y_ptr="*fp32"), aligned=True, hinted=frozenset(["stride_x"]),
        unit=frozenset(["stride_u"]), floats=frozenset(["scale"]), num_warps=4, num_stages=2, maxnreg=None, arch=90,
    )  # fmt: skip
    return make_spec(_Fn, {"BLOCK": 64}, **(args | kw))


def test_make_spec_types_hints_and_constants():
    spec = _spec()
    assert spec.kernel == "toy_kernel"
    assert spec.signature == ("*bf16", "*fp32", "fp32", "i32", "i32", "constexpr", "constexpr")
    assert spec.constexprs == (("stride_u", 1), ("BLOCK", 64))  # in signature order
    assert spec.divisible == ("x_ptr", "y_ptr", "stride_x")  # n is not hinted: not specialised
    assert spec.options() == dict(num_warps=4, num_stages=2)
    assert _spec(maxnreg=168).options() == dict(num_warps=4, num_stages=2, maxnreg=168)


def test_an_unaligned_spec_has_no_hints_and_another_digest():
    aligned, unaligned = _spec(), _spec(aligned=False)
    assert unaligned.divisible == () and unaligned.signature == aligned.signature
    assert aligned.digest() != unaligned.digest() and aligned.digest() == _spec().digest()
    assert len({_spec(num_warps=8).digest(), _spec(maxnreg=128).digest(), _spec(arch=80).digest(), aligned.digest()}) == 4


def test_small_helpers():
    assert [next_pow2(n) for n in (0, 1, 2, 3, 17)] == [1, 1, 2, 4, 32]
    assert triton_type("bfloat16") == "*bf16" and triton_type("float32") == "*fp32"
    with pytest.raises(ValueError, match="dtype is 'complex64'"):
        triton_type("complex64")
    assert cuda_target("sm_90a") == 90 and cuda_target("sm_80") == 80 and cuda_target("sm_100a") == 100
    with pytest.raises(ValueError, match="arch is 'cpu'"):
        cuda_target("cpu")


def test_compiling_under_the_interpreter_says_why_not():
    if not triton_launch.INTERPRETED:
        pytest.skip("this session compiles (TRITON_INTERPRET unset)")
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET"):
        triton_launch.jit_function("rel_attn_fwd_kernel")


class _FakeCompiled:
    """Triton's CompiledKernel as a Launcher uses it: ``run`` (loading the module on first access),
    ``function``, ``packed_metadata`` and ``[grid](*args)``."""

    def __init__(self):
        self.loads, self.runs, self.indexed = 0, [], []
        self.function, self.packed_metadata = "fn-handle", "packed"

    @property
    def run(self):
        self.loads += 1
        return lambda *a: self.runs.append(a)

    def __getitem__(self, grid):
        return lambda *args: self.indexed.append((grid, args))


def test_launcher_runs_the_compiled_kernel_on_the_current_stream(monkeypatch):
    from triton import knobs

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: 1000 + device, raising=False)
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", None)
    compiled = _FakeCompiled()
    launcher = Launcher(compiled)
    launcher((2, 1, 5), ("a", 1, 2.0))
    launcher((4, 4, 4), ("b",))
    assert compiled.loads == 1  # loaded once, then the bound launch is reused
    assert compiled.runs == [
        (2, 1, 5, 1003, "fn-handle", "packed", None, None, None, "a", 1, 2.0),
        (4, 4, 4, 1003, "fn-handle", "packed", None, None, None, "b"),
    ]
    hook = lambda *a: None  # noqa: E731  (a profiler's launch hook: Triton's own path calls it)
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", hook)
    launcher((1, 1, 1), ("c",))
    assert compiled.indexed == [((1, 1, 1), ("c",))] and len(compiled.runs) == 2
