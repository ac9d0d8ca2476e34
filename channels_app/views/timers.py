"""Reminders bound to a session, and the dev-mode routes that fire timers by hand."""
from __future__ import annotations

from django.conf import settings
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from channels_app.bodies import CreateReminder, validate_body
from channels_app.errors import APIError
from channels_app.ownership import get_agent, get_owned_reminder, get_owned_session
from channels_app.pagination import ArmedReminderPages, ReminderPages, paginate
from channels_app.replies.timers import Reminder, ReminderList, ScheduleFired
from channels_app.schema import BODY, SESSION, list_parameters, refusals
from sessions.models import Reminder as ReminderRow, Schedule, Session
from sessions.timers.schedules import TimerError, cancel_reminder, create_reminder, fire_reminder_now, fire_schedule_now


class SessionRemindersView(APIView):
    @extend_schema(summary="The session's reminders (operators: any session's)",
                   parameters=list_parameters("Reminders", 100), responses={200: ReminderList, **refusals(*SESSION)})
    def get(self, request: Request, slug: str, session_id: str) -> Response:
        session = get_owned_session(slug, session_id, request.user, operators=True)
        return paginate(ReminderPages, ReminderRow.objects.filter(session=session), request, self, Reminder.of)

    @extend_schema(summary="Set a reminder that wakes the session with a prompt", request=CreateReminder,
                   responses={201: Reminder, **refusals(*SESSION, 409, *BODY)})
    def post(self, request: Request, slug: str, session_id: str) -> Response:
        body: CreateReminder = validate_body(CreateReminder, request.data)
        session = get_owned_session(slug, session_id, request.user)
        try:
            reminder = create_reminder(session, delay=body.delay, every=body.every, cron=body.cron, prompt=body.prompt,
                                       until=body.until, title=body.title, created_by=request.user.as_dict())
        except TimerError as exc:
            raise APIError(exc.status, exc.code, str(exc)) from None
        return Response(Reminder.of(reminder), status=201)


class ReminderView(APIView):
    @extend_schema(summary="Cancel a reminder (operators: any session's, recorded there as operator.acted)",
                   responses={204: OpenApiResponse(description="Cancelled"), **refusals(*SESSION, 409)})
    def delete(self, request: Request, slug: str, reminder_id: str) -> Response:
        reminder = get_owned_reminder(slug, reminder_id, request.user, operators=True)
        if not cancel_reminder(reminder, "cancelled", by=request.user):
            raise APIError(409, "reminder_not_armed", f"reminder {reminder_id!r} already ended ({reminder.status})")
        return Response(status=204)


def require_dev_mode() -> None:
    if not settings.AGENTSITE_DEV:
        raise APIError(403, "dev_mode_required", "this route fires timers by hand and exists only under `serve --dev`")


class DevScheduleFireView(APIView):
    @extend_schema(summary="Dev mode: fire a schedule now, exactly once", request=None,
                   responses={200: ScheduleFired, **refusals(*SESSION, 409)})
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
        return Response(ScheduleFired(schedule_id=schedule_id, session_ids=session_ids))


class DevReminderListView(APIView):
    @extend_schema(summary="Dev mode: the caller's armed reminders on this agent",
                   parameters=list_parameters("Reminders", 100), responses={200: ReminderList, **refusals(*SESSION)})
    def get(self, request: Request, slug: str) -> Response:
        require_dev_mode()
        agent = get_agent(slug)
        owned = Session.objects.for_principal(request.user).filter(agent=agent)
        rows = ReminderRow.objects.filter(session__in=owned, status=ReminderRow.Status.ARMED)
        return paginate(ArmedReminderPages, rows, request, self, Reminder.of)


class DevReminderFireView(APIView):
    @extend_schema(summary="Dev mode: fire a reminder now, exactly once", request=None,
                   responses={200: Reminder, **refusals(*SESSION, 409)})
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
        return Response(Reminder.of(reminder))
