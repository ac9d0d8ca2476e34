"""Apps import downward only: agents < sessions < channels_app < agentsite.

Every import counts, at any depth: one placed inside a function to dodge an
import cycle still makes the lower app depend on the higher one. Migrations
and tests are left out.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("agents", "sessions", "channels_app", "agentsite")


def imported_modules(source: str, package: str) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in `source`, including nested ones.

    `package` is the dotted package the source lives in, to resolve relative imports.
    """
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = parts[: len(parts) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            found.append((node.lineno, name))
    return found


def project_modules() -> list[tuple[str, Path]]:
    modules = []
    for app in LAYERS:
        for path in sorted((ROOT / app).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if {"migrations", "tests"} & set(relative.parts):
                continue
            modules.append((app, path))
    return modules


def upward_imports() -> list[str]:
    problems = []
    for app, path in project_modules():
        relative = path.relative_to(ROOT)
        package = ".".join(relative.with_suffix("").parts[:-1])
        for line, name in imported_modules(path.read_text(encoding="utf-8"), package):
            top = name.split(".", 1)[0]
            if top in LAYERS and LAYERS.index(top) > LAYERS.index(app):
                problems.append(f"{relative}:{line} imports {name} ({app} is below {top})")
    return problems


def test_apps_import_only_lower_layers():
    problems = upward_imports()
    assert not problems, "upward imports:\n" + "\n".join(problems)


def test_every_app_is_scanned():
    scanned = {app for app, _ in project_modules()}
    assert scanned == set(LAYERS)
    assert len(project_modules()) > 40


def test_imports_inside_functions_and_relative_imports_are_seen():
    source = (
        "import os\n"
        "def f():\n"
        "    from channels_app.auth import Principal\n"
        "    class C:\n"
        "        def g(self):\n"
        "            import agentsite.settings\n"
        "from . import models\n"
        "from ..agents import sdk\n"
    )
    assert sorted(imported_modules(source, "sessions.management")) == [
        (1, "os"), (3, "channels_app.auth"), (6, "agentsite.settings"),
        (7, "sessions.management"), (8, "sessions.agents"),
    ]
