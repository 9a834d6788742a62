"""Kernels, one per file; they import nothing from the dispatcher or the op registration."""
