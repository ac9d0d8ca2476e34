"""Hostile input against a real server: a 4xx in the error shape every time, never a 500.

A real `manage.py serve` runs once on the embedded default (SQLite) and once
scaled out (PostgreSQL + Redis). The databases refuse different things:
PostgreSQL stores no NUL, neither driver encodes a lone surrogate, SQLite
overflows on instants near year 1 and 9999 once they are made UTC. Each
case below is one request; together they cover deep nesting, huge numbers,
wrong types, bad bytes, bad text in every text field, path id and query
parameter, bad counts and cursors, oversized bodies and wrong content types.
A real turn whose model sends such text as tool input must go on normally,
and the socket must answer bad frames with error frames, never 1011.
"""
from __future__ import annotations

import base64
import contextlib
import json
import os
import socket
import struct
from dataclasses import dataclass
from typing import Any, Iterator

import httpx
import pytest

from tests.sessions.test_live_stream import RawWebsocket, dump, is_type, read_ndjson
from tests.support import Server, backend_env, run_server

NUL, SURROGATE = "\x00", "\ud800"
DEEP = 50_000
MAX_BODY = 1024 * 1024  # serve's default AGENTSITE_MAX_BODY_BYTES


@pytest.fixture(scope="module", params=["sqlite", "postgres+redis"])
def server(request, tmp_path_factory) -> Iterator[Server]:
    with contextlib.ExitStack() as stack:
        env = backend_env(stack, request.param, migrated=True)
        root = tmp_path_factory.mktemp(f"fuzz-{request.param.replace('+', '-')}")
        yield stack.enter_context(run_server(root, env=env))


@pytest.fixture(scope="module")
def client(server: Server) -> Iterator[httpx.Client]:
    with server.client(timeout=30) as c:
        yield c


def start(client: httpx.Client, message: str) -> tuple[str, str]:
    response = client.post("/support/v1/session", json={"message": message})
    assert response.status_code == 201, response.text
    return response.json()["sessionId"], response.json()["continuationToken"]


def settled(client: httpx.Client, session_id: str, start_index: int = 0, until: str = "session.waiting") -> list[dict]:
    return read_ndjson(client, f"/support/v1/session/{session_id}/stream?startIndex={start_index}", until=is_type(until))


@dataclass
class World:
    """What the cases aim at: a session parked on an approval, its call, a reminder."""

    sid: str
    call: str
    rid: str

    def snapshot(self, client: httpx.Client) -> dict[str, Any]:
        base = f"/support/v1/session/{self.sid}"
        return {
            "sessions": sorted(s["sessionId"] for s in client.get("/support/v1/sessions?limit=100").json()["sessions"]),
            "events": len(dump(client, self.sid)),
            "approvals": client.get(f"{base}/approvals").json(),
            "reminders": client.get(f"{base}/reminders").json(),
        }


@pytest.fixture(scope="module")
def world(client: httpx.Client) -> World:
    sid, _ = start(client, '/call cancel_order {"order_id": "A102"}')
    settled(client, sid, until="action.approval_requested")
    [approval] = client.get(f"/support/v1/session/{sid}/approvals").json()["approvals"]
    reminder = client.post(f"/support/v1/session/{sid}/reminders", json={"delay": "1h", "prompt": "later"})
    assert reminder.status_code == 201, reminder.text
    return World(sid, approval["callId"], reminder.json()["reminderId"])


@pytest.fixture(scope="module")
def before(client: httpx.Client, world: World) -> dict[str, Any]:
    return world.snapshot(client)


# -- the cases ---------------------------------------------------------------------------------------

@dataclass
class Case:
    id: str
    method: str
    path: str
    body: bytes | None = None
    headers: dict[str, str] | None = None
    status: int = 400
    code: str | None = None


def raw(value: Any) -> bytes:
    """JSON as a client would send it; NUL and lone surrogates travel as \\u escapes."""
    return json.dumps(value).encode()


def nested(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


S = "/support/v1/session/{sid}"
# Each POST route, a valid body, and its text fields (dotted: nested).
POST_ROUTES = {
    "create": ("/support/v1/session", {"message": "hi"},
               ["message", "title", "asOf", "continuationToken", "mode", "admission"]),
    "follow-up": (f"{S}/message", {"message": "hi"}, ["message", "continuationToken", "admission"]),
    "approval": (f"{S}/approvals/{{call}}", {"decision": "deny"}, ["decision", "reason"]),
    "reminder": (f"{S}/reminders", {"delay": "1h", "prompt": "p"}, ["delay", "prompt", "until", "title"]),
    "tool": ("/support/v1/tools/lookup_order/call", {"input": {"order_id": "A100"}}, ["input.order_id", "sessionId"]),
}
WRONG_TYPES = [7, 2.5, True, ["x"], {"a": 1}]
MULTIPART = b'--b\r\nContent-Disposition: form-data; name="message"\r\n\r\nhi\r\n--b--\r\n'


def with_field(body: dict, dotted: str, value: Any) -> dict:
    body = json.loads(json.dumps(body))
    *parents, name = dotted.split(".")
    target = body
    for parent in parents:
        target = target[parent]
    target[name] = value
    return body


def body_cases() -> Iterator[Case]:
    for route, (path, valid, fields) in POST_ROUTES.items():
        for field in fields:
            for label, bad in (("NUL", NUL), ("surrogate", SURROGATE)):
                yield Case(f"{route} {field} {label}", "post", path, raw(with_field(valid, field, f"a{bad}b")),
                           code="invalid_text")
            for wrong in WRONG_TYPES:
                yield Case(f"{route} {field} as {type(wrong).__name__}", "post", path, raw(with_field(valid, field, wrong)))
        yield Case(f"{route} NUL in a key", "post", path, raw({**valid, "x\x00": 1}), code="invalid_text")
        yield Case(f"{route} surrogate in a key", "post", path, raw({**valid, SURROGATE: 1}), code="invalid_text")
        for label, body in (("array", "[]"), ("number", "7"), ("null", "null"), ("string", '"hi"'), ("empty", "")):
            yield Case(f"{route} body is {label}", "post", path, body.encode())
        yield Case(f"{route} {DEEP} arrays deep", "post", path, b"[" * DEEP + b"]" * DEEP, code="body_too_deep")
        yield Case(f"{route} {DEEP} objects deep", "post", path, b'{"a":' * DEEP + b"1" + b"}" * DEEP,
                   code="body_too_deep")
        yield Case(f"{route} 65 deep", "post", path, raw(nested(65)), code="body_too_deep")
        yield Case(f"{route} unclosed deep", "post", path, b"[" * DEEP, code="body_too_deep")
        yield Case(f"{route} 1e999", "post", path, json.dumps(valid)[:-1].encode() + b', "n": 1e999}',
                   code="invalid_number")
        yield Case(f"{route} -1e999", "post", path, b'{"x": -1e999}', code="invalid_number")
        yield Case(f"{route} NaN", "post", path, b'{"x": NaN}', code="invalid_number")
        yield Case(f"{route} Infinity", "post", path, b'{"x": Infinity}', code="invalid_number")
        yield Case(f"{route} 5000-digit integer", "post", path, b'{"x": ' + b"9" * 5000 + b"}", code="invalid_number")
        yield Case(f"{route} 4000-digit integer", "post", path, b'{"x": ' + b"9" * 4000 + b"}")
        yield Case(f"{route} invalid UTF-8", "post", path, b'{"message": "\xff\xfe"}', code="invalid_json")
        yield Case(f"{route} UTF-8 surrogate bytes", "post", path, b'{"message": "\xed\xa0\x80"}', code="invalid_json")
        yield Case(f"{route} overlong UTF-8", "post", path, b'{"message": "\xc0\xae"}', code="invalid_json")
        yield Case(f"{route} raw NUL byte", "post", path, b'{"message": "a\x00b"}', code="invalid_json")
        yield Case(f"{route} truncated", "post", path, b'{"message": "hi"', code="invalid_json")
        yield Case(f"{route} oversized", "post", path, b'{"message": "' + b"x" * (MAX_BODY + 10) + b'"}', status=413,
                   code="body_too_large")
        for content_type in ("text/plain", "application/x-www-form-urlencoded", "application/xml", ""):
            yield Case(f"{route} content type {content_type or 'missing'}", "post", path, raw(valid),
                       {"content-type": content_type}, status=415, code="unsupported_media_type")
        yield Case(f"{route} multipart", "post", path, MULTIPART, {"content-type": "multipart/form-data; boundary=b"},
                   status=415, code="unsupported_media_type")
        yield Case(f"{route} multipart without a boundary", "post", path, raw(valid),
                   {"content-type": "multipart/form-data"}, status=415, code="unsupported_media_type")
    for route in ("create", "follow-up"):
        yield Case(f"{route} message over the limit", "post", POST_ROUTES[route][0], raw({"message": "x" * 100_001}),
                   code="invalid_request")
    tool = POST_ROUTES["tool"][0]
    yield Case("tool input nested NUL", "post", tool, raw({"input": {"a": [{"b": NUL}]}}), code="invalid_text")
    yield Case("tool input 1e999", "post", tool, b'{"input": {"order_id": 1e999}}', code="invalid_number")
    yield Case("tool input 63 deep", "post", tool, raw({"input": {"a": nested(62)}}))
    yield Case("tool sessionId unknown", "post", tool, raw({"input": {"order_id": "A100"}, "sessionId": "ses_x"}),
               status=404)
    reminders = POST_ROUTES["reminder"][0]
    for field, value in (("delay", "١m"), ("delay", "٣h"), ("every", "١m"), ("cron", "١ * * * *"), ("delay", "0m"),
                         ("delay", "９m"), ("delay", "1_0m")):
        yield Case(f"reminder {field} {value!r}", "post", reminders, raw({field: value, "prompt": "p"}),
                   code="invalid_reminder")
    yield Case("create asOf with Arabic-Indic digits", "post", "/support/v1/session",
               raw({"message": "hi", "asOf": "٢٠٢٦-01-31T12:00:00Z"}), code="invalid_request")


SESSION_ROUTES = [("get", "", None), ("delete", "", None), ("post", "/message", {"message": "hi"}),
                  ("post", "/stop", None), ("get", "/events", None), ("get", "/stream", None), ("get", "/approvals", None),
                  ("post", "/approvals/{call}", {"decision": "deny"}), ("get", "/reminders", None),
                  ("post", "/reminders", {"delay": "1h", "prompt": "p"})]


def path_cases() -> Iterator[Case]:
    for method, suffix, valid in SESSION_ROUTES:
        body = raw(valid) if valid is not None else None
        yield Case(f"{method} session%00{suffix}", method, f"/support/v1/session/ses_x%00{suffix}", body,
                   code="invalid_text")
        yield Case(f"{method} session %ED%A0%80{suffix}", method, f"/support/v1/session/ses_%ED%A0%80{suffix}", body,
                   status=404)
    yield Case("approval call%00", "post", f"{S}/approvals/call%00", raw({"decision": "deny"}), code="invalid_text")
    yield Case("delete reminder%00", "delete", "/support/v1/reminders/rem_%00", code="invalid_text")
    yield Case("tool name%00", "post", "/support/v1/tools/look%00/call", raw({"input": {}}), code="invalid_text")
    yield Case("dev schedule%00", "post", "/support/v1/dev/schedules/x%00", code="invalid_text")
    yield Case("dev reminder%00", "post", "/support/v1/dev/reminders/rem_%00", code="invalid_text")
    yield Case("playground sessionId%00", "get", "/playground/support?sessionId=ses_%00", code="invalid_text")
    yield Case("query name%00", "get", "/support/v1/sessions?x%00=1", code="invalid_text")


BAD_COUNTS = ["-1", "٣", "١٠", "０", "1e3", "1.5", " 3", "+3", "3_0", "99999999999999999999", "%00", "%ED%A0%80", "0x10", "abc"]
CURSOR_DATA = [
    '["2026-01-01T00:00:00+00:00", "\\ud800"]',
    '["2026-01-01T00:00:00+00:00", "ses_\\u0000"]',
    '["0001-01-01T00:00:00+14:00", "ses_x"]',
    '["9999-12-31T23:59:59-14:00", "ses_x"]',
    '["2026-01-01T00:00:00", "ses_x"]',
    '["2026-01-01T00:00:00+00:00", 1e999]',
    '["2026-01-01T00:00:00+00:00", ["ses_x"]]',
    '["\\ud800", "ses_x"]',
    '["2026-01-01T00:00:00+00:00", "ses_x", 3]',
    "[" * 1000 + "]" * 1000,
    "\udcff",
]


def query_cases() -> Iterator[Case]:
    for value in BAD_COUNTS:
        yield Case(f"events startIndex={value}", "get", f"{S}/events?startIndex={value}", code="invalid_start_index"
                   if value not in ("%00",) else "invalid_text")
        yield Case(f"stream startIndex={value}", "get", f"{S}/stream?startIndex={value}", code="invalid_start_index"
                   if value not in ("%00",) else "invalid_text")
        yield Case(f"sessions limit={value}", "get", f"/support/v1/sessions?limit={value}", code="invalid_limit"
                   if value not in ("%00",) else "invalid_text")
    for value in ("+3", "3_0", "-2", "soon", "99999999999999999999"):
        yield Case(f"Last-Event-ID {value}", "get", f"{S}/stream", headers={"accept": "text/event-stream",
                   "last-event-id": value}, code="invalid_start_index")
    for data in CURSOR_DATA:
        encoded = base64.urlsafe_b64encode(data.encode("utf-8", "surrogatepass")).decode().rstrip("=")
        yield Case(f"cursor {data[:40]}", "get", f"/support/v1/sessions?cursor={encoded}", code="invalid_cursor")
    for value in ("garbage!!", "%ED%A0%80", "====", "A" * 5000):
        yield Case(f"cursor {value[:20]}", "get", f"/support/v1/sessions?cursor={value}", code="invalid_cursor")
    yield Case("cursor %00", "get", "/support/v1/sessions?cursor=%00", code="invalid_text")


CASES = [*body_cases(), *path_cases(), *query_cases()]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_hostile_request_gets_a_4xx_in_the_error_shape(client, world, before, case):
    headers = {"content-type": "application/json"} if case.body is not None else {}
    headers.update(case.headers or {})
    path = case.path.format(sid=world.sid, call=world.call)
    response = client.request(case.method.upper(), path, content=case.body, headers=headers)

    assert response.status_code == case.status, response.text[:500]
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}, body
    assert body["error"]["message"]
    if case.code:
        assert body["error"]["code"] == case.code, body


def test_bad_text_is_refused_naming_the_field(client, world):
    body = raw({"input": {"order_id": "A100", "notes": [{"text": f"a{NUL}"}]}})
    response = client.post("/support/v1/tools/lookup_order/call", content=body, headers={"content-type": "application/json"})
    error = response.json()["error"]
    assert (response.status_code, error["code"], error["details"]) == (400, "invalid_text", {"field": "input.notes[0].text"})
    assert "NUL" in error["message"]

    response = client.get(f"/support/v1/session/ses_x%00/approvals/{world.call}")
    assert response.json()["error"]["details"] == {"field": "sessionId"}


def test_the_hostile_requests_stored_nothing(client, world, before):
    assert world.snapshot(client) == before


# -- a model that sends bad text as tool input ---------------------------------------------------------

def test_a_tool_input_the_databases_cannot_store_is_refused_and_the_turn_goes_on(client):
    message = "\n".join([
        '/call refund_order {"order_id": "A100", "reason": "broken \\u0000 lid"}',
        '/call refund_order {"order_id": "A100", "reason": "broken \\ud800 lid"}',
        '/call lookup_order {"order_id": "A100", "\\u0000": 1}',
        '/call lookup_order {"order_id": "A100", "n": NaN}',
    ])
    session_id, token = start(client, message)
    events = settled(client, session_id)

    [requested] = [e["data"] for e in events if e["type"] == "actions.requested"]
    assert requested["calls"][0]["input"] == {"order_id": "A100", "reason": "broken \ufffd lid"}
    assert requested["calls"][1]["input"] == {"order_id": "A100", "reason": "broken \ufffd lid"}
    results = [e["data"] for e in events if e["type"] == "action.result"]
    assert [("output" in r, r["error"].split(":")[0]) for r in results] == [(False, "invalid input")] * 4
    assert "input.reason holds a NUL character" in results[0]["error"]
    assert "input.reason holds a lone surrogate" in results[1]["error"]
    assert "has a key that holds a NUL character" in results[2]["error"]
    assert "input.n is not a finite number" in results[3]["error"]
    types = [e["type"] for e in events]
    assert types[-2:] == ["turn.completed", "session.waiting"]
    assert "turn.failed" not in types
    replies = [e["data"]["text"] for e in events if e["type"] == "message.completed"]
    assert replies[-1].startswith("Tool results:\nrefund_order (error): invalid input: input.reason holds a NUL")

    follow = client.post(f"/support/v1/session/{session_id}/message",
                         json={"message": '/call lookup_order {"order_id": "A101"}', "continuationToken": token})
    assert follow.status_code == 202, follow.text
    later = settled(client, session_id, start_index=len(events))
    assert [e["type"] for e in later][-2:] == ["turn.completed", "session.waiting"]
    [result] = [e["data"] for e in later if e["type"] == "action.result"]
    assert result["output"]["status"] == "shipped"
    assert client.get(f"/support/v1/session/{session_id}").json()["status"] == "waiting"


# -- the websocket -----------------------------------------------------------------------------------

class Socket(RawWebsocket):
    def send(self, opcode: int, payload: bytes) -> None:
        """A masked client frame of any length."""
        n = len(payload)
        if n < 126:
            head = bytes([0x80 | opcode, 0x80 | n])
        elif n < 65536:
            head = bytes([0x80 | opcode, 0x80 | 126]) + struct.pack(">H", n)
        else:
            head = bytes([0x80 | opcode, 0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        key = (mask * (n // 4 + 1))[:n]
        masked = (int.from_bytes(payload, "big") ^ int.from_bytes(key, "big")).to_bytes(n, "big") if n else b""
        self.sock.sendall(head + mask + masked)

    def reply(self) -> tuple[int, bytes]:
        opcode, payload = self.frame()
        while opcode == 9:
            self.send(10, payload)
            opcode, payload = self.frame()
        return opcode, payload

    def close_code(self) -> int:
        opcode, payload = self.reply()
        assert opcode == 8, (opcode, payload[:200])
        return struct.unpack(">H", payload[:2])[0]


FRAMES = [
    ("surrogate", raw({"type": "message", "message": f"a{SURROGATE}"}), "invalid_text"),
    ("NUL", raw({"type": "message", "message": f"a{NUL}"}), "invalid_text"),
    ("NUL in a key", raw({"type": "message", "message": "hi", NUL: 1}), "invalid_text"),
    ("over the limit", raw({"type": "message", "message": "x" * 100_001}), "invalid_request"),
    ("deep", b"[" * DEEP + b"]" * DEEP, "body_too_deep"),
    ("1e999", b'{"type": "message", "message": 1e999}', "invalid_number"),
    ("NaN", b'{"type": "message", "message": NaN}', "invalid_number"),
    ("unknown admission", raw({"type": "message", "message": "hi", "admission": "later"}), "invalid_request"),
    ("message as number", raw({"type": "message", "message": 7}), "invalid_request"),
    ("blank message", raw({"type": "message", "message": " "}), "invalid_request"),
    ("raw NUL byte", b'{"type": "message", "message": "a\x00b"}', "invalid_frame"),
    ("not JSON", b"hello", "invalid_frame"),
    ("an array", b"[1, 2]", "invalid_frame"),
    ("unknown type", raw({"type": "dance"}), "invalid_frame"),
]


def test_bad_frames_get_error_frames_and_the_socket_stays_usable(server, client):
    session_id, _ = start(client, "hello")
    settled(client, session_id)
    ws = Socket(server.base_url, f"/support/v1/session/{session_id}/ws?startIndex=1000")
    try:
        for name, payload, code in FRAMES:
            ws.send(1, payload)
            opcode, reply = ws.reply()
            assert opcode == 1, (name, opcode, reply[:200])
            frame = json.loads(reply)
            assert frame["type"] == "error" and frame["error"]["code"] == code, (name, frame)
        ws.send(2, b"\xff\x00")
        assert json.loads(ws.reply()[1])["error"]["code"] == "invalid_frame"
        ws.send(1, raw({"type": "stop"}))
        assert json.loads(ws.reply()[1]) == {"type": "ack", "stopping": False}
        ws.send(8, struct.pack(">H", 1000))
        assert ws.close_code() == 1000
    finally:
        ws.close()
    assert len(dump(client, session_id)) == 10, "no frame wrote anything"


@pytest.mark.parametrize("path,code", [
    ("/support/v1/session/ses_x%00/ws", 4400),
    ("/support/v1/session/{sid}/ws?startIndex=%D9%A3", 4400),
    ("/support/v1/session/{sid}/ws?startIndex=-1", 4400),
    ("/support/v1/session/{sid}/ws?startIndex=%00", 4400),
    ("/support/v1/session/ses_%ED%A0%80/ws", 4404),
])
def test_a_socket_with_a_bad_id_or_start_index_is_closed_with_4400(server, world, path, code):
    ws = Socket(server.base_url, path.format(sid=world.sid))
    try:
        assert ws.close_code() == code
    finally:
        ws.close()


@pytest.mark.parametrize("payload", [b"\xff", b'{"message": "\xed\xa0\x80"}'])
def test_a_frame_that_is_not_utf8_ends_the_connection_as_the_protocol_says(server, world, payload):
    """RFC 6455 fails such a connection: the websocket layer (autobahn) drops it before the app sees the frame."""
    ws = Socket(server.base_url, f"/support/v1/session/{world.sid}/ws?startIndex=1000")
    try:
        ws.send(1, payload)
        try:
            code = ws.close_code()
        except ConnectionError:  # dropped without a closing handshake
            code = None
        assert code in (None, 1007)
    finally:
        ws.close()


@pytest.mark.parametrize("request_line", [
    b"GET /support/v1/session/ses_\xff\xfe HTTP/1.1", b"GET /support/v1/session/ses_\x00 HTTP/1.1",
    b"GET /support/v1/sessions?limit=\xd9\xa3 HTTP/1.1",
])
def test_raw_bytes_in_the_request_line_get_400_from_the_http_server(server, request_line):
    host, port = server.base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request_line + f"\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode())
        head = sock.recv(4096)
    assert head.split(b"\r\n")[0] == b"HTTP/1.1 400 Bad Request", head


# -- last: nothing crashed -----------------------------------------------------------------------------

def test_the_server_logged_no_traceback(server):
    log = server.output()
    assert "Traceback" not in log, log[log.find("Traceback") - 2000:][:6000]
    assert "Exception inside application" not in log
