"""An agent folder's A/B experiments: `agent/ab.py` or `agent/ab/<name>.py`, each defining
`define_ab(...)` values, checked as discovery checks everything else (each problem names its file)."""
from __future__ import annotations

import re
from pathlib import Path

from agents import providers
from agents.discovery.loaded import Problem
from agents.experiments import ABTest
from agents.modules import find_in_file

# Names appear in URLs (`/<slug>/v1/abs/<name>`) and in each session's enrollment.
EXPERIMENT_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


def load_experiments(base: Path, namespace: str, problems: list[Problem]) -> dict[str, ABTest]:
    files = [base / "ab.py"] if (base / "ab.py").is_file() else []
    if (base / "ab").is_dir():
        files += sorted(p for p in (base / "ab").glob("*.py") if not p.name.startswith("_"))
    found: dict[str, ABTest] = {}
    for path in files:
        rel = path.relative_to(base.parent).as_posix()
        module = f"{namespace}.ab" if path.parent == base else f"{namespace}.ab_{path.stem}"
        tests = find_in_file(path, module, ABTest, lambda message, rel=rel: problems.append(Problem(rel, message)))
        if tests is None:
            continue
        if not tests:
            problems.append(Problem(rel, "define an experiment: experiment = define_ab(...) (from agents.sdk import define_ab)"))
        for test in tests:
            problems.extend(Problem(rel, f"experiment {test.name!r}: {p}") for p in experiment_problems(test))
            if test.name in found:
                problems.append(Problem(rel, f"experiment {test.name!r} is defined twice: give each experiment its own name"))
                continue
            found[test.name] = test
    return found


def experiment_problems(test: ABTest) -> list[str]:
    problems = list(test.problems)
    if not isinstance(test.name, str) or not EXPERIMENT_NAME.match(test.name):
        problems.append("rename it: experiment names are lowercase letters, digits, '-' and '_' (at most 64)")
    for variant in test.variants.values():
        if variant.model is None:
            continue
        try:
            providers.parse_model_id(variant.model)
        except ValueError as exc:
            problems.append(f"variant {variant.id!r}: no provider serves this model: {exc}")
    return problems
