"""`ask_question`: the model stops and asks the person, and their answer is the call's result.

A question is a tool call that waits like one gated for approval (`Tool.question`): stored as
`awaiting_approval`, announced with `action.approval_requested` (`kind: "question"`), the turn parked
until it is answered (sessions.turn.approvals.answer_question), so it survives restarts and a Stop
ends it like any parked turn. The function below never runs: the answer is the output.
"""
from __future__ import annotations

from pydantic import BaseModel, Field, field_validator

MAX_OPTIONS = 10


class AskQuestionInput(BaseModel):
    question: str = Field(min_length=1, max_length=2000, description="The question, in a sentence or two")
    options: list[str] | None = Field(
        default=None, max_length=MAX_OPTIONS,
        description=f"Answers to choose from (at most {MAX_OPTIONS}), the one you recommend first; the person may "
                    "also answer in their own words. Leave out for an open question")

    @field_validator("options")
    @classmethod
    def distinct_short_options(cls, options: list[str] | None) -> list[str] | None:
        if options is None:
            return None
        cleaned = [option.strip() for option in options]
        if any(not option or len(option) > 200 for option in cleaned):
            raise ValueError("each option is 1 to 200 characters")
        if len(set(cleaned)) != len(cleaned):
            raise ValueError("options must differ from each other")
        return cleaned or None


def ask_question(input: AskQuestionInput, ctx) -> str:
    raise RuntimeError("a question is answered by a person, not run")


DESCRIPTION = ("Ask the person a question and wait for their answer, which is this call's result. Use it when "
               "you cannot go on without a decision or a fact only they have, not for things you can find out. "
               "Ask one thing at a time; offer options when the answer is one of a few.")
