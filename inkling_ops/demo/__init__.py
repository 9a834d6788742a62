"""The serving demo: a tiny Hugging Face Inkling model served by a small loop of our own.

- ``model.py``: the model's forward over packed tokens, a paged KV cache and per-request conv
  states, our op in every attention layer;
- ``engine.py``: the loop (scheduler with chunked prefill, block allocation, CUDA graphs);
- ``check.py``: its greedy tokens against Hugging Face's eager attention;
- ``cli.py``: ``python -m inkling_ops demo`` (what ``scripts/demo`` runs);
- ``step.py``: the single attention step (``python -m inkling_ops demo step``).
"""

from .cli import main

__all__ = ["main"]
