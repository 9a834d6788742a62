"""Host time per launch of a CuTe DSL kernel called through TVM-FFI, against bare torch launches,
and a CUDA-graph capture/replay of it, on this machine's GPU (sm_90 or newer).

The kernels are the toys of tests/cute_toys.py: ``scale_copy`` (``out = x * scale``, fp32, two
tensors and a scalar) and ``rel_attn_shaped`` (rel_attn's runtime arguments: 8 tensors and 3
scalars, each checked by the compiled wrapper), compiled for this GPU's arch, written to a CuTe
store and loaded back from it (``inkling_ops.kernels.cute_runtime.obtain``), so what is timed is
what a backend launches. ``--store DIR`` uses the store under DIR (e.g. one a
CPU machine filled with ``CUTE_DSL_ARCH=sm_90a``: then the row "obtained" says "loaded", which
checks that such an entry runs here); by default a fresh temporary one.

Host time: the wall time of a loop of ``--calls`` launches (no synchronisation inside it, so the
GPU never holds the host back: the toy runs for ~2 us), divided by the calls; median and minimum
over ``--rounds`` loops. Checks (each prints ok or what failed): results, the launch lands on
torch's current stream (a side stream that is busy first), a graph of the launch replays with new
inputs, and a first-ever call of a freshly loaded module inside a capture.

Usage: python3 meta/tools/cute_launch_probe.py [--store DIR] [--calls 200] [--rounds 50] [--n 4096]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for path in (ROOT, ROOT / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import torch  # noqa: E402


def host_us(launch, *, calls: int, rounds: int) -> tuple[float, float]:
    """Median and minimum host microseconds per ``launch()`` over ``rounds`` loops of ``calls``."""
    for _ in range(20):
        launch()
    torch.cuda.synchronize()
    per_call = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            launch()
        per_call.append((time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(per_call), min(per_call)


def check(name: str, fn) -> tuple[str, str]:
    try:
        fn()
        return name, "ok"
    except Exception as exc:  # report and go on: the probe's job is to say what works
        return name, f"FAILED: {type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, help="root of the kernel store to use (default: a temporary one)")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--n", type=int, default=4096, help="elements of the toy's tensors")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("cute_launch_probe: needs a CUDA device")
        return 2
    major, minor = torch.cuda.get_device_capability()
    if major < 9:
        print(f"cute_launch_probe: the toy is built for sm_90 and newer; this GPU is sm_{major}{minor}")
        return 2
    arch = f"sm_{major}{minor}a"

    import cute_toys
    import cutlass
    import tvm_ffi

    from inkling_ops.kernel_cache import KernelStore, cute_fingerprint
    from inkling_ops.kernels import cute_runtime

    root = args.store or Path(tempfile.mkdtemp(prefix="inkling-cute-probe-"))
    store = KernelStore(arch, root=root, facts=cute_fingerprint(arch))
    compiled = []

    def build():
        compiled.append(cute_toys.compile_scale(arch=arch))
        return compiled[-1]

    start = time.perf_counter()
    fn, how = cute_runtime.obtain(store, "cute-launch-probe-toy", build, describe="tests/cute_toys.py scale_copy")
    obtain_s = time.perf_counter() - start

    wide, wide_how = cute_runtime.obtain(
        store, "cute-launch-probe-rel-attn-shaped", lambda: cute_toys.compile_rel_attn_shaped(arch=arch),
        describe="tests/cute_toys.py rel_attn_shaped",
    )
    bf16 = dict(device="cuda", dtype=torch.bfloat16)
    i32 = dict(device="cuda", dtype=torch.int32)
    wide_args = (
        torch.randn(16, 32, 128, **bf16), torch.randn(64, 16, 8, 128, **bf16), torch.randn(64, 16, 8, 128, **bf16),
        torch.empty(16, 32, 128, **bf16), torch.zeros(4, 16, **i32), torch.full((4,), 64, **i32),
        torch.arange(0, 20, 4, **i32), torch.randn(16, 32, 512, **bf16), 0.5, -1, 4,
    )

    x = torch.randn(args.n, device="cuda")
    out = torch.empty_like(x)
    rows = []  # (what, median us, min us)
    rows.append(("torch.mul(x, 3.0, out=out)", *host_us(lambda: torch.mul(x, 3.0, out=out), calls=args.calls, rounds=args.rounds)))
    rows.append(("out.copy_(x)", *host_us(lambda: out.copy_(x), calls=args.calls, rounds=args.rounds)))
    rows.append(("toy, TVM-FFI function from the store", *host_us(lambda: fn(x, out, 3.0), calls=args.calls, rounds=args.rounds)))
    rows.append(("rel_attn_shaped (8 tensors, 3 scalars)", *host_us(lambda: wide(*wide_args), calls=args.calls, rounds=args.rounds)))
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        rows.append(("same, under torch.cuda.stream(side)", *host_us(lambda: fn(x, out, 3.0), calls=args.calls, rounds=args.rounds)))
    torch.cuda.synchronize()
    if compiled:  # compiled in this process: the DSL's own Python wrapper, for comparison
        jit = compiled[-1].function
        rows.append(("same, the DSL's JitCompiledFunction", *host_us(lambda: jit(x, out, 3.0), calls=args.calls, rounds=args.rounds)))

    checks = []

    def eager():
        fn(x, out, 3.0)
        torch.testing.assert_close(out, x * 3.0, rtol=0, atol=0)

    def wide_result():
        q, out_wide = wide_args[0], wide_args[3]
        wide(*wide_args)
        torch.testing.assert_close(out_wide[:, 0, 0], (q[:, 0, 0].float() * 0.5).bfloat16(), rtol=0, atol=0)

    def on_current_stream():
        # If the launch went anywhere but the side stream it would run before the fill, which
        # waits behind the sleep, and the NaNs would stay.
        busy = torch.cuda.Stream()
        busy.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(busy):
            torch.cuda._sleep(2_000_000)
            out.fill_(float("nan"))
            fn(x, out, 5.0)
        torch.cuda.current_stream().wait_stream(busy)
        torch.testing.assert_close(out, x * 5.0, rtol=0, atol=0)

    def graph_replay():
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn(x, out, 7.0)
        out.zero_()
        x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(out, x * 7.0, rtol=0, atol=0)

    def first_call_inside_capture():
        fresh = cute_runtime.load_files(store.get("cute-launch-probe-toy"))  # a new module: its cubin is not loaded yet
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fresh(x, out, 9.0)
        out.zero_()
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(out, x * 9.0, rtol=0, atol=0)

    checks.append(check("result (eager)", eager))
    checks.append(check("result of rel_attn_shaped", wide_result))
    checks.append(check("launches on torch's current stream", on_current_stream))
    checks.append(check("CUDA graph capture + replay with new inputs", graph_replay))
    checks.append(check("first call of a fresh module inside a capture", first_call_inside_capture))

    print(f"device {torch.cuda.get_device_name()} ({arch}); torch {torch.__version__}, nvidia-cutlass-dsl {cutlass.__version__}, "
          f"apache-tvm-ffi {tvm_ffi.__version__}, tensor exchange: {cute_runtime.torch_tensor_exchange()}")
    print(f"obtained from {store.directory}: scale_copy {how} in {obtain_s:.2f} s, rel_attn_shaped {wide_how}; "
          f"n = {args.n}, {args.rounds} loops of {args.calls} calls")
    print()
    print(f"| {'host time per launch':<40} | median us | min us |")
    print(f"|{'-' * 42}|-----------|--------|")
    for what, median, low in rows:
        print(f"| {what:<40} | {median:9.2f} | {low:6.2f} |")
    print()
    for name, result in checks:
        print(f"{name}: {result}")
    print(json.dumps(dict(
        probe="cute_launch", device=torch.cuda.get_device_name(), arch=arch, torch=torch.__version__,
        cutlass_dsl=cutlass.__version__, tvm_ffi=tvm_ffi.__version__, exchange=cute_runtime.torch_tensor_exchange(),
        obtained=dict(scale_copy=how, rel_attn_shaped=wide_how), host_us={what: round(median, 3) for what, median, _ in rows}, checks=dict(checks),
    )))
    return 0 if all(result == "ok" for _, result in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
