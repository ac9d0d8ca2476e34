"""What an eval file declares: `define_eval(tags=..., cases=[...])` or a module-level `test(t)`,
and `evals/config.py`'s `max_concurrency`."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

DEFAULT_CONCURRENCY = 20
MAX_CONCURRENCY = 200


@dataclass(frozen=True)
class Case:
    """One case as written in a case list: `id` is appended to the file's id."""

    test: Callable[[Any], None]
    id: str = ""
    description: str = ""
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class EvalDefinition:
    tags: tuple[str, ...] = ()
    cases: tuple[Case, ...] = ()


def case(test: Callable[[Any], None], id: str = "", description: str = "", tags: list[str] | tuple[str, ...] = ()) -> Case:
    return Case(test=test, id=id, description=description, tags=tuple(tags))


def define_eval(*, cases: list[Case | dict[str, Any]], tags: list[str] | tuple[str, ...] = ()) -> EvalDefinition:
    """An eval file's cases, each a `Case` or a dict with `test` and optional `id`, `description`, `tags`.

    Assign it to a module-level name (any name); a file with one case list needs no `test`.
    """
    built: list[Case] = []
    for index, item in enumerate(cases):
        if isinstance(item, dict):
            unknown = set(item) - {"test", "id", "description", "tags"}
            if unknown or not callable(item.get("test")):
                raise TypeError(f"case {index}: a dict with a callable `test` and optionally id, description, "
                                f"tags (unknown: {sorted(unknown)})")
            item = case(**item)
        elif not isinstance(item, Case):
            raise TypeError(f"case {index}: a dict or case(...), not {type(item).__name__}")
        built.append(item)
    return EvalDefinition(tags=tuple(tags), cases=tuple(built))


@dataclass(frozen=True)
class EvalCase:
    """A case found on disk, with its id from the path (and its `id=`)."""

    id: str
    file: str
    test: Callable[[Any], None] = field(repr=False, compare=False)
    tags: tuple[str, ...] = ()
    description: str = ""


@dataclass(frozen=True)
class EvalConfig:
    max_concurrency: int = DEFAULT_CONCURRENCY
