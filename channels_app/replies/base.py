"""What every body shares: the `Reply` base, a page of a list, the error body, and the renderer."""
from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel
from rest_framework import renderers

from channels_app.described import JSONValue


class Reply(BaseModel):
    # defer_build: a reply's serializer is built when a view first writes one, not as the process starts.
    model_config = ConfigDict(alias_generator=to_camel, validate_by_name=True, serialize_by_alias=True,
                              json_schema_serialization_defaults_required=True, defer_build=True)
    # Fields left unset are left out of the body (results whose keys depend on the outcome).
    omit_unset: ClassVar[bool] = False


class JSONRenderer(renderers.JSONRenderer):
    """DRF's JSON renderer, which also writes a `Reply` (by alias, straight from pydantic-core)."""

    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        if isinstance(data, Reply):
            return data.model_dump_json(exclude_unset=data.omit_unset).encode()
        return super().render(data, accepted_media_type, renderer_context)


class Page(Reply):
    """A list paged after clients had it whole: `nextCursor` comes only when another page follows,
    so the body of a list that fits one page is what it always was."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=False)
    omit_unset: ClassVar[bool] = True  # every field of the items is set by their `of`


# -- errors: every route's refusal (channels_app.errors writes it) ---------------------------

class ErrorDetail(Reply):
    code: str
    message: str
    # Free-form, by code: for `invalid_request` a list of {field, message, type}; often null.
    details: JSONValue = None


class ErrorBody(Reply):
    """Every refusal: `{"error": {"code", "message", "details"}}`."""

    error: ErrorDetail
