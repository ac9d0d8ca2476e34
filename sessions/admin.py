"""The operators' console: sessions with their turns, tool calls and events.

History is read-only: events, turns and tool calls are shown, never edited,
since changing them would falsify what happened. Operators can stop a
running turn, delete sessions, and approve or deny parked tool calls.
"""
from django.contrib import admin, messages
from django.utils.html import format_html

from channels_app.auth import Principal
from sessions.admission import delete_session, interrupt, stop_session
from sessions.approvals import resolve_approval
from sessions.models import Event, Reminder, Schedule, Session, ToolCall, Turn
from sessions.timers import cancel_reminder


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


class EventInline(ReadOnlyInline):
    """A session's events in index order."""

    model = Event
    fields = ("index", "type", "turn_id", "at", "data")
    readonly_fields = fields
    ordering = ("index",)
    show_change_link = False


class TurnInline(ReadOnlyInline):
    model = Turn
    fields = ("id", "trigger", "status", "claimed_by", "started_at", "ended_at", "error")
    readonly_fields = fields


class ToolCallInline(ReadOnlyInline):
    model = ToolCall
    fields = ("call_id", "tool", "status", "stubbed", "decided_by", "created_at", "ended_at")
    readonly_fields = fields
    fk_name = "session"


def _principal(request) -> Principal:
    user = request.user
    return Principal(authenticator="django", principal_id=user.get_username(), principal_type="staff")


@admin.register(Session)
class SessionAdmin(admin.ModelAdmin):
    list_display = ("id", "agent", "status", "mode", "title", "principal_id", "created_at", "updated_at", "playground")
    list_filter = ("agent", "status", "mode", "channel", "authenticator", "principal_id", "created_at")
    search_fields = ("id", "title", "principal_id")
    date_hierarchy = "created_at"
    readonly_fields = (
        "id", "agent", "deployment", "channel", "mode", "status", "title", "principal_id", "principal_type",
        "authenticator", "next_event_index", "options", "usage", "active_turn", "created_at", "updated_at",
    )
    exclude = ("continuation_token_hash", "conversation")
    inlines = [TurnInline, ToolCallInline, EventInline]
    actions = ["stop_running_turns", "delete_sessions"]

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # ours also stops a running turn first
        return actions

    @admin.display(description="playground")
    def playground(self, obj: Session) -> str:
        return format_html('<a href="/playground/{}/session/{}">open</a>', obj.agent.slug, obj.id)

    @admin.action(description="Stop the running turn of the selected sessions", permissions=["change"])
    def stop_running_turns(self, request, queryset) -> None:
        stopped = sum(stop_session(s) for s in queryset)
        self.message_user(request, f"Asked {stopped} running turn(s) to stop.", messages.SUCCESS)

    @admin.action(description="Delete the selected sessions and their events", permissions=["delete"])
    def delete_sessions(self, request, queryset) -> None:
        count = 0
        for session in queryset:
            delete_session(session)
            count += 1
        self.message_user(request, f"Deleted {count} session(s).", messages.SUCCESS)

    def has_add_permission(self, request) -> bool:
        return False  # sessions start through a channel, which records who started them


@admin.register(Turn)
class TurnAdmin(admin.ModelAdmin):
    list_display = ("id", "session", "trigger", "status", "claimed_by", "started_at", "ended_at")
    list_filter = ("status", "trigger", "session__agent")
    search_fields = ("id", "session__id")
    readonly_fields = [f.name for f in Turn._meta.fields]
    actions = ["stop_turns"]

    def has_add_permission(self, request) -> bool:
        return False

    @admin.action(description="Stop the selected turns", permissions=["change"])
    def stop_turns(self, request, queryset) -> None:
        count = sum(interrupt(t.pk) for t in queryset.exclude(status__in=Turn.FINISHED))
        self.message_user(request, f"Asked {count} turn(s) to stop.", messages.SUCCESS)


@admin.register(ToolCall)
class ToolCallAdmin(admin.ModelAdmin):
    """Tool calls, including approvals: parked calls can be decided here too."""

    list_display = ("call_id", "tool", "status", "session", "turn", "stubbed", "decided_by", "created_at")
    list_filter = ("status", "tool", "session__agent")
    search_fields = ("call_id", "tool", "session__id")
    readonly_fields = [f.name for f in ToolCall._meta.fields]
    actions = ["approve", "deny"]

    def has_add_permission(self, request) -> bool:
        return False

    def _decide(self, request, queryset, decision: str) -> None:
        decided = 0
        for row in queryset.filter(status=ToolCall.Status.AWAITING_APPROVAL).select_related("session"):
            resolve_approval(row.session, row.call_id, decision, _principal(request), reason="decided in the admin")
            decided += 1
        done = {"approve": "Approved", "deny": "Denied"}[decision]
        self.message_user(request, f"{done} {decided} parked call(s).", messages.SUCCESS)

    @admin.action(description="Approve the selected parked calls", permissions=["change"])
    def approve(self, request, queryset) -> None:
        self._decide(request, queryset, "approve")

    @admin.action(description="Deny the selected parked calls", permissions=["change"])
    def deny(self, request, queryset) -> None:
        self._decide(request, queryset, "deny")


@admin.register(Event)
class EventAdmin(admin.ModelAdmin):
    list_display = ("session", "index", "type", "turn_id", "at")
    list_filter = ("type",)
    search_fields = ("session__id", "type")

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    list_display = ("schedule_id", "agent", "kind", "cron", "active", "next_fire_at", "last_fired_at", "fire_count")
    list_filter = ("agent", "kind", "active")
    search_fields = ("schedule_id", "agent__slug")
    # Schedules come from agent folders; edit the folder and deploy instead.
    readonly_fields = [f.name for f in Schedule._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False


@admin.register(Reminder)
class ReminderAdmin(admin.ModelAdmin):
    list_display = ("id", "agent", "session", "kind", "spec", "status", "reason", "next_fire_at", "last_fired_at",
                    "fire_count")
    list_filter = ("status", "kind", "agent")
    search_fields = ("id", "session__id", "title", "prompt")
    readonly_fields = [f.name for f in Reminder._meta.fields]
    actions = ["cancel"]

    def has_add_permission(self, request) -> bool:
        return False

    @admin.action(description="Cancel the selected reminders", permissions=["change"])
    def cancel(self, request, queryset) -> None:
        count = sum(cancel_reminder(r, "cancelled in the admin") for r in queryset.filter(status=Reminder.Status.ARMED))
        self.message_user(request, f"Cancelled {count} reminder(s).", messages.SUCCESS)
