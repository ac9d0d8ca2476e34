"""The admin's A/B experiments: one row per (agent, experiment) the agent's releases declared,
with the sessions that gave samples, and the act of stopping one (new sessions then get the
control variant; sessions already enrolled keep theirs)."""
from __future__ import annotations

from django.contrib import admin, messages
from django.utils.html import format_html

from sessions.models import Experiment, ExperimentSample


@admin.register(Experiment)
class ExperimentAdmin(admin.ModelAdmin):
    list_display = ("name", "agent", "status", "sessions", "results")
    list_filter = ("agent",)
    search_fields = ("name", "agent__slug")
    readonly_fields = ("agent", "name", "stopped_at")
    actions = ["stop_experiments"]

    def has_add_permission(self, request) -> bool:
        return False  # a row comes from a release declaring the experiment

    @admin.display(description="status")
    def status(self, obj: Experiment) -> str:
        return f"stopped {obj.stopped_at:%Y-%m-%d %H:%M} UTC" if obj.stopped_at else "running"

    @admin.display(description="sessions")
    def sessions(self, obj: Experiment) -> int:
        return (ExperimentSample.objects.filter(agent=obj.agent.slug, experiment=obj.name)
                .values("session_id").distinct().count())

    @admin.display(description="results")
    def results(self, obj: Experiment) -> str:
        return format_html('<a href="/playground/{}/abs/{}">A/B page</a>', obj.agent.slug, obj.name)

    @admin.action(description="Stop the selected experiments (new sessions get control)", permissions=["change"])
    def stop_experiments(self, request, queryset) -> None:
        count = sum(Experiment.stop(e.agent, e.name) for e in queryset.select_related("agent"))
        self.message_user(request, f"Stopped {count} experiment(s).", messages.SUCCESS)
