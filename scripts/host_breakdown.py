"""Where the eager host time of one rel_attn call goes, layer by layer (CUDA).

    python3 scripts/host_breakdown.py [--profile]

The benchmark's tiny decode (1 request, q_len 1, kv 256, 8 / 1 heads, head_dim 128, page 16,
E 1024: two splits, so a workspace and a combine). Each line is the median host wall time per
call over batches of back-to-back calls (no synchronize inside a batch), from the outermost
layer inward:

- ``op``: ``torch.ops.inkling.rel_attn_out`` with the default backend (what a user pays);
- ``op_null``: the same with a backend that launches nothing (registration, validation, dispatch);
- ``backend_run``: ``TritonBackend.run`` (configuration, workspace, both launches);
- ``run_triton``: the same without choosing the configuration;
- ``fwd_launch`` / ``combine_launch``: one launch each through our launch functions;
- ``fwd_compiled``: the compiled forward kernel called directly with prepared arguments
  (Triton's own launcher: argument packing, stream lookup);
- ``empty_triton``: a compiled one-argument Triton kernel, called the same way;
- ``noop``: a one-element in-place add (a bare PyTorch kernel launch).

``--profile`` adds cProfile's top functions (by own time) for ``op``.
"""

from __future__ import annotations

import cProfile
import pstats
import sys

import torch
import triton

import inkling_ops
from inkling_ops import dispatch
from inkling_ops.backends.triton_backend import TritonBackend, run_triton
from inkling_ops.host_overhead import _NullBackend, _per_call_us
from inkling_ops.kernels.triton_configs import fwd_config
from inkling_ops.testing import make_case


@triton.jit
def _empty_kernel(x_ptr):
    pass


def main(profile: bool) -> None:
    case = make_case([1], [256], num_heads=8, num_kv_heads=1, head_dim=128, rel_extent=1024, page_size=16,
                     dtype=torch.bfloat16, device="cuda")  # fmt: skip
    out = torch.empty_like(case.q)
    args = (case.q, case.key_cache, case.value_cache, case.block_table, case.cache_seqlens, case.cu_seqlens_q,
            case.rel_logits)  # fmt: skip
    options = dict(max_seqlen_q=1, softmax_scale=case.softmax_scale, window_size=[-1, -1], out=out)
    if "null" not in dispatch.backend_names():
        dispatch.register_backend(_NullBackend(), before=None)
    op = torch.ops.inkling.rel_attn_out.default
    problem, device = _problem(args, options)
    _, splits, _ = dispatch.plan(problem, device, None)
    config = fwd_config(head_dim=128, q_per_kv=8, max_seqlen_q_bucket=1, page_size=16, rel_extent=1024)
    kv = (case.q, case.key_cache, case.value_cache, case.block_table, case.cache_seqlens, case.cu_seqlens_q,
          case.rel_logits, out)  # fmt: skip
    common = dict(softmax_scale=case.softmax_scale, window_left=-1, max_seqlen_q=1)

    from inkling_ops.kernels import triton_combine, triton_fwd

    rows = splits * 1 * 8
    ws = torch.empty(rows * 129, dtype=torch.float32, device="cuda")
    part_out, part_lse = ws[: rows * 128].view(splits, 1, 8, 128), ws[rows * 128 :].view(splits, 1, 8)
    fwd_args = (case.q, case.key_cache, case.value_cache, case.rel_logits, case.block_table, case.cache_seqlens,
                case.cu_seqlens_q, out)  # fmt: skip

    def fwd_launch():
        triton_fwd.launch_rel_attn_fwd(*fwd_args, **common, num_splits=splits, config=config, part_out=part_out,
                                       part_lse=part_lse)  # fmt: skip

    compiled = triton_fwd.launch_rel_attn_fwd(*fwd_args, **common, num_splits=splits, config=config,
                                              part_out=part_out, part_lse=part_lse)  # fmt: skip
    # the same argument tuple launch_rel_attn_fwd builds, captured from its cache's last call
    captured = {}
    real_launch = triton_fwd._launch

    def capture(grid, a, **kw):
        captured.update(grid=grid, args=a)
        return real_launch(grid, a, **kw)

    triton_fwd._launch = capture
    fwd_launch()
    triton_fwd._launch = real_launch
    grid3 = captured["grid"] + (1,) * (3 - len(captured["grid"]))
    runner = compiled[grid3]
    x = torch.zeros(1, device="cuda")
    empty = _empty_kernel[(1,)](x)
    empty_runner = empty[(1, 1, 1)]

    layers = {
        "op": lambda: op(*args, **options),
        "op_null": lambda: op(*args, **options, backend="null"),
        "backend_run": lambda: TritonBackend().run(problem, splits, *args[:6], case.rel_logits, out),
        "run_triton": lambda: run_triton(*kv, **common, num_splits=splits, config=config),
        "fwd_launch": fwd_launch,
        "combine_launch": lambda: triton_combine.launch_rel_attn_combine(part_out, part_lse, out, case.cu_seqlens_q),
        "fwd_compiled": lambda: runner(*captured["args"]),
        "empty_triton": lambda: empty_runner(x),
        "noop": lambda: x.add_(1),
    }
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}, "
          f"inkling_ops {inkling_ops.__version__}; splits {splits}, config {config}")  # fmt: skip
    with torch.inference_mode():
        for name, fn in layers.items():
            print(f"{name:16s} {_per_call_us(fn, device='cuda'):8.1f} us per call", flush=True)
        if profile:
            prof = cProfile.Profile()
            fn = layers["op"]
            prof.enable()
            for _ in range(3000):
                fn()
            prof.disable()
            torch.cuda.synchronize()
            pstats.Stats(prof).sort_stats("tottime").print_stats(30)


def _problem(args, options):
    from inkling_ops.validation import check_call

    problem = check_call(*args, options["max_seqlen_q"], options["softmax_scale"], options["window_size"], True, 0,
                         options["out"])  # fmt: skip
    return problem, args[0].device


if __name__ == "__main__":
    main("--profile" in sys.argv[1:])
