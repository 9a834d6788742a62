"""The backend dispatcher: picks the backend for a validated call and runs it.

Backends are tried in priority order for the call's device type; each declares whether it
supports the call and, if not, why. A backend requested by name that cannot run the call is
an error listing the reason, never a silent substitution. When the default choice has to
skip a preferred backend, it says so once per reason (``warnings.warn``), because the
fallback changes both speed and rounding.
"""

from __future__ import annotations

import os
import warnings

import torch

from . import checked
from .backends.base import Backend
from .backends.reference import ReferenceBackend
from .backends.triton_backend import TritonBackend
from .compile_keys import CompileKey, DeviceFacts, compile_key, split_count
from .problem import RelAttnArgs, RelAttnProblem
from .validation import OP_NAME

#: Backends by priority, highest first. Kernel backends insert themselves ahead of the reference.
_BACKENDS: list[Backend] = [TritonBackend(), ReferenceBackend()]
_FACTS: dict[tuple[str, int], DeviceFacts] = {}
_WARNED: set[str] = set()


def register_backend(backend: Backend, *, before: str | None = "reference") -> None:
    """Add ``backend`` to the priority list, ahead of the backend named ``before`` (None: last)."""
    names = [b.name for b in _BACKENDS]
    if backend.name in names:
        raise ValueError(f"a backend named {backend.name!r} is already registered")
    index = names.index(before) if before in names else len(_BACKENDS)
    _BACKENDS.insert(index, backend)


def backend_names() -> list[str]:
    """Registered backends, highest priority first."""
    return [b.name for b in _BACKENDS]


def get_backend(name: str) -> Backend:
    for b in _BACKENDS:
        if b.name == name:
            return b
    raise ValueError(f"{OP_NAME}: argument 'backend' is {name!r}; expected one of {backend_names()} or None")


def device_facts(device: torch.device) -> DeviceFacts:
    """Arch and SM count of ``device`` (queried once per device, then cached)."""
    index = device.index if device.index is not None else (torch.cuda.current_device() if device.type == "cuda" else 0)
    facts = _FACTS.get((device.type, index))
    if facts is None:
        if device.type == "cuda":
            props = torch.cuda.get_device_properties(index)
            suffix = "a" if (props.major, props.minor) == (9, 0) else ""
            facts = DeviceFacts(
                arch=f"sm_{props.major}{props.minor}{suffix}",
                num_sms=props.multi_processor_count,
                capability=(props.major, props.minor),
            )
        else:
            facts = DeviceFacts(arch=device.type, num_sms=os.cpu_count() or 1)
        _FACTS[(device.type, index)] = facts
    return facts


def select_backend(problem: RelAttnProblem, facts: DeviceFacts, requested: str | None) -> Backend:
    """The backend that runs ``problem``: ``requested`` if given (or an error), else the first that can."""
    if requested is not None:
        backend = get_backend(requested)
        reason = backend.is_available()
        if reason is None and problem.device_type not in backend.device_types:
            reason = f"it runs on {backend.device_types}, not {problem.device_type}"
        reason = reason or backend.why_not(problem, facts)
        if reason is not None:
            raise ValueError(f"{OP_NAME}: argument 'backend' is {requested!r}, which cannot run this call: {reason}")
        return backend
    skipped = []
    for backend in _BACKENDS:
        if problem.device_type not in backend.default_device_types:
            continue
        reason = backend.is_available() or backend.why_not(problem, facts)
        if reason is None:
            if skipped:
                _warn_fallback(backend.name, skipped)
            return backend
        skipped.append(f"{backend.name}: {reason}")
    raise ValueError(f"{OP_NAME}: no backend runs this call on {problem.device_type}: " + "; ".join(skipped))


def _warn_fallback(chosen: str, skipped: list[str]) -> None:
    message = f"{OP_NAME}: using the {chosen!r} backend because " + "; ".join(skipped)
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, stacklevel=4)


def _backend_and_splits(problem: RelAttnProblem, device: torch.device, requested: str | None) -> tuple[Backend, int, DeviceFacts]:
    facts = device_facts(device)
    backend = select_backend(problem, facts, requested)
    splits = 1 if backend.split_policy is None else split_count(problem, facts, backend.split_policy)
    return backend, splits, facts


def plan(problem: RelAttnProblem, device: torch.device, requested: str | None) -> tuple[Backend, int, CompileKey]:
    """Backend, split count and compile key for one call (host-only; no device sync)."""
    backend, splits, facts = _backend_and_splits(problem, device, requested)
    return backend, splits, compile_key(problem, arch=facts.arch, backend=backend.name, splits=splits)


def run(problem: RelAttnProblem, requested: str | None, args: RelAttnArgs, out: torch.Tensor) -> None:
    """Run a validated call (its tensors bundled in ``args``) on the chosen backend, writing ``out``."""
    backend, splits, _ = _backend_and_splits(problem, args.q.device, requested)
    if checked.is_checked_mode():
        checked.check_device_values(problem, args.block_table, args.cache_seqlens, args.cu_seqlens_q)
    if problem.num_tokens == 0 or problem.num_reqs == 0:
        return
    backend.run(problem, splits, args, out)
