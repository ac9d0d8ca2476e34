"""What the features add to a turn, registered when the app is ready.

The turn room names no feature: each feature's `register()`, called from
`SessionsConfig.ready` as the ticker's jobs are added there, hands this module a
trigger's handler, built-in tools, a tool family, a recovery step, the variants
or an observer; a feature that registered nothing adds nothing. ARCHITECTURE.md
lists who registers what.
"""
from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Sequence

_NOTHING = nullcontext()


@dataclass(frozen=True)
class Trigger:
    """What a feature does for the turns of one trigger; each part optional."""

    # Runs the turn instead of the agent's loop (a parked direct tool call, decided).
    run: Callable[[Any], None] | None = None
    # More fields for the turn's `message.received` event, from the turn.
    received: Callable[[Any], dict[str, Any]] | None = None
    # After the turn settled: (turn, agent slug, messages, status, error).
    answered: Callable[[Any, str, list[dict[str, Any]], str, str], None] | None = None
    # The recovery sweep ends the turn as lost: the events to append with its end.
    lost: Callable[[Any], list[tuple[str, dict[str, Any]]]] | None = None


class Chosen(NamedTuple):
    """A turn's instructions, model and params."""

    instructions: str
    model: str
    params: dict[str, Any]


class RecoveryStep(NamedTuple):
    name: str
    run: Callable[[Any], object]
    when: str | None  # a field of sessions.sql.recovery.Due: the step runs only when it is set


class ModelCall:
    """One model call, as observers see it; the runner fills in how it went."""

    __slots__ = ("session", "model_id", "provider", "model", "system", "messages", "started", "first_output",
                 "usage", "reply")

    def __init__(self, session, model_id: str, provider: str, model: str, system: str,
                 messages: list[dict[str, Any]], started: float):
        self.session, self.model_id, self.provider, self.model = session, model_id, provider, model
        self.system, self.messages, self.started = system, messages, started
        self.first_output: float | None = None  # monotonic, when the model first said something
        self.usage: dict[str, Any] | None = None  # set once the call succeeded
        self.reply: dict[str, Any] | None = None  # the assistant message, once the call succeeded


class TurnObserver:
    """Told of a turn as it runs. Every method does nothing unless overridden.

    The methods returning a context manager wrap what they observe, so a span can
    be the current one around it; code after their `yield` runs only when it succeeded.
    """

    def turn_run(self, turn) -> AbstractContextManager:
        """Around one worker's run of a turn."""
        return _NOTHING

    def subagent(self, subagent_id: str) -> AbstractContextManager:
        """Around a delegation to a subagent."""
        return _NOTHING

    def model_call(self, call: ModelCall) -> AbstractContextManager:
        """Around one model call (also one that fails or is interrupted)."""
        return _NOTHING

    def tool_call(self, row) -> AbstractContextManager:
        """Around the run of one tool call (its row ends done or failed inside)."""
        return _NOTHING

    def tool_calls_ended(self, session, rows: list, started: float, durations: dict[int, float]) -> None:
        """A loop reported these calls' results; `durations`: ms of those it ran, from `started` (monotonic)."""

    def turn_ended(self, status: str, code: str, usage: dict[str, Any] | None) -> None:
        """The run's outcome, inside `turn_run`, before it settles."""

    def new_turn(self) -> dict[str, str]:
        """Fields a Turn being created takes (the trace it continues)."""
        return {}

    def session_started(self, session) -> None:
        """A session was created; called once its transaction committed, so it must not raise."""

    def turn_settled(self, session, turn, status: str, usage: dict[str, Any] | None,
                     timings: dict[str, Any] | None, events: Sequence[tuple[str, dict[str, Any]]]) -> None:
        """A turn ended, inside the transaction that ends it (and only if it ended it); `events`: the
        last ones it appended, its `turn.completed` or `turn.failed` among them when it has one."""


class Variants:
    """How a session takes part in A/B variants; this default: in none."""

    def of(self, deployment) -> Any:
        """What a new session of `deployment` may be enrolled in, read before the write lock."""
        return None

    def enroll(self, session, message: str, found: Any) -> list[tuple[str, dict[str, Any]]]:
        """Set the new session's variants (`session.ab_variants`); the events that say so."""
        return []

    def choose(self, loaded, enrolled: dict[str, str] | None) -> Chosen:
        """The instructions, model and params of a turn of a session with variants `enrolled`."""
        return Chosen(loaded.instructions, loaded.model, dict(loaded.config.params))


triggers: dict[str, Trigger] = {}
builtin_sources: list[tuple[str, Callable[[Any], dict[str, Any]]]] = []
tool_families: list[tuple[str, Callable[[Any], dict[str, Any]]]] = []
recovery_steps: list[RecoveryStep] = []
observers: list[TurnObserver] = []
_variants: list[Variants] = [Variants()]


def add_trigger(trigger: str, handler: Trigger) -> None:
    triggers[trigger] = handler


def add_builtin_tools(feature: str, source: Callable[[Any], dict[str, Any]]) -> None:
    """`source(loaded)`: the built-ins `feature` gives that agent, named; offered before the engine's own.
    /info names `feature` as where they come from."""
    if (feature, source) not in builtin_sources:
        builtin_sources.append((feature, source))


def add_tool_family(family: str, source: Callable[[Any], dict[str, Any]]) -> None:
    """`source(loaded)`: that agent's tools of `family`, after its own and its workspace's (which win a name)."""
    if all(name != family for name, _ in tool_families):
        tool_families.append((family, source))


def add_recovery_step(name: str, step: Callable[[Any], object], when: str | None = None) -> None:
    """`step(now)` runs in each recovery sweep, after the lost turns ended (once per name); with `when`, only in
    the passes whose question (sessions.sql.recovery.Due) finds that field set: the step has work."""
    if all(existing.name != name for existing in recovery_steps):
        recovery_steps.append(RecoveryStep(name, step, when))


def add_observer(observer: TurnObserver) -> None:
    if all(type(o) is not type(observer) for o in observers):
        observers.append(observer)


def set_variants(chooser: Variants) -> None:
    _variants[0] = chooser


def variants() -> Variants:
    return _variants[0]


def turn_fields() -> dict[str, str]:
    """What a new Turn takes from the observers."""
    fields: dict[str, str] = {}
    for observer in observers:
        fields.update(observer.new_turn())
    return fields


def session_started(session) -> None:
    for observer in observers:
        observer.session_started(session)


def turn_settled(session, turn, status: str, usage, timings, events) -> None:
    for observer in observers:
        observer.turn_settled(session, turn, status, usage, timings, events)
