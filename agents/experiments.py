"""A/B experiments an agent folder declares: `agent/ab.py` or `agent/ab/<name>.py`.

    from agents.sdk import define_ab, split_by_session_hash

    experiment = define_ab(
        "concise-replies",
        variants={"control": {"label": "Baseline"},
                  "short": {"label": "Shorter", "instructions": "Answer in one short paragraph."}},
        split=split_by_session_hash(holdout=0.1),
        derive={"lookups": lambda event: 1 if event.type == "action.result" and event.data.get("toolName") == "lookup" else None},
        on_sample=lambda sample: print(sample.variant, sample.metrics["toolCalls"]),
    )

A session is enrolled once, when it is created, and keeps its variant for its
life. The control variant is the one with id "control", else the first one
declared. Nothing here needs Django: agent code imports it anywhere.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Mapping

# The keys a variant may set; anything else is refused at discovery.
VARIANT_KEYS = frozenset({"label", "instructions", "model", "params"})
# The metrics every sample carries, in the order results list them.
BUILTIN_METRICS = ("turns", "toolCalls", "errors", "approvals", "inputTokens", "outputTokens", "costUsd",
                   "wallTimeMs", "firstTokenMs")


@dataclass(frozen=True)
class SplitContext:
    """What a split sees of a session being created (its first message included)."""

    session_id: str
    agent: str
    experiment: str
    variants: tuple[str, ...]
    channel: str = "http"
    mode: str = "chat"
    message: str = ""
    principal_id: str = ""
    options: Mapping[str, Any] = field(default_factory=dict)


# A split answers a variant id, or None: the session takes no part (held out, or not eligible).
Split = Callable[[SplitContext], "str | None"]


def hash_fraction(experiment: str, session_id: str) -> float:
    """A number in [0, 1) fixed by the experiment and the session: the same session always lands alike,
    and two experiments split independently of each other."""
    digest = hashlib.sha256(f"{experiment}\0{session_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


@dataclass(frozen=True)
class HashSplit:
    """Variants in equal shares by a hash of the session id, after holding `holdout` of sessions out."""

    holdout: float = 0.0

    def __call__(self, ctx: SplitContext) -> str | None:
        u = hash_fraction(ctx.experiment, ctx.session_id)
        if u < self.holdout or not ctx.variants:
            return None
        share = (u - self.holdout) / (1 - self.holdout)
        return ctx.variants[min(int(share * len(ctx.variants)), len(ctx.variants) - 1)]


@dataclass(frozen=True)
class ConditionalSplit:
    """Only sessions `predicate` accepts take part; `then` splits them."""

    predicate: Callable[[SplitContext], bool]
    then: Split

    @property
    def holdout(self) -> float:
        return getattr(self.then, "holdout", 0.0)

    def __call__(self, ctx: SplitContext) -> str | None:
        return self.then(ctx) if self.predicate(ctx) else None


def split_by_session_hash(holdout: float = 0.0) -> HashSplit:
    return HashSplit(holdout=holdout)


def split_if(predicate: Callable[[SplitContext], bool], then: Split | None = None) -> ConditionalSplit:
    return ConditionalSplit(predicate=predicate, then=then or HashSplit())


@dataclass(frozen=True)
class Variant:
    id: str
    label: str
    instructions: str | None = None
    model: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SampleEvent:
    """An event of the turn as `derive` sees it."""

    type: str
    data: Mapping[str, Any]
    index: int


@dataclass(frozen=True)
class Sample:
    """One settled turn of an enrolled session: numbers and ids only, never content."""

    experiment: str
    variant: str
    agent: str
    session_id: str
    turn_id: str
    at: datetime
    metrics: Mapping[str, float | None]


@dataclass
class ABTest:
    """What `define_ab` returns. Problems in what was passed are kept, and reported at discovery."""

    name: str
    variants: dict[str, Variant]
    split: Split
    derive: dict[str, Callable[[SampleEvent], Any]]
    on_sample: Callable[[Sample], Any] | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def control(self) -> str:
        return "control" if "control" in self.variants else next(iter(self.variants), "")

    @property
    def holdout(self) -> float:
        return float(getattr(self.split, "holdout", 0.0))

    def metric_names(self) -> list[str]:
        return list(BUILTIN_METRICS) + [m for m in self.derive if m not in BUILTIN_METRICS]

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "control": self.control, "holdout": self.holdout,
                "variants": [{"id": v.id, "label": v.label, **({"model": v.model} if v.model else {})}
                             for v in self.variants.values()],
                "metrics": self.metric_names()}


def define_ab(name: str, *, variants: Mapping[str, Mapping[str, Any]], split: Split | None = None,
              derive: Mapping[str, Any] | None = None, on_sample: Callable[[Sample], Any] | None = None) -> ABTest:
    problems: list[str] = []
    found: dict[str, Variant] = {}
    for vid, spec in (variants or {}).items():
        unknown = sorted(set(spec) - VARIANT_KEYS)
        if unknown:
            problems.append(f"variant {vid!r}: unknown key(s) {', '.join(map(repr, unknown))} "
                            f"(a variant may set {', '.join(sorted(VARIANT_KEYS))})")
        found[str(vid)] = Variant(id=str(vid), label=str(spec.get("label") or vid),
                                  instructions=spec.get("instructions"), model=spec.get("model"),
                                  params=dict(spec.get("params") or {}))
    if not found:
        problems.append("declare at least one variant")
    split = split if split is not None else HashSplit()
    holdout = getattr(split, "holdout", 0.0)
    if not isinstance(holdout, (int, float)) or not 0 <= holdout < 1:
        problems.append(f"holdout must be in [0, 1), not {holdout!r}")
    for metric, fn in (derive or {}).items():
        if not callable(fn):
            problems.append(f"derive[{metric!r}] is not callable: give a function of an event returning a number or None")
    if on_sample is not None and not callable(on_sample):
        problems.append("on_sample is not callable")
    return ABTest(name=name, variants=found, split=split, derive=dict(derive or {}), on_sample=on_sample,
                  problems=problems)
