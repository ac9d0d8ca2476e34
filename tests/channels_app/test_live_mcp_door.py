"""Agents as MCP servers, asked by the official `mcp` client over streamable HTTP, on a real `manage.py
serve`: the embedded default (SQLite) and PostgreSQL + Redis with two web processes, where a client's
requests, the retry that carries an approval among them, land on either process.

The server admits callers by bearer (`--bearer-token`) and personal tokens, so the door is asked as
every caller: the owner of a session, another member, an operator, a token scoped to the agent, one
scoped elsewhere, a revoked one, a wrong one, and none.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass
from typing import Any, Iterator

import httpx
import httpx2
import mcp_types as types
import pytest
from django.contrib.auth.models import Group, User
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from sessions.models import PersonalToken
from sessions.principal import OPERATORS_GROUP
from tests.server_database import on_server_database
from tests.support import Server, backend_env, run_server

SERVER_TOKEN = "mcp-door-server-token-0123456789"
CANCEL = '/call cancel_order {"order_id": "A102"}'
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@dataclass
class Door:
    server: Server
    tokens: dict[str, str]
    env: dict[str, str]

    def headers(self, caller: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[caller]}"} if caller in self.tokens else {}

    def http(self) -> httpx.Client:
        return httpx.Client(base_url=self.server.base_url, timeout=30)

    def raw(self, path: str, caller: str, **headers: str) -> httpx.Response:
        with self.http() as client:
            return client.post(path, json=INITIALIZE, headers={**MCP_HEADERS, **self.headers(caller), **headers})

    def ask(self, path: str, caller: str, calls: Any, elicit=None, mode: str = "auto") -> Any:
        """Run `calls(client)` in an MCP client session on `path` as `caller`."""
        async def run():
            http_client = httpx2.AsyncClient(headers=self.headers(caller), timeout=60)
            async with http_client, Client(streamable_http_client(self.server.base_url + path, http_client=http_client),
                                           elicitation_callback=elicit, mode=mode) as client:
                return await calls(client)
        return asyncio.run(run())


def cast() -> dict[str, str]:
    mia, max_, olga = (User.objects.create_user(n, password="pw") for n in ("mia", "max", "olga"))
    olga.groups.add(Group.objects.get_or_create(name=OPERATORS_GROUP)[0])
    revoked, secret = PersonalToken.issue(mia, "old")
    revoked.revoke()
    return {
        "owner": PersonalToken.issue(mia, "t")[1], "member": PersonalToken.issue(max_, "t")[1],
        "operator": PersonalToken.issue(olga, "t")[1],
        "scoped_here": PersonalToken.issue(olga, "here", agents=["support"])[1],
        "scoped_elsewhere": PersonalToken.issue(olga, "elsewhere", agents=["notes"])[1],
        "revoked": secret, "wrong": "ast_" + "x" * 40, "server_token": SERVER_TOKEN,
    }


@pytest.fixture(scope="module", params=["sqlite", "postgres+redis"])
def door(request, tmp_path_factory, django_db_blocker) -> Iterator[Door]:
    with contextlib.ExitStack() as stack:
        env = backend_env(stack, request.param, migrated=True)
        extra = ["--web-processes", "2"] if request.param != "sqlite" else []
        server = stack.enter_context(run_server(tmp_path_factory.mktemp("mcp"), "--bearer-token", SERVER_TOKEN,
                                                "--no-schedules", *extra, env=env))
        with on_server_database(server.state_root, django_db_blocker, env):
            tokens = cast()
        yield Door(server, tokens, env)


def text(result: types.CallToolResult) -> str:
    return result.content[0].text


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_client_asks_sees_progress_and_continues_the_session(door: Door, mode: str):
    progress: list[str] = []

    async def on_progress(value, total, message):
        progress.append(message)

    async def calls(client: Client):
        listed = [tool.name for tool in (await client.list_tools()).tools]
        first = await client.call_tool("ask", {"message": "Where is my order?"}, progress_callback=on_progress)
        again = await client.call_tool("ask", {"message": "Thanks", "sessionId": first.structured_content["sessionId"],
                                               "continuationToken": first.structured_content["continuationToken"]})
        return listed, first, again

    listed, first, again = door.ask("/support/mcp", "owner", calls, mode=mode)
    assert listed == ["ask"]
    assert not first.is_error and text(first) == "You said: Where is my order?"
    assert first.structured_content["status"] == "completed"
    session = first.structured_content["sessionId"]
    assert progress and progress[-1] == f"session.waiting (session {session})"
    assert again.structured_content["sessionId"] == session and text(again) == "You said: Thanks"
    assert again.structured_content["continuationToken"] != first.structured_content["continuationToken"]
    with door.http() as client:
        detail = client.get(f"/support/v1/session/{session}", headers=door.headers("owner")).json()
        events = client.get(f"/support/v1/session/{session}/events", headers=door.headers("owner")).text
    assert (detail["channel"], detail["principal"]["principalId"]) == ("mcp", "mia")
    received = [json.loads(line)["data"]["text"] for line in events.splitlines()
                if json.loads(line)["type"] == "message.received"]
    assert received == ["Where is my order?", "Thanks"]


def test_an_approval_is_asked_through_elicitation_and_the_call_runs_once(door: Door):
    asked: list[str] = []

    async def approve(context, params):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"decision": "approve"})

    async def calls(client: Client):
        return await client.call_tool("ask", {"message": CANCEL})

    result = door.ask("/support/mcp", "owner", calls, elicit=approve)
    assert asked == ['The agent support wants to run cancel_order with {"order_id": "A102"}. Approve it?']
    assert not result.is_error and result.structured_content["status"] == "completed"
    assert "cancel_order (ok)" in text(result) and '"cancelled": true' in text(result)
    session = result.structured_content["sessionId"]
    with door.http() as client:
        events = [json.loads(line) for line in client.get(
            f"/support/v1/session/{session}/events", headers=door.headers("owner")).text.splitlines()]
    resolved = [e["data"] for e in events if e["type"] == "action.approval_resolved"]
    assert [(r["decision"], r["decidedBy"]["principalId"]) for r in resolved] == [("approve", "mia")]
    assert len([e for e in events if e["type"] == "action.result"]) == 1


def test_a_declined_approval_denies_the_call(door: Door):
    async def decline(context, params):
        return types.ElicitResult(action="decline")

    async def calls(client: Client):
        return await client.call_tool("ask", {"message": CANCEL})

    result = door.ask("/support/mcp", "owner", calls, elicit=decline)
    assert result.structured_content["status"] == "completed"
    assert "cancel_order (error)" in text(result) and "denied" in text(result)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_without_elicitation_the_call_ends_awaiting_approval_and_a_later_ask_continues(door: Door, mode: str):
    async def first(client: Client):
        parked = await client.call_tool("ask", {"message": CANCEL})
        early = await client.call_tool("ask", {"message": "done?", "sessionId": parked.structured_content["sessionId"]})
        return parked, early

    parked, early = door.ask("/support/mcp", "owner", first, mode=mode)
    body = parked.structured_content
    assert not parked.is_error and body["status"] == "awaiting_approval"
    assert [(p["toolName"], p["input"]) for p in body["pendingApprovals"]] == [("cancel_order", {"order_id": "A102"})]
    session = body["sessionId"]
    assert body["playgroundUrl"] == f"{door.server.base_url}/playground/support?sessionId={session}"
    assert early.is_error and early.structured_content["error"]["code"] == "awaiting_approval"
    with door.http() as client:
        events = client.get(f"/support/v1/session/{session}/events", headers=door.headers("owner")).text
    assert "done?" not in events, "the refused message was not admitted"

    with door.http() as client:
        decided = client.post(f"/support/v1/session/{session}/approvals/{body['pendingApprovals'][0]['callId']}",
                              json={"decision": "approve"}, headers=door.headers("owner"))
        assert decided.status_code == 200, decided.text

    async def later(client: Client):
        return await client.call_tool("ask", {"message": "Is it cancelled?", "sessionId": session})

    answered = door.ask("/support/mcp", "owner", later, mode=mode)
    assert not answered.is_error and text(answered) == "You said: Is it cancelled?"


def test_the_server_door_lists_the_reachable_agents_and_asks_one_by_slug(door: Door):
    async def calls(client: Client):
        tools = [tool.name for tool in (await client.list_tools()).tools]
        listed = (await client.call_tool("list_agents", {})).structured_content["agents"]
        here = await client.call_tool("ask", {"agent": "support", "message": "hi"})
        there = await client.call_tool("ask", {"agent": "notes", "message": "hi"})
        return tools, listed, here, there

    tools, listed, here, there = door.ask("/mcp", "scoped_here", calls)
    assert tools == ["list_agents", "ask"]
    assert [agent["slug"] for agent in listed] == ["support"]
    assert text(here) == "You said: hi"
    assert there.is_error and there.structured_content["error"]["code"] == "scoped_token"

    _, everyone, _, _ = door.ask("/mcp", "operator", calls)
    assert {"support", "notes"} <= {agent["slug"] for agent in everyone}


def test_each_caller_at_the_doors(door: Door):
    for path in ("/support/mcp", "/mcp"):
        for caller in ("owner", "member", "operator", "scoped_here"):
            assert door.raw(path, caller).status_code == 200, (path, caller)
        for caller in ("anonymous", "wrong", "revoked"):
            refused = door.raw(path, caller)
            assert refused.status_code == 401, (path, caller, refused.text)
            assert refused.json()["error"]["code"] == "unauthorized"
            assert refused.headers["WWW-Authenticate"].startswith("Bearer")
    assert door.raw("/mcp", "scoped_elsewhere").status_code == 200  # it lists the agents of its scope
    refused = door.raw("/support/mcp", "scoped_elsewhere")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "scoped_token"
    assert door.raw("/nobody/mcp", "owner").status_code == 404
    assert door.raw("/support/mcp", "server_token").status_code == 200  # serve --bearer-token
    with door.http() as client:  # a reserved slug's path stays Django's: the page on MCP servers
        assert client.get("/docs/mcp").status_code == 200
    foreign = door.raw("/support/mcp", "owner", Origin="http://evil.example")
    assert foreign.status_code == 403 and foreign.json()["error"]["code"] == "foreign_origin"


def test_a_session_answers_only_its_owner(door: Door):
    async def start(client: Client):
        return await client.call_tool("ask", {"message": "mine"})

    session = door.ask("/support/mcp", "owner", start).structured_content["sessionId"]

    async def intrude(client: Client):
        return await client.call_tool("ask", {"message": "yours?", "sessionId": session})

    for caller in ("member", "operator"):
        refused = door.ask("/support/mcp", caller, intrude)
        assert refused.is_error and refused.structured_content["error"]["code"] == "forbidden", caller
    assert text(door.ask("/support/mcp", "owner", intrude)) == "You said: yours?"


def test_a_dismissed_question_ends_the_call_awaiting_approval_without_asking_again(door: Door):
    asked: list[str] = []

    async def dismiss(context, params):
        asked.append(params.message)
        return types.ElicitResult(action="cancel")

    async def calls(client: Client):
        return await client.call_tool("ask", {"message": CANCEL})

    result = door.ask("/support/mcp", "owner", calls, elicit=dismiss)
    assert len(asked) == 1
    assert result.structured_content["status"] == "awaiting_approval"
    assert [p["toolName"] for p in result.structured_content["pendingApprovals"]] == ["cancel_order"]


def test_two_calls_waiting_in_one_turn_are_asked_together(door: Door):
    asked: list[str] = []

    async def answer(context, params):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"decision": "deny" if "A101" in params.message
                                                            else "approve"})

    message = '/call cancel_order {"order_id": "A102"}\n/call cancel_order {"order_id": "A101"}'

    async def calls(client: Client):
        return await client.call_tool("ask", {"message": message})

    result = door.ask("/support/mcp", "owner", calls, elicit=answer)
    assert sorted(asked) == sorted(f'The agent support wants to run cancel_order with {{"order_id": "{order}"}}. '
                                   "Approve it?" for order in ("A101", "A102"))
    assert result.structured_content["status"] == "completed"
    assert "cancel_order (ok)" in text(result) and "cancel_order (error)" in text(result)


def test_an_approvals_state_answers_only_the_token_it_was_given_to(door: Door):
    """The exchange's state is the caller's: another person, or the same person's token scoped elsewhere,
    cannot decide with it; and a state the server did not sign is refused."""
    async def park(client: Client):
        return await client.session.call_tool("ask", {"agent": "support", "message": CANCEL},
                                              allow_input_required=True)

    async def elicit(context, params):
        return types.ElicitResult(action="accept", content={"decision": "approve"})

    parked = door.ask("/mcp", "scoped_here", park, elicit=elicit)
    assert isinstance(parked, types.InputRequiredResult)
    [call_id] = parked.input_requests
    approve = {call_id: types.ElicitResult(action="accept", content={"decision": "approve"})}

    def retry(state: str):
        async def calls(client: Client):
            return await client.session.call_tool("ask", {"agent": "support", "message": CANCEL},
                                                  input_responses=approve, request_state=state)
        return calls

    for caller, code in (("scoped_elsewhere", "forbidden"), ("member", "forbidden"), ("operator", "forbidden")):
        refused = door.ask("/mcp", caller, retry(parked.request_state), elicit=elicit)
        assert refused.is_error and refused.structured_content["error"]["code"] == code, caller
    forged = door.ask("/mcp", "scoped_here", retry(parked.request_state[:-4] + "AAAA"), elicit=elicit)
    assert forged.structured_content["error"]["code"] == "invalid_request_state"
    with door.http() as client:
        session = client.get("/support/v1/sessions", headers=door.headers("scoped_here")).json()["sessions"][0]
        pending = client.get(f"/support/v1/session/{session['sessionId']}/approvals",
                             headers=door.headers("scoped_here")).json()
    assert [p["callId"] for p in pending["approvals"]] == [call_id], "nothing was decided"

    done = door.ask("/mcp", "scoped_here", retry(parked.request_state), elicit=elicit)
    assert done.structured_content["status"] == "completed" and "cancel_order (ok)" in text(done)


def test_arguments_are_checked_as_the_http_route_checks_a_message(door: Door):
    async def calls(client: Client):
        return [await client.call_tool("ask", arguments) for arguments in (
            {"message": "a\u0000b"}, {"message": "   "}, {"message": "x" * 100_001}, {"message": 3},
            {"message": "hi", "sessionId": "ses_nobody"}, {"message": "hi", "colour": "red"})]

    codes = [r.structured_content["error"]["code"] for r in door.ask("/support/mcp", "owner", calls)]
    assert codes == ["invalid_text", "invalid_request", "invalid_request", "invalid_request", "session_not_found",
                     "invalid_request"]
