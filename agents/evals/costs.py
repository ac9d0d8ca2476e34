"""What a case and a run cost in US dollars, from the usage the server put on the events followed.

A turn that ended says its cost on its `turn.completed` / `turn.failed` event; a turn still
waiting for an approval when its case ends has said it only step by step (`step.completed`).
Totals add as the server's do: the known costs summed, the calls on a model without a price
counted apart, and `usd` None (unknown, never 0) only when nothing summed had a known cost.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from agents.evals.trial import ENDED


@dataclass(frozen=True)
class Cost:
    usd: float | None = None
    unpriced_calls: int = 0

    def __add__(self, other: Cost) -> Cost:
        known = [c for c in (self.usd, other.usd) if c is not None]
        # Sub-cent amounts over many calls: kept to a billionth of a cent, as the server keeps them.
        return Cost(round(sum(known), 11) if known else None, self.unpriced_calls + other.unpriced_calls)

    @classmethod
    def of_usage(cls, usage: Mapping[str, Any] | None) -> Cost:
        """A usage object's cost (None: tokens unknown, or a server that prices nothing)."""
        if not usage:
            return cls()
        usd = usage.get("costUsd")
        return cls(None if usd is None else float(usd), int(usage.get("unpricedCalls") or 0))

    @classmethod
    def of_events(cls, events: Iterable[Mapping[str, Any]]) -> Cost:
        """Each turn's cost: its ending event's usage, else (parked) the sum of its steps' usage."""
        ended: dict[str, Cost] = {}
        steps: dict[str, Cost] = {}
        for event in events:
            turn, data = event.get("turnId") or "", event.get("data") or {}
            if event.get("type") in ENDED:
                ended[turn] = cls.of_usage(data.get("usage"))
            elif event.get("type") == "step.completed":
                steps[turn] = steps.get(turn, cls()) + cls.of_usage(data.get("usage"))
        return total([*ended.values(), *(cost for turn, cost in steps.items() if turn not in ended)])


def total(costs: Iterable[Cost]) -> Cost:
    summed = Cost()
    for cost in costs:
        summed = summed + cost
    return summed
