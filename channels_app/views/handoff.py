"""A session's handoff to another model: its review (GET) and the handoff itself (POST).

Who may: the session's owner and operators, as for the session's detail.
The views translate; `sessions.handoff` decides and does.
"""
from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from pydantic import Field
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from channels_app.bodies import NO_NUL, TEXT, Body, validate_body
from channels_app.errors import APIError
from channels_app.ownership import get_owned_session
from channels_app.ratelimits import MESSAGES, check_rate
from channels_app.replies.handoff import HandoffDone, HandoffRecord, HandoffReview
from channels_app.replies.sessions import SessionWithLastTurn
from channels_app.schema import BODY, RETRY_AFTER, SESSION, refusals
from sessions.handoff import perform, review
from sessions.models import Session, Turn

MODEL_ID_MAX = 200


class HandoffRequest(Body):
    to: str = Field(min_length=1, max_length=MODEL_ID_MAX, json_schema_extra=TEXT)
    review_id: str = Field(min_length=1, max_length=64, json_schema_extra=TEXT)


TO = OpenApiParameter("to", {"type": "string", "minLength": 1, "maxLength": MODEL_ID_MAX, "pattern": NO_NUL},
                      required=True, description="The model to review a handoff to, e.g. openai:gpt-4.1-mini")


def model_query(request: Request) -> str:
    to = request.query_params.get("to")
    if not to:
        raise APIError(400, "missing_to", "name the model to hand the session over to: ?to=provider:model")
    if len(to) > MODEL_ID_MAX or "\x00" in to:
        raise APIError(400, "invalid_request", f"to: a model id of at most {MODEL_ID_MAX} characters, "
                                               "like provider:model")
    return to


class SessionHandoffView(APIView):
    @extend_schema(summary="Review a handoff of the session to another model (changes nothing)", parameters=[TO],
                   responses={200: HandoffReview, **refusals(*SESSION)})
    def get(self, request: Request, slug: str, session_id: str) -> Response:
        session = get_owned_session(slug, session_id, request.user, operators=True)
        to = model_query(request)
        return Response(HandoffReview.of(review(session, to)))

    @extend_schema(
        summary="Hand the session over to another model, as reviewed: all of it or nothing",
        request=HandoffRequest,
        parameters=[RETRY_AFTER],
        responses={
            200: OpenApiResponse(HandoffDone, description="Done: the next turn runs on the new model"),
            **refusals(*SESSION, 409, 424, *BODY, 429, 502),
        },
    )
    def post(self, request: Request, slug: str, session_id: str) -> Response:
        body: HandoffRequest = validate_body(HandoffRequest, request.data)
        session = get_owned_session(slug, session_id, request.user, operators=True)
        check_rate(request.user, MESSAGES)  # each handoff asks the target about the whole history
        row = perform(session, body.to, body.review_id, by=request.user)
        session = Session.objects.select_related("agent", "deployment").get(pk=session.pk)
        return Response(HandoffDone(handoff=HandoffRecord.of(row),
                                    session=SessionWithLastTurn.with_turn(session, Turn.objects.latest_of(session.pk))))
