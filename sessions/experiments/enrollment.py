"""Enrollment: which variant of each of its agent's experiments a new session runs.

It happens once, in the transaction that creates the session, and is stored on
the row (`Session.ab_variants`), so every turn of the session, on any worker
and after any restart, applies the same variant. Eval sessions (`purpose:
"eval"`) are never enrolled; a session an experiment's split leaves out (held
out, or refused by `split_if`) runs the agent as declared and gives no samples.
Once an operator stops an experiment, the sessions its split takes get control.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from agents.discovery import LoadedAgent, load_deployment
from agents.experiments import SplitContext
from sessions.models import EventType, Experiment, Session
from sessions.turn import extensions

log = logging.getLogger(__name__)


def experiments_of(deployment) -> dict:
    """The release's experiments; none when it cannot be loaded (creating a session must not fail on it)."""
    try:
        return load_deployment(deployment).experiments
    except Exception:
        log.exception("cannot load the experiments of %s", deployment)
        return {}


def enroll(session: Session, message: str, experiments: dict) -> list[tuple[str, dict[str, Any]]]:
    """Choose the session's variants (set on `session.ab_variants`) and return their `ab.assigned` events.

    1. Each experiment's split decides whether the session takes part, and in which variant;
       a split that raises leaves the session out of that experiment.
    2. Only if it takes part in any: a stopped experiment gives it the control variant instead
       (one query, so a session no experiment takes costs none).
    """
    if not experiments or session.run_options.purpose == "eval":
        return []
    chosen: dict[str, str] = {}
    for name, test in sorted(experiments.items()):
        ctx = SplitContext(session_id=session.id, agent=session.agent.slug, experiment=name,
                           variants=tuple(test.variants), channel=session.channel, mode=session.mode,
                           message=message, principal_id=session.principal_id, options=dict(session.options))
        try:
            variant = test.split(ctx)
        except Exception:
            log.exception("the split of experiment %s failed; session %s is left out", name, session.id)
            continue
        if variant is not None and variant in test.variants:
            chosen[name] = variant
    if chosen:
        for name in Experiment.stopped_names(session.agent_id) & set(chosen):
            chosen[name] = experiments[name].control
    session.ab_variants = chosen
    return [(EventType.AB_ASSIGNED, {"experiment": name, "variant": variant,
                                     "label": experiments[name].variants[variant].label})
            for name, variant in chosen.items()]


@dataclass(frozen=True)
class Overrides:
    instructions: str
    model: str
    params: dict[str, Any]


def overrides(loaded: LoadedAgent, enrolled: dict[str, str] | None) -> Overrides:
    """The turn's instructions, model and params under the session's variants.

    A variant's `instructions` replace the agent's instructions.md, its `model`
    replaces the model, its `params` are merged over the agent's. Experiments
    apply in name order, so where two set the same thing the later name wins.
    An experiment the release no longer declares changes nothing.
    """
    instructions, model, params = loaded.instructions, loaded.model, dict(loaded.config.params)
    for name, variant_id in sorted((enrolled or {}).items()):
        test = loaded.experiments.get(name)
        variant = test.variants.get(variant_id) if test else None
        if variant is None:
            continue
        if variant.instructions is not None:
            instructions = variant.instructions
        if variant.model is not None:
            model = variant.model
        params.update(variant.params)
    return Overrides(instructions, model, params)


class Experiments(extensions.Variants):
    """A/B experiments as the turn room's variants."""

    def of(self, deployment) -> dict:
        return experiments_of(deployment)

    def enroll(self, session: Session, message: str, found: dict) -> list[tuple[str, dict[str, Any]]]:
        return enroll(session, message, found)

    def choose(self, loaded: LoadedAgent, enrolled: dict[str, str] | None) -> Overrides:
        return overrides(loaded, enrolled)


def register() -> None:
    """A new session is enrolled in the release's experiments, and its turns run with its variants'
    instructions, model and params (sessions.apps)."""
    extensions.set_variants(Experiments())
