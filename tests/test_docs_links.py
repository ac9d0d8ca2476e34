"""The README stays short, and every relative link in it and in docs/ points at a file that exists
and, with `#anchor`, at a heading there (GitHub's anchors, which the served pages use too)."""
from __future__ import annotations

import ast
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from channels_app.docs.pages import markdown

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
FILES = [README, *sorted(DOCS.glob("*.md"))]
# Pages another part of the work writes: links to them may come first.
ARRIVING = {DOCS / "new-agent.md", DOCS / "deployments.md"}


def links_and_anchors(path: Path) -> tuple[list[str], set[str]]:
    """The file's link targets (images too) and its headings' anchors."""
    md = markdown(served=False)
    env: dict = {}
    tokens = md.parse(path.read_text(encoding="utf-8"), env)
    hrefs: list[str] = []
    for token in tokens:
        for child in token.children or ():
            if child.type == "link_open":
                hrefs.append(str(child.attrGet("href")))
            elif child.type == "image":
                hrefs.append(str(child.attrGet("src")))
    return hrefs, {h.anchor for h in env["headings"]}


def test_the_readme_is_short():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= 260, f"README.md has {lines} lines: move reference text into docs/"


def test_the_readme_keeps_the_two_quickstart_commands():
    text = README.read_text(encoding="utf-8")
    assert ("python3 -m venv .venv && .venv/bin/pip install -q -r requirements.txt && "
            ".venv/bin/python manage.py serve") in text
    assert ("python3 -m venv .venv && .venv/bin/pip install -q -r requirements-dev.txt && "
            ".venv/bin/python -m pytest") in text


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_at_files_and_headings_that_exist(path):
    hrefs, own_anchors = links_and_anchors(path)
    problems = []
    for href in hrefs:
        parts = urlsplit(href)
        if parts.scheme or parts.netloc:
            continue  # an absolute URL: not ours to check offline
        if href.startswith("/"):
            problems.append(f"{href}: a server path, which the repository's web view cannot follow")
            continue
        target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
        if path.parent == DOCS and DOCS not in (target, *target.parents):
            problems.append(f"{href}: leaves docs/, so it breaks on the served pages")
            continue
        if not target.exists():
            if target not in ARRIVING:
                problems.append(f"{href}: no such file")
            continue
        if parts.fragment:
            anchors = own_anchors if target == path else (
                links_and_anchors(target)[1] if target.suffix == ".md" else set())
            if parts.fragment not in anchors:
                problems.append(f"{href}: no heading with that anchor")
    assert not problems, "\n".join(problems)


ARCHITECTURE = ROOT / "ARCHITECTURE.md"
# Not a part of a longer name or path (`views/sessions.StartsTurns`, `tests/sessions/...`).
DOTTED = re.compile(r"(?<![\w/.-])sessions(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
PATH = re.compile(r"(?<![\w/.-])sessions/[A-Za-z0-9_/]+(?:\.py)?")


def defines(source: str, name: str) -> bool:
    """Whether a module defines or imports `name`, at any level."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
                (alias.asname or alias.name).split(".")[0] == name for alias in node.names):
            return True
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id == name:
            return True
    return False


def unresolved_names(text: str, root: Path = ROOT) -> list[str]:
    """The `sessions.x.y` names and `sessions/x/y.py` paths in `text` that name nothing in `root`."""
    problems = []
    for dotted in sorted(set(DOTTED.findall(text))):
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):  # the longest prefix that is a module or a package
            base = root.joinpath(*parts[:cut])
            module = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
            if module.is_file():
                rest = parts[cut:]
                if rest and not defines(module.read_text(encoding="utf-8"), rest[0]):
                    problems.append(f"{dotted}: {module.relative_to(root)} has no {rest[0]}")
                break
        else:
            problems.append(f"{dotted}: no such module")
    for path in sorted(set(PATH.findall(text))):
        if not (root / path.rstrip("/")).exists():
            problems.append(f"{path}: no such file or folder")
    return problems


def test_every_sessions_name_in_the_architecture_exists():
    problems = unresolved_names(ARCHITECTURE.read_text(encoding="utf-8"))
    assert not problems, "ARCHITECTURE.md names what is not there:\n" + "\n".join(problems)


def test_the_name_check_finds_a_missing_module_function_and_file(tmp_path):
    (tmp_path / "sessions" / "turn").mkdir(parents=True)
    (tmp_path / "sessions" / "__init__.py").write_text("")
    (tmp_path / "sessions" / "turn" / "__init__.py").write_text("")
    (tmp_path / "sessions" / "turn" / "engine.py").write_text(
        "def run_turn():\n    pass\n\n\nclass TurnRunner:\n    pass\n")
    text = ("`sessions.turn.engine.run_turn`, `sessions.turn.engine.TurnRunner.finish`, sessions/turn/engine.py, "
            "`sessions.turn.engine.gone`, `sessions.turn.runner`, sessions/turn/runner.py")
    assert unresolved_names(text, tmp_path) == [
        "sessions.turn.engine.gone: sessions/turn/engine.py has no gone",
        "sessions.turn.runner: sessions/turn/__init__.py has no runner",
        "sessions/turn/runner.py: no such file or folder",
    ]
