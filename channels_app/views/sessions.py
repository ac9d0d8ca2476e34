"""Sessions: create, follow up, stop, read, list, delete, and the one-time event dump."""
from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpResponse, HttpResponseBase
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from channels_app.doors import every_session_refused, is_operator
from channels_app.errors import APIError
from channels_app.bodies import (
    CreateSession, FollowUp, RuntimeOverlay, WorkspaceFile, checked_files, validate_body,
)
from channels_app.ownership import get_agent, get_owned_session, get_session_by_token
from channels_app.pagination import SessionCursorPagination, paginate
from channels_app.parsers import parse_flag, parse_start_index
from channels_app.ratelimits import MESSAGES, SESSIONS, check_rate
from channels_app.replies.sessions import (
    FollowUpAccepted, SessionCreated, SessionDetail, SessionLinks, SessionPage, SessionWithLastTurn, StopAccepted,
)
from channels_app.schema import (
    ALL_SESSIONS, BODY, EVENTS_PARAMETERS, NDJSON_EVENTS, RETRY_AFTER, SESSION, list_parameters, refusals,
)
from channels_app.stream import follow_up_start, streamed_form, turn_stream
from sessions.turn.admission import start_session, stop_session, submit_message
from sessions.retention.deletion import delete_session
from sessions.eventlog.events import read_lines
from sessions.models import Session, Turn


def session_links(request: Request, session: Session) -> dict[str, str]:
    origin = settings.AGENTSITE_PUBLIC_URL.rstrip("/") or request.build_absolute_uri("/").rstrip("/")
    return dict(SessionLinks.at(origin, session.agent.slug, session.id))


class StartsTurns(APIView):
    """A route that starts a turn: with `Accept: application/x-ndjson` or `text/event-stream`
    it answers with the turn's events (channels_app.stream.turn_stream). Refusals before
    that stay JSON: the negotiation settles on the JSON renderer instead of a 406."""

    def perform_content_negotiation(self, request, force=False):
        return super().perform_content_negotiation(
            request, force=force or streamed_form(request.headers.get("Accept", "")) is not None)


class SessionCreateView(StartsTurns):
    @extend_schema(
        summary="Create a session and start its first turn (or follow up with continuationToken)",
        request=CreateSession,
        parameters=[RETRY_AFTER],
        responses={
            201: OpenApiResponse(SessionCreated, description="A new session; its first turn is queued"),
            202: OpenApiResponse(FollowUpAccepted, description="With continuationToken: a follow-up was admitted"),
            **refusals(400, 401, 403, 404, 409, *BODY, 429),
        },
    )
    def post(self, request: Request, slug: str) -> HttpResponseBase:
        body: CreateSession = validate_body(CreateSession, request.data)
        agent = get_agent(slug)
        if body.continuation_token is not None:
            if body.runtime is not None:
                raise APIError(400, "runtime_overlay_refused", "runtime is chosen when a session is created: "
                                                               "a follow-up cannot change it")
            session = get_session_by_token(agent, body.continuation_token, request.user)
            return follow_up(request, session, body.message, body.continuation_token, body.admission,
                             body.workspace_files, body.model)
        options: dict[str, Any] = {}
        if body.dry_run:
            options["dryRun"] = True
        if body.as_of:
            options["asOf"] = body.as_of
        if body.purpose is not None:
            if not is_operator(request.user):
                raise APIError(403, "purpose_refused", "only operators and the loopback principal may start "
                                                      "sessions with a purpose (eval runs)")
            options["purpose"] = body.purpose
        files = list(body.workspace_files or [])
        if body.runtime is not None:
            files += RuntimeOverlay.admit(body.runtime, runtime_kind(agent), agent.slug).workspace_files
            options["runtime"] = "local"
        stored = sent_files(agent, files)
        check_rate(request.user, SESSIONS)
        admitted = start_session(agent, request.user, body.message, title=body.title or "", mode=body.mode,
                                 options=options, workspace_files=stored, model=body.model or "")
        session = admitted.session
        form = streamed_form(request.headers.get("Accept", ""))
        if form is not None:  # the new session's whole log so far is this turn's: from index 0
            return turn_stream(form, session, admitted.turn.id, 0, admitted.continuation_token)
        return Response(SessionCreated(
            session_id=session.id, continuation_token=admitted.continuation_token, turn_id=admitted.turn.id,
            status=session.status, mode=session.mode, model=session.bound_model, **session_links(request, session),
        ), status=201)


def runtime_kind(agent) -> str:
    """The kind of the agent's runtime as its active release declares it."""
    manifest = agent.active_deployment.manifest if agent.active_deployment else {}
    return (manifest.get("runtime") or {}).get("kind", "local")


def sent_files(agent, files: list[WorkspaceFile]) -> list[dict[str, Any]]:
    """workspaceFiles checked against the agent's runtime and the limits, as stored with the turn."""
    if files and runtime_kind(agent) != "local":
        raise APIError(400, "workspace_files_unsupported",
                       f"agent {agent.slug!r} runs on virtual_runtime: nothing can be sent into its workspace "
                       "(put the files in its filesystem)")
    return checked_files(files, "workspaceFiles")


def follow_up(request: Request, session: Session, message: str, token: str | None, admission: str,
              files: list[WorkspaceFile] | None = None, model: str | None = None) -> HttpResponseBase:
    stored = sent_files(session.agent, list(files or []))
    check_rate(request.user, MESSAGES)
    admitted = submit_message(session, message, admission=admission, continuation_token=token,
                              workspace_files=stored, model=model or "")
    form = streamed_form(request.headers.get("Accept", ""))
    if form is not None:
        turn = admitted.turn.id
        return turn_stream(form, admitted.session, turn, follow_up_start(session.id, turn),
                           admitted.continuation_token)
    return Response(FollowUpAccepted(
        session_id=session.id, continuation_token=admitted.continuation_token, turn_id=admitted.turn.id,
        status=admitted.session.status, admission=admission, **session_links(request, session),
    ), status=202)


class SessionMessageView(StartsTurns):
    @extend_schema(summary="Send a follow-up message", request=FollowUp, parameters=[RETRY_AFTER],
                   responses={202: FollowUpAccepted, **refusals(*SESSION, 409, *BODY, 429)})
    def post(self, request: Request, slug: str, session_id: str) -> HttpResponseBase:
        body: FollowUp = validate_body(FollowUp, request.data)
        session = get_owned_session(slug, session_id, request.user)
        return follow_up(request, session, body.message, body.continuation_token, body.admission,
                         body.workspace_files, body.model)


class SessionStopView(APIView):
    @extend_schema(summary="Interrupt the running turn", request=None,
                   responses={202: StopAccepted, **refusals(*SESSION, 409)})
    def post(self, request: Request, slug: str, session_id: str) -> Response:
        session = get_owned_session(slug, session_id, request.user, operators=True)
        if not stop_session(session, by=request.user):
            raise APIError(409, "not_running", "no turn is running on this session")
        return Response(StopAccepted(session_id=session.id, stopping=True), status=202)


class SessionDetailView(APIView):
    @extend_schema(summary="Session detail, with its newest turn and where that turn's time went",
                   responses={200: SessionWithLastTurn, **refusals(*SESSION)})
    def get(self, request: Request, slug: str, session_id: str) -> Response:
        session = get_owned_session(slug, session_id, request.user, operators=True)
        return Response(SessionWithLastTurn.with_turn(session, Turn.objects.latest_of(session.id)))

    @extend_schema(summary="Delete a session and its events",
                   responses={204: OpenApiResponse(description="Deleted"), **refusals(*SESSION)})
    def delete(self, request: Request, slug: str, session_id: str) -> Response:
        delete_session(get_owned_session(slug, session_id, request.user, operators=True), by=request.user)
        return Response(status=204)


class SessionListView(APIView):
    @extend_schema(
        summary="The caller's sessions, newest first (with all=1, an operator's view: every session of the agent)",
        parameters=[*list_parameters("Sessions", 20), ALL_SESSIONS],
        responses={200: SessionPage, **refusals(400, 401, 403, 404)},
    )
    def get(self, request: Request, slug: str) -> Response:
        every = parse_flag(request.query_params.get("all"), "all")
        if every and not is_operator(request.user):
            raise every_session_refused()
        agent = get_agent(slug)
        rows = Session.objects.all() if every else Session.objects.for_principal(request.user)
        rows = rows.filter(agent=agent).select_related("agent", "deployment")
        return paginate(SessionCursorPagination, rows, request, self, SessionDetail.of)


class SessionEventsView(APIView):
    @extend_schema(summary="All events from startIndex, as NDJSON, once", parameters=EVENTS_PARAMETERS,
                   responses={**NDJSON_EVENTS, **refusals(*SESSION)})
    def get(self, request: Request, slug: str, session_id: str) -> HttpResponse:
        session = get_owned_session(slug, session_id, request.user, operators=True)
        start = parse_start_index(request.query_params.get("startIndex"))
        lines = "".join(f"{line.json}\n" for line in read_lines(session.id, start))
        return HttpResponse(lines, content_type="application/x-ndjson")
