"""What a case checks: gates that fail with a readable message, and the matchers `t.check` takes.

`includes(...)` and `satisfies(...)` are matchers; `a | b` passes when either does.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Pattern


class GateFailed(AssertionError):
    """A gate of a case did not hold: `gate` names its kind (`succeeded`, `called_tool`, ...)."""

    def __init__(self, gate: str, message: str):
        super().__init__(message)
        self.gate = gate
        self.message = message


@dataclass(frozen=True)
class Matcher:
    """A test on a value with the words that describe it when it fails."""

    test: Callable[[Any], bool]
    description: str

    def __call__(self, value: Any) -> bool:
        return bool(self.test(value))

    def __or__(self, other: Matcher) -> Matcher:
        return Matcher(lambda value: self(value) or other(value), f"{self.description} or {other.description}")

    def __and__(self, other: Matcher) -> Matcher:
        return Matcher(lambda value: self(value) and other(value), f"{self.description} and {other.description}")


def includes(expected: str | Pattern[str]) -> Matcher:
    """The text contains `expected` (a string, case-sensitive, or a compiled regular expression)."""
    if isinstance(expected, re.Pattern):
        return Matcher(lambda value: isinstance(value, str) and expected.search(value) is not None,
                       f"includes /{expected.pattern}/")
    return Matcher(lambda value: isinstance(value, str) and expected in value, f"includes {expected!r}")


def satisfies(predicate: Callable[[Any], bool], description: str = "") -> Matcher:
    """`predicate(value)` is true (an exception counts as false)."""

    def test(value: Any) -> bool:
        try:
            return bool(predicate(value))
        except Exception:
            return False

    name = description or getattr(predicate, "__name__", "predicate")
    return Matcher(test, f"satisfies {name}")
