"""The README stays short, and every relative link in it and in docs/ points at a file that exists
and, with `#anchor`, at a heading there (GitHub's anchors, which the served pages use too)."""
from __future__ import annotations

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
