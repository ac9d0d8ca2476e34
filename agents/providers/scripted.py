"""`scripted`: a deterministic offline model.

It is the default when no provider key is configured and what the tests and
benchmarks use. It reads directives from the latest user message, one per
line; every other line is echoed back:

    /think <text>        stream <text> as reasoning before the reply
    /call <tool> <json>  call a tool with a JSON object input (several lines:
                         parallel calls in one step)
    /reply <text>        reply with exactly <text> instead of the echo
    /sleep <ms>          wait before answering (interruptible)
    /fail <message>      fail the model call with <message>
    /tools               reply with the names of the tools this request offers
    /system              reply with the system prompt this request carries (the
                         agent's instructions, skills, ...)
    /next                end this step: the directives after it are the next
                         step's, once this step's tool results are back

After tool results come back (and no `/next` step is left) it replies with a
summary of them. Model params
(`Agent(params=...)`): `latency_ms` (wait before every step),
`chunk_delay_ms` (wait between streamed chunks), `fail` (fail every call).
Usage is counted as one token per four characters, rounded up.
"""
from __future__ import annotations

import json
import time
from typing import Any, Iterator

from agents.providers.base import (
    Endpoint,
    ModelEvent,
    ModelRequest,
    ProviderError,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    Usage,
)


def _tokens(text: str) -> int:
    return (len(text) + 3) // 4


def _sleep(seconds: float, request: ModelRequest) -> None:
    request.waited = True
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if request.should_stop():
            return
        time.sleep(min(left, 0.02))


class ScriptedProvider:
    name = "scripted"
    in_process = True  # its whole reply is at hand at once, unless it waits (`ModelRequest.waited`)

    def endpoint(self, params: dict[str, Any]) -> Endpoint:
        return Endpoint(self.name, "", configured=True)

    def missing_configuration(self, params: dict[str, Any]) -> str:
        return ""  # runs in this process, offline

    def probe(self, params: dict[str, Any], timeout: float) -> None:
        """In this process: always reachable."""

    def stream(self, request: ModelRequest) -> Iterator[ModelEvent]:
        params = request.params
        if params.get("fail"):
            raise ProviderError(str(params["fail"]), code="scripted_failure")
        if params.get("latency_ms"):
            _sleep(float(params["latency_ms"]) / 1000, request)

        prompt_tokens = _tokens(request.system) + sum(_tokens(_content(m)) for m in request.messages)
        last = request.messages[-1] if request.messages else {"role": "user", "content": ""}
        if last["role"] == "tool":
            steps, done = _steps_so_far(request.messages)
            if done < len(steps):
                reply, reasoning, calls = self._from_user(steps[done], request)
            else:
                reply, reasoning, calls = self._after_tools(request.messages), "", []
        else:
            reply, reasoning, calls = self._from_user(_split_steps(last.get("content", ""))[0], request)

        chunk_delay = float(params.get("chunk_delay_ms", 0)) / 1000
        if reasoning:
            for chunk in _chunks(reasoning):
                yield ReasoningDelta(chunk)
        for chunk in _chunks(reply):
            if chunk_delay:
                _sleep(chunk_delay, request)
                if request.should_stop():
                    return
            yield TextDelta(chunk)
        for index, (name, arguments) in enumerate(calls):
            yield ToolCall(call_id=f"call_{len(request.messages)}_{index}", name=name, input=arguments)
        output = reply + reasoning + "".join(json.dumps(a) for _, a in calls)
        yield Usage(input_tokens=prompt_tokens, output_tokens=_tokens(output))

    def _from_user(self, text: str, request: ModelRequest) -> tuple[str, str, list[tuple[str, Any]]]:
        echo: list[str] = []
        reasoning: list[str] = []
        calls: list[tuple[str, Any]] = []
        reply: str | None = None
        for line in text.splitlines():
            command, _, rest = line.strip().partition(" ")
            rest = rest.strip()
            if command == "/think":
                reasoning.append(rest)
            elif command == "/call":
                name, _, raw = rest.partition(" ")
                try:
                    arguments = json.loads(raw) if raw.strip() else {}
                except json.JSONDecodeError:
                    arguments = raw  # the engine reports invalid input to the model
                calls.append((name, arguments))
            elif command == "/reply":
                reply = rest
            elif command == "/tools":
                reply = "Tools: " + (", ".join(sorted(t.name for t in request.tools)) or "none")
            elif command == "/system":
                reply = request.system
            elif command == "/sleep":
                try:
                    _sleep(float(rest) / 1000, request)
                except ValueError:
                    pass
            elif command == "/fail":
                raise ProviderError(rest or "scripted failure", code="scripted_failure")
            else:
                echo.append(line)
        if reply is None:
            said = "\n".join(echo).strip()
            reply = "" if calls and not said else f"You said: {said}"
        return reply, "\n".join(reasoning), calls

    def _after_tools(self, messages: list[dict[str, Any]]) -> str:
        results = []
        for message in reversed(messages):
            if message["role"] != "tool":
                break
            status = "error" if message.get("isError") else "ok"
            results.append(f"{message['name']} ({status}): {message['content']}")
        return "Tool results:\n" + "\n".join(reversed(results))


def _split_steps(text: str) -> list[str]:
    """A message's directives, one chunk per step (split at `/next` lines)."""
    steps, current = [], []
    for line in (text if isinstance(text, str) else "").splitlines():
        if line.strip() == "/next":
            steps.append("\n".join(current))
            current = []
        else:
            current.append(line)
    steps.append("\n".join(current))
    return steps


def _steps_so_far(messages: list[dict[str, Any]]) -> tuple[list[str], int]:
    """The latest user message's steps, and how many of them have run (assistant steps with calls since it)."""
    done = 0
    for message in reversed(messages):
        if message["role"] == "user":
            return _split_steps(message.get("content", "")), done
        if message["role"] == "assistant" and message.get("toolCalls"):
            done += 1
    return [""], done


def _content(message: dict[str, Any]) -> str:
    content = message.get("content") or ""
    return content if isinstance(content, str) else json.dumps(content)


def _chunks(text: str, size: int = 24) -> list[str]:
    """Split on word boundaries into pieces of about `size` characters."""
    pieces, current = [], ""
    for word in text.split(" "):
        candidate = f"{current} {word}" if current else word
        if len(candidate) > size and current:
            pieces.append(current + " ")
            current = word
        else:
            current = candidate
    if current:
        pieces.append(current)
    return pieces
