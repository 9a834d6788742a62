"""The persistent kernel store (inkling_ops/kernel_cache.py): atomic entries, broken entries
rebuilt with a warning, concurrent writers, the fingerprint, info and clear. CPU only; the
concurrent-warmers test compiles one small key for sm_90a in two subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from inkling_ops import kernel_cache
from inkling_ops.kernel_cache import MANIFEST, KernelStore, fingerprint

ROOT = Path(__file__).resolve().parents[1]
FILES = {"k.json": b'{"hash": "abc"}', "k.cubin": b"\x7fELF" + bytes(range(200))}


def _store(tmp_path, arch="sm_90a", **facts) -> KernelStore:
    return KernelStore(arch, root=tmp_path, facts=fingerprint(arch, version="0.1.0", sources="s", toolchain={"triton": "3.6.0"}) | facts)


def test_put_then_get_returns_the_files_and_leaves_no_temporary(tmp_path):
    store = _store(tmp_path)
    assert store.get("e1") is None
    paths = store.put("e1", FILES)
    assert {name: p.read_bytes() for name, p in paths.items()} == FILES
    got = store.get("e1")
    assert {name: p.read_bytes() for name, p in got.items()} == FILES
    assert sorted(p.name for p in store.directory.iterdir()) == ["FINGERPRINT.json", "e1"]
    manifest = json.loads((store.directory / "e1" / MANIFEST).read_text())
    assert manifest["files"]["k.cubin"]["size"] == len(FILES["k.cubin"])
    assert json.loads((store.directory / "FINGERPRINT.json").read_text())["toolchain"] == {"triton": "3.6.0"}


@pytest.mark.parametrize(
    "damage",
    [
        lambda entry: (entry / "k.cubin").write_bytes(FILES["k.cubin"][:50]),  # truncated
        lambda entry: (entry / "k.cubin").write_bytes(FILES["k.cubin"][:-1] + b"\0"),  # same size, other bytes
        lambda entry: (entry / MANIFEST).unlink(),  # never finished
        lambda entry: (entry / MANIFEST).write_text("{not json"),
        lambda entry: (entry / "k.json").unlink(),
        lambda entry: (entry / MANIFEST).write_text('{"files": ["k.json", "k.cubin"]}'),
        lambda entry: (entry / MANIFEST).write_text('{"files": {"k.json": 12}}'),
        lambda entry: (entry / MANIFEST).write_text("[1, 2]"),
        lambda entry: (entry / MANIFEST).write_text('{"files": {"../k.json": {"size": 2, "sha256": "x"}}}'),
    ],
    ids=["truncated", "corrupt", "no-manifest", "bad-manifest", "file-missing", "files-a-list", "file-not-a-dict",
         "manifest-a-list", "path-in-name"],
)
def test_a_broken_entry_warns_and_is_rebuilt(tmp_path, damage):
    store = _store(tmp_path)
    store.put("e1", FILES)
    damage(store.directory / "e1")
    with pytest.warns(UserWarning, match="broken"):
        assert store.get("e1") is None
    store.put("e1", FILES)  # the rebuild replaces it
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = store.get("e1")
    assert {name: p.read_bytes() for name, p in got.items()} == FILES
    assert not [p for p in store.directory.iterdir() if p.name.startswith(".")]  # nothing left aside


def test_a_second_writer_keeps_the_first_complete_entry(tmp_path):
    """Two processes that compiled the same variant: the later rename finds the entry in place,
    keeps it and drops its own copy."""
    first, second = _store(tmp_path), _store(tmp_path)
    first.put("e1", FILES)
    other = {"k.json": b"{}", "k.cubin": b"other"}
    paths = second.put("e1", other)
    assert {name: p.read_bytes() for name, p in paths.items() if name in FILES} == FILES
    assert [p.name for p in second.directory.iterdir() if p.name.startswith(".")] == []


def test_the_fingerprint_separates_versions_sources_toolchains_and_archs(tmp_path):
    base = _store(tmp_path).directory
    assert _store(tmp_path).directory == base
    assert _store(tmp_path, inkling_ops="0.2.0").directory != base
    assert _store(tmp_path, kernel_sources="t").directory != base
    assert _store(tmp_path, toolchain={"triton": "3.9.0"}).directory != base
    assert _store(tmp_path, arch="sm_80").directory != base and _store(tmp_path, arch="sm_80").directory.name.startswith("sm_80-")


def test_sources_hash_follows_the_kernel_files(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "notes.txt").write_text("ignored")
    first = kernel_cache.sources_hash.__wrapped__(tmp_path)
    (tmp_path / "notes.txt").write_text("still ignored")
    assert kernel_cache.sources_hash.__wrapped__(tmp_path) == first
    (tmp_path / "a.py").write_text("x = 2\n")
    assert kernel_cache.sources_hash.__wrapped__(tmp_path) != first
    assert len(kernel_cache.sources_hash()) == 64  # the package's own kernels


def test_default_fingerprint_reads_the_package_and_toolchain():
    facts = fingerprint("sm_90a")
    import inkling_ops

    assert facts["inkling_ops"] == inkling_ops.__version__
    assert set(facts["toolchain"]) >= {"torch", "triton"}


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("INKLING_OPS_CACHE_DIR", str(tmp_path / "c"))
    assert kernel_cache.cache_dir() == tmp_path / "c"
    monkeypatch.delenv("INKLING_OPS_CACHE_DIR")
    assert kernel_cache.cache_dir() == Path.home() / ".cache" / "inkling_ops"


def test_info_and_clear(tmp_path):
    a, b = _store(tmp_path), _store(tmp_path, arch="sm_80")
    a.put("e1", FILES)
    a.put("e2", FILES)
    b.put("e1", FILES)
    (tmp_path / "unrelated.txt").write_text("keep me")
    info = kernel_cache.info(tmp_path)
    assert info.entries == {a.directory.name: 2, b.directory.name: 1}
    entry_bytes = sum(f.stat().st_size for f in (a.directory / "e1").iterdir())
    assert info.size_bytes == 3 * entry_bytes
    assert "3 compiled variants" in str(info) and str(tmp_path) in str(info)
    assert kernel_cache.clear(tmp_path) == 3
    assert kernel_cache.info(tmp_path).entries == {}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["unrelated.txt"]
    assert kernel_cache.clear(tmp_path / "absent") == 0


WARMER = (
    "import json, sys, time\n"
    "from inkling_ops.backends.triton_backend import TritonBackend\n"
    "from inkling_ops.compile_keys import CompileKey\n"
    "key = CompileKey(dtype='bfloat16', kv_dtype='bfloat16', head_dim=32, q_per_kv=2, page_size=16, rel_extent=16,\n"
    "                 causal=True, window_left=-1, max_seqlen_q_bucket=1, num_splits=32, arch='sm_90a', backend='triton',\n"
    "                 num_kv_heads=2, kv_slot_shift=6)\n"
    "start = float(sys.argv[1])\n"
    "while time.time() < start: time.sleep(0.01)\n"  # both processes compile at once
    "backend = TritonBackend()\n"
    "kernels = backend.compile(key)\n"
    "print(json.dumps(dict(backend.compile_stats, kernels=len(kernels))))\n"
)


def test_two_processes_warming_the_same_key_at_once_leave_one_good_entry_each(tmp_path):
    import time

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["INKLING_OPS_CACHE_DIR"] = str(tmp_path / "store")
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton")  # both really compile (no shared Triton cache hit first)
    start = time.time() + 6
    procs = [
        subprocess.Popen([sys.executable, "-W", "ignore", "-c", WARMER, str(start)], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)  # fmt: skip
        for _ in range(2)
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert all(r["kernels"] == 2 and r["compiled"] + r["loaded"] == 2 for r in results), results
    info = kernel_cache.info(tmp_path / "store")
    assert sum(info.entries.values()) == 2, info  # the forward kernel and the combine (32 splits: no merge in the forward), once each
    (fp,) = (tmp_path / "store").iterdir()
    assert not [p.name for p in fp.iterdir() if p.name.startswith(".")]
    store = KernelStore("sm_90a", root=tmp_path / "store")
    store.directory = fp
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for entry in fp.iterdir():
            if entry.is_dir():
                assert store.get(entry.name) is not None


def test_discard_lets_a_rebuild_replace_an_entry_that_checks_but_does_not_load(tmp_path):
    store = _store(tmp_path)
    store.put("e1", {"k.json": b"{}", "k.cubin": b"unloadable"})
    store.discard("e1")
    assert store.get("e1") is None
    store.put("e1", FILES)
    assert store.get("e1")["k.cubin"].read_bytes() == FILES["k.cubin"]


def test_a_stray_file_where_an_entry_belongs_is_replaced(tmp_path):
    store = _store(tmp_path)
    store.directory.mkdir(parents=True)
    (store.directory / "e1").write_bytes(b"not a directory")
    assert store.get("e1") is None
    paths = store.put("e1", FILES)
    assert {name: p.read_bytes() for name, p in paths.items()} == FILES
    assert not [p for p in store.directory.iterdir() if p.name.startswith(".")]


def test_a_complete_entry_installed_after_our_check_is_moved_back_not_deleted(tmp_path):
    """The race of two writers replacing one broken entry: A finds it broken, B replaces it with a
    complete one, then A takes 'the broken one' out of the way. B's entry must survive."""
    store = _store(tmp_path)
    store.put("e1", FILES)  # B's complete entry, in place by the time A moves
    KernelStore._move_aside_if_broken(store.directory / "e1")
    assert store.get("e1") is not None
    assert not [p for p in store.directory.iterdir() if p.name.startswith(".")]


def test_put_starts_again_when_the_store_is_cleared_under_it(tmp_path, monkeypatch):
    store = _store(tmp_path)
    real_mkdtemp, calls = kernel_cache.tempfile.mkdtemp, []

    def mkdtemp_after_a_clear(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            kernel_cache.clear(tmp_path)  # `python -m inkling_ops cache clear` in another process
        return real_mkdtemp(*args, **kwargs)

    monkeypatch.setattr(kernel_cache.tempfile, "mkdtemp", mkdtemp_after_a_clear)
    paths = store.put("e1", FILES)
    assert len(calls) == 2 and {name: p.read_bytes() for name, p in paths.items()} == FILES


def test_obtain_loads_builds_once_and_looks_again_when_an_entry_vanishes(tmp_path):
    store = _store(tmp_path)
    builds, loads = [], []

    def build():
        builds.append(1)
        return FILES

    def load(paths):
        loads.append(1)
        if len(loads) == 1:  # another process replaced the entry between our lookup and our read
            raise FileNotFoundError(2, "No such file or directory", str(paths["k.cubin"]))
        return {name: p.read_bytes() for name, p in paths.items()}

    got, how = store.obtain("e1", load, build)
    assert (got, how, len(builds), len(loads)) == (FILES, "compiled", 1, 2)
    loads.clear()
    loads.append(1)  # the next load succeeds
    assert store.obtain("e1", load, build) == (FILES, "loaded") and len(builds) == 1


def test_obtain_raises_a_loaders_own_missing_file_as_it_is(tmp_path):
    """Only a missing file of the entry means it vanished; a library the loader lacks is its error."""
    store = _store(tmp_path)

    def load(paths):
        raise FileNotFoundError(2, "No such file or directory", "/usr/lib/libcuda-missing.so")

    with pytest.raises(FileNotFoundError, match="libcuda-missing"):
        store.obtain("e1", load, lambda: FILES)


def test_put_keeps_an_entry_another_writer_completed_between_our_check_and_our_move(tmp_path, monkeypatch):
    """The race of two writers replacing one broken entry, inside put(): our check saw it broken,
    then the other writer installed its complete entry before we moved 'the broken one' aside.
    Its entry (not ours) must be what stays, and nothing may be deleted under its readers."""
    store = _store(tmp_path)
    theirs = {"k.json": b'{"theirs": 1}', "k.cubin": b"their cubin"}
    store.put("e1", theirs)  # in place by the time we act
    real_check, calls = KernelStore._check, []

    def stale_check(path):
        calls.append(path)
        return "no manifest" if len(calls) == 1 else real_check(path)  # our first look predates theirs

    monkeypatch.setattr(KernelStore, "_check", staticmethod(stale_check))
    paths = store.put("e1", FILES)
    assert {name: p.read_bytes() for name, p in paths.items()} == theirs
    assert not [p for p in store.directory.iterdir() if p.name.startswith(".")]


def test_obtain_rebuilds_a_complete_entry_that_does_not_load(tmp_path):
    store = _store(tmp_path)
    store.put("e1", {"k.json": b"{}", "k.cubin": b"unloadable"})

    def load(paths):
        data = paths["k.cubin"].read_bytes()
        if data == b"unloadable":
            raise RuntimeError("bad cubin")
        return data

    with pytest.warns(UserWarning, match="does not load"):
        assert store.obtain("e1", load, lambda: FILES) == (FILES["k.cubin"], "compiled")
    assert store.obtain("e1", load, lambda: pytest.fail("rebuilt twice")) == (FILES["k.cubin"], "loaded")


CONTENDER = (
    "import sys, warnings\n"
    "from pathlib import Path\n"
    "from inkling_ops.kernel_cache import KernelStore, fingerprint\n"
    "warnings.simplefilter('ignore')\n"
    "files = {'k.cubin': b'x' * 4096, 'k.json': b'{}'}\n"
    "store = KernelStore('sm_90a', root=Path(sys.argv[1]), facts=fingerprint('sm_90a', version='x', sources='s', toolchain={}))\n"
    "load = lambda paths: {n: p.read_bytes() for n, p in paths.items()}\n"
    "for i in range(int(sys.argv[2])):\n"
    "    assert store.obtain(f'e{i}', load, lambda: files)[0] == files\n"
)


def test_processes_replacing_the_same_broken_entries_at_once_all_succeed(tmp_path):
    """Every entry planted broken, then three processes obtain them all at the same time: none
    fails (before the fix a writer could delete the complete entry another had just installed,
    and that one's read of the paths put() returned raised FileNotFoundError)."""
    count = 150
    store = KernelStore("sm_90a", root=tmp_path, facts=fingerprint("sm_90a", version="x", sources="s", toolchain={}))
    for i in range(count):
        entry = store.directory / f"e{i}"
        entry.mkdir(parents=True)
        (entry / "k.cubin").write_bytes(b"x" * 10)
        (entry / MANIFEST).write_text('{"files": {"k.cubin": {"size": 4096, "sha256": "0"}}}')
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = [
        subprocess.Popen([sys.executable, "-c", CONTENDER, str(tmp_path), str(count)], env=env, stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert all(store.get(f"e{i}") is not None for i in range(count))
    assert not [p for p in store.directory.iterdir() if p.name.startswith(".")]


def test_clear_leaves_directories_that_are_not_stores_alone(tmp_path):
    """INKLING_OPS_CACHE_DIR may point at a shared directory such as ~/.cache."""
    store = _store(tmp_path)
    store.put("e1", FILES)
    (tmp_path / "pip" / "http").mkdir(parents=True)
    (tmp_path / "pip" / "http" / "blob").write_bytes(b"someone else's")
    (tmp_path / "sm_90a-0123456789abcdef").mkdir()  # ours by its name, its FINGERPRINT.json never written
    assert kernel_cache.info(tmp_path).entries == {store.directory.name: 1}
    assert kernel_cache.clear(tmp_path) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pip"]
    assert (tmp_path / "pip" / "http" / "blob").read_bytes() == b"someone else's"


def test_the_triton_store_fingerprint_holds_ptxas_and_the_code_environment(tmp_path, monkeypatch):
    """A cubin assembled by another ptxas (by its version text) or under code-changing variables
    (PTXAS_OPTIONS, fp fusion, ...) must not be read as ours; variables that only move caches or
    run-time libraries must not split the store (a build machine's store serves the GPU host)."""
    from inkling_ops.backends.triton_backend import TritonBackend

    monkeypatch.setenv("INKLING_OPS_CACHE_DIR", str(tmp_path))
    for name in ("PTXAS_OPTIONS", "TRITON_DEFAULT_FP_FUSION", "TRITON_LIBCUDA_PATH", "TRITON_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    facts = TritonBackend().store("sm_90a").facts["toolchain"]["triton_compiler"]
    assert set(facts) == {"ptxas", "environment"} and len(facts["ptxas"]) == 16
    base = TritonBackend().store("sm_90a").directory
    monkeypatch.setenv("TRITON_LIBCUDA_PATH", str(tmp_path / "lib"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    assert TritonBackend().store("sm_90a").directory == base
    for name, value in (("PTXAS_OPTIONS", "--maxrregcount=64"), ("TRITON_DEFAULT_FP_FUSION", "0")):
        monkeypatch.setenv(name, value)
        moved = TritonBackend().store("sm_90a")
        assert f"{name}={value}" in moved.facts["toolchain"]["triton_compiler"]["environment"]
        assert moved.directory != base
        monkeypatch.delenv(name)


def test_the_cute_store_fingerprint_holds_the_dsls_code_environment(tmp_path, monkeypatch):
    """A CuTe kernel built with the DSL's debug info or line info (or other code-changing
    settings) must not be served to a process that builds without, nor the reverse; the DSL's
    arch (set on a CPU build machine, not on the GPU host) and its dump settings must not split
    the store. With none of those variables set the fingerprint is the plain cute_fingerprint."""
    from inkling_ops.backends.cute_backend import CuteBackend
    from inkling_ops.kernels.cute_runtime import CODE_ENVIRONMENT

    monkeypatch.setenv("INKLING_OPS_CACHE_DIR", str(tmp_path))
    for name in (*CODE_ENVIRONMENT, "CUTE_DSL_ARCH", "CUTE_DSL_KEEP", "CUTE_DSL_DUMP_DIR"):
        monkeypatch.delenv(name, raising=False)
    base = CuteBackend().store("sm_90a")
    assert base.facts == kernel_cache.cute_fingerprint("sm_90a")
    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_90a")
    monkeypatch.setenv("CUTE_DSL_KEEP", "ptx")
    assert CuteBackend().store("sm_90a").directory == base.directory
    for name in ("CUTE_DSL_LINEINFO", "CUTE_DSL_DEBUG", "CUTE_DSL_COMPILER_OPT"):
        monkeypatch.setenv(name, "1")
        moved = CuteBackend().store("sm_90a")
        assert f"{name}=1;" in moved.facts["toolchain"]["dsl_environment"] and moved.directory != base.directory
        monkeypatch.delenv(name)


def test_a_store_that_cannot_be_written_warns_once_and_the_kernel_still_loads(tmp_path, monkeypatch):
    """A cache path under a regular file (as a read-only or foreign directory would) cannot hold
    entries: obtain() warns once, naming INKLING_OPS_CACHE_DIR, keeps the built files under a
    temporary root of the process, loads them from there, and does not build them again."""
    blocker = tmp_path / "not_a_directory"
    blocker.write_text("")
    store = KernelStore("sm_90a", root=blocker / "cache")
    builds = []

    def build():
        builds.append(1)
        return {"k.bin": b"abc"}

    with pytest.warns(UserWarning, match=r"cannot write .*INKLING_OPS_CACHE_DIR"):
        value, how = store.obtain("e1", lambda paths: paths["k.bin"].read_bytes(), build)
    assert (value, how) == (b"abc", "compiled")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second warning, no second build
        assert store.obtain("e1", lambda paths: paths["k.bin"].read_bytes(), build) == (b"abc", "loaded")
        store2 = KernelStore("sm_90a", root=blocker / "cache")
        assert store2.obtain("e2", lambda paths: paths["k.bin"].read_bytes(), build)[0] == b"abc"
    assert len(builds) == 2 and blocker.read_text() == ""


def test_a_read_only_store_keeps_serving_its_entries(tmp_path, monkeypatch):
    """Entries already in a store that refuses writes (a store filled elsewhere, mounted read-only)
    still load; a new one goes to the process's fallback; warmed-key records are skipped with a
    warning instead of failing the warmup."""
    store = KernelStore("sm_90a", root=tmp_path)
    store.put("old", {"k.bin": b"old"})

    def refusing(method):
        def write(self, *args, **kwargs):
            if self.root == tmp_path:  # the mounted store; the process's fallback root writes
                raise OSError(30, "Read-only file system")
            return method(self, *args, **kwargs)

        return write

    monkeypatch.setattr(KernelStore, "_put_once", refusing(KernelStore._put_once))
    monkeypatch.setattr(KernelStore, "_note_once", refusing(KernelStore._note_once))
    read = lambda paths: paths["k.bin"].read_bytes()  # noqa: E731
    assert store.obtain("old", read, lambda: {"k.bin": b"never"}) == (b"old", "loaded")
    monkeypatch.setattr(kernel_cache, "_WARNED_UNWRITABLE", set())
    with pytest.warns(UserWarning, match="Read-only file system"):
        assert store.obtain("new", read, lambda: {"k.bin": b"new"}) == (b"new", "compiled")
    with pytest.warns(UserWarning, match="cannot record warmed keys"):
        store.note_keys([{"a": 1}])
