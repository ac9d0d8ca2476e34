"""The body of the eval-case routes: an agent's cases kept in the admin."""
from __future__ import annotations

from typing import Iterable

from pydantic import ValidationError

from agents.evals.stored import CaseSpec
from agents.models import Agent, StoredEvalCase
from channels_app.errors import APIError
from channels_app.replies.base import Reply


class EvalCases(Reply):
    """`cases`: each as the runner takes it (steps of a message and the gates its turn must pass)."""

    agent: str
    cases: list[CaseSpec]

    @classmethod
    def of(cls, agent: Agent, rows: Iterable[StoredEvalCase]) -> EvalCases:
        cases = []
        for row in rows:
            try:
                cases.append(row.spec())
            except ValidationError as exc:  # written past the checks (by hand in the database): named, not a 500
                raise APIError(409, "invalid_eval_case", f"eval case {row.case_id!r} of {agent.slug!r} does not "
                               f"validate: fix it in the admin ({exc.error_count()} problem(s): "
                               f"{exc.errors()[0]['msg']})") from None
        return cls(agent=agent.slug, cases=cases)
