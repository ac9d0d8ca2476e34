"""The runtime's stream as steps: each model call's deltas, reply and usage, in the own loop's events.

With partial messages on, a model call arrives as the Messages API's own
stream events (message_start, the blocks' deltas, message_delta,
message_stop) around the assistant messages the SDK assembles; a call the
runtime made without streaming arrives as assistant messages only. Either
way a step opens with the call's first sign and closes at its stop, or when
what follows it (a permission question, tool results, the end) shows it is
over. Tool results come back as user messages, and are stored as the
conversation's tool messages. What a subagent of the runtime says is not
shown (its parent_tool_use_id is set).
"""
from __future__ import annotations

import time
from typing import Any, Callable

from agents.providers.base import ToolCall
from agents.providers.claude_agent_names import stored_name
from sessions.eventlog.storable import clean_text
from sessions.models import EventType
from sessions.turn.runner import Emitter, assistant_message
from sessions.turn.timings import TurnClock
from sessions.turn.usage import zero


class Steps:
    def __init__(self, emitter: Emitter, model: str, ran: Callable[[str, str, bool], None],
                 clock: TurnClock | None = None):
        """`ran(call id, result, is_error)`: told of each tool result (the runtime's own tools' end there);
        `clock`: the turn's, told of each model call."""
        self.emitter = emitter
        self.clock = clock
        self.asked = time.monotonic()  # when the model was last given something to answer
        self.ran = ran
        self.model = model  # the session's model id: it signs the thinking
        self.step = 0
        self.open = False
        self.streaming = False  # the open step's model call streams, and has not stopped yet
        self.appended: int | None = None  # where the last step's reply went in the conversation
        self.last_text = ""
        self.error = ""  # the last failed model call's reason, as the runtime names it
        self._reset()

    def _reset(self) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.signature: list[str] = []
        self.calls: list[ToolCall] = []
        self.streamed: set[str] = set()  # the kinds of delta the stream gave (then its blocks repeat them)
        self.usage = zero()
        self.started = time.monotonic()
        self.first_output: float | None = None

    def start(self) -> None:
        if self.open:
            return
        self.step += 1
        self.open = True
        self._reset()
        self.emitter.emit(EventType.STEP_STARTED, {"step": self.step})
        self.emitter.flush()

    def take(self, message: Any, messages: list[dict[str, Any]]) -> None:
        from claude_agent_sdk import AssistantMessage, StreamEvent, SystemMessage, UserMessage

        if getattr(message, "parent_tool_use_id", None):
            # A subagent of the runtime's: not shown, but its calls of the runtime's own tools end here.
            if isinstance(message, UserMessage):
                self.results(message.content, None)
            return
        if isinstance(message, SystemMessage) and message.subtype == "api_retry":
            self.retract(messages)
        elif isinstance(message, StreamEvent):
            self.stream_event(message.event, messages)
        elif isinstance(message, AssistantMessage):
            self.start()
            if message.error:
                self.error = message.error
            self.blocks(message.content)
        elif isinstance(message, UserMessage):
            self.close(messages)
            self.results(message.content, messages)

    def stream_event(self, event: dict[str, Any], messages: list[dict[str, Any]]) -> None:
        kind = event.get("type")
        if kind == "message_start":
            self.close(messages)
            self.start()
            self.streaming = True
            counts = (event.get("message") or {}).get("usage") or {}
            self.usage = {"inputTokens": counts.get("input_tokens") or 0,
                          "outputTokens": counts.get("output_tokens") or 0,
                          "cacheReadTokens": counts.get("cache_read_input_tokens") or 0,
                          "cacheWriteTokens": counts.get("cache_creation_input_tokens") or 0}
        elif kind == "content_block_delta":
            delta = event.get("delta") or {}
            if delta.get("type") == "text_delta":
                self.delta(EventType.MESSAGE_APPENDED, "text", delta.get("text", ""))
            elif delta.get("type") == "thinking_delta":
                self.delta(EventType.REASONING_APPENDED, "thinking", delta.get("thinking", ""))
        elif kind == "message_delta":
            output = (event.get("usage") or {}).get("output_tokens")
            if output is not None:
                self.usage["outputTokens"] = output
        elif kind == "message_stop":
            self.close(messages)

    def delta(self, type_: EventType, kind: str, text: str) -> None:
        text = clean_text(text)
        if not text:
            return
        first = not self.streamed
        self.streamed.add(kind)
        if self.first_output is None:
            self.first_output = time.monotonic()
        (self.text if kind == "text" else self.reasoning).append(text)
        self.emitter.emit(type_, {"delta": text})
        if first:  # the first delta leaves at once; coalescing starts after it
            self.emitter.flush()

    def blocks(self, content: list[Any]) -> None:
        from claude_agent_sdk import TextBlock, ThinkingBlock, ToolUseBlock

        for block in content:
            if self.first_output is None:  # a call that did not stream: its whole reply is its first output
                self.first_output = time.monotonic()
            if isinstance(block, TextBlock) and "text" not in self.streamed:
                self.text.append(clean_text(block.text))
                self.emitter.emit(EventType.MESSAGE_APPENDED, {"delta": clean_text(block.text)})
            elif isinstance(block, ThinkingBlock):
                if "thinking" not in self.streamed:
                    self.reasoning.append(clean_text(block.thinking))
                    self.emitter.emit(EventType.REASONING_APPENDED, {"delta": clean_text(block.thinking)})
                if block.signature:
                    self.signature.append(block.signature)
            elif isinstance(block, ToolUseBlock):
                name = stored_name(block.name)
                self.calls.append(ToolCall(block.id, name, block.input))

    def retract(self, messages: list[dict[str, Any]]) -> None:
        """The model call whose stream just broke off is made again: what it said is out of the conversation
        (the runtime does not keep it either), though its deltas were streamed already."""
        self.close(messages)
        if self.appended is not None and self.appended == len(messages) - 1:
            messages.pop()
        self.appended = None

    def close(self, messages: list[dict[str, Any]]) -> None:
        """End the open step: its reply joins the conversation and the log."""
        if not self.open:
            return
        self.open = self.streaming = False
        text, reasoning = "".join(self.text), "".join(self.reasoning)
        if reasoning:
            self.emitter.emit(EventType.REASONING_COMPLETED, {"text": reasoning})
        if text:
            self.emitter.emit(EventType.MESSAGE_COMPLETED, {"text": text})
        self.last_text = text or self.last_text
        messages.append(assistant_message(text, reasoning, "".join(self.signature), self.calls, self.model))
        self.appended = len(messages) - 1  # taken back if the call turns out to have broken off (retract)
        self.emitter.emit(EventType.STEP_COMPLETED, {
            "step": self.step, "durationMs": round((time.monotonic() - self.started) * 1000, 1), "usage": self.usage})
        if self.clock is not None:
            self.clock.model_called(self.model, min(self.asked, self.started), self.first_output)
        self.asked = time.monotonic()  # a call made again after this one (a retry) starts now

    def results(self, content: Any, messages: list[dict[str, Any]] | None) -> None:
        """Tool results the runtime hands the model, as the conversation's tool messages (`messages`
        None: a subagent's, which the conversation does not keep)."""
        from claude_agent_sdk import ToolResultBlock

        if not isinstance(content, list):
            return
        if messages is not None:  # the runtime's next model call starts with these
            self.asked = time.monotonic()
        asked = next((m for m in reversed(messages or []) if m.get("role") == "assistant"), {})
        names = {c["id"]: c["name"] for c in asked.get("toolCalls") or []}
        for block in content:
            if isinstance(block, ToolResultBlock):
                text = _text(block.content)
                if messages is not None:
                    messages.append({"role": "tool", "callId": block.tool_use_id,
                                     "name": names.get(block.tool_use_id, ""), "content": text,
                                     "isError": bool(block.is_error)})
                self.ran(block.tool_use_id, text, bool(block.is_error))


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""
