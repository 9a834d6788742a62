"""The reference backend: :func:`inkling_ops.reference.rel_attn_reference` behind the backend interface.

Runs anywhere PyTorch runs and supports every valid call. On CUDA it reads the metadata on
the host (a device sync), so it cannot be captured in a CUDA graph: it is the oracle and the
fallback, not the serving path.
"""

from __future__ import annotations

import torch

from ..compile_keys import DeviceFacts
from ..problem import RelAttnArgs, RelAttnProblem
from ..reference import rel_attn_reference
from .base import Backend


class ReferenceBackend(Backend):
    name = "reference"
    device_types = ("cpu", "cuda")
    default_device_types = ("cpu", "cuda")
    split_policy = None

    def why_not(self, problem: RelAttnProblem, facts: DeviceFacts) -> str | None:
        return None  # every valid call (the dispatcher has already checked the device type)

    def run(self, plan, problem: RelAttnProblem, args: RelAttnArgs, out: torch.Tensor) -> None:
        rel_attn_reference(*args, out, softmax_scale=problem.softmax_scale, window_left=problem.window_left)
