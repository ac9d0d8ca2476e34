"""`webhook_channel(...)`: a service's JSON webhook as a channel, declared with data alone.

    channel = webhook_channel(message="issue.title", thread="issue.id", secret_env="TRACKER_SECRET")

serves `POST /<slug>/v1/channels/<id>/deliveries`. Each delivery is a JSON object; the text at
the dotted path `message` is a message to the agent, and the value at `thread` (when given) names
the conversation: deliveries of one thread go to one session (a follow-up coalesced behind a
running turn), without it each delivery starts one. With `secret_env`, a delivery is taken only
when its `signature_header` holds `sha256=<hex>`, the HMAC-SHA256 of the raw body under that
secret (the agent's secret of that name, else the server's environment), checked in constant
time; callers are then the service, one identity, so threads are shared. Without it, the server's
chain admits callers, each with their own threads. It answers 202 with the session and its URLs.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.http import HttpResponse, JsonResponse

from agents.channels import POST, Channel, public_endpoint
from agents.errors import error_response
from agents.integrations.config import ProviderConfig
from agents.integrations.events import PayloadError, SignatureError, dig, header, load_json
from agents.integrations.signatures import verify_sha256_header

PATH = re.compile(r"^[A-Za-z0-9_-]{1,64}(\.[A-Za-z0-9_-]{1,64}){0,9}$")
ENV = re.compile(r"^[A-Z][A-Z0-9_]{0,127}$")
HEADER = re.compile(r"^[A-Za-z0-9-]{1,100}$")
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


@dataclass(frozen=True)
class WebhookConfig(ProviderConfig):
    message: str = "text"
    thread: str = ""
    secret_env: str = ""
    signature_header: str = "X-Signature-256"


def webhook_channel(*, message: str = "text", thread: str = "", secret_env: str = "",
                    signature_header: str = "X-Signature-256", description: str = "") -> Channel:
    """A channel taking a JSON webhook's deliveries (see the module docstring)."""
    if not PATH.match(message) or (thread and not PATH.match(thread)):
        raise ValueError("webhook_channel(message=..., thread=...) are dotted paths into the delivery's JSON, "
                         "e.g. 'issue.title'")
    if secret_env and not ENV.match(secret_env):
        raise ValueError(f"webhook_channel(secret_env={secret_env!r}) names a secret: upper-case letters, digits, _")
    if not HEADER.match(signature_header):
        raise ValueError(f"webhook_channel(signature_header={signature_header!r}) is not a header name")
    config = WebhookConfig(message=message, thread=thread, secret_env=secret_env, signature_header=signature_header)
    return Channel(
        kind="webhook",
        description=description or f"A JSON webhook: {message} is the message"
                                   + (f", {thread} the conversation" if thread else ""),
        routes=[POST("/deliveries", raw=True, handler=functools.partial(receive, config),
                     description="A delivery: a JSON object" + (f", signed in {signature_header}" if secret_env else ""))],
        # Signed deliveries come from the service, one identity: its threads are one set. Else each caller
        # the server's chain admits is themself, with threads of their own.
        auth=[public_endpoint()] if secret_env else None,
        shared_sessions=bool(secret_env),
        config=config,
    )


def receive(config: WebhookConfig, req: Any) -> HttpResponse:
    if config.secret_env:
        try:
            verify_sha256_header(config.secret("secret_env"), req.raw_body, header(req.headers, config.signature_header),
                                 header_name=config.signature_header)
        except SignatureError as exc:
            return error_response(401, "invalid_signature", str(exc))
    try:
        payload = load_json(req.raw_body)
    except PayloadError as exc:
        return error_response(400, "invalid_payload", str(exc))
    text = dig(payload, *config.message.split("."))
    if not isinstance(text, str) or not text.strip():
        return error_response(400, "invalid_payload", f"the delivery has no text at {config.message!r}")
    if len(text) > settings.AGENTSITE_MAX_MESSAGE_CHARS:
        return error_response(400, "invalid_payload", f"the text at {config.message!r} is over "
                                                      f"{settings.AGENTSITE_MAX_MESSAGE_CHARS} characters")
    thread = dig(payload, *config.thread.split(".")) if config.thread else None
    if config.thread and (not isinstance(thread, (str, int)) or isinstance(thread, bool) or str(thread) == ""):
        return error_response(400, "invalid_payload", f"the delivery has no conversation id at {config.thread!r}")
    if UNSTORABLE.search(text) or (thread is not None and UNSTORABLE.search(str(thread))):
        return error_response(400, "invalid_text", "the delivery holds a NUL character or a lone surrogate, "
                                                   "which no database stores")
    options: dict[str, Any] = {"admission": "coalesce"}
    if thread is not None:
        options.update(continuation_token=f"thread:{thread}", title=f"thread {thread}"[:200])
    if config.secret_env:
        options["auth"] = {"principal_id": f"webhook:{req.agent.slug}/{req.channel_id}", "authenticator": "webhook",
                           "principal_type": "app"}
    handle = req.send(text, **options)
    return JsonResponse({"sessionId": handle.session_id, "created": handle.created,
                         "thread": None if thread is None else str(thread), **req.session_urls(handle.session_id)},
                        status=202)
