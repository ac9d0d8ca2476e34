"""Loopback HTTP servers that speak the OpenAI Chat Completions and Anthropic
Messages streaming protocols, scripted per test, for the real SDK clients."""
from __future__ import annotations

import itertools
import json
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# Each reply's message id differs, as the API's do (the Claude Agent SDK's runtime merges messages of one id).
MESSAGE_IDS = itertools.count(1)


class Reply:
    def __init__(self, status: int = 200, events: list[Any] | None = None, headers: dict[str, str] | None = None,
                 body: Any = None, delay: float = 0.0, gap: float = 0.0, break_after: int | None = None):
        self.status = status
        self.events = events or []
        self.headers = headers or {}
        self.body = body
        self.delay = delay  # seconds before answering: longer than the client's timeout makes it give up
        self.gap = gap  # seconds between streamed events: a reply still streaming when a turn is stopped
        self.break_after = break_after  # events sent before the stream breaks off (None: it does not)


class LoopbackModelServer:
    """Answers each POST with the next scripted Reply and records the request bodies.

    GET /v1/models (both protocols' model list, what a health probe asks) answers
    `model_list_status` with an empty list, and is counted in `model_list_requests`.
    """

    def __init__(self, kind: str):
        self.kind = kind  # "openai" | "anthropic"
        # Anthropic: sign each thinking block with the model called, and refuse (400) a request
        # handing back a thinking block another model signed, as the real API refuses one.
        self.signs_thinking = False
        self.replies: deque[Reply] = deque()
        self.requests: list[dict[str, Any]] = []
        self.model_list_requests = 0
        self.model_list_status = 200
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                if self.path.split("?")[0] != "/v1/models":
                    self.send_error(404)
                    return
                server.model_list_requests += 1
                ok = server.model_list_status == 200
                body = ({"object": "list", "data": []} if server.kind == "openai" else
                        {"data": [], "has_more": False, "first_id": None, "last_id": None}) if ok else \
                    {"type": "error", "error": {"type": "api_error", "message": "models unavailable"}}
                payload = json.dumps(body).encode()
                self.send_response(server.model_list_status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_POST(self):
                length = int(self.headers.get("content-length", 0))
                server.requests.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()},
                                        "body": json.loads(self.rfile.read(length) or b"{}")})
                body = server.requests[-1]["body"]
                reply = server.replies.popleft() if server.replies else Reply(500, body={"error": "no reply scripted"})
                if server.signs_thinking and (foreign := foreign_signature(body)):
                    reply = Reply(400, body={"type": "error", "error": {
                        "type": "invalid_request_error", "message": f"Invalid `signature` in `thinking` block: {foreign}"}})
                if reply.delay:
                    time.sleep(reply.delay)
                if reply.status == 200 and server.kind == "anthropic" and body.get("stream") is False:
                    reply = Reply(body=as_message(reply.events))  # a non-streaming call: the same reply, whole
                if reply.status != 200 or reply.body is not None:
                    payload = json.dumps(reply.body or {"error": {"message": "error", "type": "error"}}).encode()
                    self.send_response(reply.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                try:
                    self.send_response(200)
                    self.send_header("content-type", "text/event-stream")
                    self.end_headers()
                    for at, event in enumerate(reply.events):
                        if reply.break_after is not None and at == reply.break_after:
                            self.wfile.flush()
                            self.close_connection = True
                            return  # the stream breaks off: the connection closes mid-answer
                        if server.signs_thinking and event.get("delta", {}).get("type") == "signature_delta":
                            event = {**event, "delta": {**event["delta"], "signature": signature_of(body["model"])}}
                        if server.kind == "anthropic":
                            chunk = f"event: {event['type']}\ndata: {json.dumps(event)}\n\n"
                        else:
                            chunk = f"data: {json.dumps(event)}\n\n"
                        self.wfile.write(chunk.encode())
                        self.wfile.flush()
                        if reply.gap:
                            time.sleep(reply.gap)
                    if server.kind == "openai":
                        self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (its timeout)
                    return
                self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> "LoopbackModelServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def as_message(events: list[dict[str, Any]]) -> dict[str, Any]:
    """A streamed Anthropic reply as the non-streaming API answers it: one message with its blocks."""
    message: dict[str, Any] = {}
    blocks: dict[int, dict[str, Any]] = {}
    for event in events:
        kind = event.get("type")
        if kind == "message_start":
            message = {**event["message"], "content": []}
        elif kind == "content_block_start":
            blocks[event["index"]] = dict(event["content_block"], **({"input": ""} if
                                                                    event["content_block"]["type"] == "tool_use" else {}))
        elif kind == "content_block_delta":
            block, delta = blocks[event["index"]], event["delta"]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            elif delta["type"] == "signature_delta":
                block["signature"] = delta["signature"]
            elif delta["type"] == "input_json_delta":
                block["input"] += delta["partial_json"]
        elif kind == "message_delta":
            message.update(event["delta"])
            message["usage"] = {**message.get("usage", {}), **event.get("usage", {})}
    for index in sorted(blocks):
        block = blocks[index]
        if block["type"] == "tool_use":
            block["input"] = json.loads(block["input"] or "{}")
        message["content"].append(block)
    return message


def signature_of(model: str) -> str:
    return f"signed-by:{model}"


def foreign_signature(body: dict[str, Any]) -> str:
    """The first signature of a thinking block in `body` that its model did not write; empty: none."""
    for message in body.get("messages", []):
        for block in message.get("content") if isinstance(message.get("content"), list) else []:
            if block.get("type") == "thinking" and block.get("signature") != signature_of(body.get("model", "")):
                return block.get("signature", "")
    return ""


# --- OpenAI chunk builders ---------------------------------------------------

def oa_chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-test",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def oa_usage(prompt: int, completion: int, cached: int = 0) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-test", "choices": [],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
                      "prompt_tokens_details": {"cached_tokens": cached}}}


def oa_text(text: str, prompt: int = 10, completion: int = 5, pieces: int = 3) -> list[dict[str, Any]]:
    size = max(1, len(text) // pieces)
    parts = [text[i:i + size] for i in range(0, len(text), size)]
    return ([oa_chunk({"role": "assistant", "content": ""})] + [oa_chunk({"content": p}) for p in parts]
            + [oa_chunk({}, "stop"), oa_usage(prompt, completion)])


def oa_tool_calls(calls: list[tuple[str, str, dict]], prompt: int = 20, completion: int = 8) -> list[dict[str, Any]]:
    """Each call's id/name in one chunk and its arguments split over several."""
    chunks = [oa_chunk({"role": "assistant", "content": None})]
    for index, (call_id, name, arguments) in enumerate(calls):
        raw = json.dumps(arguments)
        chunks.append(oa_chunk({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                                 "function": {"name": name, "arguments": ""}}]}))
        for i in range(0, len(raw), 5):
            chunks.append(oa_chunk({"tool_calls": [{"index": index, "function": {"arguments": raw[i:i + 5]}}]}))
    return chunks + [oa_chunk({}, "tool_calls"), oa_usage(prompt, completion)]


# --- Anthropic event builders ------------------------------------------------

def an_start(input_tokens: int, cache_read: int = 0, cache_write: int = 0) -> dict[str, Any]:
    return {"type": "message_start", "message": {
        "id": f"msg_{next(MESSAGE_IDS)}", "type": "message", "role": "assistant", "model": "claude-test", "content": [],
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": 1, "cache_read_input_tokens": cache_read,
                  "cache_creation_input_tokens": cache_write}}}


def an_end(output_tokens: int, stop: str) -> list[dict[str, Any]]:
    return [{"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
             "usage": {"output_tokens": output_tokens}},
            {"type": "message_stop"}]


def an_text(text: str, input_tokens: int = 10, output_tokens: int = 5, thinking: str = "") -> list[dict[str, Any]]:
    events = [an_start(input_tokens)]
    index = 0
    if thinking:
        events += [
            {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": thinking}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "sig-1"}},
            {"type": "content_block_stop", "index": 0},
        ]
        index = 1
    events.append({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}})
    for i in range(0, len(text), 7):
        events.append({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text[i:i + 7]}})
    events.append({"type": "content_block_stop", "index": index})
    return events + an_end(output_tokens, "end_turn")


def an_tool_uses(calls: list[tuple[str, str, dict]], input_tokens: int = 20, output_tokens: int = 8,
                 thinking: str = "") -> list[dict[str, Any]]:
    events = [an_start(input_tokens)]
    if thinking:
        events += an_text("", thinking=thinking)[1:5]  # its thinking block, at index 0
    for index, (call_id, name, arguments) in enumerate(calls, start=1 if thinking else 0):
        raw = json.dumps(arguments)
        events.append({"type": "content_block_start", "index": index,
                       "content_block": {"type": "tool_use", "id": call_id, "name": name, "input": {}}})
        for i in range(0, len(raw), 4):
            events.append({"type": "content_block_delta", "index": index,
                           "delta": {"type": "input_json_delta", "partial_json": raw[i:i + 4]}})
        events.append({"type": "content_block_stop", "index": index})
    return events + an_end(output_tokens, "tool_use")
