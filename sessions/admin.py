from django.contrib import admin

from sessions.models import Event, Session, Turn


class EventInline(admin.TabularInline):
    """A session's events in index order; history is read-only."""

    model = Event
    fields = ("index", "type", "turn_id", "at", "data")
    readonly_fields = fields
    ordering = ("index",)
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False


class TurnInline(admin.TabularInline):
    model = Turn
    fields = ("id", "trigger", "status", "claimed_by", "started_at", "ended_at", "error")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Session)
class SessionAdmin(admin.ModelAdmin):
    list_display = ("id", "agent", "status", "mode", "title", "principal_id", "created_at", "updated_at")
    list_filter = ("agent", "status", "mode", "channel", "authenticator", "created_at")
    search_fields = ("id", "title", "principal_id")
    readonly_fields = (
        "id", "agent", "deployment", "channel", "mode", "status", "principal_id", "principal_type",
        "authenticator", "next_event_index", "options", "usage", "active_turn", "created_at", "updated_at",
    )
    exclude = ("continuation_token_hash", "conversation")
    inlines = [TurnInline, EventInline]


@admin.register(Turn)
class TurnAdmin(admin.ModelAdmin):
    list_display = ("id", "session", "trigger", "status", "claimed_by", "started_at", "ended_at")
    list_filter = ("status", "trigger")
    search_fields = ("id", "session__id")
    readonly_fields = [f.name for f in Turn._meta.fields]


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
