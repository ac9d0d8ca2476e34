"""OpenAI-compatible Chat Completions, through the official `openai` client.

`openai:<model>` reaches OPENAI_BASE_URL (default api.openai.com) with
OPENAI_API_KEY; vLLM, Ollama, LM Studio and llama.cpp servers work by
pointing OPENAI_BASE_URL (or the agent param `base_url`) at them. The client
retries rate limits (honouring retry-after) and transient errors with backoff.
"""
from __future__ import annotations

import json
from typing import Any, Iterator

import openai

from agents.providers.base import (
    WARMING_URL,
    ModelEvent,
    ModelRequest,
    ReasoningDelta,
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

# Agent params passed through to the API; the rest configure the client.
REQUEST_PARAMS = ("temperature", "top_p", "max_tokens", "max_completion_tokens", "reasoning_effort", "seed", "stop")


def to_openai_messages(system: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for m in messages:
        if m["role"] == "user":
            out.append({"role": "user", "content": m["content"]})
        elif m["role"] == "assistant":
            entry: dict[str, Any] = {"role": "assistant", "content": m.get("content") or None}
            if m.get("toolCalls"):
                entry["tool_calls"] = [
                    {"id": c["id"], "type": "function",
                     "function": {"name": c["name"], "arguments": c["input"] if isinstance(c["input"], str) else json.dumps(c["input"])}}
                    for c in m["toolCalls"]
                ]
            out.append(entry)
        elif m["role"] == "tool":
            out.append({"role": "tool", "tool_call_id": m["callId"], "content": m["content"]})
    return out



class OpenAIProvider(KeyedProvider):
    name = "openai"
    key_env = "OPENAI_API_KEY"
    base_url_env = "OPENAI_BASE_URL"
    keyless_server = True  # vLLM, Ollama, ... on a base URL of their own often need no key

    def client(self, params: dict[str, Any]) -> openai.OpenAI:
        return sdk_client(openai.OpenAI, params, key_env=self.key_env, base_url_env=self.base_url_env, timeout=120)

    def endpoint(self, params: dict[str, Any]) -> Endpoint:
        return sdk_endpoint(self, self.client(params), params)

    def warm(self) -> None:
        """Import what the SDK loads on first use (the chat resource, the HTTP transport); no call is made."""
        with openai.OpenAI(api_key="warming", base_url=WARMING_URL) as client:
            client.chat.completions  # noqa: B018  its first read imports the resource

    def probe(self, params: dict[str, Any], timeout: float) -> None:
        """GET {base}/models: every OpenAI-compatible server answers it."""
        try:
            self.client(probe_params(params, timeout)).models.list()
        except openai.OpenAIError as exc:
            raise classify_error(exc, openai) from exc

    def stream(self, request: ModelRequest) -> Iterator[ModelEvent]:
        params = request.params
        kwargs: dict[str, Any] = {
            "model": request.model,
            "messages": to_openai_messages(request.system, request.messages),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        kwargs.update({k: params[k] for k in REQUEST_PARAMS if k in params})
        if request.tools:
            kwargs["tools"] = [
                {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.input_schema}}
                for t in request.tools
            ]
        calls: dict[int, dict[str, str]] = {}
        try:
            stream = self.client(params).chat.completions.create(**kwargs)
            with stream:
                for chunk in stream:
                    if request.should_stop():
                        return
                    if chunk.usage is not None:
                        yield _usage(chunk.usage)
                    for choice in chunk.choices:
                        delta = choice.delta
                        reasoning = (delta.model_extra or {}).get("reasoning_content") or (delta.model_extra or {}).get("reasoning")
                        if reasoning:
                            yield ReasoningDelta(reasoning)
                        if delta.content:
                            yield TextDelta(delta.content)
                        for part in delta.tool_calls or []:
                            # Tool calls arrive split across chunks, keyed by index.
                            slot = calls.setdefault(part.index, {"id": "", "name": "", "arguments": ""})
                            if part.id:
                                slot["id"] = part.id
                            if part.function and part.function.name:
                                slot["name"] += part.function.name
                            if part.function and part.function.arguments:
                                slot["arguments"] += part.function.arguments
        except openai.OpenAIError as exc:
            raise classify_error(exc, openai) from exc
        for index in sorted(calls):
            slot = calls[index]
            try:
                arguments: Any = json.loads(slot["arguments"]) if slot["arguments"].strip() else {}
            except json.JSONDecodeError:
                arguments = slot["arguments"]  # reported to the model as invalid input
            yield ToolCall(call_id=slot["id"] or f"call_{index}", name=slot["name"], input=arguments)


def _usage(usage: Any) -> Usage:
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", 0) or 0
    return Usage(
        input_tokens=(usage.prompt_tokens or 0) - cached,
        output_tokens=usage.completion_tokens or 0,
        cache_read_tokens=cached,
    )
