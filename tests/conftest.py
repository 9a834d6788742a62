"""Make helper modules in tests/ (e.g. ``brute_force``) importable as top-level modules."""

import os
import sys

_TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)
