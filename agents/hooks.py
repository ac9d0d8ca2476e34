"""Observe-only event handlers (`agent/hooks/<name>.py`), declared with `@hook(...)`."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Hook:
    """An observe-only handler for events of the given types (`*`: all)."""

    events: tuple[str, ...]
    function: Callable[[dict[str, Any]], Any]

    def wants(self, event_type: str) -> bool:
        return "*" in self.events or event_type in self.events


def hook(*events: str) -> Callable[[Callable[[dict[str, Any]], Any]], Hook]:
    """`@hook("turn.completed")` or `@hook("*")`: called with each event envelope after it is stored."""
    if not events:
        raise TypeError("name the event types to observe, e.g. @hook('turn.completed'), or '*' for all")

    def decorate(function: Callable[[dict[str, Any]], Any]) -> Hook:
        return Hook(events=tuple(events), function=function)

    return decorate
