"""The body of the eval-case routes: an agent's cases kept in the admin."""
from __future__ import annotations

from typing import Iterable

from agents.evals.stored import CaseSpec
from agents.models import Agent, StoredEvalCase
from channels_app.replies.base import Reply


class EvalCases(Reply):
    """`cases`: each as the runner takes it (steps of a message and the gates its turn must pass)."""

    agent: str
    cases: list[CaseSpec]

    @classmethod
    def of(cls, agent: Agent, rows: Iterable[StoredEvalCase]) -> EvalCases:
        return cls(agent=agent.slug, cases=[row.spec() for row in rows])
