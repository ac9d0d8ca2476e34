"""The built-in HTTP channel: JSON routes under /<slug>/v1/.

Views translate HTTP into arguments and call one function of the sessions
app; the streaming route lives in `stream.py` (it is async).
"""
from __future__ import annotations

import base64
import json
import re
from datetime import datetime, timezone
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.http import HttpResponse, JsonResponse
from drf_spectacular.utils import OpenApiParameter, extend_schema
from pydantic import BaseModel
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.models import Agent
from channels_app.bodies import ApprovalDecision, CreateReminder, CreateSession, FollowUp, ToolCallBody, validate_body
from channels_app.errors import APIError
from channels_app.parsers import load_json, parse_count
from sessions.admission import delete_session, start_session, stop_session, submit_message
from sessions.approvals import pending_approvals, resolve_approval
from sessions.direct import call_tool
from sessions.events import read_events
from sessions.models import Reminder, Schedule, Session
from sessions.timers import TimerError, cancel_reminder, create_reminder, fire_reminder_now, fire_schedule_now


def parse_body(model: type[BaseModel], request: Request) -> Any:
    return validate_body(model, request.data)


def get_agent(slug: str) -> Agent:
    agent = Agent.objects.select_related("active_deployment").filter(slug=slug).first()
    if agent is None:
        raise APIError(404, "agent_not_found", f"no agent {slug!r} on this server")
    return agent


def get_owned_session(slug: str, session_id: str, principal) -> Session:
    """The session, if it belongs to this agent (404) and to the caller (403)."""
    session = Session.objects.select_related("agent", "deployment").filter(pk=session_id, agent__slug=slug).first()
    if session is None:
        get_agent(slug)
        raise APIError(404, "session_not_found", f"no session {session_id!r} on agent {slug!r}")
    if not session.is_owned_by(principal):
        raise APIError(403, "forbidden", "this session belongs to another principal")
    return session


def iso(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


def session_urls(request: Request, session: Session) -> dict[str, str]:
    base = f"/{session.agent.slug}/v1/session/{session.id}"
    origin = settings.AGENTSITE_PUBLIC_URL.rstrip("/") or request.build_absolute_uri("/").rstrip("/")
    return {
        "streamUrl": f"{origin}{base}/stream",
        "eventsUrl": f"{origin}{base}/events",
        "playgroundUrl": f"{origin}/playground/{session.agent.slug}?sessionId={session.id}",
    }


def render_session(session: Session) -> dict[str, Any]:
    return {
        "sessionId": session.id,
        "agent": session.agent.slug,
        "status": session.status,
        "mode": session.mode,
        "title": session.title,
        "channel": session.channel,
        "principal": {
            "authenticator": session.authenticator,
            "principalId": session.principal_id,
            "principalType": session.principal_type,
        },
        "usage": session.usage,
        "options": session.options,
        "abVariants": {},
        "deployment": {"version": session.deployment.version, "contentHash": session.deployment.content_hash},
        "activeTurnId": session.active_turn_id,
        "lastEventIndex": session.next_event_index - 1,
        "createdAt": iso(session.created_at),
        "updatedAt": iso(session.updated_at),
    }


def _start_index(request: Request) -> int:
    value = parse_count(request.query_params.get("startIndex", "0"))
    if value is None:
        raise APIError(400, "invalid_start_index", "startIndex must be a non-negative integer")
    return value


class AgentListView(APIView):
    @extend_schema(summary="The agents on this server", responses={200: dict})
    def get(self, request: Request) -> Response:
        agents = Agent.objects.select_related("active_deployment").exclude(active_deployment=None)
        return Response({"agents": [
            {
                "slug": a.slug,
                "name": a.name or a.slug,
                "description": a.description,
                "model": a.model_id,
                "deployment": {"version": a.active_deployment.version, "contentHash": a.active_deployment.content_hash},
            }
            for a in agents
        ]})


class SessionCreateView(APIView):
    @extend_schema(
        summary="Create a session and start its first turn (or follow up with continuationToken)",
        request=CreateSession, responses={201: dict, 202: dict},
    )
    def post(self, request: Request, slug: str) -> Response:
        body: CreateSession = parse_body(CreateSession, request)
        agent = get_agent(slug)
        if body.continuation_token is not None:
            session_id = Session.id_from_token(body.continuation_token)
            session = Session.objects.select_related("agent", "deployment").filter(pk=session_id or "", agent=agent).first()
            if session is None:
                raise APIError(404, "session_not_found", "no session on this agent matches that continuation token")
            if not session.is_owned_by(request.user):
                raise APIError(403, "forbidden", "this session belongs to another principal")
            return follow_up(request, session, body.message, body.continuation_token, body.admission)
        options: dict[str, Any] = {}
        if body.dry_run:
            options["dryRun"] = True
        if body.as_of:
            options["asOf"] = body.as_of
        admitted = start_session(agent, request.user, body.message, title=body.title or "", mode=body.mode, options=options)
        session = admitted.session
        return Response(
            {
                "sessionId": session.id,
                "continuationToken": admitted.continuation_token,
                "turnId": admitted.turn.id,
                "status": session.status,
                "mode": session.mode,
                **session_urls(request, session),
            },
            status=201,
        )


def follow_up(request: Request, session: Session, message: str, token: str | None, admission: str) -> Response:
    admitted = submit_message(session, message, admission=admission, continuation_token=token)
    return Response(
        {
            "sessionId": session.id,
            "continuationToken": admitted.continuation_token,
            "turnId": admitted.turn.id,
            "status": admitted.session.status,
            "admission": admission,
            **session_urls(request, session),
        },
        status=202,
    )


class SessionMessageView(APIView):
    @extend_schema(summary="Send a follow-up message", request=FollowUp, responses={202: dict})
    def post(self, request: Request, slug: str, session_id: str) -> Response:
        body: FollowUp = parse_body(FollowUp, request)
        session = get_owned_session(slug, session_id, request.user)
        return follow_up(request, session, body.message, body.continuation_token, body.admission)


class SessionStopView(APIView):
    @extend_schema(summary="Interrupt the running turn", request=None, responses={202: dict, 409: dict})
    def post(self, request: Request, slug: str, session_id: str) -> Response:
        session = get_owned_session(slug, session_id, request.user)
        if not stop_session(session):
            raise APIError(409, "not_running", "no turn is running on this session")
        return Response({"sessionId": session.id, "stopping": True}, status=202)


class SessionDetailView(APIView):
    @extend_schema(summary="Session detail", responses={200: dict})
    def get(self, request: Request, slug: str, session_id: str) -> Response:
        return Response(render_session(get_owned_session(slug, session_id, request.user)))

    @extend_schema(summary="Delete a session and its events", responses={204: None})
    def delete(self, request: Request, slug: str, session_id: str) -> Response:
        delete_session(get_owned_session(slug, session_id, request.user))
        return Response(status=204)


CURSOR_SESSION_ID = re.compile(r"[A-Za-z0-9_]{1,40}")


def _decode_cursor(raw: str) -> tuple[datetime, str]:
    """The (created_at, id) a cursor points after; anything else a client makes up is a 400."""
    try:
        created, session_id = load_json(base64.urlsafe_b64decode(raw.encode() + b"==").decode(), "cursor")
        instant = datetime.fromisoformat(created)
        # Near year 1 or 9999 an offset pushes the instant out of range once it is made UTC.
        instant = instant.astimezone(timezone.utc) if instant.tzinfo else None
    except (ValueError, TypeError, OverflowError):  # JSONRefused, UnicodeError and binascii.Error are ValueErrors
        instant = session_id = None
    if instant is None or not isinstance(session_id, str) or not CURSOR_SESSION_ID.fullmatch(session_id):
        raise APIError(400, "invalid_cursor", "cursor is not one this server issued")
    return instant, session_id


def _encode_cursor(session: Session) -> str:
    raw = json.dumps([session.created_at.isoformat(), session.id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


class SessionListView(APIView):
    @extend_schema(
        summary="The caller's sessions, newest first",
        parameters=[OpenApiParameter("cursor", str), OpenApiParameter("limit", int)],
        responses={200: dict},
    )
    def get(self, request: Request, slug: str) -> Response:
        agent = get_agent(slug)
        limit = parse_count(request.query_params.get("limit", "20")) or 0
        if not 1 <= limit <= 100:
            raise APIError(400, "invalid_limit", "limit must be an integer from 1 to 100")
        rows = (
            Session.objects.for_principal(request.user)
            .filter(agent=agent)
            .select_related("agent", "deployment")
            .order_by("-created_at", "-id")
        )
        if cursor := request.query_params.get("cursor"):
            created, session_id = _decode_cursor(cursor)
            rows = rows.filter(Q(created_at__lt=created) | Q(created_at=created, id__lt=session_id))
        page = list(rows[: limit + 1])
        more = len(page) > limit
        page = page[:limit]
        return Response({
            "sessions": [render_session(s) for s in page],
            "nextCursor": _encode_cursor(page[-1]) if more else None,
        })


class SessionEventsView(APIView):
    @extend_schema(
        summary="All events from startIndex, as NDJSON, once",
        parameters=[OpenApiParameter("startIndex", int)],
        responses={(200, "application/x-ndjson"): str},
    )
    def get(self, request: Request, slug: str, session_id: str) -> HttpResponse:
        session = get_owned_session(slug, session_id, request.user)
        start = _start_index(request)
        lines = "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in read_events(session.id, start))
        return HttpResponse(lines, content_type="application/x-ndjson")


class AgentInfoView(APIView):
    @extend_schema(summary="The agent: model, tools with their input schemas, deployment", responses={200: dict})
    def get(self, request: Request, slug: str) -> Response:
        agent = get_agent(slug)
        deployment = agent.active_deployment
        manifest = deployment.manifest if deployment else {}
        schedule_state = {
            s.schedule_id: {"nextFireAt": iso(s.next_fire_at), "lastFiredAt": iso(s.last_fired_at), "fireCount": s.fire_count}
            for s in Schedule.objects.filter(agent=agent, active=True)
        }
        return Response({
            "slug": agent.slug,
            "name": agent.name or agent.slug,
            "description": agent.description,
            "model": manifest.get("model", ""),
            "params": manifest.get("params", {}),
            "maxSteps": manifest.get("maxSteps"),
            "tools": manifest.get("tools", []),
            "skills": manifest.get("skills", []),
            "subagents": manifest.get("subagents", []),
            "channels": [{"id": "http", "kind": "http"}],
            "schedules": [
                {**s, **schedule_state.get(s["id"], {})} for s in manifest.get("schedules", [])
            ],
            "abs": [],
            "deployment": {
                "version": deployment.version,
                "contentHash": deployment.content_hash,
                "source": deployment.source,
                "status": deployment.status,
                "createdAt": iso(deployment.created_at),
                "activatedAt": iso(deployment.activated_at),
            } if deployment else None,
        })


class AgentHealthView(APIView):
    authentication_classes: list = []
    permission_classes: list = []

    @extend_schema(summary="Liveness of one agent", responses={200: dict})
    def get(self, request: Request, slug: str) -> Response:
        agent = get_agent(slug)
        return Response({"status": "ok", "agent": agent.slug, "deployed": agent.active_deployment_id is not None})


def healthz(request) -> JsonResponse:
    return JsonResponse({"status": "ok"})


def render_approval(row) -> dict[str, Any]:
    return {
        "callId": row.call_id,
        "toolName": row.tool,
        "input": row.input,
        "status": row.status,
        "turnId": row.turn_id,
        "decidedBy": row.decided_by,
        "reason": row.reason,
        "requestedAt": iso(row.created_at),
    }


class ApprovalListView(APIView):
    @extend_schema(summary="Tool calls parked for approval", responses={200: dict})
    def get(self, request: Request, slug: str, session_id: str) -> Response:
        session = get_owned_session(slug, session_id, request.user)
        return Response({"approvals": [render_approval(r) for r in pending_approvals(session)]})


class ApprovalResolveView(APIView):
    @extend_schema(summary="Approve or deny a parked tool call", request=ApprovalDecision, responses={200: dict})
    def post(self, request: Request, slug: str, session_id: str, call_id: str) -> Response:
        body: ApprovalDecision = parse_body(ApprovalDecision, request)
        session = get_owned_session(slug, session_id, request.user)
        row = resolve_approval(session, call_id, body.decision, request.user, body.reason)
        return Response(render_approval(row))


class ToolCallView(APIView):
    @extend_schema(
        summary="Call a server tool deterministically, without a model turn",
        request=ToolCallBody, responses={200: dict, 202: dict, 400: dict, 403: dict, 409: dict, 422: dict},
    )
    def post(self, request: Request, slug: str, tool_name: str) -> Response:
        body: ToolCallBody = parse_body(ToolCallBody, request)
        agent = get_agent(slug)
        session = get_owned_session(slug, body.session_id, request.user) if body.session_id else None
        result = call_tool(agent, tool_name, body.input, session=session)
        # A needs_approval tool bound to a session parks until someone decides it.
        return Response(result, status=202 if result.get("status") == "awaiting_approval" else 200)


def render_reminder(r: Reminder) -> dict[str, Any]:
    return {
        "reminderId": r.id,
        "sessionId": r.session_id,
        "title": r.title,
        "kind": r.kind,
        "spec": r.spec,
        "form": "run" if r.is_run_form else "prompt",
        "prompt": r.prompt,
        "until": r.until,
        "status": r.status,
        "reason": r.reason,
        "fireCount": r.fire_count,
        "nextFireAt": iso(r.next_fire_at),
        "lastFiredAt": iso(r.last_fired_at),
        "createdAt": iso(r.created_at),
    }


class SessionRemindersView(APIView):
    @extend_schema(summary="The session's reminders", responses={200: dict})
    def get(self, request: Request, slug: str, session_id: str) -> Response:
        session = get_owned_session(slug, session_id, request.user)
        rows = Reminder.objects.filter(session=session).order_by("-created_at")
        return Response({"reminders": [render_reminder(r) for r in rows]})

    @extend_schema(summary="Set a reminder that wakes the session with a prompt", request=CreateReminder,
                   responses={201: dict})
    def post(self, request: Request, slug: str, session_id: str) -> Response:
        body: CreateReminder = parse_body(CreateReminder, request)
        session = get_owned_session(slug, session_id, request.user)
        try:
            reminder = create_reminder(session, delay=body.delay, every=body.every, cron=body.cron, prompt=body.prompt,
                                       until=body.until, title=body.title, created_by=request.user.as_dict())
        except TimerError as exc:
            raise APIError(exc.status, exc.code, str(exc)) from None
        return Response(render_reminder(reminder), status=201)


def get_owned_reminder(slug: str, reminder_id: str, principal) -> Reminder:
    reminder = Reminder.objects.select_related("session").filter(pk=reminder_id, agent__slug=slug).first()
    if reminder is None:
        get_agent(slug)
        raise APIError(404, "reminder_not_found", f"no reminder {reminder_id!r} on agent {slug!r}")
    if reminder.session is None or not reminder.session.is_owned_by(principal):
        raise APIError(403, "forbidden", "this reminder belongs to another principal's session")
    return reminder


class ReminderView(APIView):
    @extend_schema(summary="Cancel a reminder", responses={204: None, 409: dict})
    def delete(self, request: Request, slug: str, reminder_id: str) -> Response:
        reminder = get_owned_reminder(slug, reminder_id, request.user)
        if not cancel_reminder(reminder, "cancelled"):
            raise APIError(409, "reminder_not_armed", f"reminder {reminder_id!r} already ended ({reminder.status})")
        return Response(status=204)


def require_dev_mode() -> None:
    if not settings.AGENTSITE_DEV:
        raise APIError(403, "dev_mode_required", "this route fires timers by hand and exists only under `serve --dev`")


class DevScheduleFireView(APIView):
    @extend_schema(summary="Dev mode: fire a schedule now, exactly once", request=None, responses={200: dict})
    def post(self, request: Request, slug: str, schedule_id: str) -> Response:
        require_dev_mode()
        agent = get_agent(slug)
        schedule = Schedule.objects.select_related("agent__active_deployment").filter(
            agent=agent, schedule_id=schedule_id, active=True).first()
        if schedule is None:
            raise APIError(404, "schedule_not_found", f"agent {slug!r} has no schedule {schedule_id!r}")
        session_ids = fire_schedule_now(schedule)
        if session_ids is None:
            raise APIError(409, "already_fired", "this firing was just taken by another caller; try again")
        return Response({"scheduleId": schedule_id, "sessionIds": session_ids})


class DevReminderListView(APIView):
    @extend_schema(summary="Dev mode: the caller's armed reminders on this agent", responses={200: dict})
    def get(self, request: Request, slug: str) -> Response:
        require_dev_mode()
        agent = get_agent(slug)
        owned = Session.objects.for_principal(request.user).filter(agent=agent)
        rows = Reminder.objects.filter(session__in=owned, status=Reminder.Status.ARMED)
        return Response({"reminders": [render_reminder(r) for r in rows]})


class DevReminderFireView(APIView):
    @extend_schema(summary="Dev mode: fire a reminder now, exactly once", request=None, responses={200: dict})
    def post(self, request: Request, slug: str, reminder_id: str) -> Response:
        require_dev_mode()
        reminder = get_owned_reminder(slug, reminder_id, request.user)
        try:
            fired = fire_reminder_now(reminder)
        except TimerError as exc:
            raise APIError(exc.status, exc.code, str(exc)) from None
        if not fired:
            raise APIError(409, "reminder_not_armed", f"reminder {reminder_id!r} is not armed ({reminder.status})")
        reminder.refresh_from_db()
        return Response(render_reminder(reminder))
