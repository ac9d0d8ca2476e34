"""Values both databases can store.

PostgreSQL's `text` and `jsonb` refuse NUL (U+0000) and its `jsonb` refuses
non-finite numbers; psycopg and sqlite3 cannot encode lone surrogates
(U+D800..U+DFFF without a partner, which JSON's `\\ud800` escape produces).
SQLite would store some of these, so what one database accepts the other
refuses. Input from outside (requests, frames, model output) is checked
here and refused; values the server produces itself are cleaned here.

Both walks use an explicit stack: the values may be nested as deep as the
JSON decoder allows, deeper than a recursive walk could go.
"""
from __future__ import annotations

import math
import re
from typing import Any

BAD_CHARS = re.compile("[\x00\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def text_problem(text: str) -> str | None:
    """Why `text` cannot be stored, or None."""
    match = BAD_CHARS.search(text)
    if match is None:
        return None
    if match.group() == "\x00":
        return "holds a NUL character (U+0000)"
    return f"holds a lone surrogate (U+{ord(match.group()):04X}), which is not valid Unicode"


def clean_text(text: str) -> str:
    return BAD_CHARS.sub(REPLACEMENT, text)


def find_problem(value: Any, where: str = "") -> tuple[str, str] | None:
    """The first place in a JSON value that cannot be stored, as (path, problem), or None.

    Paths read like `items[2].name`, under `where` if given; the value itself is "value".
    """
    stack = [(where, value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            if problem := text_problem(item):
                return path or "value", problem
        elif isinstance(item, float):
            if not math.isfinite(item):
                return path or "value", "is not a finite number"
        elif isinstance(item, dict):
            for key, child in reversed(item.items()):
                key = str(key)
                if problem := text_problem(key):
                    return path or "value", f"has a key that {problem}"
                stack.append((_join(path, key), child))
        elif isinstance(item, list | tuple):
            stack.extend((f"{path}[{i}]", child) for i, child in reversed(list(enumerate(item))))
    return None


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def clean(value: Any) -> Any:
    """A copy of a JSON value that both databases store: bad characters become U+FFFD,
    non-finite numbers their names ("inf", "nan")."""
    stack: list[tuple[Any, Any]] = []
    top = _copy_of(value, stack)
    while stack:
        source, copy = stack.pop()
        if isinstance(source, dict):
            for key, child in source.items():
                copy[clean_text(str(key))] = _copy_of(child, stack)
        else:
            copy.extend(_copy_of(child, stack) for child in source)
    return top


def _copy_of(value: Any, stack: list[tuple[Any, Any]]) -> Any:
    """A cleaned leaf, or an empty container queued on `stack` to be filled."""
    if isinstance(value, dict | list | tuple):
        copy: dict | list = {} if isinstance(value, dict) else []
        stack.append((value, copy))
        return copy
    return _clean_leaf(value)


def _clean_leaf(value: Any) -> Any:
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value
