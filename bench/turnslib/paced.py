"""W5: a real model's streamed reply, from a paced loopback model to the client reading the session's stream.

`PacedModel` is an OpenAI-compatible Chat Completions server on loopback (in
this process, on a thread) that answers every request with `tokens` chunks of
one word each, `gap_ms` apart, then a finish chunk and usage, and notes the
wall-clock time it wrote its first and last content chunk. The agent `paced`
(written here, `openai:paced` with `base_url` pointing at it) is deployed beside
the bench's agent, so a turn is a real `openai` provider call through the
official SDK.

W5 runs `w5` sessions one after another: create, read the stream to
`session.waiting`, and compare the client's clock (the same machine's) at the
first and last `message.appended` line with the model's at its first and last
chunk: `first_token_ms` is the server's overhead on the first token,
`last_token_lag_ms` on the last. It counts the delta lines a client reads and
the events stored per turn. `sdk_alone` is what the official client costs when
it reads the same stream in a process of its own, with nothing else: the floor
the server's CPU per streamed turn is compared with.
"""
from __future__ import annotations

import json
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from turnslib.config import PYTHON, TURN_TIMEOUT, BenchError
from turnslib.stats import r1, summary

AGENT_SLUG = "paced"
AGENT_PY = '''from agents.sdk import Agent

agent = Agent(model="openai:paced", name="Paced", params={{"base_url": "{base_url}", "max_retries": 0}}, tools=[])
'''


class PacedModel:
    """The loopback model: one word a chunk, `gap_ms` apart; each request's first and last chunk times kept."""

    def __init__(self, tokens: int, gap_ms: float):
        self.tokens, self.gap = tokens, gap_ms / 1000
        self.sent: list[tuple[float, float]] = []  # (first content chunk, last content chunk), wall clock
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):  # the model list a health probe asks for
                body = json.dumps({"object": "list", "data": [{"id": "paced", "object": "model"}]}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                self.rfile.read(int(self.headers.get("content-length", 0)))
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("connection", "close")
                self.end_headers()
                model.stream(self.wfile)
                self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> PacedModel:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def stream(self, out) -> None:
        def chunk(delta: dict[str, Any], finish: str | None = None, usage: dict[str, int] | None = None) -> None:
            body = {"id": "chatcmpl-paced", "object": "chat.completion.chunk", "created": 0, "model": "paced",
                    "choices": [] if usage else [{"index": 0, "delta": delta, "finish_reason": finish}],
                    **({"usage": usage} if usage else {})}
            out.write(f"data: {json.dumps(body)}\n\n".encode())
            out.flush()

        chunk({"role": "assistant", "content": ""})
        first = last = 0.0
        for n in range(self.tokens):
            if n:
                time.sleep(self.gap)
            chunk({"content": f"word{n} "})
            last = time.time()
            first = first or last
        chunk({}, finish="stop")
        chunk({}, usage={"prompt_tokens": 10, "completion_tokens": self.tokens, "total_tokens": 10 + self.tokens})
        out.write(b"data: [DONE]\n\n")
        out.flush()
        self.sent.append((first, last))


def write_agent(folder: Path, model: PacedModel) -> Path:
    root = folder / AGENT_SLUG
    (root / "agent").mkdir(parents=True, exist_ok=True)
    (root / "agent" / "instructions.md").write_text("You answer at length.\n")
    (root / "agent" / "agent.py").write_text(AGENT_PY.format(base_url=model.base_url))
    return root


def streamed_turn(client: httpx.Client, model: PacedModel) -> dict[str, Any]:
    """One new session's turn on the paced agent, read on its stream; its timings and counts."""
    before = len(model.sent)
    created = client.post(f"/{AGENT_SLUG}/v1/session", json={"message": "Tell me a long story."})
    if created.status_code != 201:
        raise BenchError(f"W5: create: HTTP {created.status_code} {created.text[:200]}")
    sid = created.json()["sessionId"]
    deltas, first_seen, last_seen, index = 0, 0.0, 0.0, -1
    deadline = time.monotonic() + TURN_TIMEOUT
    with client.stream("GET", f"/{AGENT_SLUG}/v1/session/{sid}/stream", params={"startIndex": 0}) as lines:
        for line in lines.iter_lines():
            if not line:
                continue
            event = json.loads(line)
            index = max(index, event.get("index", index))
            if event["type"] == "message.appended":
                last_seen = time.time()
                first_seen = first_seen or last_seen
                deltas += 1
            elif event["type"] in ("turn.failed", "session.failed"):
                raise BenchError(f"W5: the turn failed: {json.dumps(event.get('data'))[:300]}")
            if event["type"] == "session.waiting" or time.monotonic() > deadline:
                break
    if len(model.sent) <= before or not deltas:
        raise BenchError("W5: the turn ended without the model's stream reaching the client")
    first_sent, last_sent = model.sent[-1]
    return {"first_token_ms": (first_seen - first_sent) * 1000, "last_token_lag_ms": (last_seen - last_sent) * 1000,
            "deltas": deltas, "events": index + 1}


SDK_ALONE = '''
import resource, sys, openai
client = openai.OpenAI(base_url=sys.argv[1], api_key="unset", max_retries=0)
runs = int(sys.argv[2])
start = resource.getrusage(resource.RUSAGE_SELF)
for _ in range(runs):
    for chunk in client.chat.completions.create(model="paced", messages=[{"role": "user", "content": "hi"}],
                                                stream=True, stream_options={"include_usage": True}):
        pass
end = resource.getrusage(resource.RUSAGE_SELF)
print((end.ru_utime + end.ru_stime - start.ru_utime - start.ru_stime) / runs * 1000)
'''


def sdk_alone(model: PacedModel, runs: int) -> float:
    """CPU ms the official client alone spends reading one such stream (its own process, after its import)."""
    done = subprocess.run([PYTHON, "-c", SDK_ALONE, model.base_url, str(runs)], capture_output=True, text=True,
                          timeout=TURN_TIMEOUT * runs + 60)
    if done.returncode != 0:
        raise BenchError(f"W5: the SDK alone failed: {done.stderr[-500:]}")
    return float(done.stdout.strip())


def w5_block(turns: list[dict[str, Any]]) -> dict[str, Any]:
    def stat(key: str) -> dict[str, Any]:
        return {k: r1(v) for k, v in summary([t[key] for t in turns]).items()}
    return {"first_token_ms": stat("first_token_ms"), "last_token_lag_ms": stat("last_token_lag_ms"),
            "deltas_per_turn": r1(sum(t["deltas"] for t in turns) / len(turns)),
            "events_per_turn": r1(sum(t["events"] for t in turns) / len(turns))}
