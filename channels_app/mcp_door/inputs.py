"""`ask`'s arguments, checked as the HTTP routes check their bodies."""
from __future__ import annotations

from typing import Any

from pydantic import Field

from channels_app.asking import checked as checked_as
from channels_app.bodies import MessageBody


class AskInput(MessageBody):
    """`ask`'s arguments on `/<slug>/mcp`, checked as `POST /<slug>/v1/session` checks its body."""

    session_id: str | None = Field(default=None, min_length=1, max_length=64)
    continuation_token: str | None = Field(default=None, min_length=1, max_length=200)


class AskAnyInput(AskInput):
    """`ask`'s arguments on `/mcp`: which agent too."""

    agent: str = Field(min_length=1, max_length=64)


def checked(arguments: dict[str, Any], model: type[AskInput]) -> AskInput:
    """The arguments as `model`, else the 400 the HTTP route gives (`invalid_text`, `invalid_request`)."""
    return checked_as(model, arguments, "arguments")
