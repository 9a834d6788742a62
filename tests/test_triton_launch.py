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


# --- PackedLaunch: the parameter buffer, against a stand-in driver --------------------------------

import ctypes  # noqa: E402
from types import SimpleNamespace  # noqa: E402

from inkling_ops.kernels.triton_launch import PackedLaunch  # noqa: E402

_TOY_SIGNATURE = {"x_ptr": "*bf16", "y_ptr": "*fp32", "scale": "fp32", "n": "i32", "stride_x": "i32",
                  "stride_u": "constexpr", "BLOCK": "constexpr"}  # fmt: skip


class _Driver:
    """cuLaunchKernel / cuFuncGetParamInfo stand-ins: the parameter sizes the 'driver' reports, and
    each launch's grid, block, shared memory, stream and parameter values read back from the buffer."""

    def __init__(self, sizes):
        self.sizes, self.launches = sizes, []

    def param_info(self, function, index, offset, size):
        if index >= len(self.sizes):
            return 1  # CUDA_ERROR_INVALID_VALUE
        size._obj.value = self.sizes[index]
        return 0

    def launch(self, function, g0, g1, g2, b0, b1, b2, shared, stream, params, extra):
        values = []
        for i, n in enumerate(self.sizes):
            raw = ctypes.string_at(params[i], n)
            values.append(raw)
        self.launches.append(((function, g0, g1, g2, b0, b1, b2, shared, stream), values))
        return 0


def _toy_compiled(signature=_TOY_SIGNATURE):
    meta = SimpleNamespace(num_warps=4, shared=2048, num_ctas=1, cluster_dims=(1, 1, 1))
    return SimpleNamespace(src=SimpleNamespace(signature=dict(signature)), metadata=meta, function=0xF00)


@pytest.fixture
def driver(monkeypatch):
    fake = _Driver([8, 8, 4, 4, 4, 8, 8])  # the two pointers, scale, n, stride_x, Triton's two scratch pointers
    monkeypatch.setattr(triton_launch, "_driver", lambda: (fake.launch, fake.param_info))
    return fake


def test_packed_launch_writes_pointers_and_the_bound_values(driver):
    tail = (0.5, 1000, 64, 1, 64)  # scale, n, stride_x, then the two constexprs
    packed = PackedLaunch.build(_toy_compiled(), (3, 2, 1), 2, tail)
    assert packed is not None
    assert packed(77, (0x1000, 0x2000)) == 0
    assert packed(78, (0x3000, 0x4000)) == 0
    (head, values), (head2, values2) = driver.launches
    assert head == (0xF00, 3, 2, 1, 128, 1, 1, 2048, 77) and head2[-1] == 78
    as_int = lambda raw: int.from_bytes(raw, "little", signed=True)  # noqa: E731
    assert [as_int(v) for v in values[:2]] == [0x1000, 0x2000]
    assert [as_int(v) for v in values2[:2]] == [0x3000, 0x4000]
    assert ctypes.c_float.from_buffer_copy(values[2]).value == 0.5
    assert [as_int(v) for v in values[3:5]] == [1000, 64]
    assert [as_int(v) for v in values[5:]] == [0, 0]  # null scratch


@pytest.mark.parametrize(
    "sizes,tail,why",
    [
        ([8, 8, 4, 4], (0.5, 1000, 64, 1, 64), "the driver reports fewer parameters"),
        ([8, 8, 4, 4, 8, 8, 8], (0.5, 1000, 64, 1, 64), "a parameter of another size"),
        ([8, 8, 4, 4, 4, 8, 8, 8], (0.5, 1000, 64, 1, 64), "more than two trailing parameters"),
        ([8, 8, 4, 4, 4, 8, 8], (0.5, 1 << 31, 64, 1, 64), "an i32 value out of range"),
        ([8, 8, 4, 4, 4, 8, 8], (0.5, 1000, 64, 1), "fewer values than parameters"),
        ([8, 8, 4, 4, 4, 8, 8], (0.5, True, 64, 1, 64), "a bool for an i32"),
    ],
)
def test_packed_launch_refuses_what_it_cannot_pack(monkeypatch, sizes, tail, why):
    fake = _Driver(sizes)
    monkeypatch.setattr(triton_launch, "_driver", lambda: (fake.launch, fake.param_info))
    assert PackedLaunch.build(_toy_compiled(), (3, 2, 1), 2, tail) is None, why


def test_packed_launch_refuses_an_empty_grid_and_no_driver(driver, monkeypatch):
    assert PackedLaunch.build(_toy_compiled(), (0, 2, 1), 2, (0.5, 1000, 64, 1, 64)) is None
    monkeypatch.setattr(triton_launch, "_driver", lambda: (None, None))
    assert PackedLaunch.build(_toy_compiled(), (3, 2, 1), 2, (0.5, 1000, 64, 1, 64)) is None
