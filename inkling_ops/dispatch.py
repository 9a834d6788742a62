"""The backend dispatcher: plans a validated call and runs the plan on its backend.

Backends are tried in priority order for the call's device type; each declares whether it
supports the call and, if not, why (:mod:`inkling_ops.planning`). A backend requested by name
that cannot run the call is an error listing the reason, never a silent substitution. When the
default choice has to skip a preferred backend, it says so once per reason (``warnings.warn``),
because the fallback changes both speed and rounding.

A call's plan is kept per (problem, requested backend, layout, device): a repeated call reuses it
and costs one dictionary lookup here.
"""

from __future__ import annotations

import os
import warnings

import torch

from . import checked, planning
from .backends.base import Backend
from .compile_keys import STANDARD_LAYOUT, DeviceFacts, KVLayout, layout_of
from .kernels.arch import cuda_arch
from .planning import Plan, backend_names, get_backend, plan_for, register_backend, select_backend
from .problem import RelAttnArgs, RelAttnProblem
from .validation import OP_NAME

_FACTS: dict[tuple[str, int], DeviceFacts] = {}
_WARNED: set[str] = set()
_PLANS: dict[tuple, tuple[Backend, Plan]] = {}
#: plans kept at most (a caller whose token counts never repeat would otherwise grow the table)
MAX_PLANS = 4096

__all__ = ["backend_names", "device_facts", "get_backend", "plan_call", "register_backend", "run", "select_backend"]
planning._ON_CHANGE.append(_PLANS.clear)  # a new backend may change which backend a cached plan names


def device_facts(device: torch.device) -> DeviceFacts:
    """Arch and SM count of ``device`` (queried once per device, then cached)."""
    index = device.index if device.index is not None else (torch.cuda.current_device() if device.type == "cuda" else 0)
    facts = _FACTS.get((device.type, index))
    if facts is None:
        if device.type == "cuda":
            props = torch.cuda.get_device_properties(index)
            facts = DeviceFacts(
                arch=cuda_arch((props.major, props.minor)),
                num_sms=props.multi_processor_count,
                capability=(props.major, props.minor),
            )
        else:
            facts = DeviceFacts(arch=device.type, num_sms=os.cpu_count() or 1)
        _FACTS[(device.type, index)] = facts
    return facts


def _warn_fallback(chosen: str, skipped: list[str]) -> None:
    message = f"{OP_NAME}: using the {chosen!r} backend because " + "; ".join(skipped)
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, stacklevel=5)


def plan_call(
    problem: RelAttnProblem, device: torch.device, requested: str | None, layout: KVLayout = STANDARD_LAYOUT
) -> tuple[Backend, Plan]:
    """The backend and plan of one call on ``device`` (host-only; no device sync), kept for reuse."""
    cache_key = (problem, requested, layout, device)
    hit = _PLANS.get(cache_key)
    if hit is None:
        facts = device_facts(device)
        backend, skipped = select_backend(problem, facts, requested, layout)
        if skipped:
            _warn_fallback(backend.name, skipped)
        if len(_PLANS) >= MAX_PLANS:
            _PLANS.clear()
        hit = _PLANS[cache_key] = (backend, plan_for(backend, problem, facts, layout))
    return hit


def run(problem: RelAttnProblem, requested: str | None, args: RelAttnArgs, out: torch.Tensor) -> None:
    """Run a validated call (its tensors bundled in ``args``) on the chosen backend, writing ``out``."""
    q = args.q
    layout = layout_of(args, out) if q.is_cuda else STANDARD_LAYOUT
    backend, plan = plan_call(problem, q.device, requested, layout)
    if checked.is_checked_mode():
        checked.check_device_values(problem, args.block_table, args.cache_seqlens, args.cu_seqlens_q)
    if problem.num_tokens == 0 or problem.num_reqs == 0:
        return
    backend.run(plan, problem, args, out)
