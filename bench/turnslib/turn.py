"""One turn as a client sees it: create a session, read its stream until `session.waiting`."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import httpx

from turnslib.config import TURN_TIMEOUT
from turnslib.stats import parse_at


@dataclass
class TurnResult:
    ok: bool
    latency_ms: float
    error: str = ""
    session_id: str = ""
    turn_id: str = ""
    token: str = ""
    # client wall clock (epoch s) and server `at` (epoch s)
    sent: float = 0.0
    responded: float = 0.0
    received: float = 0.0
    at_received: float | None = None
    at_waiting: float | None = None
    tool_ok: bool | None = None


def note(event: dict[str, Any], res: TurnResult) -> bool:
    """Record what matters of one event; True on the turn's session.waiting."""
    kind = event.get("type")
    if res.turn_id and event.get("turnId") not in (None, res.turn_id):
        return False
    if kind == "message.received":
        res.at_received = parse_at(event["at"])
    elif kind == "action.result":
        res.tool_ok = "error" not in event.get("data", {}) and res.tool_ok is not False
    elif kind == "turn.failed":
        res.error = f"turn.failed: {event.get('data', {}).get('error')}"
    elif kind == "session.waiting" and (not res.turn_id or event.get("turnId") == res.turn_id):
        res.at_waiting = parse_at(event["at"])
        return True
    return False


def _finish(res: TurnResult, p0: float, w0: float, want_tool: bool) -> TurnResult:
    res.latency_ms = (time.perf_counter() - p0) * 1000
    res.received = w0 + res.latency_ms / 1000
    res.ok = not res.error and res.at_waiting is not None and (res.tool_ok is True if want_tool else True)
    if not res.ok and not res.error:
        res.error = "tool call failed" if want_tool else "no session.waiting"
    return res


def _read_turn(stream: httpx.Response, res: TurnResult, p0: float) -> None:
    """A stream's events until the turn's session.waiting, or the turn timeout. A turn whose id the
    caller does not know yet (one request) is the one its message.received names."""
    for line in stream.iter_lines():
        if not line:
            continue
        event = json.loads(line)
        if not res.turn_id and event.get("type") == "message.received":
            res.turn_id = event.get("turnId") or ""
        if note(event, res):
            break
        if time.perf_counter() - p0 > TURN_TIMEOUT:
            res.error = "turn timeout"
            break


def new_session_turn(client: httpx.Client, agent: str, message: str, want_tool: bool = False) -> TurnResult:
    """W1/W4: POST /session, then read its stream from 0 until session.waiting."""
    res = TurnResult(ok=False, latency_ms=0.0)
    w0, p0 = time.time(), time.perf_counter()
    res.sent = w0
    try:
        r = client.post(f"/{agent}/v1/session", json={"message": message})
        res.responded = w0 + (time.perf_counter() - p0)
        if r.status_code != 201:
            res.error = f"create: HTTP {r.status_code} {r.text[:200]}"
            return _finish(res, p0, w0, want_tool)
        body = r.json()
        res.session_id, res.turn_id, res.token = body["sessionId"], body["turnId"], body["continuationToken"]
        with client.stream("GET", f"/{agent}/v1/session/{res.session_id}/stream", params={"startIndex": 0}) as s:
            if s.status_code != 200:
                res.error = f"stream: HTTP {s.status_code}"
                return _finish(res, p0, w0, want_tool)
            _read_turn(s, res, p0)
    except httpx.HTTPError as exc:
        res.error = f"{type(exc).__name__}: {exc}"
    return _finish(res, p0, w0, want_tool)


def one_request_turn(client: httpx.Client, agent: str, message: str, want_tool: bool = False) -> TurnResult:
    """W1/W4 under --one-request: POST /session with Accept: application/x-ndjson, whose answer
    is the turn's events until its session.waiting. `responded`: when the answer's headers came."""
    res = TurnResult(ok=False, latency_ms=0.0)
    w0, p0 = time.time(), time.perf_counter()
    res.sent = w0
    try:
        with client.stream("POST", f"/{agent}/v1/session", json={"message": message},
                           headers={"Accept": "application/x-ndjson"}) as s:
            res.responded = w0 + (time.perf_counter() - p0)
            if s.status_code != 200:
                res.error = f"create: HTTP {s.status_code} {s.read()[:200]!r}"
                return _finish(res, p0, w0, want_tool)
            res.session_id, res.token = s.headers["X-Session-Id"], s.headers["X-Continuation-Token"]
            _read_turn(s, res, p0)
    except httpx.HTTPError as exc:
        res.error = f"{type(exc).__name__}: {exc}"
    return _finish(res, p0, w0, want_tool)


async def anew_session_turn(client: httpx.AsyncClient, agent: str, message: str) -> TurnResult:
    res = TurnResult(ok=False, latency_ms=0.0)
    w0, p0 = time.time(), time.perf_counter()
    res.sent = w0
    try:
        r = await client.post(f"/{agent}/v1/session", json={"message": message})
        res.responded = w0 + (time.perf_counter() - p0)
        if r.status_code != 201:
            res.error = f"create: HTTP {r.status_code} {r.text[:200]}"
            return _finish(res, p0, w0, False)
        body = r.json()
        res.session_id, res.turn_id = body["sessionId"], body["turnId"]
        async with client.stream("GET", f"/{agent}/v1/session/{res.session_id}/stream", params={"startIndex": 0}) as s:
            if s.status_code != 200:
                res.error = f"stream: HTTP {s.status_code}"
                return _finish(res, p0, w0, False)
            async for line in s.aiter_lines():
                if line and note(json.loads(line), res):
                    break
                if time.perf_counter() - p0 > TURN_TIMEOUT:
                    res.error = "turn timeout"
                    break
    except httpx.HTTPError as exc:
        res.error = f"{type(exc).__name__}: {exc}"
    return _finish(res, p0, w0, False)


def diagnose(client: httpx.Client, agent: str, session_id: str) -> str:
    """After a failed turn: does the event log have the session.waiting the stream did not deliver?"""
    try:
        r = client.get(f"/{agent}/v1/session/{session_id}/events", params={"startIndex": 0}, timeout=10)
        types = [json.loads(line)["type"] for line in r.text.splitlines() if line.strip()]
        return f"[{session_id}: log has {len(types)} events, last {types[-2:]}]"
    except (httpx.HTTPError, ValueError, KeyError) as exc:
        return f"[{session_id}: events not readable: {exc}]"


async def adiagnose(client: httpx.AsyncClient, agent: str, session_id: str) -> str:
    try:
        r = await client.get(f"/{agent}/v1/session/{session_id}/events", params={"startIndex": 0}, timeout=10)
        types = [json.loads(line)["type"] for line in r.text.splitlines() if line.strip()]
        return f"[{session_id}: log has {len(types)} events, last {types[-2:]}]"
    except (httpx.HTTPError, ValueError, KeyError) as exc:
        return f"[{session_id}: events not readable: {exc}]"

