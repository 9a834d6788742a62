"""The lab tools under ``meta/tools/`` (the tuner, the kernel report), loaded by path for the tests
that use them: they are not part of the ``inkling_ops`` package.

    from lab_tools import load_tool
    tuning = load_tool("tuning")
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

META_DIR = Path(__file__).resolve().parents[1] / "meta"
TOOLS_DIR = META_DIR / "tools"


def load_tool(name: str):
    """The module ``meta/tools/<name>.py``, imported once (kept in ``sys.modules`` as
    ``lab_tools.<name>``)."""
    return load_lab_module(f"lab_tools.{name}", TOOLS_DIR / f"{name}.py")


def load_lab_module(key: str, path: Path):
    """The lab script at ``path`` (meta/ is not a package), imported once as ``sys.modules[key]``
    (registered before it runs, so its dataclasses resolve)."""
    if key in sys.modules:
        return sys.modules[key]
    if not path.is_file():
        raise ValueError(f"path={str(path)!r}: no such lab script")
    spec = importlib.util.spec_from_file_location(key, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[key]
        raise
    return module
