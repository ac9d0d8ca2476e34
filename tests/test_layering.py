"""Apps import downward only: agents < sessions < channels_app < agentsite; no
import cycles between modules; no module too long to read.

Every import counts, at any depth: one placed inside a function to dodge an
import cycle still makes the lower app depend on the higher one. Migrations
and tests are left out of the import rules.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("agents", "sessions", "channels_app", "agentsite")
MAX_LINES = 450
# Where the line limit applies besides the apps.
OTHER_CODE = ("tests", "bench")


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


def imports_with_names(source: str, package: str) -> list[tuple[int, str, tuple[str, ...]]]:
    """Like `imported_modules`, with the names a `from` import takes (empty for `import x`)."""
    found: list[tuple[int, str, tuple[str, ...]]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name, ()) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            (line, name), = imported_modules(ast.unparse(node), package)
            found.append((node.lineno, name, tuple(alias.name for alias in node.names)))
    return found


def module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path, apps: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """module -> {imported project module: "file:line"}.

    `from pkg import name` counts as importing `pkg.name` when that is a module,
    else `pkg`. Importing `a.b.c` is not counted as importing the packages `a`
    and `a.b` (their `__init__` runs first, but a package that re-exports its
    modules would otherwise be a cycle with each of them). Imports under
    `if TYPE_CHECKING:` count: a type-only import is still a dependency a reader
    has to follow, and it is the usual way to hide a cycle, as an import inside a
    function is (take a Protocol or a duck type instead).
    """
    files = {module_name(root, path): path for app in apps for path in sorted((root / app).rglob("*.py"))
             if not {"migrations", "tests"} & set(path.relative_to(root).parts)}
    graph: dict[str, dict[str, str]] = {}
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        edges: dict[str, str] = {}
        for line, name, names in imports_with_names(path.read_text(encoding="utf-8"), package):
            targets = [f"{name}.{n}" for n in names if f"{name}.{n}" in files]
            if len(targets) < len(names) or not names:
                targets.append(name)
            for target in targets:
                if target in files and target != module:
                    edges.setdefault(target, f"{path.relative_to(root)}:{line}")
        graph[module] = edges
    return graph


def cycles(graph: dict[str, dict[str, str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, {}):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def describe_cycle(graph: dict[str, dict[str, str]], component: list[str]) -> str:
    inside = [f"    {where} imports {target}" for module in component
              for target, where in sorted(graph[module].items()) if target in component]
    return " <-> ".join(component) + "\n" + "\n".join(inside)


def long_modules(root: Path, folders: tuple[str, ...], limit: int = MAX_LINES) -> list[str]:
    """`path: lines` of every Python file over `limit` lines in `folders`, migrations aside."""
    found = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            if "migrations" in path.relative_to(root).parts:
                continue
            count = len(path.read_text(encoding="utf-8").splitlines())
            if count > limit:
                found.append(f"{path.relative_to(root)}: {count} lines")
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


def test_no_import_cycles_in_or_between_apps():
    graph = import_graph(ROOT, LAYERS)
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(describe_cycle(graph, c) for c in found)


def test_the_cycle_check_sees_cycles_through_functions_and_type_checking(tmp_path):
    app = tmp_path / "app"
    (app / "inner").mkdir(parents=True)
    (app / "__init__.py").write_text("")
    (app / "inner" / "__init__.py").write_text("from app.inner.deep import thing\n")
    (app / "inner" / "deep.py").write_text("thing = 1\n")
    (app / "a.py").write_text("from app import b\n")
    (app / "b.py").write_text("def f():\n    from .c import g\n")
    (app / "c.py").write_text("import app.a\n")
    (app / "d.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from app.e import E\n")
    (app / "e.py").write_text("from app import d\n")
    (app / "f.py").write_text("from app.inner import deep\nimport app.a\n")
    graph = import_graph(tmp_path, ("app",))
    assert graph["app.a"] == {"app.b": "app/a.py:1"}
    assert graph["app.f"] == {"app.inner.deep": "app/f.py:1", "app.a": "app/f.py:2"}
    assert cycles(graph) == [["app.a", "app.b", "app.c"], ["app.d", "app.e"]]

    (app / "c.py").write_text("import app.inner\n")
    (app / "e.py").write_text("")
    assert cycles(import_graph(tmp_path, ("app",))) == []


def test_no_module_is_over_450_lines():
    found = long_modules(ROOT, LAYERS + OTHER_CODE)
    assert not found, f"split these modules (over {MAX_LINES} lines):\n" + "\n".join(found)


def test_the_line_check_names_long_files_and_skips_migrations(tmp_path):
    (tmp_path / "app" / "migrations").mkdir(parents=True)
    (tmp_path / "app" / "long.py").write_text("x = 1\n" * 451)
    (tmp_path / "app" / "short.py").write_text("x = 1\n" * 450)
    (tmp_path / "app" / "migrations" / "0001_initial.py").write_text("x = 1\n" * 900)
    assert long_modules(tmp_path, ("app",)) == ["app/long.py: 451 lines"]


def test_nothing_in_the_apps_imports_the_sdk_facade():
    """`agents.sdk` is what agent folders import; the apps import each name from its home."""
    graph = import_graph(ROOT, LAYERS)
    found = [f"{where} imports agents.sdk" for module, edges in sorted(graph.items())
             for target, where in edges.items() if target == "agents.sdk"]
    assert not found, "\n".join(found)


# The rooms of sessions/ that every turn passes through, and the features that plug into them
# (sessions.turn.extensions) when the app is ready.
FEATURES = ("handoff", "messaging", "custom_channels", "experiments", "tracing", "metrics", "host", "mcp",
            "workspaces", "dashboard", "retention", "direct", "evals")
# What a module of the turn room may still use of a feature, and why (ARCHITECTURE.md, "Rooms"):
# the workspace a turn opens is part of the turn; `ctx.host` is part of every tool call's context.
TURN_ROOM_USES = {
    "sessions/turn/engine.py": {"workspaces"},
    "sessions/turn/toolset.py": {"workspaces"},
    "sessions/turn/tools.py": {"host"},
}


def feature_imports(path: Path, allowed: set[str] = frozenset()) -> list[str]:
    """`path:line imports name` for each import of a feature package in `path`, but `allowed` ones."""
    relative = path.relative_to(ROOT)
    package = ".".join(relative.with_suffix("").parts[:-1])
    found = []
    for line, name, names in imports_with_names(path.read_text(encoding="utf-8"), package):
        parts = name.split(".")
        # `from sessions import tracing` names the feature in `names`, not in the module.
        features = {parts[1]} if parts[0] == "sessions" and len(parts) > 1 else (
            set(names) if name == "sessions" else set())
        for feature in sorted(features & set(FEATURES) - allowed):
            found.append(f"{relative}:{line} imports sessions.{feature}")
    return found


def turn_room_feature_imports() -> list[str]:
    found = []
    paths = [path for folder in ("turn", "eventlog", "plumbing")
             for path in sorted((ROOT / "sessions" / folder).rglob("*.py"))]
    for path in paths + [ROOT / "sessions" / "timers" / "ticker.py"]:
        found += feature_imports(path, TURN_ROOM_USES.get(str(path.relative_to(ROOT)), set()))
    return found


def test_the_turn_room_imports_no_feature():
    found = turn_room_feature_imports()
    assert not found, "a feature registers what it adds (sessions.turn.extensions):\n" + "\n".join(found)
    for core in ("engine", "recovery", "builtins", "runner", "extensions"):
        assert feature_imports(ROOT / "sessions" / "turn" / f"{core}.py", TURN_ROOM_USES.get(
            f"sessions/turn/{core}.py", set())) == []


def test_the_feature_check_sees_every_form_of_import(tmp_path, monkeypatch):
    module = tmp_path / "sessions" / "turn" / "engine.py"
    module.parent.mkdir(parents=True)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    for source in ("from sessions.messaging.turns import record_reply\n", "from sessions import tracing\n",
                   "import sessions.handoff\n", "def f():\n    from ..custom_channels import delivery\n",
                   "from sessions.workspaces.store import Workspace\n"):
        module.write_text(source)
        assert len(feature_imports(module)) == 1, source
    module.write_text("from sessions.turn import extensions\nfrom sessions.eventlog.events import SessionGone\n")
    assert feature_imports(module) == []
    module.write_text("from sessions.workspaces.store import Workspace\n")
    assert feature_imports(module, {"workspaces"}) == []


def test_the_top_of_sessions_holds_rooms_and_features_not_loose_modules():
    loose = sorted(p.name for p in (ROOT / "sessions").glob("*.py"))
    assert len(loose) <= 6, f"sessions/ has {len(loose)} loose modules; put them in a room: {loose}"
    rooms = {p.name for p in (ROOT / "sessions").iterdir() if (p / "__init__.py").exists()}
    assert {"turn", "eventlog", "timers", "plumbing", *FEATURES} <= rooms
