"""Plans: what a call will run, decided from its static problem and the device's facts alone.

``plan(problem, facts)`` is pure: it takes a :class:`~inkling_ops.problem.RelAttnProblem`, the
:class:`~inkling_ops.compile_keys.DeviceFacts` of the device (passed in, never queried here) and
the layout facts of the call's tensors (default: the standard aligned layout a serving
configuration assumes), and returns a :class:`Plan`: the backend, the compile key, the split
count, the backend's launch configuration and the workspace it allocates. The dispatcher runs
exactly this plan, and :func:`inkling_ops.serving.enumerate_compile_keys` walks the same function,
so the keys that warmup compiles are the keys that calls reach.
"""

from __future__ import annotations

from dataclasses import dataclass

from .backends.base import Backend
from .backends.cute_backend import CuteBackend
from .backends.reference import ReferenceBackend
from .backends.triton_backend import TritonBackend
from .compile_keys import STANDARD_LAYOUT, CompileKey, DeviceFacts, KVLayout, compile_key, split_count
from .problem import RelAttnProblem
from .validation import OP_NAME


@dataclass(frozen=True)
class Plan:
    """One call's decisions (frozen and hashable).

    - ``backend``: the backend's name; ``key``: the compile key of every kernel it launches;
    - ``num_splits``: KV splits (1: no split);
    - ``launch``: the backend's launch configuration (Triton: a ``FwdConfig``; None for a backend
      without one);
    - ``workspace_bytes``: device memory the call allocates beside ``out`` (split-KV partials, the
      two-pass prefill's log-sum-exps).
    """

    backend: str
    key: CompileKey
    num_splits: int
    launch: object
    workspace_bytes: int


#: Backends by priority, highest first. Kernel backends go ahead of the reference; the CuTe
#: backend goes ahead of Triton, and its ``why_not_default`` (a pure rule,
#: ``cute_backend.prefers_cute``) passes the calls it is not faster on to Triton.
_BACKENDS: list[Backend] = [CuteBackend(), TritonBackend(), ReferenceBackend()]
#: functions called when the list changes (the dispatcher drops its cached plans)
_ON_CHANGE: list = []


def register_backend(backend: Backend, *, before: str | None = "reference") -> None:
    """Add ``backend`` to the priority list, ahead of the backend named ``before`` (None: last)."""
    names = [b.name for b in _BACKENDS]
    if backend.name in names:
        raise ValueError(f"a backend named {backend.name!r} is already registered")
    index = names.index(before) if before in names else len(_BACKENDS)
    _BACKENDS.insert(index, backend)
    for hook in _ON_CHANGE:
        hook()


def backend_names() -> list[str]:
    """Registered backends, highest priority first."""
    return [b.name for b in _BACKENDS]


def get_backend(name: str) -> Backend:
    for b in _BACKENDS:
        if b.name == name:
            return b
    raise ValueError(f"{OP_NAME}: argument 'backend' is {name!r}; expected one of {backend_names()} or None")


def select_backend(
    problem: RelAttnProblem, facts: DeviceFacts, requested: str | None, layout: KVLayout = STANDARD_LAYOUT
) -> tuple[Backend, list[str]]:
    """The backend that runs ``problem`` (``requested`` if given, or an error) on tensors laid out
    as ``layout``, and the reasons of the preferred backends the default choice skipped (empty
    when none was skipped)."""
    if requested is not None:
        backend = get_backend(requested)
        reason = backend.is_available()
        if reason is None and problem.device_type not in backend.device_types:
            reason = f"it runs on {backend.device_types}, not {problem.device_type}"
        reason = reason or backend.why_not(problem, facts)
        if reason is not None:
            raise ValueError(f"{OP_NAME}: argument 'backend' is {requested!r}, which cannot run this call: {reason}")
        return backend, []
    skipped = []
    for backend in _BACKENDS:
        if problem.device_type not in backend.default_device_types:
            continue
        if backend.why_not_default(problem, facts, layout) is not None:
            continue  # it could run the call, but is not the better choice for it: no warning
        reason = backend.is_available() or backend.why_not(problem, facts)
        if reason is None:
            return backend, skipped
        skipped.append(f"{backend.name}: {reason}")
    if not skipped:
        devices = sorted({d for b in _BACKENDS for d in b.default_device_types})
        raise ValueError(f"{OP_NAME}: no backend runs calls on device type {problem.device_type!r}; "
                         f"the tensors must be on one of {devices}")
    raise ValueError(f"{OP_NAME}: no backend runs this call on {problem.device_type}: " + "; ".join(skipped))


def plan(
    problem: RelAttnProblem,
    facts: DeviceFacts,
    backend: str | None = None,
    *,
    layout: KVLayout = STANDARD_LAYOUT,
) -> Plan:
    """The plan of one call: pure in its arguments (no tensors, no device queries).

    ``backend``: a backend's name to force, or None for the dispatcher's default choice (the
    first registered backend that is preferred for the call, ``why_not_default``, and can run
    it). Raises ``ValueError`` when the named backend cannot run it, or none can.

    Equivalent: what ``torch.ops.inkling.rel_attn`` runs for a call whose problem is ``problem``
    on a device with ``facts``.
    """
    chosen, _ = select_backend(problem, facts, backend, layout)
    return plan_for(chosen, problem, facts, layout)


def plan_for(backend: Backend, problem: RelAttnProblem, facts: DeviceFacts, layout: KVLayout) -> Plan:
    """The plan of ``problem`` on an already chosen ``backend``."""
    splits = 1 if backend.split_policy is None else split_count(problem, facts, backend.split_policy)
    key = compile_key(
        problem, arch=facts.arch, backend=backend.name, splits=splits, layout=layout,
        compact_grid=backend.compact_grid(problem),
    )  # fmt: skip
    launch, workspace = backend.launch_plan(key, problem)
    return Plan(backend=backend.name, key=key, num_splits=splits, launch=launch, workspace_bytes=workspace)
