"""The console's agent editor in the playground (operators): a new agent, an agent's edit page with
its releases and what the newest changed, and the Markdown preview of instructions.

The pages only show; saving goes through the REST routes (`POST /v1/agents`, `PUT /v1/agents/<slug>`,
a release's activate) from the page's script (static/playground/editor.js), behind the same door.
"""
from __future__ import annotations

import json

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import path
from django.views.decorators.http import require_POST

from agents.console.saving import as_spec
from agents.console.spec import WORKSPACE_TOOLS, SpecError
from agents.definitions import BUILTINS
from agents.models import Agent
from agents.releasediff import diff_releases
from agents.errors import error_body
from channels_app.doors import admit_page, error_page
from channels_app.views.deployments import RELEASES

RELEASES_SHOWN = 20
# The lists the editor edits a record at a time (static/playground/rows.js): the field, its legend, what one
# record is called, its fields ("name:long" a longer text, "name:json" JSON of its own) and an example.
RECORD_LISTS = [
    {"name": "skills", "legend": "Skills", "noun": "skill", "fields": "name,description,body:long,files:json",
     "example": '[{"name": "tone", "description": "How to write", "body": "Write plainly.", "files": {}}]'},
    {"name": "subagents", "legend": "Subagents", "noun": "subagent",
     "fields": "id,description,instructions:long,model,params:json",
     "example": '[{"id": "summarizer", "description": "Summarizes", "instructions": "Summarize in a line."}]'},
    {"name": "schedules", "legend": "Schedules (cron, UTC)", "noun": "schedule", "fields": "id,cron,prompt:long,title",
     "example": '[{"id": "daily", "cron": "0 9 * * *", "prompt": "Say good morning."}]'},
    {"name": "webhooks", "legend": "JSON webhooks", "noun": "webhook",
     "fields": "id,message,thread,secretEnv,signatureHeader,description",
     "example": '[{"id": "tracker", "message": "issue.title", "thread": "issue.id", "secretEnv": "TRACKER_SECRET"}]'},
]
MAX_PREVIEW_CHARS = 200_000  # an agent's instructions at most (agents.console.spec)


def new_agent_page(request: HttpRequest) -> HttpResponse:
    principal = admit_page(request, RELEASES)
    if isinstance(principal, HttpResponse):
        return principal
    return render(request, "playground/editor.html", _context(None, None))


def edit_agent_page(request: HttpRequest, slug: str) -> HttpResponse:
    principal = admit_page(request, RELEASES)
    if isinstance(principal, HttpResponse):
        return principal
    agent = Agent.objects.select_related("active_deployment").filter(slug=slug).first()
    if agent is None or agent.active_deployment is None:
        return error_page(request, 404, "No such agent", f"There is no agent {slug!r} on this server.")
    try:
        spec = as_spec(agent.active_deployment)
    except SpecError as exc:
        return error_page(request, 409, "Not editable here", f"Agent {slug!r} is a folder that data cannot hold "
                          f"(edit the folder and deploy it): {exc}")
    return render(request, "playground/editor.html", _context(agent, spec.model_dump(mode="json", by_alias=True)))


def _context(agent: Agent | None, definition: dict | None) -> dict:
    releases = list(agent.deployments.releases().order_by("-version")[:RELEASES_SHOWN]) if agent else []
    changed = []
    if len(releases) >= 2:  # what the newest release changed against the one before it
        changed = [{"name": s.name, "table": s.table(f"v{releases[1].version}", f"v{releases[0].version}")}
                   for s in diff_releases(releases[1], releases[0]) if s.changed]
    return {"agent": agent, "definition": definition, "releases": releases, "changed": changed,
            "builtins": BUILTINS, "workspace_tools": WORKSPACE_TOOLS, "record_lists": RECORD_LISTS,
            "kind": agent.active_deployment.source_kind if agent else "console"}


@require_POST
def preview(request: HttpRequest) -> HttpResponse:
    """Instructions as the page shows them: Markdown to HTML, any HTML in it shown as text."""
    principal = admit_page(request, RELEASES)
    if isinstance(principal, HttpResponse):
        return principal
    try:
        text = json.loads(request.body or b"{}").get("markdown", "")
    except (ValueError, AttributeError, RecursionError):
        text = None
    if not isinstance(text, str) or len(text) > MAX_PREVIEW_CHARS:
        return JsonResponse(error_body("invalid_request", f'send {{"markdown": "..."}}, at most {MAX_PREVIEW_CHARS} '
                                                          "characters"), status=400)
    from markdown_it import MarkdownIt  # the docs' renderer; loaded when a preview is first asked for

    return JsonResponse({"html": MarkdownIt("commonmark", {"html": False}).render(text)})


urlpatterns = [
    path("playground/agents/new", new_agent_page, name="playground-new-agent"),
    path("playground/agents/preview", preview, name="playground-preview"),
    path("playground/<slug:slug>/edit", edit_agent_page, name="playground-edit-agent"),
]
