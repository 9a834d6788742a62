"""A thin launch cache in front of a ``triton.jit`` kernel, to cut the per-call host cost.

Triton's ``kernel[grid](...)`` binds and specializes every argument on every call. After the
first launch of a variant we keep the compiled kernel and launch it directly, keyed on exactly
what Triton specializes on: constexpr values, tensor dtypes and 16-byte alignment, the integer
type of each int and, for ints Triton specializes, whether it is 1 or a multiple of 16. A
miss (a new variant) goes through Triton's normal path, which compiles and caches as usual.
Under ``TRITON_INTERPRET=1`` there is nothing compiled to keep and every call goes through
Triton.
"""

from __future__ import annotations

import torch

_I32 = (-(2**31), 2**31 - 1)


class CachedLauncher:
    """``launcher(grid, args, num_warps=, num_stages=, launch_pdl=False, maxnreg=None)``, args
    positional in signature order. ``launch_pdl`` (programmatic dependent launch) and ``maxnreg``
    (a cap on registers per thread, so more programs fit on an SM) are compile options in Triton,
    so they are part of the cache key; under the interpreter they are dropped."""

    def __init__(self, kernel):
        self.kernel = kernel
        params = getattr(kernel, "params", None)
        self._kinds = None
        if params is not None and hasattr(kernel, "run") and all(hasattr(p, "is_constexpr") for p in params):
            self._kinds = tuple(
                "constexpr" if p.is_constexpr else ("int_dns" if p.do_not_specialize else "int_or_other")
                for p in params
            )
        self._compiled: dict[tuple, object] = {}

    def _key(self, args: tuple, num_warps: int, num_stages: int, launch_pdl: bool, maxnreg) -> tuple:
        key = [num_warps, num_stages, launch_pdl, maxnreg]
        for kind, arg in zip(self._kinds, args):
            if kind == "constexpr":
                key.append(arg)
            elif isinstance(arg, torch.Tensor):
                key.append((arg.dtype, arg.data_ptr() % 16 == 0))
            elif isinstance(arg, bool) or not isinstance(arg, int):
                key.append(type(arg))
            elif kind == "int_dns":
                key.append(_I32[0] <= arg <= _I32[1])
            else:
                key.append((_I32[0] <= arg <= _I32[1], arg == 1, arg % 16 == 0))
        return tuple(key)

    def __call__(
        self, grid: tuple, args: tuple, *, num_warps: int, num_stages: int, launch_pdl: bool = False, maxnreg=None
    ):
        if self._kinds is None or len(args) != len(self._kinds):
            return self.kernel[grid](*args, num_warps=num_warps, num_stages=num_stages)
        key = self._key(args, num_warps, num_stages, launch_pdl, maxnreg)
        compiled = self._compiled.get(key)
        if compiled is None:
            options = dict(launch_pdl=True) if launch_pdl else {}
            if maxnreg is not None:
                options["maxnreg"] = maxnreg
            compiled = self.kernel[grid](*args, num_warps=num_warps, num_stages=num_stages, **options)
            if hasattr(compiled, "run") and hasattr(compiled, "function"):
                self._compiled[key] = compiled
            return compiled
        compiled[grid + (1,) * (3 - len(grid))](*args)  # a compiled kernel wants all three grid dims
        return compiled
