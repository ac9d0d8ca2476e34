"""The one interface every model provider implements.

A provider turns a `ModelRequest` (system prompt, provider-neutral messages,
tool specs) into a stream of `ModelEvent`s: text and reasoning deltas, tool
calls and usage. Messages are dicts in one neutral shape:

    {"role": "user", "content": "..."}
    {"role": "assistant", "content": "...", "toolCalls": [{"id", "name", "input"}],
     "reasoning": "...", "reasoningSignature": "..."}
    {"role": "tool", "callId": "...", "name": "...", "content": "...", "isError": bool}
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Protocol, TypeVar, Union

from agents.secrets.lookup import credential

ClientT = TypeVar("ClientT")


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass
class ModelRequest:
    model: str
    system: str
    messages: list[dict[str, Any]]
    tools: list[ToolSpec] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    # Polled while the provider waits, so an interrupt need not wait for the model.
    should_stop: Callable[[], bool] = lambda: False


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True)
class ReasoningSignature:
    """Opaque proof a provider wants back with its reasoning on the next call."""

    signature: str


@dataclass(frozen=True)
class ToolCall:
    call_id: str
    name: str
    input: Any


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


ModelEvent = Union[TextDelta, ReasoningDelta, ReasoningSignature, ToolCall, Usage]


class ProviderError(Exception):
    """A model call failed; `code` is the machine-readable reason."""

    def __init__(self, message: str, *, code: str = "model_error"):
        super().__init__(message)
        self.code = code


def classify_error(exc: Exception, sdk: Any) -> ProviderError:
    """Map an official SDK's error to a ProviderError.

    The `openai` and `anthropic` clients share one exception family
    (AuthenticationError, PermissionDeniedError, RateLimitError,
    APIStatusError, APIConnectionError), so one mapping serves both; `sdk`
    is the client module.
    """
    if isinstance(exc, sdk.AuthenticationError | sdk.PermissionDeniedError):
        return ProviderError(f"model provider refused the credentials: {exc}", code="auth_error")
    if isinstance(exc, sdk.RateLimitError):
        return ProviderError(f"model provider rate limit, retries exhausted: {exc}", code="rate_limited")
    if isinstance(exc, sdk.APIStatusError):
        return ProviderError(f"model provider error {exc.status_code}: {exc}", code="model_error")
    if isinstance(exc, sdk.APIConnectionError):
        return ProviderError(f"cannot reach the model provider: {exc}", code="connection_error")
    return ProviderError(f"model call failed: {exc}", code="model_error")


def sdk_client(client_class: Callable[..., ClientT], params: dict[str, Any], *, key_env: str, base_url_env: str,
               timeout: float) -> ClientT:
    """An official SDK's client configured from an agent's params and its credentials (secrets, then environment).

    Params `api_key_env` (the variable holding the key, default `key_env`),
    `base_url` (else `base_url_env`, else the SDK's default), `max_retries`
    (default 3) and `timeout` (seconds, default `timeout`).
    """
    return client_class(
        api_key=credential(params.get("api_key_env", key_env)) or "unset",  # local servers often need no key
        base_url=params.get("base_url") or credential(base_url_env) or None,
        max_retries=int(params.get("max_retries", 3)),
        timeout=float(params.get("timeout", timeout)),
    )


class Provider(Protocol):
    name: str

    def stream(self, request: ModelRequest) -> Iterator[ModelEvent]: ...
