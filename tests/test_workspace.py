"""The workspace kept per stream between eager calls (``inkling_ops/workspace.py``).

CPU: the keeping rules (reuse, growth, one buffer per stream, the size cap, capture, release),
for the fp32 workspace and the arrival counts, with CPU tensors standing in for CUDA ones. GPU
(marked): split-KV decodes (4 splits, merged in the forward) on one stream and on two streams at
once, eager calls between the replays of a captured call, against the reference.
"""

from __future__ import annotations

import pytest
import torch

import inkling_ops
from inkling_ops import workspace
from inkling_ops.testing import make_case

CPU = torch.device("cpu")


@pytest.fixture
def clean(monkeypatch):
    """No kept buffers before or after; capture reported as off (the CPU tests' stand-in)."""
    workspace.release_workspaces()
    monkeypatch.setattr(workspace, "_capturing", lambda: False)
    yield
    workspace.release_workspaces()


def test_reused_on_one_stream_and_grown(clean):
    first = workspace.fp32_workspace(100, CPU, stream=7)
    assert first.dtype == torch.float32 and first.numel() >= 100
    assert workspace.fp32_workspace(60, CPU, stream=7).data_ptr() == first.data_ptr()
    grown = workspace.fp32_workspace(300, CPU, stream=7)
    assert grown.numel() >= 300 and grown.data_ptr() != first.data_ptr()
    assert workspace.kept_bytes() == 4 * grown.numel()


def test_one_buffer_per_stream(clean):
    a = workspace.fp32_workspace(100, CPU, stream=1)
    b = workspace.fp32_workspace(100, CPU, stream=2)
    assert a.data_ptr() != b.data_ptr()
    assert workspace.kept_bytes() == 4 * (a.numel() + b.numel())


def test_one_buffer_per_device_for_the_same_stream_handle(clean, monkeypatch):
    """Every CUDA device's default stream has the handle 0: the buffer kept for cuda:0's must not
    serve cuda:1's (the allocation stood in by CPU tensors)."""
    monkeypatch.setattr(workspace, "_allocate_outside_pools", lambda make, numel, device, dtype: make(numel, dtype=dtype))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: None)
    zero, one = torch.device("cuda", 0), torch.device("cuda", 1)
    a = workspace.fp32_workspace(100, zero, stream=0)
    b = workspace.fp32_workspace(100, one, stream=0)
    assert a.data_ptr() != b.data_ptr() and workspace.fp32_workspace(100, zero, stream=0).data_ptr() == a.data_ptr()
    c = workspace.arrival_counts(10, zero, stream=0)
    d = workspace.arrival_counts(10, one, stream=0)
    assert c.data_ptr() != d.data_ptr()


def test_over_the_cap_allocates_per_call(clean):
    big = workspace.REUSE_MAX_BYTES // 4 + 1
    a = workspace.fp32_workspace(big, CPU, stream=3)
    assert a.numel() == big and workspace.kept_bytes() == 0


def test_capture_allocates_per_call(clean, monkeypatch):
    kept = workspace.fp32_workspace(100, CPU, stream=4)
    monkeypatch.setattr(workspace, "_capturing", lambda: True)
    during = workspace.fp32_workspace(100, CPU, stream=4)
    assert during.data_ptr() != kept.data_ptr()
    assert workspace.kept_bytes() == 4 * kept.numel()


def test_release(clean):
    a = workspace.fp32_workspace(100, CPU, stream=5)
    assert inkling_ops.release_workspaces() == 4 * a.numel()
    assert workspace.kept_bytes() == 0
    assert workspace.fp32_workspace(100, CPU, stream=5).data_ptr() != 0


def test_arrival_counts_are_zeros_kept_per_stream(clean):
    first = workspace.arrival_counts(10, CPU, stream=8)
    assert first.dtype == torch.int32 and first.numel() >= 10 and not first.any()
    assert workspace.arrival_counts(4, CPU, stream=8).data_ptr() == first.data_ptr()
    other = workspace.arrival_counts(10, CPU, stream=9)
    assert other.data_ptr() != first.data_ptr()
    grown = workspace.arrival_counts(50, CPU, stream=8)
    assert grown.numel() >= 50 and not grown.any() and grown.data_ptr() != first.data_ptr()
    # kept apart from the fp32 workspace of the same stream (whose contents are garbage)
    assert workspace.fp32_workspace(50, CPU, stream=8).data_ptr() != grown.data_ptr()
    assert workspace.kept_bytes() == 4 * (grown.numel() + other.numel()) + 4 * 50
    assert inkling_ops.release_workspaces() > 0 and workspace.kept_bytes() == 0


def test_arrival_counts_under_capture_are_fresh_zeros(clean, monkeypatch):
    kept = workspace.arrival_counts(10, CPU, stream=10)
    monkeypatch.setattr(workspace, "_capturing", lambda: True)
    during = workspace.arrival_counts(10, CPU, stream=10)
    assert during.data_ptr() != kept.data_ptr() and not during.any()
    assert workspace.kept_bytes() == 4 * kept.numel()


# --- on the GPU --------------------------------------------------------------------------------

TOL = dict(atol=2e-2, rtol=2e-2)


def _decode(seed: int):
    return make_case(q_lens=[1] * 5, kv_lens=[3000, 17, 1024, 1025, 2], num_heads=16, num_kv_heads=2,
                     rel_extent=1024, head_dim=128, dtype=torch.bfloat16, device="cuda",
                     generator=torch.Generator().manual_seed(seed))  # fmt: skip


def _call(case, out):
    inkling_ops.rel_attn(*case.args(), **case.kwargs(), num_splits=4, backend="triton", out=out)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_two_streams_at_once():
    """Split decodes of different inputs issued on two streams without syncs between them: each
    stream keeps its own buffer and both results match the reference."""
    workspace.release_workspaces()
    a, b = _decode(1), _decode(2)
    out_a, out_b = torch.empty_like(a.q), torch.empty_like(b.q)
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    for stream in (s1, s2):
        stream.wait_stream(torch.cuda.current_stream())
    for _ in range(20):
        with torch.cuda.stream(s1):
            _call(a, out_a)
        with torch.cuda.stream(s2):
            _call(b, out_b)
    torch.cuda.synchronize()
    assert len(workspace._BUFFERS) >= 2 and len(workspace._COUNTS) >= 2
    # the forward merged its 4 splits (one launch) and set every arrival count back to zero
    assert all(not counts.any() for counts, _ in workspace._COUNTS.values())
    torch.testing.assert_close(out_a.float(), a.reference_fp32(), **TOL)
    torch.testing.assert_close(out_b.float(), b.reference_fp32(), **TOL)
    workspace.release_workspaces()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_eager_calls_between_replays():
    """A captured split decode owns its workspace: eager split decodes of other inputs on the
    same stream between its replays neither disturb it nor are disturbed, and the capture keeps
    no buffer of its own here."""
    workspace.release_workspaces()
    a, b = _decode(3), _decode(4)
    out_a, out_b = torch.empty_like(a.q), torch.empty_like(b.q)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        _call(a, out_a)  # warm-up: compiles
    torch.cuda.current_stream().wait_stream(side)
    _call(b, out_b)
    kept = workspace.kept_bytes()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _call(a, out_a)
    assert workspace.kept_bytes() == kept
    out_a.zero_()
    for _ in range(5):
        graph.replay()
        _call(b, out_b)
    torch.cuda.synchronize()
    torch.testing.assert_close(out_a.float(), a.reference_fp32(), **TOL)
    torch.testing.assert_close(out_b.float(), b.reference_fp32(), **TOL)
    workspace.release_workspaces()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_cudagraph_trees_warmup():
    """torch.compile(mode="reduce-overhead") warms up eagerly with the thread's allocations routed
    to its graphs' pool and refuses live tensors there it does not know: the kept buffer must not
    be one of them."""
    workspace.release_workspaces()
    case = _decode(5)

    def step(q, k, v, bt, sl, cu, rel):
        return inkling_ops.rel_attn(q * 1.0, k, v, block_table=bt, cache_seqlens=sl, cu_seqlens_q=cu, rel_logits=rel,
                                    max_seqlen_q=1, softmax_scale=case.softmax_scale, num_splits=4) + 1.0  # fmt: skip

    compiled = torch.compile(step, mode="reduce-overhead", fullgraph=True)
    for _ in range(4):
        got = compiled(case.q, case.key_cache, case.value_cache, case.block_table, case.cache_seqlens,
                       case.cu_seqlens_q, case.rel_logits)  # fmt: skip
    torch.cuda.synchronize()
    torch.testing.assert_close(got.float(), case.reference_fp32() + 1.0, **TOL)
    workspace.release_workspaces()


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_a_forked_child_starts_without_the_parents_allocator(clean):
    """A child process inherits the parent's executor object but none of its threads: the module
    forgets both (after_in_child), so the child's first growth makes its own."""
    import os

    workspace.fp32_workspace(100, CPU, stream=6)  # makes the allocator thread here
    assert workspace._ALLOCATOR is not None
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then grow a buffer with a fresh allocator; never return to pytest
        code = 0
        try:
            ok = workspace._ALLOCATOR is None and not workspace._BUFFERS
            ok = ok and workspace.fp32_workspace(100, CPU, stream=6).numel() >= 100
            os.write(write, b"1" if ok else b"0")
        except BaseException as e:  # the parent's assertion shows what the child raised
            code = 1
            os.write(write, f"the child raised {type(e).__name__}: {e}".encode()[:4000])
        finally:
            os._exit(code)
    import select
    import signal

    os.close(write)
    ready, _, _ = select.select([read], [], [], 60)
    answer = os.read(read, 4096) if ready else b""
    os.close(read)
    if not ready:
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    if not ready:
        reason = "the child did not answer within 60 s"
    elif answer == b"0":
        reason = "the child kept the parent's allocator"
    else:
        reason = answer.decode(errors="replace")
    assert answer == b"1", reason
