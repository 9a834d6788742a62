"""Warmup of the CuTe DSL backend on a machine without a GPU: every compile key of a reference
serving configuration compiled for sm_90a into a persistent store, then loaded from there by a
fresh process (the build-machine / serving-machine split of docs/serving.md).

The reference configuration is Inkling at tensor-parallel 8 (bf16, head_dim 128, page 16): a
global layer type (8 / 1 heads, E 1024) and a sliding one (8 / 2 heads, window 511, E 512),
with small scheduler limits so the key count stays modest. Many keys share one compiled
function (one per dtype, head_dim and q_per_kv), so the two layer types cost two compiles.
The DSL's ``CUTE_DSL_KEEP`` / ``CUTE_DSL_DUMP_DIR`` are honoured: the test adds ``ptx`` to the
user's tokens and uses the user's dump directory when set (a temporary one otherwise), and
checks the PTX of each compile. Skips without nvidia-cutlass-dsl.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

pytest.importorskip("cutlass.cute")
pytest.importorskip("tvm_ffi")

from inkling_ops import kernel_cache, planning, strict  # noqa: E402
from inkling_ops.backends import cute_backend  # noqa: E402
from inkling_ops.compile_keys import DeviceFacts  # noqa: E402
from inkling_ops.serving import ServingConfig, enumerate_compile_keys, problem_for  # noqa: E402
from inkling_ops.warmup import warmup  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
H200 = DeviceFacts(arch="sm_90a", num_sms=132)
LIMITS = dict(page_size=16, head_dim=128, max_num_seqs=8, max_num_batched_tokens=512, max_model_len=8192, dtype=torch.bfloat16)
INKLING_TP8 = {
    "global": ServingConfig(num_heads=8, num_kv_heads=1, rel_extent=1024, **LIMITS),
    "sliding": ServingConfig(num_heads=8, num_kv_heads=2, rel_extent=512, window_left=511, **LIMITS),
}


@pytest.fixture
def fresh_cute(monkeypatch, tmp_path):
    """The registered cute backend with empty in-memory tables (and strict mode's record of warmed
    keys), a store under ``tmp_path``, and the DSL keeping PTX (the user's CUTE_DSL_KEEP plus
    ``ptx``, in the user's CUTE_DSL_DUMP_DIR when set). Yields (backend, dump directory)."""
    backend = planning.get_backend("cute")
    for name in ("_by_key", "_by_config", "_stores"):
        monkeypatch.setattr(backend, name, {})
    monkeypatch.setattr(strict, "_warmed", {})
    monkeypatch.setenv("INKLING_OPS_CACHE_DIR", str(tmp_path / "store"))
    tokens = [t for t in os.environ.get("CUTE_DSL_KEEP", "").split(",") if t.strip()]
    monkeypatch.setenv("CUTE_DSL_KEEP", ",".join(tokens + ["ptx"]))
    dump = Path(os.environ.get("CUTE_DSL_DUMP_DIR") or tmp_path / "dump")
    monkeypatch.setenv("CUTE_DSL_DUMP_DIR", str(dump))
    yield backend, dump


def _ptx_written_since(dump: Path, since: float) -> list[str]:
    # every compile of the kernel writes one file whose (truncated) name is the same for every
    # configuration: read it after each compile
    return [p.read_text() for p in dump.glob("*.sm_90a.ptx") if p.stat().st_mtime >= since]


def _check_ptx(ptx: str) -> None:
    assert ".target sm_90a" in ptx
    assert "wgmma.mma_async" in ptx
    # K and V load with TMA (SCHEDULE's tma_kv); the tile that holds kv_len
    # is still gathered with cp.async
    assert "cp.async.bulk.tensor" in ptx
    assert re.search(r"cp\.async\.cg\.shared\.global", ptx)


def test_cute_enumeration_yields_only_keys_the_backend_accepts():
    backend = planning.get_backend("cute")
    for config in INKLING_TP8.values():
        keys = enumerate_compile_keys(config, facts=H200, backend="cute")
        # it never splits, so decode keys have one split, and keys differ only in the q bucket and
        # the grid (compact for prefill-class calls of several requests, on both layers)
        assert {k.num_splits for k in keys} == {1} and {k.backend for k in keys} == {"cute"}
        dense = sorted(k.max_seqlen_q_bucket for k in keys if not k.compact_grid)
        compact = sorted(k.max_seqlen_q_bucket for k in keys if k.compact_grid)
        assert dense == [1 << i for i in range(10)]  # 1 ... 512
        assert compact == [1 << i for i in range(5, 10)]  # 32 ... 512
        # the q bucket is a runtime value: one kernel configuration a grid
        assert len({cute_backend.fwd_config(k) for k in keys}) == 2
    refused = dataclasses.replace(INKLING_TP8["global"], head_dim=256)  # outside the kernel's scope
    assert enumerate_compile_keys(refused, facts=H200, backend="cute") == set()
    assert "head_dim 256" in backend.why_not(problem_for(refused, num_tokens=1, num_reqs=1, max_seqlen_q=1), H200)
    assert enumerate_compile_keys(refused, facts=H200, backend="triton")  # Triton takes it
    # head_dim 64: its own kernel configurations, one a grid as at 128
    small = dataclasses.replace(INKLING_TP8["global"], head_dim=64)
    configs = {cute_backend.fwd_config(k) for k in enumerate_compile_keys(small, facts=H200, backend="cute")}
    assert sorted((c.head_dim, c.compact_grid) for c in configs) == [(64, False), (64, True)]


#: ``python -m inkling_ops warmup`` of each configuration in one process (one import): the first
#: with the target from the DSL's CUTE_DSL_ARCH, the second with --arch (the cute backend never
#: splits, so neither needs --num-sms)
LOADER = """
import sys
from inkling_ops.__main__ import main
first, second = sys.argv[1:]
assert main(["warmup", "--config", first, "--backend", "cute", "--no-progress"]) == 0
assert main(["warmup", "--config", second, "--backend", "cute", "--arch", "sm_90a", "--no-progress"]) == 0
"""


def test_cute_warmup_compiles_every_key_of_a_serving_configuration_and_a_new_process_loads_them(fresh_cute, tmp_path):
    backend, dump = fresh_cute
    total, configs = 0, {}
    for name, config in INKLING_TP8.items():
        since = time.time() - 1
        summary = warmup(config, facts=H200, backend="cute", progress=False)
        keys = enumerate_compile_keys(config, facts=H200, backend="cute")
        assert summary.backend == "cute" and set(summary.keys) == keys, name
        # one compile per kernel configuration (one per layer type): the other keys share it
        configs[name] = {cute_backend.fwd_config(k) for k in keys}
        n = len(configs[name])
        assert (summary.compiled, summary.loaded, summary.shared) == (n, 0, len(keys) - n), (name, summary)
        ptx = _ptx_written_since(dump, since)
        assert ptx, f"{name}: no PTX kept in {dump}"
        _check_ptx(ptx[-1])
        total += len(keys)
    store = backend.store("sm_90a")
    assert store.directory.parent == tmp_path / "store" and store.directory.name.startswith("sm_90a-cute-")
    info = kernel_cache.info(tmp_path / "store")
    entries = len(set().union(*configs.values()))
    # per kernel configuration, not per key: each layer's two grids (the layers' GQA groups differ)
    assert sum(info.entries.values()) == entries == 4, str(info)
    assert all(backend._by_key[k] is not None for k in backend._by_key) and len(backend._by_key) == total

    # A serving process with no GPU (and no CUDA at all) loads every key from the store.
    paths = []
    for name, config in INKLING_TP8.items():
        fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
        fields["dtype"], fields["kv_dtype"] = "bfloat16", None
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(fields))
        paths.append(str(path))
    env = dict(
        os.environ, CUDA_VISIBLE_DEVICES="", CUTE_DSL_ARCH="sm_90a", INKLING_OPS_CACHE_DIR=str(tmp_path / "store"),
        PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )  # fmt: skip
    result = subprocess.run([sys.executable, "-c", LOADER, *paths], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("warmup:")]
    assert len(lines) == 2, result.stdout
    for line, (name, config) in zip(lines, INKLING_TP8.items()):
        n = len(enumerate_compile_keys(config, facts=H200, backend="cute"))
        loaded = len(configs[name])
        assert f"warmup: {n} compile keys on backend 'cute' for sm_90a: 0 kernels compiled, {loaded} loaded from the cache" in line
    assert sum(kernel_cache.info(tmp_path / "store").entries.values()) == entries  # nothing new written
