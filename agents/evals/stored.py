"""Eval cases kept as data (in the admin, beside an agent) instead of in a folder's Python files.

A stored case is a conversation written down: steps, each a message (with
files for the workspace, if any) and the gates its turn must pass. The gates
are the ones a folder case calls on its trial: `succeeded`, `calledTool`,
`notCalledTool`, and the reply checked with `replyIncludes` (text) or
`replyMatches` (a regular expression). So the people who shape a console
agent can also say what it must do, and `manage.py eval --url … --agent SLUG`
runs those cases exactly as it runs a folder's (read over REST by `agents.evals.runner.fetch_cases`).

`CaseSpec` is the one check of a stored case (the admin's form and the REST
route both use it); its problems name the field, as the console's agent spec does.
"""
from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator

from agents.evals.cases import EvalCase
from agents.evals.gates import includes

CASE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
MAX_STEPS = 50
MAX_MESSAGE = 100_000  # the server's own bound on a message (AGENTSITE_MAX_MESSAGE_CHARS' default)
SOURCE = "(kept in the admin)"  # what a stored case shows where a folder case shows its file


def _storable(value: str) -> str:
    if "\x00" in value:
        raise ValueError("a NUL character cannot be stored: remove it")
    return value


Text = Annotated[str, AfterValidator(_storable)]


class _Gate(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Succeeded(_Gate):
    gate: Literal["succeeded"]


class _ToolGate(_Gate):
    tool: Text = Field(min_length=1, max_length=200)


class CalledTool(_ToolGate):
    gate: Literal["calledTool"]


class NotCalledTool(_ToolGate):
    gate: Literal["notCalledTool"]


class ReplyIncludes(_Gate):
    gate: Literal["replyIncludes"]
    text: Text = Field(min_length=1, max_length=2000)


class ReplyMatches(_Gate):
    gate: Literal["replyMatches"]
    pattern: Text = Field(min_length=1, max_length=2000)

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as error:
            raise ValueError(f"not a regular expression ({error}): write it as Python's re module reads it")
        return value


Gate = Annotated[Union[Succeeded, CalledTool, NotCalledTool, ReplyIncludes, ReplyMatches],
                 Field(discriminator="gate")]


class Step(BaseModel):
    model_config = ConfigDict(extra="forbid")

    message: Text = Field(min_length=1, max_length=MAX_MESSAGE)
    files: dict[Text, Text] = Field(default_factory=dict, description="workspace files sent with the message: "
                                                                       "path → text")
    expect: list[Gate] = Field(default_factory=list, max_length=50)


class CaseSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    description: Text = Field(default="", max_length=2000)
    tags: list[Annotated[Text, Field(min_length=1, max_length=50)]] = Field(default_factory=list, max_length=20)
    steps: list[Step] = Field(min_length=1, max_length=MAX_STEPS)

    @field_validator("id")
    @classmethod
    def _plain_id(cls, value: str) -> str:
        if not CASE_ID.match(value):
            raise ValueError("a case id is 1 to 100 letters, digits, '.', '_' or '-', starting with a letter or "
                             "digit (for example refund-over-limit)")
        return value


class CaseList(BaseModel):
    """An agent's whole set of stored cases, as `PUT /v1/agents/<slug>/eval-cases` takes it."""

    model_config = ConfigDict(extra="forbid")

    cases: list[CaseSpec] = Field(max_length=1000)

    @field_validator("cases")
    @classmethod
    def _ids_once(cls, cases: list[CaseSpec]) -> list[CaseSpec]:
        seen: set[str] = set()
        for case in cases:
            if case.id in seen:
                raise ValueError(f"two cases are named {case.id!r}: give each case its own id")
            seen.add(case.id)
        return cases


def problems(error: ValidationError) -> list[dict[str, str]]:
    """Each problem as {field, message}, the field written as a path (`steps.0.expect.1.tool`)."""
    return [{"field": ".".join(str(part) for part in problem["loc"]) or "case",
             "message": problem["msg"].removeprefix("Value error, ")} for problem in error.errors()]


def as_eval_case(spec: CaseSpec) -> EvalCase:
    """The case as the eval runner runs a folder's; each step's gates are on that step's own turn."""
    steps = tuple(spec.steps)

    def test(t: Any) -> None:
        for step in steps:
            since = len(t.events)
            t.send(step.message, step.files or None)
            for gate in step.expect:
                _apply(t, gate, since)

    return EvalCase(id=spec.id, file=SOURCE, test=test, tags=tuple(spec.tags), description=spec.description)


def _apply(t: Any, gate: Any, since: int) -> None:
    if isinstance(gate, Succeeded):
        t.succeeded()
    elif isinstance(gate, CalledTool):
        t.called_tool(gate.tool, since=since)
    elif isinstance(gate, NotCalledTool):
        t.not_called_tool(gate.tool, since=since)
    elif isinstance(gate, ReplyIncludes):
        t.check(t.reply, includes(gate.text))
    else:
        t.check(t.reply, includes(re.compile(gate.pattern)))
