"""Custom channels over HTTP: routes under /<slug>/v1/channels/<id>/..., their
validation, handler arguments, continuation keys, per-session state, the
events map, background work, and how /info lists them."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.test import Client

from agents.discovery import deploy_agent_folder
from channels_app import custom_channels
from sessions.models import Session

ROOT = Path(__file__).resolve().parents[2]
WEBHOOK = ROOT / "examples" / "webhook"
transactional = pytest.mark.django_db(transaction=True)

LAB_CHANNEL = '''\
import json
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
