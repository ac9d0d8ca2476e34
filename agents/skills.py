"""Skills: on-demand procedures the model loads by name.

Three forms under `agent/skills/`:
- `<name>.md`: flat markdown; `description` front matter, else the first body line.
- `<name>/SKILL.md` plus sibling files: `description` front matter required.
- `<name>.py`: `skill = Skill(description=..., markdown=..., files={...})`.
The model sees each skill's name and description; the body and files are
read through built-in tools only when it asks.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import frontmatter

from agents.definitions import Skill
from agents.modules import find_in_file

SKILL_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
MAX_SKILL_FILE_BYTES = 512 * 1024


@dataclass(frozen=True)
class LoadedSkill:
    name: str
    description: str
    markdown: str
    files: dict[str, str] = field(default_factory=dict)
    source: str = ""


def _first_line(body: str) -> str:
    for line in body.splitlines():
        line = line.strip().lstrip("#").strip()
        if line:
            return line
    return ""


def _parse(path: Path, rel: str, problems: list[tuple[str, str]]) -> tuple[dict, str] | None:
    try:
        post = frontmatter.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        problems.append((rel, "not UTF-8 text: save it as UTF-8"))
        return None
    except Exception as exc:  # malformed YAML front matter
        problems.append((rel, f"front matter is not valid YAML: {exc}"))
        return None
    return dict(post.metadata), post.content.strip()


def safe_relative(path: str) -> str | None:
    """A normalized relative POSIX path, or None if it could leave its root."""
    pure = PurePosixPath(path.replace("\\", "/"))
    if pure.is_absolute() or ".." in pure.parts or not pure.parts:
        return None
    return pure.as_posix()


def load_skills(skills_dir: Path, namespace: str, problems: list[tuple[str, str]]) -> dict[str, LoadedSkill]:
    skills: dict[str, LoadedSkill] = {}
    if not skills_dir.is_dir():
        return skills
    for path in sorted(skills_dir.iterdir()):
        if path.name.startswith((".", "_")) or path.name == "__pycache__":
            continue
        name = path.stem if path.is_file() else path.name
        rel = f"agent/skills/{path.name}"
        if not SKILL_NAME.match(name):
            problems.append((rel, "rename it: skill names are lowercase letters, digits, '-' and '_'"))
            continue
        if name in skills:
            problems.append((rel, f"a skill named {name!r} is defined twice: keep one form"))
            continue
        skill = None
        if path.is_file() and path.suffix == ".md":
            parsed = _parse(path, rel, problems)
            if parsed:
                meta, body = parsed
                description = str(meta.get("description") or _first_line(body)).strip()
                if not description:
                    problems.append((rel, "empty skill: add a description front matter or a first line"))
                else:
                    skill = LoadedSkill(name, description, body, source=rel)
        elif path.is_dir():
            skill = _load_packaged(path, name, rel, problems)
        elif path.is_file() and path.suffix == ".py":
            skill = _load_generated(path, name, rel, namespace, problems)
        else:
            problems.append((rel, "skills are <name>.md, <name>/SKILL.md or <name>.py"))
        if skill:
            skills[name] = skill
    return skills


def _load_packaged(path: Path, name: str, rel: str, problems: list[tuple[str, str]]) -> LoadedSkill | None:
    main = path / "SKILL.md"
    if not main.is_file():
        problems.append((f"{rel}/SKILL.md", "missing: a packaged skill needs SKILL.md with a description"))
        return None
    parsed = _parse(main, f"{rel}/SKILL.md", problems)
    if not parsed:
        return None
    meta, body = parsed
    description = str(meta.get("description") or "").strip()
    if not description:
        problems.append((f"{rel}/SKILL.md", "add `description:` front matter (required for packaged skills)"))
        return None
    files: dict[str, str] = {}
    for file in sorted(p for p in path.rglob("*") if p.is_file() and p != main and "__pycache__" not in p.parts):
        if file.is_symlink():
            problems.append((f"{rel}/{file.relative_to(path)}", "symlinks are not allowed in skills: copy the file"))
            continue
        if file.stat().st_size > MAX_SKILL_FILE_BYTES:
            problems.append((f"{rel}/{file.relative_to(path)}", f"larger than {MAX_SKILL_FILE_BYTES} bytes: trim it"))
            continue
        try:
            files[file.relative_to(path).as_posix()] = file.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            problems.append((f"{rel}/{file.relative_to(path)}", "not UTF-8 text: skills carry text files only"))
    return LoadedSkill(name, description, body, files, source=f"{rel}/SKILL.md")


def _load_generated(path: Path, name: str, rel: str, namespace: str, problems: list[tuple[str, str]]) -> LoadedSkill | None:
    skills = find_in_file(path, f"{namespace}.skills.{name}", Skill, lambda message: problems.append((rel, message)),
                          name="skill")
    if skills is None:
        return None
    if not skills:
        problems.append((rel, "define `skill = Skill(description=..., markdown=...)` (from agents.sdk import Skill)"))
        return None
    found = skills[0]
    if not found.description.strip():
        problems.append((rel, "give the skill a description: Skill(description=...)"))
        return None
    files = {}
    for key, content in (found.files or {}).items():
        safe = safe_relative(key)
        if safe is None:
            problems.append((rel, f"file {key!r} must be a relative path inside the skill (no '..')"))
        elif not isinstance(content, str):
            problems.append((rel, f"file {key!r} must be text"))
        else:
            files[safe] = content
    return LoadedSkill(name, found.description.strip(), found.markdown, files, source=rel)
