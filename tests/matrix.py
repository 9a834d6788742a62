"""Cross products of test parameters split between the default run and the slow suite.

A kernel option crossed with every case of a matrix is the longest part of the CPU run under
Triton's interpreter. :func:`rotated` keeps one diagonal of the product in the default run, so
every option and every case still run there, each against several partners, and marks the rest
``slow`` (``scripts/test -m slow`` runs them; ``-m "slow or not slow"`` runs all).
"""

from __future__ import annotations

import itertools

import pytest


def rotated(*axes, every: int):
    """``pytest.param`` s of the product of ``axes`` (each a list of ``(id, value)``): the
    combination of indices ``(i, j, ...)`` is in the default run when ``sum % every == 0``, else
    marked slow. Each value of each axis meets the default run as long as the other axes have
    ``every`` values between them."""
    params = []
    for combo in itertools.product(*(list(enumerate(axis)) for axis in axes)):
        index = sum(i for i, _ in combo)
        values = tuple(value for _, (_, value) in combo)
        ident = "-".join(str(name) for _, (name, _) in combo)
        marks = () if index % every == 0 else (pytest.mark.slow,)
        params.append(pytest.param(*values, id=ident, marks=marks))
    return params
