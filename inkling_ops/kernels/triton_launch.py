"""A thin launch cache in front of a ``triton.jit`` kernel, to cut the per-call host cost.

Triton's ``kernel[grid](...)`` binds and specializes every argument on every call. After the
first launch of a variant we keep the compiled kernel and launch it directly, keyed on exactly
what Triton specializes on: constexpr values, tensor dtypes and 16-byte alignment, the integer
type of each int and, for ints Triton specializes, whether it is 1 or a multiple of 16. A
miss (a new variant) goes through Triton's normal path, which compiles and caches as usual.

Building that key walks every argument in Python (several microseconds for the forward
kernel's 57). A first, finer key is cheaper to build: other arguments by value (and type),
pointers by dtype and address modulo 16; it maps straight to the compiled kernel (timings in
meta/TUNING.md).
Under ``TRITON_INTERPRET=1`` there is nothing compiled to keep and every call goes through
Triton.
"""

from __future__ import annotations

from operator import itemgetter

import torch

_I32 = (-(2**31), 2**31 - 1)
_SCALARS = frozenset((int, float, bool, type(None)))


def next_pow2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1). ``triton.next_power_of_2`` computes the
    same, but as a Triton constexpr function it costs several microseconds per call from host code."""
    return 1 << max(0, n - 1).bit_length()


def _getter(indices: list[int]):
    """``args -> tuple(args[i] for i in indices)``, at C speed."""
    if not indices:
        return lambda args: ()
    if len(indices) == 1:
        index = indices[0]
        return lambda args: (args[index],)
    return itemgetter(*indices)


class CachedLauncher:
    """``launcher(grid, args, num_warps=, num_stages=, maxnreg=None)``, args positional in
    signature order. ``maxnreg`` (a cap on registers per thread, so more programs fit on an SM)
    is a compile option in Triton, so it is part of the cache key; under the interpreter it is
    dropped."""

    def __init__(self, kernel):
        self.kernel = kernel
        params = getattr(kernel, "params", None)
        self._kinds = None
        if params is not None and hasattr(kernel, "run") and all(hasattr(p, "is_constexpr") for p in params):
            self._kinds = tuple(
                "constexpr" if p.is_constexpr else ("int_dns" if p.do_not_specialize else "int_or_other")
                for p in params
            )
            # The fast key (see _fast_key) groups the arguments by parameter: constexprs,
            # pointers (named ``*_ptr``), unspecialized ints, and everything else.
            names = [getattr(p, "name", "") for p in params]
            groups = {"constexpr": [], "ptr": [], "int_dns": [], "int_or_other": []}
            for i, (kind, name) in enumerate(zip(self._kinds, names)):
                groups["ptr" if kind == "int_or_other" and name.endswith("_ptr") else kind].append(i)
            self._constexprs = _getter(groups["constexpr"])
            self._pointers = _getter(groups["ptr"])
            self._dns_ints = _getter(groups["int_dns"])
            self._values = _getter(groups["int_or_other"])
        self._compiled: dict[tuple, object] = {}
        self._by_fast_key: dict[tuple, object] = {}

    def _fast_key(self, args: tuple, num_warps: int, num_stages: int, maxnreg) -> tuple:
        """A key at least as fine as Triton's specialization, cheaper to build than :meth:`_key`:
        other arguments (strides, sizes, scales) enter by value and type, so two calls share a key
        only if Triton would see the same values; pointers by dtype and address modulo 16;
        unspecialized ints by type and whether they fit int32. Raises (AttributeError,
        TypeError) when a ``*_ptr`` argument is not a tensor or another argument is not a Python
        scalar; the caller then uses :meth:`_key`."""
        values = self._values(args)
        value_types = tuple(map(type, values))
        if not _SCALARS.issuperset(value_types):
            raise TypeError("a tensor (or another object) outside the *_ptr parameters")
        dns = self._dns_ints(args)
        return (
            num_warps, num_stages, maxnreg, self._constexprs(args), values, value_types,
            tuple([(t.dtype, t.data_ptr() & 15) for t in self._pointers(args)]),
            tuple(map(type, dns)), tuple([_I32[0] <= a <= _I32[1] for a in dns]),
        )  # fmt: skip

    def _key(self, args: tuple, num_warps: int, num_stages: int, maxnreg) -> tuple:
        key = [num_warps, num_stages, maxnreg]
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

    def __call__(self, grid: tuple, args: tuple, *, num_warps: int, num_stages: int, maxnreg=None):
        if self._kinds is None or len(args) != len(self._kinds):
            return self.kernel[grid](*args, num_warps=num_warps, num_stages=num_stages)
        try:
            fast_key = self._fast_key(args, num_warps, num_stages, maxnreg)
        except (AttributeError, TypeError):
            fast_key = None
        compiled = self._by_fast_key.get(fast_key) if fast_key is not None else None
        if compiled is None:
            key = self._key(args, num_warps, num_stages, maxnreg)
            compiled = self._compiled.get(key)
            if compiled is None:
                options = {} if maxnreg is None else dict(maxnreg=maxnreg)
                compiled = self.kernel[grid](*args, num_warps=num_warps, num_stages=num_stages, **options)
                if hasattr(compiled, "run") and hasattr(compiled, "function"):
                    self._compiled[key] = compiled
                    self._remember(fast_key, compiled)
                return compiled
            self._remember(fast_key, compiled)
        compiled[grid + (1,) * (3 - len(grid))](*args)  # a compiled kernel wants all three grid dims
        return compiled

    #: fast keys kept at most (they hold argument values, so a caller that varies strides or
    #: scales could otherwise grow the table without bound; past this it starts over)
    MAX_FAST_KEYS = 4096

    def _remember(self, fast_key, compiled) -> None:
        if fast_key is None:
            return
        if len(self._by_fast_key) >= self.MAX_FAST_KEYS:
            self._by_fast_key.clear()
        self._by_fast_key[fast_key] = compiled
