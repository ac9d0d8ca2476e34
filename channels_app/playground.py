"""The web playground: server-rendered pages; the conversation itself streams
into the page over the session websocket (see static/playground/playground.js).

Pages pass the same doors (channels_app.doors) and ownership checks as the HTTP
API, an agent's pages its token scope too; a caller that no policy admits is
sent to the login page and back.
"""
from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path, reverse
from django.views.decorators.http import require_http_methods

from agents.evals.stored import MAX_STEPS
from agents.mcpauth.stored import with_status
from agents.models import Agent, StoredEvalCase
from agents.providers.runtimes import LABELS, runtime_name
from channels_app.auth import agent_scope
from channels_app.doors import AGENT, LISTING, admit_page, error_page, every_session_refused, is_operator, refusal_page
from channels_app.errors import APIError
from channels_app.experiments_page import ab_page
from channels_app.ownership import get_owned_session
from channels_app.replies.artifacts import artifact_path
from sessions.evals.capture import case_file_text, case_id_for, case_steps
from sessions.mcp.check import unreachable_servers
from sessions.models import Artifact, Event, EventType, Reminder, Session
from sessions.tracing.links import trace_url
from sessions.eventlog.trajectory import fold_turn_outcome
from sessions.workspaces.store import list_files, workspace_size


def dev_mode(request: HttpRequest) -> dict[str, Any]:
    """Template context: dev mode shows buttons that fire timers by hand; a reloading server
    says on the agent's pages when its folder became a new release (or stopped validating)."""
    return {"dev_mode": settings.AGENTSITE_DEV, "reloading": settings.AGENTSITE_RELOAD}


def edits_agents(principal) -> bool:
    """Whether the console's editor admits `principal` (operators, with no token scoped to some agents)."""
    return is_operator(principal) and agent_scope(principal) is None


def _agent(slug: str) -> Agent | None:
    return Agent.objects.select_related("active_deployment").filter(slug=slug).first()


def agents_page(request: HttpRequest) -> HttpResponse:
    principal = admit_page(request, LISTING)
    if isinstance(principal, HttpResponse):
        return principal
    agents = Agent.objects.select_related("active_deployment").exclude(active_deployment=None)
    if (scope := agent_scope(principal)) is not None:  # a scoped token sees its agents only, as GET /v1/agents
        agents = agents.filter(slug__in=scope)
    return render(request, "playground/agents.html", {"agents": agents, "editor": edits_agents(principal)})


def agent_page(request: HttpRequest, slug: str) -> HttpResponse:
    principal = admit_page(request, AGENT, slug)
    if isinstance(principal, HttpResponse):
        return principal
    agent = _agent(slug)
    if agent is None or agent.active_deployment is None:
        return error_page(request, 404, "No such agent", f"There is no agent {slug!r} on this server.")
    if session_id := request.GET.get("sessionId"):
        return session_page(request, slug, session_id)
    every = request.GET.get("all") == "1"
    if every and not is_operator(principal):
        return refusal_page(request, every_session_refused())
    # An operator's view, as `GET /<slug>/v1/sessions?all=1`: every session of the agent, whoever
    # started it (a person, a schedule, a channel), with who that was.
    rows = Session.objects.all() if every else Session.objects.for_principal(principal)
    sessions = (
        rows.filter(agent=agent).only("id", "title", "status", "mode", "channel", "principal_id", "principal_type",
                                      "authenticator", "created_at", "updated_at").order_by("-created_at")[:50]
    )
    manifest = agent.active_deployment.manifest
    return render(request, "playground/agent.html", {
        "agent": agent, "release": agent.active_deployment, "manifest": manifest, "sessions": sessions, "tools": _tool_rows(manifest),
        "models": agent.active_deployment.models, "editor": edits_agents(principal),
        "channels": _channel_rows(manifest), "every": every, "operator": is_operator(principal), "principal": principal,
        "oauth_servers": [m for m in with_status(agent, manifest.get("mcp", [])) if m.get("oauth")],
        "mcp_errors": sorted(unreachable_servers(agent).items()),
    })


def _tool_rows(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    return [{**t, "schema": json.dumps(t.get("inputSchema", {}), indent=2), "example": json.dumps(example_input(t.get("inputSchema", {})))}
            for t in manifest.get("tools", [])]


# What a raw route's "Try" form starts with, by channel kind: the headers naming the event
# ("{now}" becomes a fresh number on each try, so a delivery id is never a duplicate) and a body.
RAW_EXAMPLES = {
    "github": ({"X-GitHub-Event": "ping", "X-GitHub-Delivery": "try-{now}"}, {"zen": "Tried from the playground."}),
    "gitlab": ({"X-Gitlab-Event": "Note Hook", "X-Gitlab-Event-UUID": "try-{now}"}, {"object_kind": "note"}),
    "bitbucket": ({"X-Event-Key": "diagnostics:ping", "X-Request-UUID": "try-{now}"}, {"test": True}),
    "slack": ({}, {"type": "url_verification", "challenge": "tried-from-the-playground"}),
}


def _channel_rows(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """Custom channels with a "Try" form per route: its path parameters and an example body or query;
    a raw route (a provider's webhook) takes a body sent as it is and extra headers."""
    rows = []
    for channel in manifest.get("channels", []):
        routes = []
        for route in channel.get("routes", []):
            params = [s[1:] for s in route["path"].split("/") if s.startswith(":")]
            if route.get("rawBody"):
                headers, body = RAW_EXAMPLES.get(channel.get("kind", ""), ({}, {}))
                routes.append({**route, "takes": "raw", "example": json.dumps(body), "schema": "",
                               "headers": json.dumps(headers), "params": params})
                continue
            takes = "body" if route.get("bodySchema") else "query" if route.get("querySchema") else ""
            schema = route.get("bodySchema") or route.get("querySchema") or {}
            routes.append({**route, "takes": takes, "example": json.dumps(example_input(schema)) if takes else "",
                           "schema": json.dumps(schema, indent=2) if takes else "", "params": params})
        rows.append({**channel, "routes": routes})
    return rows


def example_input(schema: dict[str, Any]) -> dict[str, Any]:
    """A plausible input for the scripted model's `/call` hint: field examples, else placeholders."""
    example: dict[str, Any] = {}
    for name, prop in schema.get("properties", {}).items():
        if name not in schema.get("required", []):
            continue
        if "examples" in prop and prop["examples"]:
            example[name] = prop["examples"][0]
        elif prop.get("type") == "integer":
            example[name] = 1
        elif prop.get("type") == "number":
            example[name] = 1.0
        elif prop.get("type") == "boolean":
            example[name] = True
        else:
            example[name] = "example"
    return example


def _owned_session(request: HttpRequest, slug: str, session_id: str) -> tuple[Session | None, bool, HttpResponse | None]:
    """The session and whether the caller follows it as an operator, if the caller owns it or is
    an operator (who may follow any session: read it, decide its parked calls, stop it, cancel its
    reminders, never post in it); else the page that refuses."""
    principal = admit_page(request, AGENT, slug)
    if isinstance(principal, HttpResponse):
        return None, False, principal
    try:
        session = get_owned_session(slug, session_id, principal, operators=True)
    except APIError as exc:
        if exc.status_code == 403:
            return None, False, refusal_page(request, exc)
        if exc.error_code == "agent_not_found":
            return None, False, error_page(request, 404, "No such agent", f"There is no agent {slug!r} on this server.")
        return None, False, error_page(request, 404, "No such session", f"There is no session {session_id!r} on {slug!r}.")
    request.principal = principal  # as admitted_page leaves it
    return session, principal.oversees(session), None


def session_page(request: HttpRequest, slug: str, session_id: str) -> HttpResponse:
    session, following, refusal = _owned_session(request, slug, session_id)
    if refusal:
        return refusal
    manifest = session.deployment.manifest
    reminders = Reminder.objects.filter(session=session, status=Reminder.Status.ARMED).order_by("next_fire_at")
    artifacts = [{"name": a.name, "content_type": a.content_type, "size": a.size,
                  "url": artifact_path(slug, session.id, a.name)}
                 for a in Artifact.objects.filter(session=session).order_by("created_at", "name")]
    models = session.deployment.models
    bound = session.bound_model
    return render(request, "playground/session.html", {
        "agent": session.agent, "release": session.deployment, "session": session, "manifest": manifest, "tools": _tool_rows(manifest),
        "model": bound,  # the session's selection, which may differ from the release's default
        "runtime": LABELS[runtime_name(bound)],
        "following": following, "models": models, "keeps_cases": edits_agents(request.principal),
        # "Switch model…": to whoever the handoff route admits (the owner and operators), on a chat
        # session (a task session has no next turn to run elsewhere) whose release lists another model.
        "can_switch": session.mode == Session.Mode.CHAT and any(m != bound for m in models),
        "channels": _channel_rows(manifest),
        "reminders": list(reminders), "workspace": workspace_panel(session, manifest), "artifacts": artifacts,
    })


def workspace_panel(session: Session, manifest: dict[str, Any]) -> dict[str, Any]:
    """What the session page shows of the workspace: a local one's files, or what a virtual one is."""
    runtime = manifest.get("runtime") or {"kind": "local"}
    panel: dict[str, Any] = {"kind": runtime.get("kind", "local"), "tools": runtime.get("workspaceTools")}
    if panel["kind"] == "local":
        panel["files"] = list_files(session.id)
        panel["size"] = workspace_size(session.id)
    else:
        panel["filesystem"] = runtime.get("filesystem")
    return panel


def _parse(at: str) -> datetime:
    return datetime.fromisoformat(at)


# A turn's stage totals as the waterfall's heading names them, in the order the stages come.
WATERFALL_TOTALS = (("queue", "queueMs"), ("load", "loadMs"), ("workspace", "workspaceMs"), ("runtime", "runtimeMs"),
                    ("model", "modelMs"),
                    ("first output", "firstTokenMs"), ("tools", "toolsMs"), ("approval", "approvalMs"),
                    ("settle", "settleMs"), ("total", "totalMs"))


def waterfall(timings: dict[str, Any] | None) -> dict[str, Any] | None:
    """A turn's waterfall, from the `timings` of its ending event: one bar per step, placed and sized
    by its share of the whole turn; None for a turn that ended without them."""
    if not isinstance(timings, dict) or not timings.get("totalMs"):
        return None
    total = float(timings["totalMs"])
    bars = []
    for step in timings.get("steps") or []:
        left = min(max(100 * step["startMs"] / total, 0), 99.5)
        bars.append({**step, "label": f"{step['kind']} {step.get('name') or ''}".strip(), "left": round(left, 2),
                     "width": round(min(max(100 * step["durationMs"] / total, 0.5), 100 - left), 2)})
    totals = [(label, timings[key]) for label, key in WATERFALL_TOTALS if timings.get(key) is not None]
    return {"bars": bars, "totals": totals}


def build_trace(rows: list[tuple[int, str, str, dict, datetime]]) -> list[dict[str, Any]]:
    """Turns with their steps, tool calls and subagents, each with start offset and duration (ms)."""
    turns: list[dict[str, Any]] = []
    by_turn: dict[str, dict[str, Any]] = {}
    open_steps: dict[str, dict[str, Any]] = {}
    calls: dict[str, dict[str, Any]] = {}
    for index, type_, turn_id, data, at in rows:
        if not turn_id:
            continue
        turn = by_turn.get(turn_id)
        if turn is None:
            turn = by_turn[turn_id] = {"id": turn_id, "start": at, "end": at, "status": "running", "input": "",
                                      "items": [], "usage": {}, "error": "", "waterfall": None}
            turns.append(turn)
        turn["end"] = max(turn["end"], at)
        if type_ == "message.received":
            turn["input"] = data.get("text", "")
        elif type_ == "step.started":
            step = {"kind": "step", "label": f"step {data.get('step')}", "start": at, "end": at}
            open_steps[turn_id] = step
            turn["items"].append(step)
        elif type_ == "step.completed" and turn_id in open_steps:
            open_steps.pop(turn_id)["end"] = at
        elif type_ == "actions.requested":
            for call in data.get("calls", []):
                item = {"kind": "tool", "label": call.get("toolName", "?"), "start": at, "end": at, "callId": call.get("callId")}
                calls[call.get("callId")] = item
                turn["items"].append(item)
        elif type_ == "action.result" and data.get("callId") in calls:
            item = calls[data["callId"]]
            item["end"] = at
            item["error"] = data.get("error")
            item["stubbed"] = data.get("stubbed")
        elif type_ == "subagent.called":
            turn["items"].append({"kind": "subagent", "label": data.get("subagent", "?"), "start": at, "end": at})
        elif type_ == "subagent.completed":
            for item in reversed(turn["items"]):
                if item["kind"] == "subagent" and item["label"] == data.get("subagent"):
                    item["end"] = at
                    break
        else:
            fold_turn_outcome(turn, type_, data)
            if type_ in (EventType.TURN_COMPLETED, EventType.TURN_FAILED):
                turn["waterfall"] = waterfall(data.get("timings"))
                turn["traceId"] = data.get("traceId", "")
    for turn in turns:
        total = max((turn["end"] - turn["start"]).total_seconds() * 1000, 0.001)
        turn["durationMs"] = round(total, 1)
        for item in turn["items"]:
            offset = (item["start"] - turn["start"]).total_seconds() * 1000
            duration = (item["end"] - item["start"]).total_seconds() * 1000
            item.update(offsetMs=round(offset, 1), durationMs=round(duration, 1),
                        left=round(100 * offset / total, 2), width=max(round(100 * duration / total, 2), 0.5))
    return turns


def trace_page(request: HttpRequest, slug: str, session_id: str) -> HttpResponse:
    session, _, refusal = _owned_session(request, slug, session_id)
    if refusal:
        return refusal
    rows = list(Event.objects.filter(session=session).order_by("index").values_list("index", "type", "turn_id", "data", "at"))
    turns = build_trace(rows)
    for turn in turns:  # a traced turn links to the operators' trace viewer, when one is configured
        turn["traceUrl"] = trace_url(turn.get("traceId", ""))
    return render(request, "playground/trace.html", {
        "agent": session.agent, "session": session, "turns": turns, "event_count": len(rows),
    })


def eval_case_download(request: HttpRequest, slug: str, session_id: str) -> HttpResponse:
    """GET: the session as an eval case file (`sessions.evals.capture`), downloaded: for its owner and operators.
    POST: the session kept as one of the agent's eval cases in the admin, for operators who may edit agents."""
    session, _, refusal = _owned_session(request, slug, session_id)
    if refusal:
        return refusal
    if request.method == "POST":
        return _keep_case(request, session)
    response = HttpResponse(case_file_text(session), content_type="text/x-python; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{case_id_for(session)}_eval.py"'
    return response


def _keep_case(request: HttpRequest, session: Session) -> HttpResponse:
    if not edits_agents(request.principal):
        return refusal_page(request, APIError(403, "operators_only", "only operators keep eval cases in the admin"))
    steps = case_steps(session)
    if not steps:
        return error_page(request, 409, "Nothing to keep", "This session has no message a person sent.")
    note = f"Kept from session {session.id}"
    if len(steps) > MAX_STEPS:
        note += f" (its first {MAX_STEPS} of {len(steps)} messages: a case holds at most {MAX_STEPS})"
        steps = steps[:MAX_STEPS]
    base = case_id_for(session)
    for _ in range(3):  # another keep of the same moment may take the id first
        taken = set(StoredEvalCase.objects.filter(agent=session.agent).values_list("case_id", flat=True))
        case_id = next(name for n in range(1, len(taken) + 2)
                       if (name := f"{base}_{n}" if n > 1 else base) not in taken)
        kept = StoredEvalCase(agent=session.agent, case_id=case_id, steps=steps,
                              updated_by=request.principal.principal_id[:150],
                              description=f"{note}: tighten its gates (the reply's shape, the tools it must leave "
                                          "alone) before relying on it.")
        try:
            kept.full_clean()
        except ValidationError as exc:
            return error_page(request, 409, "Not a case", f"This session does not make a case: {exc}")
        try:
            with transaction.atomic():
                kept.save()
            break
        except IntegrityError:
            continue
    else:
        return error_page(request, 409, "Not kept", "Other cases were kept under the same name meanwhile: try again.")
    return redirect(reverse("admin:agents_storedevalcase_change", args=[kept.pk]))


urlpatterns = [
    path("playground/", agents_page, name="playground"),
    path("playground/<slug:slug>", agent_page, name="playground-agent"),
    path("playground/<slug:slug>/session/<str:session_id>", session_page, name="playground-session"),
    path("playground/<slug:slug>/session/<str:session_id>/trace", trace_page, name="playground-trace"),
    path("playground/<slug:slug>/session/<str:session_id>/eval-case", require_http_methods(["GET", "HEAD", "POST"])(
        eval_case_download), name="playground-eval-case"),
    path("playground/<slug:slug>/abs/<str:name>", ab_page, name="playground-ab"),
]
