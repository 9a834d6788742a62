"""The CuTe DSL runtime (inkling_ops/kernels/cute_runtime.py) on a toy kernel: compiling for sm_90a
without a GPU, the DSL's CUTE_DSL_KEEP / CUTE_DSL_DUMP_DIR, CuTe entries of the persistent store
(fingerprint, export, load, broken entries rebuilt), and, on a GPU, launches on torch's current
stream and in CUDA graphs. Skips without nvidia-cutlass-dsl and apache-tvm-ffi."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

pytest.importorskip("cutlass.cute")
pytest.importorskip("tvm_ffi")

import cute_toys  # noqa: E402

from inkling_ops import kernel_cache  # noqa: E402
from inkling_ops.kernel_cache import KernelStore, cute_fingerprint  # noqa: E402
from inkling_ops.kernels import cute_runtime  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def toy() -> cute_runtime.CuteCompiled:
    """The toy compiled once for sm_90a, with its PTX."""
    return cute_toys.compile_scale(arch="sm_90a", ptx=True)


def _store(root: Path, arch: str = "sm_90a") -> KernelStore:
    return KernelStore(arch, root=root, facts=cute_fingerprint(arch))


def test_cute_compile_for_sm90a_needs_no_gpu_and_returns_the_ptx(toy):
    assert toy.arch == "sm_90a"
    assert ".target sm_90a" in toy.ptx
    assert ".entry kernel_cutlass__scale_kernel" in toy.ptx
    assert type(toy.function).__name__.startswith("TVMFFI")  # compiled with --enable-tvm-ffi


def test_cute_compile_rejects_an_arch_that_is_not_one():
    with pytest.raises(ValueError, match="arch is 'hopper'; expected a CUDA architecture"):
        cute_toys.compile_scale(arch="hopper")
    with pytest.raises(ValueError, match="arch must name a CUDA architecture like 'sm_90a', got 90"):
        cute_toys.compile_scale(arch=90)


def test_cute_compile_honours_cute_dsl_keep_and_dump_dir(tmp_path, monkeypatch):
    dump = tmp_path / "dump" / "not-yet-there"
    monkeypatch.setenv("CUTE_DSL_KEEP", "ptx,cubin")
    monkeypatch.setenv("CUTE_DSL_DUMP_DIR", str(dump))
    compiled = cute_toys.compile_scale()
    kept = sorted(p.name for p in dump.iterdir())
    assert [name.rsplit(".", 2)[1:] for name in kept] == [["sm_90a", "cubin"], ["sm_90a", "ptx"]]
    assert compiled.ptx == (dump / kept[1]).read_text()  # kept by the user's request, so returned too
    assert (dump / kept[0]).read_bytes()[:4] == b"\x7fELF"


def test_cute_compile_without_cute_dsl_keep_leaves_no_files_behind(tmp_path, monkeypatch):
    monkeypatch.delenv("CUTE_DSL_KEEP", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))  # where the PTX is kept while it is read
    (tmp_path / "tmp").mkdir()
    monkeypatch.chdir(tmp_path)  # the DSL's default dump directory
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    assert ".target sm_90a" in cute_toys.compile_scale(ptx=True).ptx
    assert cute_toys.compile_scale(ptx=False).ptx is None
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["tmp"]


def test_cute_entry_is_exported_written_and_loaded_back(tmp_path, toy):
    builds = []
    build = lambda: builds.append(1) or toy  # noqa: E731
    store = _store(tmp_path)
    fn, how = cute_runtime.obtain(store, "toy", build, describe="toy scale_copy")
    assert how == "compiled" and len(builds) == 1
    assert type(fn).__name__ == "Function" and type(fn).__module__.startswith("tvm_ffi")
    assert store.directory.name.startswith("sm_90a-cute-")
    assert sorted(p.name for p in (store.directory / "toy").iterdir()) == ["MANIFEST.json", "kernel.o"]
    assert json.loads((store.directory / "toy" / "MANIFEST.json").read_text())["spec"] == "toy scale_copy"
    facts = json.loads((store.directory / "FINGERPRINT.json").read_text())
    assert facts["family"] == "cute" and {"nvidia-cutlass-dsl", "apache-tvm-ffi"} <= set(facts["toolchain"])
    # the DSL's compiler lives in its -libs wheels (one of cu12 / cu13): the installed ones count too
    assert set(facts["toolchain"]) <= set(kernel_cache.CUTE_TOOLCHAIN) and "nvidia-cutlass-dsl-libs-base" in facts["toolchain"]
    again, how = cute_runtime.obtain(_store(tmp_path), "toy", build)  # another backend, same store
    assert how == "loaded" and len(builds) == 1
    assert "1 compiled variants" in str(kernel_cache.info(tmp_path))


LOADER = (
    "import sys\n"
    "from inkling_ops.kernel_cache import KernelStore, cute_fingerprint\n"
    "from inkling_ops.kernels import cute_runtime\n"
    "store = KernelStore('sm_90a', root=sys.argv[1], facts=cute_fingerprint('sm_90a'))\n"
    "fn, how = cute_runtime.obtain(store, 'toy', lambda: sys.exit('would compile'))\n"
    "import torch\n"
    "try:\n"
    "    fn(torch.ones(8), torch.empty(8), 2.0)\n"
    "except ValueError as exc:\n"
    "    print(how, type(fn).__name__, 'refused:', exc)\n"
)


def test_cute_entry_loads_in_a_fresh_process_without_a_gpu(tmp_path, toy):
    """What a serving process does with a store a build machine filled: it loads the object
    without compiling (and here, without a driver); the compiled argument checks run on load."""
    cute_runtime.obtain(_store(tmp_path), "toy", lambda: toy)
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), CUDA_VISIBLE_DEVICES="")
    result = subprocess.run([sys.executable, "-c", LOADER, str(tmp_path)], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("loaded Function refused:")
    assert "expected device_type=cuda" in result.stdout


@pytest.mark.parametrize("damage", ["truncated", "not-an-object"])
def test_cute_entry_that_is_broken_or_does_not_load_is_rebuilt(tmp_path, toy, damage):
    store = _store(tmp_path)
    if damage == "truncated":  # the manifest catches it
        store.put("toy", cute_runtime.export_files(toy))
        path = store.directory / "toy" / cute_runtime.OBJECT
        path.write_bytes(path.read_bytes()[:100])
        expected = "broken"
    else:  # a complete entry whose object the DSL cannot link
        store.put("toy", {cute_runtime.OBJECT: b"\x7fELF" + bytes(300)})
        expected = "does not load"
    with pytest.warns(UserWarning, match=expected):
        fn, how = cute_runtime.obtain(store, "toy", lambda: toy)
    assert how == "compiled"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cute_runtime.obtain(store, "toy", lambda: toy)[1] == "loaded"


def test_cute_obtain_refuses_a_build_for_another_arch(tmp_path, toy):
    with pytest.raises(ValueError, match="compiled for 'sm_90a', but the store holds 'sm_100a'"):
        cute_runtime.obtain(_store(tmp_path, "sm_100a"), "toy", lambda: toy)


def test_cute_signature_of_a_loaded_function_is_the_runtime_arguments_only(tmp_path):
    """rel_attn's argument list (8 tensors, 3 scalars, the env stream): the stream is not a
    parameter of the loaded function, and its shape relations are checked by it."""
    fn, _ = cute_runtime.obtain(_store(tmp_path), "wide", cute_toys.compile_rel_attn_shaped)
    with pytest.raises(TypeError, match=r"Expects 11 parameters.*q: Tensor\(\[n0, n1, 128\], bfloat16\).*rel_logits: Tensor\(\[n0, n1, n8\]"):
        fn(torch.ones(8), torch.empty(8))


def test_cute_fingerprint_follows_cute_sources_and_dsl_versions(tmp_path):
    (tmp_path / "cute_fwd.py").write_text("x = 1\n")
    (tmp_path / "triton_fwd.py").write_text("y = 1\n")
    first = kernel_cache.sources_hash.__wrapped__(tmp_path, kernel_cache.CUTE_SOURCES)
    (tmp_path / "triton_fwd.py").write_text("y = 2\n")  # a Triton kernel is not a CuTe source
    assert kernel_cache.sources_hash.__wrapped__(tmp_path, kernel_cache.CUTE_SOURCES) == first
    (tmp_path / "cute_fwd.py").write_text("x = 2\n")
    assert kernel_cache.sources_hash.__wrapped__(tmp_path, kernel_cache.CUTE_SOURCES) != first

    def directory(**facts):
        base = cute_fingerprint("sm_90a", version="0.1.0", sources="s", toolchain={"nvidia-cutlass-dsl": "4.8.1", "apache-tvm-ffi": "0.1.15"})
        return KernelStore("sm_90a", root=tmp_path, facts=base | facts).directory

    base = directory()
    assert directory() == base and base.name.startswith("sm_90a-cute-")
    assert directory(kernel_sources="t") != base
    assert directory(toolchain={"nvidia-cutlass-dsl": "4.9.0", "apache-tvm-ffi": "0.1.15"}) != base
    assert directory(toolchain={"nvidia-cutlass-dsl": "4.8.1", "apache-tvm-ffi": "0.1.16"}) != base
    assert directory(inkling_ops="0.2.0") != base
    # the package's own: the sources are inkling_ops/kernels/cute_*.py, this runtime among them
    facts = cute_fingerprint("sm_90a")
    assert facts["kernel_sources"] == kernel_cache.sources_hash(kernel_cache.KERNELS_DIR, "cute_*.py")
    assert facts["kernel_sources"] != kernel_cache.sources_hash()


needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture(scope="module")
def toy_on_device(tmp_path_factory):
    """The toy for this GPU's arch, through the store (compiled, then loaded from there)."""
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) < (9, 0):
        pytest.skip(f"the toy is compiled for sm_90a and newer; this GPU is sm_{major}{minor}")
    arch = f"sm_{major}{minor}a"
    store = _store(tmp_path_factory.mktemp("cute-store"), arch)
    return cute_runtime.obtain(store, "toy", lambda: cute_toys.compile_scale(arch=arch))[0]


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("n", [1, 1000, 4099])
def test_cute_toy_runs_on_torchs_current_stream(toy_on_device, n):
    """On a side stream that is busy first: a launch anywhere else would run before the fill
    that waits behind the sleep, and the NaNs would stay."""
    x = torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(2_000_000)
        out.fill_(float("nan"))
        toy_on_device(x, out, 3.0)
    torch.cuda.current_stream().wait_stream(side)
    torch.testing.assert_close(out, x * 3.0, rtol=0, atol=0)


@pytest.mark.gpu
@needs_gpu
def test_cute_toy_is_captured_in_a_cuda_graph_and_replays(toy_on_device):
    x = torch.randn(777, device="cuda")
    out = torch.empty_like(x)
    toy_on_device(x, out, 2.0)  # the first call on a device loads the cubin: before capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        toy_on_device(x, out, 2.0)
    out.zero_()
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, x * 2.0, rtol=0, atol=0)


@pytest.mark.gpu
@needs_gpu
def test_cute_toy_refuses_misaligned_and_mistyped_tensors(toy_on_device):
    """The compiled wrapper (the DSL's TVM-FFI builder) checks each tensor before launching: the
    16-byte alignment the toy was compiled for, then its dtype."""
    x = torch.randn(65, device="cuda")
    with pytest.raises(ValueError, match=r"Misaligned Tensor data on argument #0 .*expected data alignment=16 bytes"):
        toy_on_device(x[1:], torch.empty(64, device="cuda"), 1.0)  # 4-byte offset: not 16-aligned
    with pytest.raises(ValueError, match=r"Mismatched Tensor on argument #0 .*expected dtype=float32"):
        toy_on_device(x.half(), torch.empty(65, device="cuda", dtype=torch.half), 1.0)


def test_cute_launch_probe_says_what_it_needs_without_a_gpu():
    """The H200 probe (meta/tools/cute_launch_probe.py) imports and refuses cleanly here."""
    if torch.cuda.is_available():
        pytest.skip("on a GPU the probe runs for real: python3 meta/tools/cute_launch_probe.py")
    result = subprocess.run([sys.executable, str(ROOT / "meta" / "tools" / "cute_launch_probe.py")], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "needs a CUDA device" in result.stdout, result.stderr[-2000:]
