"""Whether this machine can run the CuTe backend's kernels (the GPU tests' skip reason)."""

from __future__ import annotations

import torch

from inkling_ops import planning


def why_no_cute_device() -> str | None:
    """Why the CuTe kernels cannot run here (None: a Hopper GPU and the CuTe DSL are present)."""
    if not torch.cuda.is_available():
        return "needs a CUDA device"
    if torch.cuda.get_device_capability() != (9, 0):
        return "the cute kernel is for Hopper (sm_90a)"
    return planning.get_backend("cute").is_available()
