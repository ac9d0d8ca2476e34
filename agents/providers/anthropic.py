"""Anthropic Messages API with streaming, tool use and thinking, through the official client.

`anthropic:<model>` uses ANTHROPIC_API_KEY (and ANTHROPIC_BASE_URL or the
agent param `base_url` if set). Agent params: `max_tokens` (default 4096),
`thinking_budget` (enables extended thinking), `temperature`. The client
retries rate limits and overloads with backoff, honouring retry-after.
"""
from __future__ import annotations

import json
from typing import Any, Iterator

import anthropic

from agents.providers.base import (
    WARMING_URL,
    ModelEvent,
    ModelRequest,
    ReasoningDelta,
    ReasoningSignature,
    TextDelta,
    ToolCall,
    Usage,
    Endpoint,
    KeyedProvider,
    classify_error,
    probe_params,
    sdk_client,
    sdk_endpoint,
)
from agents.providers.messages_api import to_anthropic_messages


class AnthropicProvider(KeyedProvider):
    name = "anthropic"
    key_env = "ANTHROPIC_API_KEY"
    base_url_env = "ANTHROPIC_BASE_URL"

    def client(self, params: dict[str, Any]) -> anthropic.Anthropic:
        return sdk_client(anthropic.Anthropic, params, key_env=self.key_env, base_url_env=self.base_url_env,
                          timeout=300)

    def endpoint(self, params: dict[str, Any]) -> Endpoint:
        return sdk_endpoint(self, self.client(params), params)

    def warm(self) -> None:
        """Import what the SDK loads on first use (the messages resource, the HTTP transport); no call is made."""
        with anthropic.Anthropic(api_key="warming", base_url=WARMING_URL) as client:
            client.messages  # noqa: B018  its first read imports the resource

    def probe(self, params: dict[str, Any], timeout: float) -> None:
        """GET /v1/models: answered with the key's access, without running a model."""
        try:
            self.client(probe_params(params, timeout)).models.list()
        except anthropic.AnthropicError as exc:
            raise classify_error(exc, anthropic) from exc

    def stream(self, request: ModelRequest) -> Iterator[ModelEvent]:
        params = request.params
        kwargs: dict[str, Any] = {
            "model": request.model,
            "max_tokens": int(params.get("max_tokens", 4096)),
            "messages": to_anthropic_messages(request.messages),
            "stream": True,
        }
        if request.system:
            kwargs["system"] = request.system
        if "temperature" in params:
            kwargs["temperature"] = params["temperature"]
        if params.get("thinking_budget"):
            kwargs["thinking"] = {"type": "enabled", "budget_tokens": int(params["thinking_budget"])}
        if request.tools:
            kwargs["tools"] = [{"name": t.name, "description": t.description, "input_schema": t.input_schema} for t in request.tools]

        blocks: dict[int, dict[str, Any]] = {}
        input_tokens = cache_read = cache_write = output_tokens = 0
        try:
            stream = self.client(params).messages.create(**kwargs)
            with stream:
                for event in stream:
                    if request.should_stop():
                        return
                    kind = event.type
                    if kind == "message_start":
                        usage = event.message.usage
                        input_tokens = usage.input_tokens or 0
                        cache_read = getattr(usage, "cache_read_input_tokens", 0) or 0
                        cache_write = getattr(usage, "cache_creation_input_tokens", 0) or 0
                        output_tokens = usage.output_tokens or 0
                    elif kind == "content_block_start":
                        block = event.content_block
                        if block.type == "tool_use":
                            blocks[event.index] = {"id": block.id, "name": block.name, "json": ""}
                    elif kind == "content_block_delta":
                        delta = event.delta
                        if delta.type == "text_delta":
                            yield TextDelta(delta.text)
                        elif delta.type == "thinking_delta":
                            yield ReasoningDelta(delta.thinking)
                        elif delta.type == "signature_delta":
                            yield ReasoningSignature(delta.signature)
                        elif delta.type == "input_json_delta" and event.index in blocks:
                            blocks[event.index]["json"] += delta.partial_json
                    elif kind == "message_delta":
                        output_tokens = event.usage.output_tokens or output_tokens
        except anthropic.AnthropicError as exc:
            raise classify_error(exc, anthropic) from exc
        for index in sorted(blocks):
            block = blocks[index]
            try:
                arguments: Any = json.loads(block["json"]) if block["json"].strip() else {}
            except json.JSONDecodeError:
                arguments = block["json"]
            yield ToolCall(call_id=block["id"], name=block["name"], input=arguments)
        yield Usage(input_tokens=input_tokens, output_tokens=output_tokens,
                    cache_read_tokens=cache_read, cache_write_tokens=cache_write)
