"""Finding a project's cases: `evals/**/*_eval.py` beside `agent/` (never inside it), and `evals/config.py`.

A case's id is its file's path under `evals/` without `_eval.py` (`evals/weather/nyc_eval.py` →
`weather/nyc`), plus `/<id>` for a case of a case list that names one. Each error names the file and
what to change.
"""
from __future__ import annotations

import hashlib
import inspect
from pathlib import Path
from types import ModuleType

from agents.evals.cases import MAX_CONCURRENCY, EvalCase, EvalConfig, EvalDefinition
from agents.modules import import_file

SUFFIX = "_eval.py"


class EvalFileError(Exception):
    """An eval file or the config that cannot be used: `path` and the fix are in the message."""

    def __init__(self, path: Path, problem: str, fix: str):
        super().__init__(f"{path}: {problem} (fix: {fix})")
        self.path = path


def evals_folder(project: Path) -> Path:
    return Path(project) / "evals"


def _import(path: Path) -> ModuleType:
    name = "agentsite_evals_" + hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    try:
        return import_file(path, name)
    except Exception as error:
        raise EvalFileError(path, f"importing it raised {type(error).__name__}: {error}",
                            "make the file import on its own (`python " + str(path) + "`)") from error


def _cases_of(path: Path, base_id: str) -> list[EvalCase]:
    module = _import(path)
    definitions = [value for value in vars(module).values() if isinstance(value, EvalDefinition)]
    test = vars(module).get("test")
    if definitions and callable(test):
        raise EvalFileError(path, "it has both define_eval(...) and a test(t) function",
                            "keep one: put the test in the case list, or drop define_eval")
    if len(definitions) > 1:
        raise EvalFileError(path, "it has more than one define_eval(...)", "merge them into one case list")
    if callable(test):
        if len(inspect.signature(test).parameters) != 1:
            raise EvalFileError(path, "test must take one argument", "write `def test(t):`")
        return [EvalCase(id=base_id, file=str(path), test=test, description=(test.__doc__ or "").strip())]
    if not definitions:
        raise EvalFileError(path, "it declares no case", "add `def test(t): ...` or `cases = define_eval(cases=[...])`")
    definition = definitions[0]
    found: list[EvalCase] = []
    seen: set[str] = set()
    for index, case in enumerate(definition.cases):
        if len(definition.cases) > 1 and not case.id:
            raise EvalFileError(path, f"case {index} has no id", "give every case of a list of several an `id`")
        if "/" in case.id or case.id.strip() != case.id:
            raise EvalFileError(path, f"case id {case.id!r} has a slash or spaces", "use a plain name such as 'nyc'")
        case_id = f"{base_id}/{case.id}" if case.id else base_id
        if case_id in seen:
            raise EvalFileError(path, f"two cases are named {case_id!r}", "give each case its own id")
        seen.add(case_id)
        found.append(EvalCase(id=case_id, file=str(path), test=case.test,
                              tags=tuple(dict.fromkeys(definition.tags + case.tags)), description=case.description))
    return found


def discover_cases(project: Path) -> list[EvalCase]:
    """Every case of the project, sorted by id."""
    root = evals_folder(project)
    if not root.is_dir():
        raise EvalFileError(root, "there is no evals/ folder", f"create {root} beside agent/ with a *{SUFFIX} file")
    cases: list[EvalCase] = []
    ids: dict[str, str] = {}
    for path in sorted(root.rglob(f"*{SUFFIX}")):
        if "__pycache__" in path.parts:
            continue
        relative = path.relative_to(root).as_posix()
        base_id = relative[: -len(SUFFIX)]
        for case in _cases_of(path, base_id):
            if case.id in ids:
                raise EvalFileError(path, f"case id {case.id!r} is also declared by {ids[case.id]}",
                                    "rename one of the files or ids")
            ids[case.id] = case.file
            cases.append(case)
    agent_evals = Path(project) / "agent" / "evals"
    if not cases:
        hint = f" ({agent_evals} is ignored: evals live beside agent/)" if agent_evals.is_dir() else ""
        raise EvalFileError(root, f"no *{SUFFIX} file declares a case{hint}",
                            f"add e.g. evals/smoke{SUFFIX} with a `def test(t):`")
    return sorted(cases, key=lambda c: c.id)


def load_config(project: Path) -> EvalConfig:
    """`evals/config.py`'s `max_concurrency` (default 20, at most 200)."""
    path = evals_folder(project) / "config.py"
    if not path.is_file():
        return EvalConfig()
    value = getattr(_import(path), "max_concurrency", EvalConfig().max_concurrency)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_CONCURRENCY:
        raise EvalFileError(path, f"max_concurrency is {value!r}",
                            f"set `max_concurrency` to a whole number from 1 to {MAX_CONCURRENCY}")
    return EvalConfig(max_concurrency=value)


def select_cases(cases: list[EvalCase], ids: list[str], tags: list[str]) -> list[EvalCase]:
    """Cases named by id (or by an id's prefix: `weather` selects `weather/nyc`), then those with any of `tags`."""
    chosen = cases
    if ids:
        chosen = [c for c in chosen if any(c.id == i or c.id.startswith(i.rstrip("/") + "/") for i in ids)]
    if tags:
        chosen = [c for c in chosen if set(tags) & set(c.tags)]
    return chosen
