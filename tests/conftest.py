"""Make helper modules in tests/ (e.g. ``brute_force``) importable as top-level modules."""

import os
import sys

_TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)


# On a machine without CUDA the Triton kernels run under Triton's interpreter. The variable must
# be set before any kernel module is imported (triton.jit reads it at decoration time), so it is
# set here, before pytest imports the test modules.
import torch  # noqa: E402

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
