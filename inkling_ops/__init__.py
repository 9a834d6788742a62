"""inkling_ops: Inkling's relative-bias paged attention as a PyTorch op.

Importing the package registers ``torch.ops.inkling.rel_attn`` and
``torch.ops.inkling.rel_attn_out``. See docs/ for the semantics and the API.
"""

from . import library  # noqa: F401  (registers the ops first)
from .api import rel_attn
from .checked import checked_mode, is_checked_mode, set_checked_mode
from .compat import bucket_max_seqlen_q, inkling_fa4_num_splits, inkling_fa4_rel_attention
from .compile_keys import CompileKey, DeviceFacts, KVLayout
from .dispatch import backend_names, device_facts
from .heuristics import SplitPolicy, num_splits
from .planning import Plan, plan
from .reference import rel_attn_reference
from .serving import ServingConfig, enumerate_compile_keys, problem_for
from .strict import StrictCompileError, strict_compiles
from .warmup import warmup
from .workspace import release_workspaces

__version__ = "0.1.0"

__all__ = [
    "CompileKey",
    "DeviceFacts",
    "KVLayout",
    "Plan",
    "ServingConfig",
    "StrictCompileError",
    "SplitPolicy",
    "backend_names",
    "bucket_max_seqlen_q",
    "checked_mode",
    "device_facts",
    "enumerate_compile_keys",
    "inkling_fa4_num_splits",
    "inkling_fa4_rel_attention",
    "is_checked_mode",
    "num_splits",
    "plan",
    "problem_for",
    "rel_attn",
    "rel_attn_reference",
    "release_workspaces",
    "set_checked_mode",
    "strict_compiles",
    "warmup",
]
