"""The dashboard's page in the admin, for operators: staff (who are operators) and members of
the `operators` group, as everywhere else on this server. The URL conf puts it behind the
operators' door (`channels_app.doors.admitted_page`, a layer above, which this layer cannot
import): anyone else admitted gets 403, someone no policy admits is sent to the login page,
which brings them back here. The door leaves the principal it admitted on the request; the view
refuses (403) a request that carries none, so mounted anywhere without its door it shows nothing."""
from __future__ import annotations

from typing import Any
from urllib.parse import quote

from django.conf import settings
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from sessions.dashboard.charts import lines_chart, spend_chart, tokens_chart, turns_chart, usd
from sessions.dashboard.figures import DEFAULT_WINDOW, WINDOWS, dashboard_figures
from sessions.dashboard.spend import spend_figures
from sessions.models import BackupRun
from sessions.principal import Principal
from sessions.tracing.links import trace_url

def playground_turn_url(agent: str, session_id: str, turn_id: str) -> str:
    """The turn on its session's trace page in the playground (its section's id is the turn's), with its waterfall."""
    return f"/playground/{quote(agent)}/session/{quote(session_id)}/trace#{quote(turn_id)}"


def playground_session_url(agent: str, session_id: str) -> str:
    return f"/playground/{quote(agent)}/session/{quote(session_id)}"


def _expensive_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**row, "usd": usd(row["cost"]), "url": playground_session_url(row["agent"], row["id"])} for row in rows]


def _slowest_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**row, "url": playground_turn_url(row["agent"], row["session_id"], row["id"]),
             "trace_url": trace_url(row["trace_id"])} for row in rows]


def backup_figures() -> dict[str, Any] | None:
    """The newest scheduled backup's run and the newest that succeeded; None while none is scheduled or was taken."""
    last = BackupRun.objects.order_by("-slot").first()
    if last is None and not settings.AGENTSITE_BACKUP_SCHEDULE:
        return None
    success = last if last and last.status == BackupRun.Status.SUCCEEDED else BackupRun.last_success()
    return {"schedule": settings.AGENTSITE_BACKUP_SCHEDULE, "keep": settings.AGENTSITE_BACKUP_KEEP, "last": last,
            "success": success}


def dashboard(request: HttpRequest) -> HttpResponse:
    if not isinstance(getattr(request, "principal", None), Principal):
        raise PermissionDenied("the dashboard is served behind the operators' door only")
    key = request.GET.get("window", DEFAULT_WINDOW)
    window = WINDOWS.get(key) or WINDOWS[DEFAULT_WINDOW]
    figures = dashboard_figures(window)
    buckets = figures["buckets"]
    spend = spend_figures(figures["since"], figures["now"])
    context = {
        **admin.site.each_context(request),
        "title": "Dashboard",
        "window": window,
        "windows": list(WINDOWS.values()),
        "figures": figures,
        "backups": backup_figures(),
        "slowest": _slowest_rows(figures["slowest"]),
        "turns_chart": turns_chart(buckets, window.bucket),
        "duration_chart": lines_chart(buckets, window.bucket, ("totalP50", "totalP95")),
        "queue_chart": lines_chart(buckets, window.bucket, ("queueP50", "queueP95")),
        "tokens_chart": tokens_chart(figures["tokens"]),
        "spend": {**spend, "usd": usd(spend["total"]), "sessions": _expensive_rows(spend["sessions"]),
                  "charts": [spend_chart(split) | {"by": by, "label": split.label}
                             for by, split in spend["splits"].items()]},
    }
    return TemplateResponse(request, "admin/dashboard.html", context)
