"""Custom channels over HTTP: routes under /<slug>/v1/channels/<id>/..., their
validation, handler arguments, continuation keys, per-session state, the
events map, background work, and how /info lists them."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.test import Client

from agents.discovery import deploy_agent_folder
from channels_app import custom_channels
from sessions.events import read_events
from sessions.models import Session

ROOT = Path(__file__).resolve().parents[2]
WEBHOOK = ROOT / "examples" / "webhook"
transactional = pytest.mark.django_db(transaction=True)

LAB_CHANNEL = '''\
import json
import re
from pydantic import BaseModel, Field
from django.http import HttpResponse
from agents.sdk import GET, POST, PUT, PATCH, DELETE, Channel

CALLS = {calls!r}


class Page(BaseModel):
    limit: int = Field(ge=1, le=50)


class Empty(BaseModel):
    pass


class Optional(BaseModel):
    note: str = "none"


class Start(BaseModel):
    text: str
    key: str | None = None
    admission: str = "preempt"


class Reply(BaseModel):
    ok: bool
    limit: int


def record(what):
    with open(CALLS, "a") as f:
        f.write(json.dumps(what) + "\\n")


def listing(req):
    return Reply(ok=True, limit=req.query.limit)


def optional(req):
    return {{"note": req.body.note}}


def item(req):
    return {{"id": req.params["item_id"], "sub": req.params["sub"], "ip": req.request_ip,
             "principal": req.auth.principal_id, "method": req.request.method}}


def boom(req):
    raise RuntimeError("secret internals")


def raw(req):
    return HttpResponse("plain text", content_type="text/plain", status=202)


def nothing(req):
    return None


def start(req):
    files = [{{"path": "inbox/note.txt", "content": "from the channel"}}] if req.body.text == "with a file" else None
    h = req.send(req.body.text, continuation_token=req.body.key, admission=req.body.admission,
                 state={{"from": "route"}}, workspace_files=files)
    return {{"sessionId": h.session_id, "created": h.created, "status": h.status}}


def touch_state(req):
    state = req.state_of(req.params["sid"]).update({{"touched": True}})
    return state


def info_about(req):
    key = req.params["key"]
    found = req.find_continuation(key)
    return {{"has": req.has_continuation_session(key), "busy": req.is_continuation_busy(key),
             "sessionId": found.session_id if found else None}}


def later(ctx, word):
    record({{"later": word, "channel": ctx.channel_id}})


def defer(req):
    req.wait_until(later, "hello")
    return {{"deferred": True}}


def emit(req):
    return {{"index": req.emit_assistant_message(req.params["sid"], "done by the host")}}


def interrupt(req):
    return {{"interrupted": req.interrupt_continuation(req.params["key"])}}


def gated(req):
    return req.call_tool("refund", {{"order_id": "A1"}}, session_id=req.params["sid"])


def decide(req):
    return req.resolve_approval(req.params["sid"], req.params["call"], "approve", reason="ok by chat")


def form(req):
    return {{"bytes": req.raw_body.decode(), "type": req.headers.get("content-type"), "dev": req.dev_loopback}}


def once(req):
    delivery = req.headers["x-delivery"]
    with req.atomic():
        if not req.claim_delivery(delivery):
            return {{"duplicate": True}}
        h = req.send("delivered " + delivery)
        if req.raw_body == b"fail after the claim":
            raise RuntimeError("the send is rolled back with the claim")
    return {{"duplicate": False, "sessionId": h.session_id}}


def on_completed(event, channel, ctx):
    record({{"event": event["type"], "session": ctx.session.id, "index": event["index"]}})
    channel.state.modify(lambda s: {{**s, "replies": [*s.get("replies", []), event["data"]["text"]]}})


def on_any(event, channel, ctx):
    if event["type"] == "session.started":
        raise RuntimeError("a failing handler is only logged")


def started(ctx):
    record({{"on_start": ctx.channel_id}})


def stopped():
    record({{"on_stop": True}})


channel = Channel(
    routes=[
        GET("/items", query=Page, handler=listing),
        POST("/optional", body=Optional, handler=optional),
        GET("/items/:item_id/:sub", query=Empty, handler=item),
        DELETE("/items/:item_id/:sub", handler=item),
        POST("/boom", body=Empty, handler=boom),
        GET("/raw", query=Empty, handler=raw),
        PUT("/nothing", body=Empty, handler=nothing),
        POST("/start", body=Start, handler=start),
        PATCH("/state/:sid", body=Empty, handler=touch_state),
        GET("/continuation/:key", query=Empty, handler=info_about),
        POST("/defer", body=Empty, handler=defer),
        POST("/emit/:sid", body=Empty, handler=emit),
        POST("/interrupt/:key", body=Empty, handler=interrupt),
        POST("/gated/:sid", body=Empty, handler=gated),
        POST("/decide/:sid/:call", body=Empty, handler=decide),
        POST("/form", raw=True, handler=form),
        POST("/once", raw=True, handler=once),
    ],
    events={{"message.completed": on_completed, "*": on_any}},
    state={{"replies": []}},
    on_start=started,
    on_stop=stopped,
)
'''

WHO = '''\
from pydantic import BaseModel
from agents.sdk import GET, POST, Channel, {policy_import}


class Empty(BaseModel):
    pass


def who(req):
    return {{"authenticator": req.auth.authenticator, "principal": req.auth.principal_id}}


def start(req):
    as_app = {{"principal_id": "bot", "authenticator": "app"}} if req.request.GET.get("as") == "app" else None
    return {{"sessionId": req.send("hello", auth=as_app).session_id}}


{extra}
class Text(BaseModel):
    text: str = ""


channel = Channel(routes=[GET("/who", query=Empty, handler=who), POST("/start", body=Empty, handler=start)]
                  + ([POST("/signed", body=Text, handler=signed_who)] if "signed_who" in globals() else []),
                  auth={auth})
'''

POLICIES = {
    "default": ("allow_all", "None", ""),
    "strict": ("local_dev_strict", "[local_dev_strict()]", ""),
    "dev": ("local_dev", "[local_dev()]", ""),
    "loopback": ("loopback_only", "[loopback_only()]", ""),
    "token": ("bearer_auth", '[bearer_auth("channel-token-123")]', ""),
    "verified": ("bearer_auth", "[bearer_auth(verifier=verify)]",
                 "def verify(token):\n    return {'principal_id': 'svc-' + token[:4]} if token.startswith('ok') else None\n"),
    "everyone": ("allow_all", "[allow_all()]", ""),
    "public": ("public_endpoint", "[public_endpoint()]", ""),
    "signed": ("public_endpoint", "[public_endpoint()]",
               "import hashlib, hmac\n\n\n"
               "def signed_who(req):\n"
               "    expected = hmac.new(b'webhook-secret', req.raw_body, hashlib.sha256).hexdigest()\n"
               "    if not hmac.compare_digest(expected, req.request.headers.get('X-Signature', '')):\n"
               "        from django.http import JsonResponse\n"
               "        return JsonResponse({'error': 'bad signature'}, status=401)\n"
               "    return {'verified': True, 'text': req.body.text}\n"),
}


REFUND_TOOL = '''\
from pydantic import BaseModel
from agents.sdk import tool


class Input(BaseModel):
    order_id: str


@tool(description="Refund an order.", effect="write", needs_approval=True)
def refund(input: Input, ctx) -> dict:
    return {"refunded": input.order_id}
'''


def write_agent(root: Path, channels: dict[str, str]) -> Path:
    (root / "agent" / "channels").mkdir(parents=True)
    (root / "agent" / "tools").mkdir(parents=True)
    (root / "agent" / "tools" / "refund.py").write_text(REFUND_TOOL)
    (root / "agent" / "instructions.md").write_text("Echo.\n")
    (root / "agent" / "agent.py").write_text('from agents.sdk import Agent\nagent = Agent(model="scripted:echo", tools=[])\n')
    for name, text in channels.items():
        (root / "agent" / "channels" / f"{name}.py").write_text(text)
    return root


@pytest.fixture
def calls(tmp_path) -> Path:
    return tmp_path / "calls.jsonl"


def recorded(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def lab(tmp_path, calls, db):
    custom_channels._mounted.clear()
    return deploy_agent_folder(write_agent(tmp_path / "lab", {"lab": LAB_CHANNEL.format(calls=str(calls))})).agent


@pytest.fixture
def gate(tmp_path, db):
    channels = {name: WHO.format(policy_import=imp, auth=auth, extra=extra)
                for name, (imp, auth, extra) in POLICIES.items()}
    return deploy_agent_folder(write_agent(tmp_path / "gate", channels)).agent


@pytest.fixture
def server_default(settings):
    settings.AGENTSITE_AUTH_POLICIES = None
    settings.AGENTSITE_AUTH = "local_dev_strict"


def post(client: Client, path: str, body=None, **extra):
    return client.post(path, json.dumps(body if body is not None else {}), content_type="application/json", **extra)


LOCAL = {"HTTP_HOST": "127.0.0.1:8000", "REMOTE_ADDR": "127.0.0.1"}
REMOTE = {"HTTP_HOST": "agents.example.com", "REMOTE_ADDR": "203.0.113.9"}


# -- routes, validation, what handlers return ------------------------------------------

def test_a_get_route_gets_its_validated_query(server_default, lab):
    response = Client(**LOCAL).get("/lab/v1/channels/lab/items?limit=7")

    assert response.status_code == 200, response.content
    assert response.json() == {"ok": True, "limit": 7}


def test_a_bad_query_is_a_400_naming_the_field(server_default, lab):
    response = Client(**LOCAL).get("/lab/v1/channels/lab/items?limit=500")

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert error["message"].startswith("query.limit:")
    assert error["details"][0]["field"] == "query.limit"


def test_a_missing_body_field_is_a_400_naming_it_and_the_handler_never_runs(server_default, lab):
    response = post(Client(**LOCAL), "/lab/v1/channels/lab/start", {"key": "k"})

    assert response.status_code == 400
    assert response.json()["error"]["details"][0]["field"] == "body.text"
    assert Session.objects.count() == 0


def test_an_empty_post_body_is_the_empty_object(server_default, lab):
    response = Client(**LOCAL).post("/lab/v1/channels/lab/optional", "", content_type="application/json")

    assert response.status_code == 200, response.content
    assert response.json() == {"note": "none"}


def test_a_body_that_is_not_json_is_refused(server_default, lab):
    client = Client(**LOCAL)
    assert client.post("/lab/v1/channels/lab/optional", "{oops", content_type="application/json").status_code == 400
    assert client.post("/lab/v1/channels/lab/optional", "a=b",
                       content_type="application/x-www-form-urlencoded").status_code == 415


def test_a_raw_route_hands_over_the_bytes_whatever_the_content_type(server_default, lab, settings):
    settings.AGENTSITE_DEV = True
    response = Client(**LOCAL).post("/lab/v1/channels/lab/form", "payload=%7B%22a%22%3A1%7D",
                                    content_type="application/x-www-form-urlencoded")

    assert response.status_code == 200, response.content
    assert response.json() == {"bytes": "payload=%7B%22a%22%3A1%7D", "type": "application/x-www-form-urlencoded",
                               "dev": True}
    settings.AGENTSITE_DEV = False
    assert Client(**LOCAL).post("/lab/v1/channels/lab/form", "x", content_type="text/plain").json()["dev"] is False


def test_a_claimed_delivery_starts_one_turn_and_a_failure_leaves_it_unclaimed(server_default, lab, sync_turns):
    client = Client(**LOCAL)

    first = client.post("/lab/v1/channels/lab/once", "", content_type="text/plain", HTTP_X_DELIVERY="d-1").json()
    again = client.post("/lab/v1/channels/lab/once", "", content_type="text/plain", HTTP_X_DELIVERY="d-1").json()
    failed = client.post("/lab/v1/channels/lab/once", "fail after the claim", content_type="text/plain",
                         HTTP_X_DELIVERY="d-2")
    retried = client.post("/lab/v1/channels/lab/once", "", content_type="text/plain", HTTP_X_DELIVERY="d-2").json()

    assert first["duplicate"] is False and again == {"duplicate": True}
    assert failed.status_code == 500
    assert retried["duplicate"] is False
    assert sorted(Session.objects.values_list("title", flat=True)) == ["delivered d-1", "delivered d-2"]


def test_path_parameters_the_principal_and_the_peer_reach_the_handler(server_default, lab):
    client = Client(**LOCAL)

    got = client.get("/lab/v1/channels/lab/items/42/detail").json()
    deleted = client.delete("/lab/v1/channels/lab/items/42/detail").json()

    assert got == {"id": "42", "sub": "detail", "ip": "127.0.0.1", "principal": "local", "method": "GET"}
    assert deleted["method"] == "DELETE"


def test_unknown_channels_and_routes_are_404_and_a_wrong_method_is_405(server_default, lab):
    client = Client(**LOCAL)

    assert client.get("/lab/v1/channels/nope/items").json()["error"]["code"] == "channel_not_found"
    assert client.get("/lab/v1/channels/lab/nowhere").status_code == 404
    assert client.get("/nobody/v1/channels/lab/items").status_code == 404
    wrong = post(client, "/lab/v1/channels/lab/items")
    assert wrong.status_code == 405
    assert wrong["Allow"] == "GET"


def test_a_failing_handler_is_a_500_with_a_generic_body(server_default, lab, caplog):
    response = post(Client(**LOCAL), "/lab/v1/channels/lab/boom")

    assert response.status_code == 500
    assert response.json() == {"error": {"code": "internal_error", "message": "the channel's handler failed",
                                         "details": None}}
    assert "secret internals" not in response.content.decode()
    assert "secret internals" in caplog.text


def test_handlers_may_answer_with_a_django_response_or_nothing(server_default, lab):
    client = Client(**LOCAL)

    raw = client.get("/lab/v1/channels/lab/raw")
    assert (raw.status_code, raw.content, raw["Content-Type"]) == (202, b"plain text", "text/plain")
    assert client.put("/lab/v1/channels/lab/nothing", "{}", content_type="application/json").status_code == 204


# -- continuation keys and state ------------------------------------------------------------

@transactional
def test_the_same_continuation_key_reaches_the_same_session(server_default, lab, sync_turns):
    client = Client(**LOCAL)

    first = post(client, "/lab/v1/channels/lab/start", {"text": "one", "key": "pr:acme/app#12"}).json()
    second = post(client, "/lab/v1/channels/lab/start", {"text": "two", "key": "pr:acme/app#12"}).json()
    other = post(client, "/lab/v1/channels/lab/start", {"text": "three", "key": "pr:acme/app#13"}).json()
    unkeyed = post(client, "/lab/v1/channels/lab/start", {"text": "four"}).json()

    assert first["created"] is True and second["created"] is False
    assert second["sessionId"] == first["sessionId"]
    assert other["sessionId"] != first["sessionId"] and unkeyed["sessionId"] not in (first["sessionId"],
                                                                                       other["sessionId"])
    session = Session.objects.get(pk=first["sessionId"])
    assert session.channel == "lab"
    received = [e["data"] for e in read_events(session.id) if e["type"] == "message.received"]
    assert [(r["text"], r["source"], r["channelId"]) for r in received] == [("one", "channel", "lab"),
                                                                            ("two", "channel", "lab")]
    assert "pr:acme/app#12" not in session.channel_key_hash  # stored hashed


@transactional
def test_send_writes_workspace_files_into_the_sessions_workspace(server_default, lab, sync_turns):
    from sessions.workspaces import list_files

    sid = post(Client(**LOCAL), "/lab/v1/channels/lab/start", {"text": "with a file"}).json()["sessionId"]

    assert "inbox/note.txt" in [f["path"] for f in list_files(sid)]
    received = next(e["data"] for e in read_events(sid) if e["type"] == "message.received")
    assert received["workspaceFiles"][0]["path"] == "inbox/note.txt"


@transactional
def test_continuation_helpers_report_the_keys_session(server_default, lab, sync_turns):
    client = Client(**LOCAL)
    before = client.get("/lab/v1/channels/lab/continuation/C123:1712345.678").json()
    started = post(client, "/lab/v1/channels/lab/start", {"text": "hi", "key": "C123:1712345.678"}).json()
    after = client.get("/lab/v1/channels/lab/continuation/C123:1712345.678").json()

    assert before == {"has": False, "busy": False, "sessionId": None}
    assert after == {"has": True, "busy": False, "sessionId": started["sessionId"]}


@transactional
def test_routes_and_event_handlers_change_the_sessions_state(server_default, lab, sync_turns, calls):
    client = Client(**LOCAL)
    started = post(client, "/lab/v1/channels/lab/start", {"text": "hello there", "key": "k1"}).json()

    touched = client.patch(f"/lab/v1/channels/lab/state/{started['sessionId']}", "{}",
                           content_type="application/json").json()

    # The turn ran at commit (sync mode); its reply was handed to the events map afterwards.
    assert touched == {"from": "route", "replies": ["You said: hello there"], "touched": True}
    deliveries = [c for c in recorded(calls) if "event" in c]
    assert deliveries == [{"event": "message.completed", "session": started["sessionId"],
                           "index": next(e["index"] for e in read_events(started["sessionId"])
                                         if e["type"] == "message.completed")}]
    session = Session.objects.get(pk=started["sessionId"])
    assert session.status == "waiting"  # the failing "*" handler never touched the turn
    assert session.channel_cursor == session.next_event_index


@transactional
def test_events_are_delivered_once_and_only_after_commit(server_default, lab, sync_turns, calls):
    from sessions.custom_channels import deliver_channel_events

    started = post(Client(**LOCAL), "/lab/v1/channels/lab/start", {"text": "once", "key": "k2"}).json()

    assert deliver_channel_events(started["sessionId"]) == 0  # everything was handed over already
    assert len([c for c in recorded(calls) if "event" in c]) == 1


@transactional
def test_a_delivery_whose_worker_died_is_taken_up_by_the_recovery_sweep(server_default, lab, sync_turns, calls):
    from datetime import timedelta

    from django.utils import timezone

    from sessions.recovery import sweep

    started = post(Client(**LOCAL), "/lab/v1/channels/lab/start", {"text": "again", "key": "k4"}).json()
    sid = started["sessionId"]
    completed = next(e["index"] for e in read_events(sid) if e["type"] == "message.completed")
    calls.unlink()
    # A worker died while handing over the reply: the cursor is still on it, its lease lapsed.
    Session.objects.filter(pk=sid).update(channel_cursor=completed,
                                          channel_lease_until=timezone.now() - timedelta(seconds=1))

    sweep()

    assert recorded(calls) == [{"event": "message.completed", "session": sid, "index": completed}]
    session = Session.objects.get(pk=sid)
    assert (session.channel_cursor, session.channel_lease_until) == (session.next_event_index, None)


@transactional
def test_a_delivery_never_enqueued_is_made_good_by_the_rescan(server_default, lab, gate, sync_turns, calls):
    from sessions.custom_channels import rescan_undelivered

    started = post(Client(**LOCAL), "/lab/v1/channels/lab/start", {"text": "lost", "key": "k9"}).json()
    sid = started["sessionId"]
    completed = next(e["index"] for e in read_events(sid) if e["type"] == "message.completed")
    calls.unlink()
    # The process died between the commit and the enqueue: nothing holds the session, its cursor lags.
    Session.objects.filter(pk=sid).update(channel_cursor=completed)
    # A session of a channel whose events map wants none of its events only has its cursor moved.
    quiet_sid = post(Client(**LOCAL), "/gate/v1/channels/everyone/start").json()["sessionId"]
    assert Session.objects.get(pk=quiet_sid).channel_cursor == 0

    assert rescan_undelivered() == 1

    assert recorded(calls) == [{"event": "message.completed", "session": sid, "index": completed}]
    for row in Session.objects.filter(pk__in=[sid, quiet_sid]):
        assert row.channel_cursor == row.next_event_index
    assert rescan_undelivered() == 0


@transactional
def test_a_delivery_held_by_another_worker_is_left_to_it(server_default, lab, sync_turns, calls):
    from datetime import timedelta

    from django.utils import timezone

    from sessions.custom_channels import deliver_channel_events

    sid = post(Client(**LOCAL), "/lab/v1/channels/lab/start", {"text": "held", "key": "k5"}).json()["sessionId"]
    Session.objects.filter(pk=sid).update(channel_cursor=0, channel_lease_until=timezone.now() + timedelta(seconds=60))

    assert deliver_channel_events(sid) == 0
    assert Session.objects.get(pk=sid).channel_cursor == 0


@transactional
def test_emit_assistant_message_appends_a_reply_without_a_turn(server_default, lab, sync_turns, calls):
    client = Client(**LOCAL)
    started = post(client, "/lab/v1/channels/lab/start", {"text": "first", "key": "k3"}).json()

    emitted = post(client, f"/lab/v1/channels/lab/emit/{started['sessionId']}").json()

    events = read_events(started["sessionId"])
    assert events[emitted["index"]]["data"] == {"text": "done by the host", "source": "channel"}
    session = Session.objects.get(pk=started["sessionId"])
    assert session.conversation[-1] == {"role": "assistant", "content": "done by the host"}
    assert session.channel_state["replies"] == ["You said: first", "done by the host"]


@transactional
def test_interrupt_continuation_stops_the_keys_turn_in_flight(server_default, lab):
    client = Client(**LOCAL)
    post(client, "/lab/v1/channels/lab/start", {"text": "long job", "key": "job-7"})  # no worker: it stays queued

    busy = client.get("/lab/v1/channels/lab/continuation/job-7").json()
    interrupted = post(client, "/lab/v1/channels/lab/interrupt/job-7").json()
    unknown = post(client, "/lab/v1/channels/lab/interrupt/job-8").json()

    assert busy["busy"] is True
    assert interrupted == {"interrupted": True} and unknown == {"interrupted": False}
    assert Session.objects.get(pk=busy["sessionId"]).turns.get().interrupt_requested


@transactional
def test_resolve_approval_unblocks_a_parked_call_without_the_approvals_route(server_default, lab, sync_turns):
    client = Client(**LOCAL)
    started = post(client, "/lab/v1/channels/lab/start", {"text": "hi", "key": "k9"}).json()
    parked = post(client, f"/lab/v1/channels/lab/gated/{started['sessionId']}").json()

    decided = post(client, f"/lab/v1/channels/lab/decide/{started['sessionId']}/{parked['callId']}").json()

    assert parked["status"] == "awaiting_approval"
    assert decided["callId"] == parked["callId"]
    resolved = [e["data"] for e in read_events(started["sessionId"]) if e["type"] == "action.approval_resolved"]
    assert resolved == [{"callId": parked["callId"], "toolName": "refund", "decision": "approve", "reason": "ok by chat",
                         "decidedBy": {"authenticator": "local", "principalId": "local", "principalType": "user",
                                       "attributes": {}}}]
    results = [e["data"] for e in read_events(started["sessionId"]) if e["type"] == "action.result"]
    assert results[-1]["output"] == {"refunded": "A1"}


@transactional
def test_wait_until_runs_the_work_as_a_task_after_the_response(server_default, lab, sync_turns, calls):
    response = post(Client(**LOCAL), "/lab/v1/channels/lab/defer")

    assert response.json() == {"deferred": True}
    assert {"later": "hello", "channel": "lab"} in recorded(calls)


def test_wait_until_refuses_what_a_worker_could_not_find(lab):
    from sessions.custom_channels import ChannelContext, ChannelError

    with pytest.raises(ChannelError, match="module-level function"):
        ChannelContext(agent=lab, channel_id="lab").wait_until(lambda ctx: None)


def test_on_start_runs_once_when_the_channel_mounts_and_on_stop_at_exit(server_default, lab, calls):
    client = Client(**LOCAL)
    client.get("/lab/v1/channels/lab/items?limit=1")
    client.get("/lab/v1/channels/lab/items?limit=2")
    custom_channels.unmount_all()

    assert [c for c in recorded(calls) if "on_start" in c or "on_stop" in c] == [{"on_start": "lab"},
                                                                                 {"on_stop": True}]


# -- auth policies -------------------------------------------------------------------------

def who(client: Client, channel: str, **extra):
    return client.get(f"/gate/v1/channels/{channel}/who", **extra)


def test_a_channel_without_auth_runs_the_servers_default_chain(server_default, gate):
    assert who(Client(**LOCAL), "default").json() == {"authenticator": "local", "principal": "local"}
    assert who(Client(**REMOTE), "default").status_code == 401


def test_local_dev_strict_refuses_a_remote_host_and_forwarded_requests(server_default, gate):
    assert who(Client(**LOCAL), "strict").status_code == 200
    assert who(Client(HTTP_HOST="evil.example", REMOTE_ADDR="127.0.0.1"), "strict").status_code == 401
    assert who(Client(**LOCAL), "strict", HTTP_X_FORWARDED_FOR="203.0.113.9").status_code == 401
    assert who(Client(**REMOTE), "strict").status_code == 401


def test_local_dev_skips_the_host_check_but_not_forwarding_headers(server_default, gate):
    assert who(Client(HTTP_HOST="evil.example", REMOTE_ADDR="127.0.0.1"), "dev").status_code == 200
    assert who(Client(**LOCAL), "dev", HTTP_X_REAL_IP="203.0.113.9").status_code == 401


def test_loopback_only_ignores_forwarding_headers(server_default, gate):
    assert who(Client(**LOCAL), "loopback", HTTP_X_FORWARDED_FOR="203.0.113.9").status_code == 200
    assert who(Client(**REMOTE), "loopback").status_code == 401


def test_bearer_auth_with_a_token_or_a_verifier(server_default, gate):
    remote = Client(**REMOTE)

    assert who(remote, "token", HTTP_AUTHORIZATION="Bearer channel-token-123").json()["authenticator"] == "bearer"
    assert who(remote, "token", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert who(remote, "token").status_code == 401
    assert who(remote, "verified", HTTP_AUTHORIZATION="Bearer ok-1234").json() == {
        "authenticator": "bearer", "principal": "svc-ok-1"}
    assert who(remote, "verified", HTTP_AUTHORIZATION="Bearer no").status_code == 401


def test_allow_all_and_public_endpoint_admit_anyone(server_default, gate):
    remote = Client(**REMOTE)

    assert who(remote, "everyone").json() == {"authenticator": "anonymous", "principal": "anonymous"}
    assert who(remote, "public").json() == {"authenticator": "public_endpoint", "principal": "public"}


def test_a_public_route_can_verify_a_signature_over_the_raw_body(server_default, gate):
    import hashlib
    import hmac

    raw = b'{"text":  "signed payload"}'
    good = hmac.new(b"webhook-secret", raw, hashlib.sha256).hexdigest()
    remote = Client(**REMOTE)

    ok = remote.post("/gate/v1/channels/signed/signed", raw, content_type="application/json", HTTP_X_SIGNATURE=good)
    forged = remote.post("/gate/v1/channels/signed/signed", raw, content_type="application/json",
                         HTTP_X_SIGNATURE="0" * 64)

    assert ok.json() == {"verified": True, "text": "signed payload"}
    assert forged.status_code == 401


def test_allow_anonymous_swaps_only_the_default_never_an_authored_chain(settings, gate):
    settings.AGENTSITE_AUTH_POLICIES = None
    settings.AGENTSITE_AUTH = "allow_all"  # serve --allow-anonymous
    remote = Client(**REMOTE)

    assert who(remote, "default").json()["authenticator"] == "anonymous"
    assert who(remote, "strict").status_code == 401
    assert who(remote, "token").status_code == 401


def test_bearer_token_swaps_only_the_default_never_an_authored_chain(settings, gate):
    from sessions.models import hash_token

    settings.AGENTSITE_AUTH_POLICIES = None
    settings.AGENTSITE_AUTH = "bearer"  # serve --bearer-token server-token-1
    settings.AGENTSITE_BEARER_TOKEN_HASHES = [hash_token("server-token-1")]
    remote = Client(**REMOTE)

    assert who(remote, "default", HTTP_AUTHORIZATION="Bearer server-token-1").status_code == 200
    assert who(remote, "default").status_code == 401
    assert who(remote, "token", HTTP_AUTHORIZATION="Bearer server-token-1").status_code == 401
    assert who(remote, "token", HTTP_AUTHORIZATION="Bearer channel-token-123").status_code == 200
    assert who(Client(**LOCAL), "strict").status_code == 200


@transactional
def test_public_endpoint_never_opens_the_session_api(settings, gate, sync_turns):
    settings.AGENTSITE_AUTH_POLICIES = None
    settings.AGENTSITE_AUTH = "local_dev_strict"
    remote = Client(**REMOTE)

    started = post(remote, "/gate/v1/channels/public/start")
    assert started.status_code == 200, started.content
    session_id = started.json()["sessionId"]

    assert remote.get(f"/gate/v1/session/{session_id}").status_code == 401
    assert post(remote, "/gate/v1/session", {"message": "hi"}).status_code == 401
    assert remote.get("/gate/v1/sessions").status_code == 401
    # Even a server that admits anonymous callers does not make them the public route's principal.
    settings.AGENTSITE_AUTH = "allow_all"
    assert remote.get(f"/gate/v1/session/{session_id}").status_code in (403, 404)
    assert remote.get("/gate/v1/sessions").json()["sessions"] == []


@transactional
def test_send_acts_as_the_caller_unless_told_otherwise(server_default, gate, sync_turns):
    client = Client(**LOCAL)

    mine = post(client, "/gate/v1/channels/default/start").json()["sessionId"]
    app = post(client, "/gate/v1/channels/default/start?as=app").json()["sessionId"]

    assert Session.objects.get(pk=mine).principal_id == "local"
    assert (Session.objects.get(pk=app).authenticator, Session.objects.get(pk=app).principal_id) == ("app", "bot")


# -- /info ---------------------------------------------------------------------------------

def test_info_lists_each_channel_with_its_routes_and_schemas_but_no_secret(server_default, gate, lab):
    info = Client(**LOCAL).get("/gate/v1/info")

    assert info.status_code == 200
    channels = {c["id"]: c for c in info.json()["channels"]}
    assert channels["http"]["kind"] == "http"
    assert channels["token"]["kind"] == "custom"
    assert channels["token"]["auth"] == [{"kind": "bearer_auth", "verifier": False}]
    assert channels["default"]["auth"] is None
    assert {(r["method"], r["url"]) for r in channels["token"]["routes"]} == {
        ("GET", "/gate/v1/channels/token/who"), ("POST", "/gate/v1/channels/token/start")}
    assert "channel-token-123" not in info.content.decode()

    lab_info = {c["id"]: c for c in Client(**LOCAL).get("/lab/v1/info").json()["channels"]}["lab"]
    items = next(r for r in lab_info["routes"] if r["path"] == "/items")
    assert items["querySchema"]["properties"]["limit"]["maximum"] == 50
    start = next(r for r in lab_info["routes"] if r["path"] == "/start")
    assert start["bodySchema"]["required"] == ["text"]
    assert lab_info["events"] == ["*", "message.completed"]


# -- the example ---------------------------------------------------------------------------

@transactional
def test_the_webhook_example_keeps_one_session_per_thread_and_stores_replies(server_default, sync_turns):
    deploy_agent_folder(WEBHOOK)
    client = Client(**LOCAL)

    first = post(client, "/webhook/v1/channels/inbox/messages", {"text": "where is my order?", "thread": "t-1"})
    second = post(client, "/webhook/v1/channels/inbox/messages", {"text": "and the invoice?", "thread": "t-1"})
    thread = client.get("/webhook/v1/channels/inbox/threads/t-1").json()

    assert first.status_code == 200, first.content
    assert first.json()["created"] is True and second.json()["created"] is False
    assert first.json()["playgroundUrl"].endswith(f"/playground/webhook?sessionId={first.json()['sessionId']}")
    assert thread["sessionId"] == first.json()["sessionId"]
    assert thread["replies"] == ["You said: where is my order?", "You said: and the invoice?"]
    missing = post(client, "/webhook/v1/channels/inbox/messages", {"thread": "t-1"})
    assert missing.status_code == 400 and missing.json()["error"]["details"][0]["field"] == "body.text"


# -- the playground --------------------------------------------------------------------------

def test_the_agent_page_has_a_try_form_for_each_channel_route(server_default, db):
    deploy_agent_folder(WEBHOOK)

    page = Client(**LOCAL).get("/playground/webhook")

    assert page.status_code == 200
    html = page.content.decode()
    forms = re.findall(r'<form class="channel-try" data-method="(\w+)" data-url="([^"]+)" data-takes="(\w*)">', html)
    assert forms == [("POST", "/webhook/v1/channels/inbox/messages", "body"),
                     ("GET", "/webhook/v1/channels/inbox/threads/:thread", "query")]
    # The body form starts from an example of the required fields; the path parameter gets an input.
    assert "{&quot;text&quot;: &quot;example&quot;, &quot;thread&quot;: &quot;example&quot;}" in html
    assert 'data-param="thread"' in html
    script = Client(**LOCAL).get("/static/playground/playground.js")
    assert b"setupChannelTries" in b"".join(script.streaming_content if script.streaming else [script.content])


def test_a_providers_webhook_route_gets_a_try_form_with_headers_and_a_raw_body(server_default, db):
    deploy_agent_folder(ROOT / "examples" / "reviewer")

    html = Client(**LOCAL).get("/playground/reviewer").content.decode()

    forms = re.findall(r'<form class="channel-try" data-method="(\w+)" data-url="([^"]+)" data-takes="(\w*)">', html)
    assert forms == [("POST", "/reviewer/v1/channels/github", "raw"),
                     ("POST", "/reviewer/v1/channels/slack/events", "raw"),
                     ("POST", "/reviewer/v1/channels/slack/interactivity", "raw")]
    assert "{&quot;X-GitHub-Event&quot;: &quot;ping&quot;, &quot;X-GitHub-Delivery&quot;: &quot;try-{now}&quot;}" in html
    assert "url_verification" in html


@transactional
def test_wait_until_hands_the_work_to_the_task_queue_not_the_request(server_default, lab, calls):
    from django_q.models import OrmQ
    from django_q.signing import SignedPackage

    response = post(Client(**LOCAL), "/lab/v1/channels/lab/defer")

    assert response.json() == {"deferred": True}
    assert recorded(calls) == [{"on_start": "lab"}]  # not run yet: a worker will
    queued = [SignedPackage.loads(row.payload) for row in OrmQ.objects.all()]
    assert [task["func"] for task in queued] == ["sessions.custom_channels.run_in_background"]
    assert queued[0]["args"][0]["args"] == ["hello"]
