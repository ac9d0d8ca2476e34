"""Where a turn's time goes: each stage measured where it happens.

A `TurnClock` follows one turn across its runs (a parked turn resumes in a
new task, perhaps in another process). Offsets are milliseconds from the
turn's creation (`Turn.created_at`): each run ties its monotonic clock to the
wall clock once, when it starts, and measures with the monotonic clock from
there. What a run measured crosses a park in `Turn.state["timings"]` and ends
up, with the turn's end, in `Turn.timings` and in the `timings` of
`turn.completed` / `turn.failed`. Nothing here reads or writes the database:
the values ride on writes the turn makes anyway (its park, its settle).
The clock hears of model and tool calls as one of the turn's observers
(sessions.turn.extensions), the one only its own turn's loop has.

The stages, each a step of the waterfall (`kind`) and a total:

    queue      created (or, after an approval, decided) → claimed by a worker   queueMs
    load       claimed → the turn, its session and the agent's release read
               (a release's first load in a process imports its modules)        loadMs
    workspace  the workspace opened, sent files written, the toolset built     workspaceMs
    model      one model call, with its time to the first output (firstTokenMs) modelMs
    tool       one tool call, by tool name                                      toolsMs
    approval   parked → the last decision on its calls (or the interrupt)       approvalMs
    settle     the loop's end → the settle's write (unrun calls reported, the
               conversation answered, the ending built)                         settleMs

and, only on turns of another agent runtime (`claude-agent:`):

    runtime    its child started and resuming the conversation ("new"), or
               the one the session's last turn left running taken ("kept")    runtimeMs

`toolsMs` counts the wall time of each step's tool run, so calls of one step
that run in parallel count once. `firstTokenMs` is the first model call's.
`totalMs` runs from the turn's creation to its settle, parked time included;
the settle's own commit is not in it, since the timings are written by it.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Iterator

from sessions.turn.extensions import ModelCall, TurnObserver

TOTALS = {"queue": "queueMs", "load": "loadMs", "workspace": "workspaceMs", "model": "modelMs", "tool": "toolsMs",
          "approval": "approvalMs", "settle": "settleMs"}
OPTIONAL = {"runtime": "runtimeMs"}  # in a turn's timings only when it has such a step


def _ms(value: float) -> float:
    return round(max(value, 0.0), 1)


class TurnClock(TurnObserver):
    """One run of a turn, measuring; `saved` is what its earlier runs measured (from a park)."""

    def __init__(self, created_at: datetime, claimed: float, saved: dict[str, Any] | None = None):
        self._origin = created_at.timestamp()
        self._wall, self._mono = time.time(), time.monotonic()
        saved = saved or {}
        self.steps: list[dict[str, Any]] = list(saved.get("steps", ()))
        self.totals = {kind: saved.get(key) or 0.0 for kind, key in TOTALS.items()}
        self.totals.update({kind: saved[key] for kind, key in OPTIONAL.items() if saved.get(key) is not None})
        self.first_token: float | None = saved.get("firstTokenMs")
        self.models = int(saved.get("models", 0))
        self.claimed = claimed
        # A resumed turn's approval wait ends when its calls were decided, known once they are read.
        self.parked: float | None = saved.get("parkedMs")
        self.waiting_on: str = saved.get("waitingOn", "")
        self._settle: dict[str, Any] | None = None
        if self.parked is None:
            self.add("queue", "", 0.0, self.offset(claimed))

    def offset(self, instant: float) -> float:
        """ms from the turn's creation to the monotonic `instant` of this run."""
        return (self._wall + instant - self._mono - self._origin) * 1000

    def add(self, kind: str, name: str, start_ms: float, duration_ms: float, **extra: Any) -> None:
        self.steps.append({"kind": kind, "name": name, "startMs": _ms(start_ms), "durationMs": _ms(duration_ms),
                           **extra})
        if kind != "tool":  # tools count by their step's wall time (tools_ran)
            self.totals[kind] = self.totals.get(kind, 0.0) + max(duration_ms, 0.0)

    def span(self, kind: str, name: str, started: float, ended: float | None = None, **extra: Any) -> None:
        """A step between two monotonic instants of this run (`ended`: now)."""
        ended = time.monotonic() if ended is None else ended
        self.add(kind, name, self.offset(started), (ended - started) * 1000, **extra)

    @contextmanager
    def model_call(self, call: ModelCall) -> Iterator[None]:
        try:
            yield
        finally:  # a failed or interrupted call is timed too
            self.model_called(call.model_id, call.started, call.first_output)

    def tool_calls_ended(self, session, rows: list, started: float, durations: dict[int, float]) -> None:
        """Each call that ran (from its row's start) and the wall time of the step's tool run."""
        if not durations:
            return
        for row in rows:
            if durations.get(row.pk):  # 0: another runner had started it (never twice)
                self.tool_ran(row.tool, row.call_id, row.started_at, durations[row.pk])
        self.tools_ran(started)

    def model_called(self, model: str, started: float, first_output: float | None) -> None:
        first = None if first_output is None else _ms((first_output - started) * 1000)
        if self.models == 0:
            self.first_token = first
        self.models += 1
        self.span("model", model, started, firstTokenMs=first)

    def tool_ran(self, name: str, call_id: str, started_at: datetime | None, duration_ms: float) -> None:
        """A call the executor ran: its row's start instant and its measured duration."""
        start = (started_at.timestamp() - self._origin) * 1000 if started_at else self.offset(time.monotonic())
        self.add("tool", name, start, duration_ms, callId=call_id)

    def tools_ran(self, started: float) -> None:
        """A step's tool run ended: its wall time counts once, however many calls ran in parallel."""
        self.totals["tool"] += (time.monotonic() - started) * 1000

    def resumed(self, decided: datetime | None) -> None:
        """A parked turn runs again: its approval wait, then its wait for a worker once decided."""
        if self.parked is None:
            return
        claimed = self.offset(self.claimed)
        decided_ms = claimed if decided is None else min(max((decided.timestamp() - self._origin) * 1000,
                                                             self.parked), claimed)
        self.add("approval", self.waiting_on, self.parked, decided_ms - self.parked)
        if decided is not None:  # (an interrupt's moment is not known: its wait counts as the approval's)
            self.add("queue", "", decided_ms, claimed - decided_ms)
        self.parked, self.waiting_on = None, ""

    def park(self, waiting_on: list[str]) -> dict[str, Any]:
        """What to keep across a park: the steps so far, and when and on which tools it waits."""
        return {**self._totals(), "steps": self.steps, "models": self.models,
                "parkedMs": _ms(self.offset(time.monotonic())), "waitingOn": ", ".join(waiting_on)}

    def finish(self, loop_ended: float) -> dict[str, Any]:
        """The turn's timings, as stored and sent: the settle so far is its last step."""
        self.resumed(None)  # interrupted while parked: the wait ended when a worker took it up
        if self._settle is not None:  # settling again: the database refused the first try
            self.steps.remove(self._settle)
            self.totals["settle"] = 0.0
        now = time.monotonic()
        self.span("settle", "", loop_ended, now)
        self._settle = self.steps[-1]
        self.steps.sort(key=lambda s: s["startMs"])
        return {**self._totals(), "totalMs": _ms(self.offset(now)), "steps": self.steps}

    def _totals(self) -> dict[str, Any]:
        totals: dict[str, Any] = {key: _ms(self.totals[kind]) for kind, key in TOTALS.items()}
        totals.update({key: _ms(self.totals[kind]) for kind, key in OPTIONAL.items() if kind in self.totals})
        totals["firstTokenMs"] = self.first_token
        return totals


def lost_turn_timings(created_at: datetime, started_at: datetime | None, now: datetime) -> dict[str, Any]:
    """What is known of a turn whose worker was lost: its first wait for a worker and its whole length.

    The stages its worker measured went with it: unknown (null), as unknown usage is.
    """
    timings: dict[str, Any] = {key: None for key in TOTALS.values()}
    timings.update(firstTokenMs=None, totalMs=_ms((now - created_at).total_seconds() * 1000), steps=[])
    if started_at is not None:
        queue = _ms((started_at - created_at).total_seconds() * 1000)
        timings["queueMs"] = queue
        timings["steps"] = [{"kind": "queue", "name": "", "startMs": 0.0, "durationMs": queue}]
    return timings
