"""CUDA architecture names and compute capabilities: the package's one parser of them (pure).

``"sm_90a"`` is Hopper with its arch-specific features (wgmma, TMA), the name an H100 / H200
reports here; other devices report ``"sm_<major><minor>"`` (``"sm_80"`` for an A100).
"""

from __future__ import annotations


def cuda_arch(capability: tuple[int, int]) -> str:
    """``(9, 0)`` -> ``"sm_90a"``, ``(8, 0)`` -> ``"sm_80"``: the arch name of a CUDA device of
    that compute capability (in device facts, compile keys and the kernel store)."""
    major, minor = capability
    return f"sm_{major}{minor}{'a' if (major, minor) == (9, 0) else ''}"


def arch_capability(arch: str) -> tuple[int, int]:
    """``"sm_90a"`` -> ``(9, 0)``, ``"sm_100f"`` -> ``(10, 0)``, ``"sm_80"`` -> ``(8, 0)``; the
    suffix (``a``: arch-specific, ``f``: family) is dropped. Anything else raises ValueError."""
    digits = arch.removeprefix("sm_")
    digits = digits[:-1] if digits[-1:] in ("a", "f") else digits
    if not arch.startswith("sm_") or not (digits.isascii() and digits.isdigit()) or len(digits) < 2:
        raise ValueError(f"arch is {arch!r}; expected a CUDA architecture such as 'sm_90a' (H100, H200) or 'sm_80' (A100)")
    return int(digits[:-1]), int(digits[-1])
