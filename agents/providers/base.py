"""The one interface every model provider implements.

A provider turns a `ModelRequest` (system prompt, provider-neutral messages,
tool specs) into a stream of `ModelEvent`s: text and reasoning deltas, tool
calls and usage. Messages are dicts in one neutral shape:

    {"role": "user", "content": "..."}
    {"role": "assistant", "content": "...", "toolCalls": [{"id", "name", "input"}],
     "reasoning": "...", "reasoningSignature": "...", "reasoningModel": "provider:model"}
    {"role": "tool", "callId": "...", "name": "...", "content": "...", "isError": bool}

`reasoningModel` names the model that signed the thinking: only that model
is sent it back (agents.providers.transcript).
"""
from __future__ import annotations

import hashlib
import os
import threading
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
    # Set by an in-process provider once it has waited for its reply (the scripted model's latency):
    # its first output is then written at once, as a network model's is (sessions.turn.runner).
    waited: bool = False


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


# Codes of a call that failed for the provider's reasons, not the request's: another provider may
# answer the same request (sessions.turn.runner falls over to an agent's declared fallback on these).
RETRYABLE_CODES = frozenset({"rate_limited", "overloaded", "server_error", "timeout", "connection_error"})
# An error's `type` in the body (also how Anthropic reports a failure in the middle of a stream).
BODY_CODES = {"rate_limit_error": "rate_limited", "overloaded_error": "overloaded", "api_error": "server_error",
              "timeout_error": "timeout"}


def _body_type(body: Any) -> str:
    error = body.get("error") if isinstance(body, dict) else None
    kind = error.get("type") if isinstance(error, dict) else None
    return kind if isinstance(kind, str) else ""


def classify_error(exc: Exception, sdk: Any) -> ProviderError:
    """Map an official SDK's error to a ProviderError.

    The `openai` and `anthropic` clients share one exception family
    (AuthenticationError, PermissionDeniedError, RateLimitError,
    APIStatusError, APITimeoutError, APIConnectionError), so one mapping
    serves both; `sdk` is the client module. Codes: `auth_error` (401, 403),
    `rate_limited` (429), `overloaded` (529, 503, an `overloaded_error`),
    `server_error` (any other 5xx, an `api_error`), `timeout` (the client's
    own timeout, 408), `connection_error` (no answer), `model_error` (any other
    4xx: a bad request or an unknown model, which no retry elsewhere fixes).
    """
    if isinstance(exc, sdk.AuthenticationError | sdk.PermissionDeniedError):
        return ProviderError(f"model provider refused the credentials: {exc}", code="auth_error")
    if isinstance(exc, sdk.RateLimitError):
        return ProviderError(f"model provider rate limit, retries exhausted: {exc}", code="rate_limited")
    if isinstance(exc, sdk.APITimeoutError):  # before APIConnectionError: it is one
        return ProviderError(f"model provider did not answer in time: {exc}", code="timeout")
    if isinstance(exc, sdk.APIConnectionError):
        return ProviderError(f"cannot reach the model provider: {exc}", code="connection_error")
    if isinstance(exc, sdk.APIStatusError):
        status = exc.status_code
        code = BODY_CODES.get(_body_type(exc.body), "")
        if status in (503, 529):
            code = "overloaded"
        elif status == 408:
            code = "timeout"
        elif status >= 500 and not code:
            code = "server_error"
        code = code or "model_error"
        label = {"overloaded": "overloaded", "server_error": "server error"}.get(code, "error")
        return ProviderError(f"model provider {label} {status}: {exc}", code=code)
    return ProviderError(f"model call failed: {exc}", code="model_error")


# Params that point the client at one provider's server: a model of another provider (a
# fallback) never gets them, it reaches its own provider as the environment configures it.
CLIENT_PARAMS = ("base_url", "api_key_env")


def params_for(model_id: str, params: dict[str, Any], declared_for: str) -> dict[str, Any]:
    """The params an agent declares for `declared_for`, as they apply to `model_id`."""
    if model_id.partition(":")[0] == declared_for.partition(":")[0]:
        return dict(params)
    return {k: v for k, v in params.items() if k not in CLIENT_PARAMS}


def client_params(params: dict[str, Any]) -> dict[str, Any]:
    """Of an agent's params, those that say where the client calls and with which key."""
    return {k: params[k] for k in CLIENT_PARAMS if k in params}


class KeyedProvider:
    """A provider reached with a key (an agent secret or the environment): the one answer to
    whether it is configured, which the model directory and a handoff's review both ask.

    `api_key_env` in the params names another variable for the key. `keyless_server`: a
    base URL of its own counts as configured (OpenAI-compatible servers often need no key).
    """

    name: str = ""
    key_env: str = ""
    base_url_env: str = ""
    keyless_server: bool = False

    def key_variable(self, params: dict[str, Any]) -> str:
        return params.get("api_key_env", self.key_env)

    def missing_configuration(self, params: dict[str, Any]) -> str:
        """What to set before a call can be made under `params`, in words; "" when nothing is missing."""
        if credential(self.key_variable(params)):
            return ""
        if self.keyless_server and (params.get("base_url") or credential(self.base_url_env)):
            return ""
        return self.key_variable(params)


def max_retries(params: dict[str, Any]) -> int:
    """How often a failed model call (a rate limit, an overload, a server error) is made again: `max_retries`."""
    return int(params.get("max_retries", 3))


def sdk_client(client_class: Callable[..., ClientT], params: dict[str, Any], *, key_env: str, base_url_env: str,
               timeout: float) -> ClientT:
    """An official SDK's client configured from an agent's params and its credentials (secrets, then environment).

    Params `api_key_env` (the variable holding the key, default `key_env`),
    `base_url` (else `base_url_env`, else the SDK's default), `max_retries`
    (default 3) and `timeout` (seconds, default `timeout`). The same configuration gets the same
    client again in a process (see CLIENTS_KEPT).
    """
    options = (
        client_class,
        credential(params.get("api_key_env", key_env)) or "unset",  # local servers often need no key
        params.get("base_url") or credential(base_url_env) or None,
        max_retries(params),
        float(params.get("timeout", timeout)),
    )
    with _clients_lock:
        client = _clients.get(options)
        if client is None:
            if len(_clients) >= CLIENTS_KEPT:
                _clients.clear()  # the ones dropped close their connections as they are collected
            client = _clients[options] = client_class(api_key=options[1], base_url=options[2],
                                                      max_retries=options[3], timeout=options[4])
        return client


# Where a provider's `warm()` points the client it builds only to import the SDK's lazy parts: never called.
WARMING_URL = "http://127.0.0.1:9"

# One client per process and configuration, kept: each holds a pool of connections to its server, so
# a turn's model call reuses one (no new TCP or TLS handshake, no new client to build: a few ms each).
# A changed key or base URL is another configuration. Cleared in a forked child: sockets are not shared.
CLIENTS_KEPT = 32
_clients: dict[tuple, Any] = {}
_clients_lock = threading.Lock()


def _forget_clients() -> None:
    global _clients_lock
    _clients_lock = threading.Lock()  # another thread may have held it at the fork
    _clients.clear()


os.register_at_fork(after_in_child=_forget_clients)


@dataclass(frozen=True)
class Endpoint:
    """Where a provider's calls go under some params and credentials, for the model directory."""

    provider: str
    base_url: str
    # A credential is set (or, for an OpenAI-compatible server, its own base URL: such servers often need no key).
    configured: bool
    # Tells keys apart without holding one: two agents' keys for one server are probed apart.
    key_hash: str = ""


def sdk_endpoint(provider: KeyedProvider, client: Any, params: dict[str, Any]) -> Endpoint:
    """Where `client` (from sdk_client) calls, as `provider` configured it under `params`."""
    key = credential(provider.key_variable(params))
    base_url = str(client.base_url).rstrip("/")
    return Endpoint(provider.name, base_url, configured=not provider.missing_configuration(params),
                    key_hash=hashlib.sha256(key.encode()).hexdigest()[:16] if key else "")


def probe_params(params: dict[str, Any], timeout: float) -> dict[str, Any]:
    """A probe tries once, briefly: a provider that does not answer at once is reported unreachable."""
    return {**params, "max_retries": 0, "timeout": timeout}


class Provider(Protocol):
    name: str

    def stream(self, request: ModelRequest) -> Iterator[ModelEvent]: ...

    def endpoint(self, params: dict[str, Any]) -> Endpoint: ...

    def missing_configuration(self, params: dict[str, Any]) -> str:
        """What to set before this provider can be called under `params`; "" when nothing is missing."""

    def probe(self, params: dict[str, Any], timeout: float) -> None:
        """One cheap request (the provider's model list); raises ProviderError if it fails."""
