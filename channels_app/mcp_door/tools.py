"""The MCP tools an agent is served as: `ask` on `/<slug>/mcp`; `list_agents` and `ask(agent, …)` on `/mcp`.

Built on the official SDK's low-level `Server`: the door decides itself what a call returns, a
reply, a tool error, or (protocol 2026-07-28, a client that declared elicitation) an
`InputRequiredResult` asking the person to decide the calls the turn parked on (or to answer the
model's question: a form of one field, a choice among its options or free text). That exchange
carries its own state through the client (`request_state`, signed here and bound to the caller),
so the client's retry may land on any web process. A client on an older protocol, or one that
cannot elicit, gets `status: "awaiting_approval"` and the playground link instead.

While the turn runs, each batch of its events is a progress notification (when the client asked
for progress).
"""
from __future__ import annotations

import json
import logging
from contextlib import aclosing
from typing import Any

import mcp_types as types
from channels.db import database_sync_to_async
from django.core import signing
from mcp.server.lowlevel.server import Server
from mcp_types.version import is_version_at_least

from agents.models import Agent
from channels_app import asking
from channels_app.auth import agent_scope
from channels_app.door_admission import REFUSALS, redis_down, refusal
from channels_app.doors import check
from channels_app.errors import APIError
from channels_app.mcp_door import inputs
from channels_app.mcp_door.caller import Caller, caller_of
from channels_app.ownership import get_agent
from channels_app.replies.sessions import SessionLinks
from sessions.plumbing.redisdown import redis_unreachable
from sessions.turn.approvals import MAX_ANSWER_CHARS

log = logging.getLogger(__name__)

# The first protocol revision that asks the client inside a tool's result rather than mid-call.
INPUT_REQUIRED_VERSION = "2026-07-28"
# How long the state of an approval exchange stays good: a person may take a while to answer.
STATE_MAX_AGE = 24 * 3600
STATE_SALT = "agentsite.mcp.ask"
CHANNEL = "mcp"

ASK_PROPERTIES: dict[str, Any] = {
    "message": {"type": "string", "description": "What to say to the agent."},
    "sessionId": {"type": "string", "description": "Continue this session (from an earlier result's "
                                                   "structuredContent); leave out to start a new one."},
    "continuationToken": {"type": "string", "description": "The token an earlier result gave, checked "
                                                           "against the session's current one (optional)."},
}
ASK_OUTPUT = {
    "type": "object",
    "properties": {
        "status": {"type": "string", "enum": ["completed", "failed", "interrupted", "awaiting_approval"]},
        "reply": {"type": "string"}, "sessionId": {"type": "string"}, "continuationToken": {"type": "string"},
        "turnId": {"type": "string"}, "playgroundUrl": {"type": "string"},
        "pendingApprovals": {"type": "array", "items": {"type": "object"}},
        "error": {"type": "string"},
    },
    "required": ["status", "sessionId", "continuationToken", "turnId"],
}
DECISION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decision": {"type": "string", "enum": ["approve", "deny"], "title": "Decision"},
        "reason": {"type": "string", "title": "Reason (optional)"},
    },
    "required": ["decision"],
}


def ask_tool(agent: dict[str, Any] | None) -> types.Tool:
    """`ask` on one agent's door (`agent`: its slug, name, description) or, without, on the server's."""
    properties = dict(ASK_PROPERTIES)
    required = ["message"]
    if agent is None:
        properties = {"agent": {"type": "string", "description": "The agent's slug (see list_agents)."},
                      **properties}
        required = ["agent", "message"]
        description = "Send a message to one of this server's agents and wait for its reply."
    else:
        about = f": {agent['description']}" if agent["description"] else ""
        description = f"Send a message to the agent {agent['name']}{about}. Waits for its reply."
    return types.Tool(name="ask", description=description, output_schema=ASK_OUTPUT,
                      input_schema={"type": "object", "properties": properties, "required": required})


LIST_AGENTS = types.Tool(name="list_agents", description="The agents on this server you may ask.",
                         input_schema={"type": "object", "properties": {}})


@database_sync_to_async
def _reachable(caller: Caller) -> list[dict[str, Any]]:
    agents = Agent.objects.exclude(active_deployment=None).order_by("slug")
    scope = agent_scope(caller.principal)
    if scope is not None:
        agents = agents.filter(slug__in=scope)
    return [{"slug": a.slug, "name": a.name or a.slug, "description": a.description} for a in agents]


@database_sync_to_async
def _agent(slug: str) -> dict[str, Any]:
    agent = get_agent(slug)
    return {"slug": agent.slug, "name": agent.name or agent.slug, "description": agent.description}


async def _list_tools(ctx, params) -> types.ListToolsResult:
    caller = caller_of(ctx)
    if caller.slug is None:
        return types.ListToolsResult(tools=[LIST_AGENTS, ask_tool(None)])
    return types.ListToolsResult(tools=[ask_tool(await _agent(caller.slug))])


async def _call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult | types.InputRequiredResult:
    caller = caller_of(ctx)
    try:
        if params.name == "list_agents" and caller.slug is None:
            agents = await _reachable(caller)
            return types.CallToolResult(content=[_text(json.dumps(agents))], structured_content={"agents": agents})
        if params.name != "ask":
            raise APIError(404, "tool_not_found", f"no tool {params.name!r} here: "
                           + ("list_agents and ask" if caller.slug is None else "only ask"))
        return await _ask(ctx, caller, params)
    except REFUSALS as exc:
        return _tool_error(refusal(exc))
    except redis_unreachable() as exc:  # the rate counters' cache restarting: the client tries again shortly
        return _tool_error(redis_down(exc))


def _tool_error(refused: APIError) -> types.CallToolResult:
    body: dict[str, Any] = {"error": {"code": refused.error_code, "message": refused.message}}
    if refused.details is not None:
        body["error"]["details"] = refused.details
    return types.CallToolResult(content=[_text(f"{refused.error_code}: {refused.message}")], structured_content=body,
                                is_error=True)


def _text(text: str) -> types.TextContent:
    return types.TextContent(type="text", text=text)


async def _ask(ctx, caller: Caller, params) -> types.CallToolResult | types.InputRequiredResult:
    cancelled = False
    if params.request_state is not None:
        asked = _resumed(caller, params.request_state)
        waiting = await database_sync_to_async(asking.pending_calls)(asked.turn_id)
        questions = {call["callId"] for call in waiting if call["kind"] == "question"}
        decisions, answers, cancelled = _decisions(params.input_responses or {}, questions)
        await database_sync_to_async(asking.decide)(caller.principal, asked, decisions, answers)
    else:
        given = inputs.checked(params.arguments or {}, inputs.AskAnyInput if caller.slug is None else inputs.AskInput)
        slug = caller.slug
        if slug is None:  # `/mcp`: the agent asked for against a token's scope (`/<slug>/mcp` was admitted so)
            slug = given.agent
            check(caller.principal, slug=slug)
        asked = await database_sync_to_async(asking.ask)(caller.principal, slug, given.message, given.session_id,
                                                         given.continuation_token, CHANNEL)
    pending = await _follow(ctx, asked)
    ended = await database_sync_to_async(asking.outcome)(asked.session_id, asked.turn_id, asked.start, pending)
    if pending and not cancelled and _can_elicit(ctx):
        return types.InputRequiredResult(
            input_requests={call["callId"]: _approval_request(asked.slug, call) for call in pending},
            request_state=_state(caller, asked))
    return _result(caller, asked, ended)


async def _follow(ctx, asked: asking.Asked) -> list[dict[str, Any]]:
    """Follow the turn until it ends ([]) or waits on people (the calls it waits on), a progress
    notification per batch."""
    seen, waiting = 0, []
    async with aclosing(asking.settled(asked, waiting=waiting)) as batches:
        async for batch in batches:
            seen += len(batch)
            await ctx.session.report_progress(seen, None, f"{batch[-1].type} (session {asked.session_id})")
    return waiting


def _can_elicit(ctx) -> bool:
    version = getattr(ctx, "protocol_version", None) or ""
    capabilities = ctx.session.client_capabilities
    return (bool(version) and is_version_at_least(version, INPUT_REQUIRED_VERSION)
            and capabilities is not None and capabilities.elicitation is not None)


def _approval_request(slug: str, call: dict[str, Any]) -> types.ElicitRequest:
    if call["kind"] == "question":
        return _question_request(slug, call["input"])
    message = (f"The agent {slug} wants to run {call['toolName']} with {json.dumps(call['input'])}. "
               "Approve it?")
    return types.ElicitRequest(params=types.ElicitRequestFormParams(message=message, requested_schema=DECISION_SCHEMA))


def _question_request(slug: str, asked: dict[str, Any]) -> types.ElicitRequest:
    """The model's question as a form of one field: a choice among its options, or free text without."""
    answer: dict[str, Any] = {"type": "string", "title": "Answer"}
    if asked.get("options"):
        answer["enum"] = list(asked["options"])
    else:
        answer.update(minLength=1, maxLength=MAX_ANSWER_CHARS)
    schema = {"type": "object", "properties": {"answer": answer}, "required": ["answer"]}
    message = f"The agent {slug} asks: {asked.get('question', '')}"
    return types.ElicitRequest(params=types.ElicitRequestFormParams(message=message, requested_schema=schema))


def _decisions(responses: dict[str, Any], questions: set[str]) -> tuple[dict[str, tuple[str, str]],
                                                                        dict[str, str], bool]:
    """The person's responses as decisions and answers, and whether they dismissed one (cancel decides
    nothing: the call then ends `awaiting_approval`, not asked again). Accept carries approve or deny, or a
    question's answer; decline denies a call, and leaves a question waiting (nobody answered it)."""
    decided: dict[str, tuple[str, str]] = {}
    answers: dict[str, str] = {}
    cancelled = False
    for call_id, response in responses.items():
        action = getattr(response, "action", None)
        content = getattr(response, "content", None) or {}
        if call_id in questions or "answer" in content:  # (one answered meanwhile elsewhere is not waiting)
            if action == "accept" and "answer" in content:
                answers[call_id] = content["answer"]  # checked as every door's answer is
            else:
                cancelled = True
        elif action == "accept" and content.get("decision") in ("approve", "deny"):
            decided[call_id] = (str(content["decision"]), str(content.get("reason") or ""))
        elif action == "decline":
            decided[call_id] = ("deny", "declined in the MCP client")
        else:
            cancelled = True
    return decided, answers, cancelled


def _bound_to(caller: Caller) -> list[str]:
    """Whom an exchange's state belongs to: the principal, and the personal token it came with."""
    principal = caller.principal
    return [principal.authenticator, principal.principal_id, str(principal.attributes.get("token") or "")]


def _state(caller: Caller, asked: asking.Asked) -> str:
    return signing.dumps({"p": _bound_to(caller), "s": asked.slug, "i": asked.session_id, "t": asked.turn_id,
                          "k": asked.continuation_token, "m": asked.mode, "n": asked.start},
                         salt=STATE_SALT, compress=True)


def _resumed(caller: Caller, state: str) -> asking.Asked:
    try:
        data = signing.loads(state, salt=STATE_SALT, max_age=STATE_MAX_AGE)
    except signing.BadSignature:
        raise APIError(400, "invalid_request_state", "requestState is not one this server gave, or it is "
                                                     "over a day old: ask again") from None
    if data.get("p") != _bound_to(caller):
        raise APIError(403, "forbidden", "requestState was given to another principal or token")
    if caller.slug is not None and data["s"] != caller.slug:
        raise APIError(400, "invalid_request_state", "requestState names another agent")
    check(caller.principal, slug=data["s"])
    return asking.Asked(data["s"], data["i"], data["t"], data["n"], data["k"], data["m"])


def _result(caller: Caller, asked: asking.Asked, ended: asking.Outcome) -> types.CallToolResult:
    links = SessionLinks.at(caller.origin, asked.slug, asked.session_id)
    body: dict[str, Any] = {"status": ended.status, "reply": ended.reply, "sessionId": asked.session_id,
                            "continuationToken": asked.continuation_token, "turnId": asked.turn_id,
                            "playgroundUrl": links.playground_url}
    if ended.status == "awaiting_approval":
        body["pendingApprovals"] = ended.pending
        said = [f"The agent asks: {call['input'].get('question', '')}" for call in ended.pending
                if call["kind"] == "question"]
        if names := ", ".join(call["toolName"] for call in ended.pending if call["kind"] == "approval"):
            said.append(f"The agent is waiting for a person to approve {names}")
        act = "decide it" if names else "answer it"
        text = f"{'; '.join(said)}: {act} at {links.playground_url}, then ask again with sessionId {asked.session_id}."
        return types.CallToolResult(content=[_text(text)], structured_content=body)
    if ended.status != "completed":
        body["error"] = ended.error
        return types.CallToolResult(content=[_text(ended.error)], structured_content=body, is_error=True)
    return types.CallToolResult(content=[_text(ended.reply)], structured_content=body)


def servers() -> tuple[Server, Server]:
    """The server of one agent's door and the server of every agent's door."""
    one = Server("agentsite", on_list_tools=_list_tools, on_call_tool=_call_tool,
                 instructions="Each call of ask is one message to the agent; pass the sessionId it returns "
                              "to continue the conversation.")
    every = Server("agentsite", on_list_tools=_list_tools, on_call_tool=_call_tool,
                   instructions="list_agents names the agents; ask(agent, message) talks to one of them.")
    return one, every

