"""What changed between two releases of an agent, section by section (the admin's diff page).

Each section is text built from a release's manifest (instructions, model, tools with
their input schemas, skills, subagents, schedules, channels, MCP servers, runtime) or
from its snapshot (the files it was deployed with); two releases are compared with
difflib, section by section, so an unchanged section says so instead of a wall of text.
"""
from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from typing import Any

from agents.discovery.bundles import ReleaseUnavailable, release_folder
from agents.models import Deployment

# Snapshot files larger than this are compared by size only (a seed file, a data set).
LARGEST_FILE = 200_000


@dataclass(frozen=True)
class SectionDiff:
    name: str
    old: list[str]
    new: list[str]

    @property
    def changed(self) -> bool:
        return self.old != self.new

    def unified(self, old_label: str, new_label: str) -> list[str]:
        return list(difflib.unified_diff(self.old, self.new, old_label, new_label, lineterm=""))

    def table(self, old_label: str, new_label: str) -> str:
        """The side-by-side HTML table of the changes, with a few lines of context."""
        return difflib.HtmlDiff(wrapcolumn=90).make_table(self.old, self.new, old_label, new_label,
                                                          context=True, numlines=2)


def _json_lines(value: Any) -> list[str]:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False).splitlines()


def _by_key(items: list[dict[str, Any]], key: str) -> dict[str, Any]:
    return {str(item.get(key)): item for item in items}


def snapshot_files(deployment: Deployment) -> dict[str, str]:
    """The release's files, relative path → text (or a line saying what a binary or large file is)."""
    try:
        root = release_folder(deployment)  # unpacked from the database if this host has not run it
    except ReleaseUnavailable:
        return {}
    found: dict[str, str] = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        relative = path.relative_to(root).as_posix()
        size = path.stat().st_size
        try:
            found[relative] = path.read_text() if size <= LARGEST_FILE else f"({size} bytes, not compared)"
        except UnicodeDecodeError:
            found[relative] = f"(binary, {size} bytes)"
    return found


def sections(deployment: Deployment) -> dict[str, list[str]]:
    """A release as text, one entry per section the diff page compares."""
    m = deployment.manifest or {}
    files = snapshot_files(deployment)
    return {
        "instructions": (m.get("instructions") or "").splitlines(),
        "model": _json_lines({"model": m.get("model"), "params": m.get("params"), "maxSteps": m.get("maxSteps")}),
        "tools": _json_lines(_by_key(m.get("tools", []), "name")),
        "skills": _json_lines(_by_key(m.get("skills", []), "name")),
        "subagents": _json_lines(_by_key(m.get("subagents", []), "id")),
        "schedules": _json_lines(_by_key(m.get("schedules", []), "id")),
        "channels": _json_lines(_by_key(m.get("channels", []), "id")),
        "mcp": _json_lines(_by_key(m.get("mcp", []), "name")),
        "runtime": _json_lines(m.get("runtime")),
        "files": [line for name, text in files.items() for line in (f"=== {name}", *text.splitlines())],
    }


def diff_releases(old: Deployment, new: Deployment) -> list[SectionDiff]:
    """Every section of two releases, old against new, in the order `sections` gives them."""
    before, after = sections(old), sections(new)
    return [SectionDiff(name, before[name], after[name]) for name in before]
