"""`manage.py mcp oauth`: the SDK's whole flow, with the browser coming back to a loopback callback.

The callback is a one-request HTTP server on http://127.0.0.1:PORT/callback,
bound before the flow starts (a port in use is said at once) and closed when
it ends. The person's browser may be on this machine, or the printed URL is
opened anywhere that reaches this port.
"""
from __future__ import annotations

import asyncio
import queue
import threading
import webbrowser
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable
from urllib.parse import parse_qs, urlsplit

import httpx2
from mcp import Client
from mcp.client.auth.oauth2 import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthToken

from agents.mcpauth.flows import TIMEOUT, FlowError, MemoryStorage, client_metadata, endpoint_of
from agents.mcpauth.stored import Endpoint

CALLBACK_PATH = "/callback"
PAGE = (b"<!doctype html><meta charset=utf-8><title>agentsite</title>"
        b"<p>%s You can close this window and return to the terminal.</p>")


@dataclass(frozen=True)
class Authorized:
    tokens: OAuthToken
    registration: OAuthClientInformationFull
    endpoint: Endpoint
    tools: list[str]
    problem: str = ""  # authorized, but listing the tools with the new token failed


class _CallbackServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int):
        self.results: queue.Queue[dict[str, str]] = queue.Queue()
        super().__init__(("127.0.0.1", port), _CallbackHandler)


class _CallbackHandler(BaseHTTPRequestHandler):
    server: _CallbackServer

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        parts = urlsplit(self.path)
        if parts.path != CALLBACK_PATH:
            self.send_error(404)
            return
        params = {k: v[0] for k, v in parse_qs(parts.query).items()}
        self.server.results.put(params)
        ok = "code" in params
        self.send_response(200 if ok else 400)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.end_headers()
        self.wfile.write(PAGE % (b"Authorized." if ok else b"Authorization failed."))

    def log_message(self, format: str, *args) -> None:  # the terminal shows the command's own lines
        pass


def redirect_uri(port: int) -> str:
    return f"http://127.0.0.1:{port}{CALLBACK_PATH}"


def authorize(url: str, declared: str, *, port: int, registration: OAuthClientInformationFull | None,
              say: Callable[[str], None], open_browser: bool = True, wait: float = 300.0) -> Authorized:
    """Run the flow against the MCP server at `url` and list its tools with the tokens it gave.

    Raises FlowError (the port taken, the person did not come back within
    `wait` seconds, the authorization server refused, the server unreachable).
    """
    try:
        callback = _CallbackServer(port)
    except OSError as exc:
        raise FlowError(f"cannot listen on 127.0.0.1:{port} for the callback ({exc.strerror}): pass --port") from None
    threading.Thread(target=callback.serve_forever, name="oauth-callback", daemon=True).start()
    try:
        return asyncio.run(_run(url, declared, callback, redirect_uri(callback.server_address[1]), registration,
                                say, open_browser, wait))
    finally:
        callback.shutdown()
        callback.server_close()


async def _run(url: str, declared: str, callback: _CallbackServer, redirect: str,
               registration: OAuthClientInformationFull | None, say: Callable[[str], None], open_browser: bool,
               wait: float) -> Authorized:
    async def send_person(authorization_url: str) -> None:
        say(f"Open this URL to authorize:\n\n  {authorization_url}\n")
        if open_browser:
            webbrowser.open(authorization_url)
        say(f"Waiting for the browser at {redirect} ...")

    async def came_back() -> AuthorizationCodeResult:
        try:
            params = await asyncio.to_thread(callback.results.get, True, wait)
        except queue.Empty:
            raise FlowError(f"no authorization came back within {wait:g} s") from None
        if "code" not in params:
            raise FlowError(f"the authorization server sent no code: {params.get('error', 'no reason given')} "
                            f"{params.get('error_description', '')}".rstrip())
        return AuthorizationCodeResult(code=params["code"], state=params.get("state"), iss=params.get("iss"))

    storage = MemoryStorage(registration)
    provider = OAuthClientProvider(url, client_metadata(redirect), storage, send_person, came_back)
    tools, problem = [], ""
    try:
        async with httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(TIMEOUT, read=wait + TIMEOUT)) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:
                tools = [t.name for t in (await client.list_tools()).tools]
    except FlowError:
        raise
    except BaseException as exc:  # noqa: BLE001 (the SDK wraps failures in exception groups)
        inner = _innermost(exc)
        if isinstance(inner, FlowError):
            raise inner from None
        if not isinstance(exc, Exception):
            raise
        if storage.tokens is None:
            raise FlowError(f"authorization failed: {inner or type(inner).__name__}") from None
        problem = str(inner) or type(inner).__name__  # the tokens came: keep them, say what failed after
    if storage.tokens is None or storage.registration is None:
        raise FlowError(f"{url} did not ask for authorization: it answered without a token")
    return Authorized(tokens=storage.tokens, registration=storage.registration,
                      endpoint=endpoint_of(provider, declared), tools=tools, problem=problem)


def _innermost(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
