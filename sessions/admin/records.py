"""The admin's read-only records of model handoffs and of messages between agents."""
from __future__ import annotations

from django.contrib import admin

from sessions.models import AgentMessage, Handoff


class RecordAdmin(admin.ModelAdmin):
    """Written by the server only: nobody adds, edits or deletes one here (a session's deletion takes them)."""

    def has_change_permission(self, request, obj=None) -> bool:
        return False  # view only: the pages show every field, with no Save

    def has_add_permission(self, request) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Handoff)
class HandoffAdmin(RecordAdmin):
    list_display = ("id", "session", "from_model", "to_model", "status", "code", "requested_by", "created_at",
                    "ended_at")
    list_filter = ("status", "from_model", "to_model", "session__agent")
    search_fields = ("id", "session__id")


@admin.register(AgentMessage)
class AgentMessageAdmin(RecordAdmin):
    list_display = ("id", "kind", "sender_agent", "sender", "recipient", "thread", "hops", "created_at", "read_at")
    list_filter = ("kind", "sender_agent", "recipient__agent")
    search_fields = ("id", "sender__id", "recipient__id", "thread")
