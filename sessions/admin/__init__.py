"""The operators' console: sessions with their turns, tool calls and events.

History is read-only: events, turns and tool calls are shown, never edited,
since changing them would falsify what happened. Operators can stop a
running turn, delete sessions, and approve or deny parked tool calls.
"""
import json

from django.contrib import admin, messages
from django.contrib.admin.utils import quote
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from django.template.defaultfilters import filesizeformat
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.http import content_disposition_header

from sessions.principal import Principal
from sessions.turn.admission import stop_session, stop_turn
from sessions.retention.deletion import delete_session
from sessions.eventlog.events import describe_act
from sessions.turn.approvals import resolve_approval
from sessions.instants import iso_z
from sessions.models import (
    Artifact, Event, EventType, HostFile, KVEntry, PersonalToken, Reminder, Schedule, Session, ToolCall, Turn,
)
from sessions.timers.schedules import cancel_reminder
from sessions.workspaces.store import workspace_size


# A session's history is shown as plain tables of its latest rows, not as
# inlines: every inline row is a whole form with hidden widgets, and a long
# session's thousands of events made its change page take seconds. The
# complete history is in each model's own list, linked from `history`.
LATEST_EVENTS = 100
LATEST_TURNS = LATEST_TOOL_CALLS = LATEST_ARTIFACTS = 30


def _when(moment) -> str:
    return iso_z(moment, "milliseconds") or "-"


def _clip(text: str, limit: int = 240) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _link(model: str, pk, text) -> str:
    # quote(): the admin unquotes "_22", "_40" ... in a path, which ids such as ses_22ab... contain.
    return format_html('<a href="{}">{}</a>', reverse(f"admin:agent_sessions_{model}_change", args=[quote(pk)]),
                       text)


def _table(headers: tuple[str, ...], rows) -> str:
    head = format_html_join("", "<th>{}</th>", ((h,) for h in headers))
    body = format_html_join("", "<tr>{}</tr>", ((format_html_join("", "<td>{}</td>", ((c,) for c in row)),) for row in rows))
    return format_html('<table class="session-history"><thead><tr>{}</tr></thead><tbody>{}</tbody></table>', head, body)


def _attachment(content: bytes, name: str, content_type: str) -> HttpResponse:
    """Stored content as a download that the browser never renders in the admin's origin."""
    response = HttpResponse(content, content_type=content_type)
    response["Content-Disposition"] = content_disposition_header(True, name.rsplit("/", 1)[-1])
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = "sandbox"
    return response


def _size(size: int) -> str:
    for unit in ("bytes", "KiB", "MiB"):
        if size < 1024 or unit == "MiB":
            return f"{size} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return ""


def _principal(request) -> Principal:
    user = request.user
    # The admin admits operators only: staff and the operators group (agentsite.admin_site).
    return Principal(authenticator="django", principal_id=user.get_username(),
                     principal_type="staff" if user.is_staff else "user", operator=True)


@admin.register(Session)
class SessionAdmin(admin.ModelAdmin):
    list_display = ("id", "agent", "status", "mode", "model", "title", "principal_id", "created_at", "updated_at",
                    "playground")
    list_filter = ("agent", "status", "mode", "model", "channel", "authenticator", "principal_id", "created_at")
    search_fields = ("id", "title", "principal_id")
    date_hierarchy = "created_at"
    summary_fields = (
        "id", "agent", "deployment", "model", "channel", "mode", "status", "title", "principal_id", "principal_type",
        "authenticator", "next_event_index", "options", "usage", "active_turn", "created_at", "updated_at",
        "history", "workspace",
    )
    readonly_fields = summary_fields + ("latest_turns", "latest_tool_calls", "latest_artifacts", "latest_events",
                                        "operator_actions")
    # The continuation token hash and the provider conversation are never shown.
    fieldsets = (
        (None, {"fields": summary_fields}),
        (f"Latest turns (up to {LATEST_TURNS})", {"fields": ("latest_turns",)}),
        (f"Latest tool calls (up to {LATEST_TOOL_CALLS})", {"fields": ("latest_tool_calls",)}),
        (f"Latest artifacts (up to {LATEST_ARTIFACTS})", {"fields": ("latest_artifacts",)}),
        (f"Latest events (up to {LATEST_EVENTS}, in index order)", {"fields": ("latest_events",)}),
        (f"Operator actions (up to {LATEST_EVENTS}, the latest first)", {"fields": ("operator_actions",)}),
    )
    actions = ["stop_running_turns", "delete_sessions"]

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # ours also stops a running turn first
        return actions

    @admin.display(description="playground")
    def playground(self, obj: Session) -> str:
        return format_html('<a href="/playground/{}/session/{}">open</a>', obj.agent.slug, obj.id)

    @admin.display(description="workspace")
    def workspace(self, obj: Session) -> str:
        """A local workspace's size on this host; virtual workspaces live in the workers' memory."""
        size = workspace_size(obj.id)
        if size is None:
            return "none on this host"
        return f"{size} bytes ({filesizeformat(size)})"

    @admin.display(description="history")
    def history(self, obj: Session) -> str:
        """Every event, turn and tool call of the session, in their own lists."""
        return format_html(
            '<a href="{}?session={}">{} events</a> · <a href="{}?session={}">{} turns</a> · '
            '<a href="{}?session={}">{} tool calls</a> · <a href="{}?session={}">{} artifacts</a> · '
            '<a href="{}?session={}">{} key-value entries</a> · '
            '<a href="{}?session={}&type={}">{} operator actions</a>',
            reverse("admin:agent_sessions_event_changelist"), obj.pk, obj.events.count(),
            reverse("admin:agent_sessions_turn_changelist"), obj.pk, obj.turns.count(),
            reverse("admin:agent_sessions_toolcall_changelist"), obj.pk, obj.tool_calls.count(),
            reverse("admin:agent_sessions_artifact_changelist"), obj.pk, obj.artifacts.count(),
            reverse("admin:agent_sessions_kventry_changelist"), obj.pk, obj.kv_entries.count(),
            reverse("admin:agent_sessions_event_changelist"), obj.pk, EventType.OPERATOR_ACTED,
            obj.events.filter(type=EventType.OPERATOR_ACTED).count(),
        )

    @admin.display(description="turns")
    def latest_turns(self, obj: Session) -> str:
        turns = reversed(obj.turns.order_by("-created_at", "-id")[:LATEST_TURNS])
        return _table(
            ("id", "trigger", "status", "claimed by", "started", "ended", "error"),
            ((_link("turn", t.pk, t.pk), t.trigger, t.status, t.claimed_by, _when(t.started_at), _when(t.ended_at),
              _clip(t.error)) for t in turns),
        )

    @admin.display(description="tool calls")
    def latest_tool_calls(self, obj: Session) -> str:
        calls = reversed(obj.tool_calls.order_by("-created_at", "-id")[:LATEST_TOOL_CALLS])
        return _table(
            ("call", "tool", "status", "stubbed", "decided by", "created", "ended"),
            ((_link("toolcall", c.pk, c.call_id), c.tool, c.status, "yes" if c.stubbed else "",
              (c.decided_by or {}).get("principalId", ""), _when(c.created_at), _when(c.ended_at)) for c in calls),
        )

    @admin.display(description="artifacts")
    def latest_artifacts(self, obj: Session) -> str:
        rows = reversed(obj.artifacts.order_by("-updated_at", "-id")[:LATEST_ARTIFACTS])
        return _table(
            ("name", "type", "size", "turn", "call", "saved", ""),
            ((_link("artifact", a.pk, a.name), a.content_type, _size(a.size), a.turn_id, a.call_id,
              _when(a.updated_at), format_html('<a href="{}">download</a>', reverse(
                  "admin:agent_sessions_artifact_download", args=[a.pk]))) for a in rows),
        )

    @admin.display(description="events")
    def latest_events(self, obj: Session) -> str:
        events = reversed(obj.events.order_by("-index")[:LATEST_EVENTS])
        return _table(
            ("index", "type", "turn", "at", "data"),
            ((_link("event", e.pk, e.index), e.type, e.turn_id, _when(e.at),
              format_html("<code>{}</code>", _clip(json.dumps(e.data, ensure_ascii=False)))) for e in events),
        )

    @admin.display(description="operator actions")
    def operator_actions(self, obj: Session) -> str:
        """Who acted on this session, not being its principal: the `operator.acted` events, as sentences."""
        acts = list(obj.events.filter(type=EventType.OPERATOR_ACTED).order_by("-index")[:LATEST_EVENTS])
        if not acts:
            return "none"
        rows = format_html_join("", "<tr><td>{}</td><td>#{}</td><td>{}</td></tr>",
                                ((_when(e.at), e.index, describe_act(e.data)) for e in acts))
        return format_html('<table class="operator-actions"><thead><tr><th>at</th><th>event</th><th>what</th></tr>'
                           '</thead><tbody>{}</tbody></table>', rows)

    @admin.action(description="Stop the running turn of the selected sessions", permissions=["change"])
    def stop_running_turns(self, request, queryset) -> None:
        stopped = sum(stop_session(s, by=_principal(request)) for s in queryset)
        self.message_user(request, f"Asked {stopped} running turn(s) to stop.", messages.SUCCESS)

    @admin.action(description="Delete the selected sessions and their events", permissions=["delete"])
    def delete_sessions(self, request, queryset) -> None:
        count = 0
        for session in queryset:
            delete_session(session, by=_principal(request))
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
        by = _principal(request)
        count = sum(stop_turn(t, by=by) for t in queryset.exclude(status__in=Turn.FINISHED).select_related("session"))
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
        waiting = queryset.filter(status=ToolCall.Status.AWAITING_APPROVAL)
        for row in waiting.filter(question=False).select_related("session"):
            resolve_approval(row.session, row.call_id, decision, _principal(request), reason="decided in the admin")
            decided += 1
        done = {ToolCall.Decision.APPROVE: "Approved", ToolCall.Decision.DENY: "Denied"}[decision]
        self.message_user(request, f"{done} {decided} parked call(s).", messages.SUCCESS)
        if questions := waiting.filter(question=True).count():  # answered in the playground or over HTTP
            self.message_user(request, f"Left {questions} question(s) the agent asked: answer them, in the "
                                       "playground or at POST …/questions/<callId>.", messages.WARNING)

    @admin.action(description="Approve the selected parked calls", permissions=["change"])
    def approve(self, request, queryset) -> None:
        self._decide(request, queryset, ToolCall.Decision.APPROVE)

    @admin.action(description="Deny the selected parked calls", permissions=["change"])
    def deny(self, request, queryset) -> None:
        self._decide(request, queryset, ToolCall.Decision.DENY)


@admin.register(Event)
class EventAdmin(admin.ModelAdmin):
    list_display = ("session", "index", "type", "turn_id", "at", "what")
    list_filter = ("type",)
    search_fields = ("session__id", "type")

    def has_add_permission(self, request) -> bool:
        return False

    @admin.display(description="what")
    def what(self, obj: Event) -> str:
        """An operator's act as a sentence (who did what); any other event's data, clipped."""
        if obj.type == EventType.OPERATOR_ACTED:
            return describe_act(obj.data)
        return _clip(json.dumps(obj.data, ensure_ascii=False), 80)

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
        by, armed = _principal(request), queryset.filter(status=Reminder.Status.ARMED).select_related("session")
        count = sum(cancel_reminder(r, "cancelled in the admin", by=by) for r in armed)
        self.message_user(request, f"Cancelled {count} reminder(s).", messages.SUCCESS)


class StoredContentAdmin(admin.ModelAdmin):
    """Rows holding content (artifacts, stored files): read-only, the bytes downloadable, never shown inline."""

    exclude = ("content",)
    download_name = ""

    def get_readonly_fields(self, request, obj=None):
        return [*(f.name for f in self.model._meta.fields if f.name != "content"), "download"]

    def has_add_permission(self, request) -> bool:
        return False

    def get_urls(self):
        name = f"{self.opts.app_label}_{self.opts.model_name}_download"
        return [path("<int:pk>/download/", self.admin_site.admin_view(self.download_view), name=name),
                *super().get_urls()]

    def download_view(self, request, pk: int) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        row = get_object_or_404(self.model, pk=pk)
        content = self.model.objects.filter(pk=pk).values_list("content", flat=True).first()
        return _attachment(bytes(content or b""), getattr(row, self.download_name),
                           getattr(row, "content_type", "application/octet-stream"))

    @admin.display(description="content")
    def download(self, obj) -> str:
        url = reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_download", args=[obj.pk])
        return format_html('<a href="{}">download</a> ({})', url, _size(obj.size))


@admin.register(Artifact)
class ArtifactAdmin(StoredContentAdmin):
    """Files turns produced, by session; the session's principal downloads them over HTTP."""

    list_display = ("name", "session", "content_type", "size", "turn_id", "call_id", "updated_at", "download")
    list_select_related = ("session",)
    list_filter = ("session__agent", "content_type")
    search_fields = ("name", "session__id")
    download_name = "name"


@admin.register(HostFile)
class HostFileAdmin(StoredContentAdmin):
    """Agents' durable file stores (`ctx.host.files`)."""

    list_display = ("path", "agent", "size", "sha256", "updated_at", "download")
    list_select_related = ("agent",)
    list_filter = ("agent",)
    search_fields = ("path",)
    download_name = "path"


@admin.register(KVEntry)
class KVEntryAdmin(admin.ModelAdmin):
    """Agents' key-value stores (`ctx.host.kv`): agent-wide keys have no session."""

    list_display = ("key", "agent", "session", "version", "short_value", "updated_at")
    list_select_related = ("agent", "session")
    list_filter = ("agent",)
    search_fields = ("key", "session__id")
    readonly_fields = [f.name for f in KVEntry._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False

    @admin.display(description="value")
    def short_value(self, obj: KVEntry) -> str:
        return _clip(json.dumps(obj.value, ensure_ascii=False), 80)


@admin.register(PersonalToken)
class PersonalTokenAdmin(admin.ModelAdmin):
    """Users' API tokens. They are made by their owners (or `manage.py createtoken`), since the
    secret is shown only once; here they are seen and revoked. The hash is never shown."""

    list_display = ("name", "user", "prefix", "agents", "created_at", "expires_at", "last_used_at", "revoked_at")
    list_select_related = ("user",)
    list_filter = ("revoked_at",)
    search_fields = ("name", "id", "user__username")
    fields = readonly_fields = ("id", "prefix", "user", "name", "agents", "created_at", "expires_at", "last_used_at",
                                "revoked_at")
    actions = ["revoke"]

    def has_add_permission(self, request) -> bool:
        return False

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request, queryset) -> None:
        revoked = sum(token.revoke() for token in queryset)
        self.message_user(request, f"Revoked {revoked} token(s).", messages.SUCCESS)

from sessions.admin import experiments, records, spend  # noqa: E402,F401 (registers ExperimentAdmin, the records, spending)
