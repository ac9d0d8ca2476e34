"""Importing an agent folder's Python files as modules of their own."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def import_file(path: Path, module_name: str) -> ModuleType:
    """Import `path` as `module_name`; on failure nothing is left in sys.modules."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module
