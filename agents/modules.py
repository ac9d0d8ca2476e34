"""Importing an agent folder's Python files as modules of their own."""
from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, TypeVar

T = TypeVar("T")


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


def find_in_file(path: Path, module_name: str, kind: type[T], report: Callable[[str], None],
                 *, name: str | None = None) -> list[T] | None:
    """Import `path` and return its module-level values of type `kind`, in definition order.

    With `name`, only the value bound to that name counts (`agent = Agent(...)`).
    A file that fails to import is reported through `report` and gives None.
    """
    try:
        module = import_file(path, module_name)
    except (Exception, SystemExit) as exc:  # a file that calls exit() when imported is a broken file too
        report(f"failed to import: {type(exc).__name__}: {exc}")
        return None
    return [value for key, value in vars(module).items() if isinstance(value, kind) and name in (None, key)]


def release_namespace(slug: str, content_hash: str) -> str:
    """The package name a release's modules are imported under (`<namespace>.tools.<name>`, ...).

    Named by slug and content, so two releases of one agent never share a module,
    and a worker that loaded a release finds its modules by these names.
    """
    return f"agentsite_agents.{re.sub(r'[^a-z0-9_]', '_', slug)}_{content_hash[:12]}"


def function_by_name(module: str, qualname: str) -> Any:
    """A module-level function (or any value) by its module and qualified name.

    A release's modules are found in `sys.modules` (a worker imports the release
    before calling into it); a library module is imported if it is not yet.
    """
    target: Any = sys.modules.get(module) or importlib.import_module(module)
    for part in qualname.split("."):
        target = getattr(target, part)
    return target
