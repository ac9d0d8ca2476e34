"""Agents as A2A servers, asked by the official `a2a-sdk` client on a real `manage.py serve`: the
embedded default (SQLite) and PostgreSQL + Redis with two web processes, where a stream and its
resubscription land on either process.

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
import pytest
from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.types import a2a_pb2 as a2a
from a2a.utils import errors
from google.protobuf.json_format import MessageToDict

from tests.channels_app.test_live_mcp_door import CANCEL, cast
from tests.server_database import on_server_database
from tests.support import Server, backend_env, run_server

SERVER_TOKEN = "a2a-door-server-token-0123456789"
SLOW = 'from agents.sdk import Agent\nagent = Agent(model="scripted:echo", params={"chunk_delay_ms": 40})\n'
LONG = " ".join(f"word{n}" for n in range(200))  # ~2.5 s of chunks: the resubscription comes mid-reply, under load too
SEND_03 = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {
    "message": {"role": "user", "messageId": "m1", "parts": [{"kind": "text", "text": "hello"}]}}}


@dataclass
class Door:
    server: Server
    tokens: dict[str, str]

    def headers(self, caller: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[caller]}"} if caller in self.tokens else {}

    def http(self) -> httpx.Client:
        return httpx.Client(base_url=self.server.base_url, timeout=30)

    def run(self, slug: str, caller: str, calls: Any, streaming: bool = True) -> Any:
        """Run `calls(client)` with an A2A client made from agent `slug`'s card (`client.card`), as `caller`."""
        async def run():
            async with httpx.AsyncClient(headers=self.headers(caller), timeout=60) as http:
                card = await A2ACardResolver(http, f"{self.server.base_url}/{slug}").get_agent_card()
                client = await create_client(card, ClientConfig(httpx_client=http, streaming=streaming))
                client.card = card
                return await calls(client)
        return asyncio.run(run())

    def events(self, slug: str, session: str) -> list[dict[str, Any]]:
        with self.http() as client:
            reply = client.get(f"/{slug}/v1/session/{session}/events", headers=self.headers("owner"))
        return [json.loads(line) for line in reply.text.splitlines()]


@pytest.fixture(scope="module", params=["sqlite", "postgres+redis"])
def door(request, tmp_path_factory, django_db_blocker) -> Iterator[Door]:
    agents = tmp_path_factory.mktemp("agents")
    (agents / "slow" / "agent").mkdir(parents=True)
    (agents / "slow" / "agent" / "agent.py").write_text(SLOW)
    (agents / "slow" / "agent" / "instructions.md").write_text("Echo, slowly.\n")
    with contextlib.ExitStack() as stack:
        env = backend_env(stack, request.param, migrated=True)
        extra = ["--web-processes", "2"] if request.param != "sqlite" else []
        server = stack.enter_context(run_server(tmp_path_factory.mktemp("a2a"), "--bearer-token", SERVER_TOKEN,
                                                "--no-schedules", "--agents", str(agents / "slow"), *extra, env=env))
        with on_server_database(server.state_root, django_db_blocker, env):
            tokens = cast()
        yield Door(server, {**tokens, "server_token": SERVER_TOKEN})


def message(text: str = "", task: a2a.Task | None = None, data: Any = None) -> a2a.SendMessageRequest:
    parts = [a2a.Part(text=text)] if text else []
    if data is not None:
        part = a2a.Part()
        part.data.struct_value.update(data)
        parts.append(part)
    sent = a2a.Message(message_id="m", role=a2a.ROLE_USER, parts=parts)
    if task is not None:
        sent.task_id, sent.context_id = task.id, task.context_id
    return a2a.SendMessageRequest(message=sent)


async def final(client, request: a2a.SendMessageRequest) -> a2a.Task:
    """What a non-streaming client gets: the task once it ended or waits on a person."""
    got = [response async for response in client.send_message(request)]
    assert [response.WhichOneof("payload") for response in got] == ["task"]
    return got[0].task


def reply_of(task: a2a.Task) -> str:
    return "".join(part.text for artifact in task.artifacts for part in artifact.parts)


def state_of(response: a2a.StreamResponse) -> int:
    """The task's state as a stream's response tells it (the task itself, or a status update)."""
    return response.task.status.state if response.HasField("task") else response.status_update.status.state


def index_of(response: a2a.StreamResponse) -> int:
    """The index in the session's log of the event an update comes from."""
    return int(getattr(response, response.WhichOneof("payload")).metadata["agentsite"]["index"])


def test_a_client_reads_the_card_sends_and_continues_the_context(door: Door):
    async def calls(client):
        card = client.card
        first = await final(client, message("Where is my order?"))
        again = await final(client, _in_context(first, "Thanks"))
        fetched = await client.get_task(a2a.GetTaskRequest(id=first.id, history_length=1))
        return card, first, again, fetched

    card, first, again, fetched = door.run("support", "owner", calls, streaming=False)
    assert card.name == "Shop support" and card.capabilities.streaming
    assert {skill.id for skill in card.skills} == {"cancel_order", "lookup_order", "refund_order"}
    assert card.supported_interfaces[0].url == f"{door.server.base_url}/support/a2a"
    assert "bearer" in card.security_schemes
    assert first.status.state == a2a.TASK_STATE_COMPLETED and reply_of(first) == "You said: Where is my order?"
    assert [m.role for m in first.history] == [a2a.ROLE_USER, a2a.ROLE_AGENT]
    assert again.context_id == first.context_id and again.id != first.id
    assert reply_of(again) == "You said: Thanks"
    assert [m.parts[0].text for m in fetched.history] == ["You said: Where is my order?"]
    with door.http() as client:
        detail = client.get(f"/support/v1/session/{first.context_id}", headers=door.headers("owner")).json()
    assert (detail["channel"], detail["principal"]["principalId"]) == ("a2a", "mia")
    received = [e["data"]["text"] for e in door.events("support", first.context_id) if e["type"] == "message.received"]
    assert received == ["Where is my order?", "Thanks"]


def _in_context(task: a2a.Task, text: str) -> a2a.SendMessageRequest:
    request = message(text)
    request.message.context_id = task.context_id
    return request


def test_a_stream_resubscribed_after_a_dropped_connection_loses_and_repeats_nothing(door: Door):
    async def calls(client):
        before: list[a2a.StreamResponse] = []
        stream = client.send_message(message(LONG))
        async for response in stream:
            before.append(response)
            if len([r for r in before if r.HasField("artifact_update")]) == 3:
                break  # the connection drops mid-reply
        await stream.aclose()
        task_id = before[0].task.id
        after = [response async for response in client.subscribe(a2a.SubscribeToTaskRequest(id=task_id))]
        return before, after

    before, after = door.run("slow", "owner", calls)
    assert before[0].HasField("task") and after[0].HasField("task")
    snapshot, updates = after[0].task, after[1:]
    assert snapshot.status.state == a2a.TASK_STATE_WORKING and reply_of(snapshot)
    seen = [index_of(r) for r in before[1:]]
    later = [index_of(r) for r in updates]
    assert later and min(later) > max(seen), "an event came twice"
    assert len(later) == len(set(later))
    chunks = [r.artifact_update for r in updates if r.HasField("artifact_update")]
    streamed = reply_of(snapshot) + "".join(c.artifact.parts[0].text for c in chunks if not c.last_chunk)
    assert streamed == f"You said: {LONG}", "a chunk was lost or repeated"
    assert chunks[-1].last_chunk and chunks[-1].artifact.parts[0].text == f"You said: {LONG}"
    assert updates[-1].status_update.status.state == a2a.TASK_STATE_COMPLETED
    log = [e["index"] for e in door.events("slow", snapshot.context_id) if e["type"] == "message.appended"]
    assert set(later) & set(log) == {index_of(r) for r in updates if r.HasField("artifact_update")
                                     and not r.artifact_update.last_chunk}


def test_a_cancelled_task_stops_its_turn(door: Door):
    async def calls(client):
        stream = client.send_message(message("/sleep 20000\nnever"))
        first = await anext(stream)
        await stream.aclose()
        cancelled = await client.cancel_task(a2a.CancelTaskRequest(id=first.task.id))
        with pytest.raises(errors.TaskNotCancelableError) as again:
            await client.cancel_task(a2a.CancelTaskRequest(id=first.task.id))
        parked = [r async for r in client.send_message(message(CANCEL))]
        stopped = await client.cancel_task(a2a.CancelTaskRequest(id=parked[0].task.id))
        return cancelled, again.value, parked, stopped

    cancelled, again, parked, stopped = door.run("support", "owner", calls)
    assert cancelled.status.state == a2a.TASK_STATE_CANCELED
    assert state_of(parked[-1]) == a2a.TASK_STATE_INPUT_REQUIRED
    assert stopped.status.state == a2a.TASK_STATE_CANCELED, "a task waiting on a person is cancelled too"
    assert again.data["code"] == "task_not_cancelable"
    failed = [e["data"] for e in door.events("support", cancelled.context_id) if e["type"] == "turn.failed"]
    assert [f["code"] for f in failed] == ["interrupted"]


def test_an_input_required_approval_completes_with_the_decision(door: Door):
    async def calls(client):
        parked = await final(client, message(CANCEL))
        decided = await final(client, message("approve", parked))
        with pytest.raises(errors.InvalidParamsError) as ended:
            await final(client, message("approve", decided))
        denied_first = await final(client, message(CANCEL.replace("A102", "A103")))
        denied = await final(client, message(task=denied_first, data={"decision": "deny", "reason": "not now"}))
        return parked, decided, ended.value, denied

    parked, decided, ended, denied = door.run("support", "owner", calls, streaming=False)
    assert parked.status.state == a2a.TASK_STATE_INPUT_REQUIRED
    pending = MessageToDict(parked.status.message.parts[1].data)["pendingApprovals"]
    assert [(p["toolName"], p["input"]) for p in pending] == [("cancel_order", {"order_id": "A102"})]
    assert decided.id == parked.id and decided.status.state == a2a.TASK_STATE_COMPLETED
    assert "cancel_order (ok)" in reply_of(decided) and '"cancelled": true' in reply_of(decided)
    assert ended.data["code"] == "task_not_waiting"
    assert denied.status.state == a2a.TASK_STATE_COMPLETED and "cancel_order (error)" in reply_of(denied)
    events = door.events("support", parked.context_id)
    resolved = [e["data"] for e in events if e["type"] == "action.approval_resolved"]
    assert [(r["decision"], r["decidedBy"]["principalId"]) for r in resolved] == [("approve", "mia")]
    assert len([e for e in events if e["type"] == "action.result"]) == 1


def test_a_task_waits_on_a_person_while_any_call_of_its_step_does(door: Door):
    """One call of the step needs approval and the other runs: the task is input-required, whether
    waited for, fetched or resubscribed, until the decision."""
    both = CANCEL + '\n/call lookup_order {"order_id": "A100"}'

    async def calls(client):
        streamed = [r async for r in client.send_message(message(both))]
        task_id = streamed[0].task.id
        fetched = await client.get_task(a2a.GetTaskRequest(id=task_id))
        again = [r async for r in client.subscribe(a2a.SubscribeToTaskRequest(id=task_id))]
        listed = await client.list_tasks(a2a.ListTasksRequest(context_id=fetched.context_id))
        with pytest.raises(errors.InvalidParamsError) as bad_page:
            await client.list_tasks(a2a.ListTasksRequest(page_token="-5"))
        decided = [r async for r in client.send_message(message("yes", fetched))]
        final_task = await client.get_task(a2a.GetTaskRequest(id=task_id))
        return streamed, fetched, again, listed, bad_page.value, decided, final_task

    streamed, fetched, again, listed, bad_page, decided, final_task = door.run("support", "owner", calls)
    # A stream opens on the task as sent, however fast its turn ran: everything it did follows.
    assert streamed[0].task.status.state == a2a.TASK_STATE_SUBMITTED
    assert state_of(streamed[-1]) == a2a.TASK_STATE_INPUT_REQUIRED
    assert fetched.status.state == a2a.TASK_STATE_INPUT_REQUIRED
    assert [r.WhichOneof("payload") for r in again] == ["task"]  # waiting on a person: nothing to follow
    assert again[0].task.status.state == a2a.TASK_STATE_INPUT_REQUIRED
    assert [t.id for t in listed.tasks] == [fetched.id] and listed.total_size == 1
    assert bad_page.data["code"] == "invalid_page_token"
    assert state_of(decided[-1]) == a2a.TASK_STATE_COMPLETED
    assert "cancel_order (ok)" in reply_of(final_task) and "lookup_order (ok)" in reply_of(final_task)


def test_a_task_answers_only_its_owner_and_operators_read_it(door: Door):
    async def start(client):
        return await final(client, message("mine"))

    task = door.run("support", "owner", start, streaming=False)

    async def read(client):
        return await client.get_task(a2a.GetTaskRequest(id=task.id))

    async def intrude(client):
        return await final(client, _in_context(task, "yours?"))

    async def cancel(client):
        return await client.cancel_task(a2a.CancelTaskRequest(id=task.id))

    for calls in (read, cancel):
        with pytest.raises(errors.TaskNotFoundError):
            door.run("support", "member", calls, streaming=False)
    assert door.run("support", "operator", read, streaming=False).id == task.id
    with pytest.raises(errors.TaskNotCancelableError):  # found, and ended
        door.run("support", "operator", cancel, streaming=False)
    for caller in ("member", "operator"):
        with pytest.raises(errors.InvalidParamsError) as refused:
            door.run("support", caller, intrude, streaming=False)
        assert refused.value.data["code"] == "forbidden", caller
    assert reply_of(door.run("support", "owner", intrude, streaming=False)) == "You said: yours?"


def test_each_caller_at_the_doors(door: Door):
    def card(caller: str, slug: str = "support") -> httpx.Response:
        with door.http() as client:
            return client.get(f"/{slug}/.well-known/agent-card.json", headers=door.headers(caller))

    def rpc(caller: str, slug: str = "support", **headers: str) -> httpx.Response:
        with door.http() as client:
            return client.post(f"/{slug}/a2a", json=SEND_03, headers={**door.headers(caller), **headers})

    for caller in ("owner", "member", "operator", "scoped_here", "server_token"):
        assert card(caller).status_code == 200, caller
        answered = rpc(caller)
        assert answered.status_code == 200, (caller, answered.text)
        assert answered.json()["result"]["status"]["state"] == "completed", caller  # 0.3: message/send
    for caller in ("anonymous", "wrong", "revoked"):
        for refused in (card(caller), rpc(caller)):
            assert refused.status_code == 401, (caller, refused.text)
            assert refused.json()["error"]["code"] == "unauthorized"
            assert refused.headers["WWW-Authenticate"].startswith("Bearer")
    for refused in (card("scoped_elsewhere"), rpc("scoped_elsewhere")):
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "scoped_token"
    assert card("owner", "nobody").status_code == 404 and rpc("owner", "nobody").status_code == 404
    with door.http() as client:  # the upload limit of every route (AGENTSITE_MAX_BODY_BYTES, 1 MiB)
        huge = client.post("/support/a2a", content=b"x" * (1024 * 1024 + 1), headers=door.headers("owner"))
    assert huge.status_code == 413 and huge.json()["error"]["code"] == "body_too_large"
    foreign = rpc("owner", Origin="http://evil.example")
    assert foreign.status_code == 403 and foreign.json()["error"]["code"] == "foreign_origin"
    with door.http() as client:
        wrong_method = client.get("/support/a2a", headers=door.headers("owner"))
        assert wrong_method.status_code == 405 and wrong_method.headers["Allow"] == "POST"
        # a reserved slug's paths stay Django's: no page here, rather than the door's 405
        assert client.get("/docs/a2a", headers=door.headers("owner")).status_code == 404


def test_bad_input_is_a_clear_error(door: Door):
    async def calls(client):
        found = []
        for request in (message(""), message("hi\x00there")):
            with pytest.raises(errors.InvalidParamsError) as refused:
                await final(client, request)
            found.append(refused.value.data["code"])
        with pytest.raises(errors.TaskNotFoundError):
            await client.get_task(a2a.GetTaskRequest(id="turn_nope"))
        bad = message("hi")
        bad.message.parts.append(a2a.Part(url="http://example.com/x.png"))
        with pytest.raises(errors.ContentTypeNotSupportedError):
            await final(client, bad)
        return found

    assert door.run("support", "owner", calls, streaming=False) == ["invalid_request", "invalid_text"]
