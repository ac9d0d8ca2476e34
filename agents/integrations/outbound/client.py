"""`OutboundClient`: httpx's request arguments, every hop through the guard, one deadline per call.

1. The request is built as httpx builds it (`params`, `headers`, `cookies`,
   `content`, `data`, `files`, `json`) and its body read, so that any hop can
   send it again.
2. Each hop's URL is checked (`guard.check_url`) and the request is sent to
   the address that was checked, with the original `Host` header and TLS
   server name, so a second DNS answer (rebinding) never decides where the
   connection goes.
3. Redirects are followed here, one hop at a time, each hop checked again,
   up to `max_redirects`. Credentials are dropped when a hop changes origin.
4. `auth` runs as httpx runs it: an `httpx.Auth` flow (a `(user, password)`
   pair is basic auth, a function is `httpx.FunctionAuth`) whose every request
   goes through steps 2 and 3.
5. `timeout` bounds the whole call (`finish_within`): resolving, every hop
   and auth round trip, and reading the bodies.
"""
from __future__ import annotations

import json as jsonlib
import ssl
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, TypeVar

from agents.integrations.outbound.domains import domain_admits
from agents.integrations.outbound.guard import (
    Allowlist,
    OutboundError,
    OutboundRefused,
    Resolver,
    Target,
    check_url,
    parse_url,
)
from agents.redaction import without_credentials

REDIRECT_STATUSES = {301, 302, 303, 307, 308}
CREDENTIAL_HEADERS = ("authorization", "cookie", "private-token")
USER_AGENT = "agentsite"
T = TypeVar("T")
CLIENT_TIMEOUT: Any = object()  # `request(timeout=)` not given: the client's

if TYPE_CHECKING:  # httpx itself where a request is made (agents.integrations.outbound.guard says why)
    import httpx


class OutboundHTTPError(OutboundError):
    """The remote answered with an error status."""

    def __init__(self, response: httpx.Response):
        text = response.text[:500]
        super().__init__(f"{response.request.method} {response.url} answered {response.status_code}: {text}")
        self.response = response
        self.status_code = response.status_code


class OutboundTimeout(OutboundError):
    """The call did not finish within its timeout."""


def call_seconds(timeout: Any) -> float | None:
    """`timeout` as the seconds a whole call may take (None: no limit)."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout is the seconds the whole call may take (a number) or None, not {timeout!r}")
    if timeout <= 0:
        raise ValueError(f"timeout must be more than 0 seconds, not {timeout!r}")
    return float(timeout)


def auth_flow(auth: Any) -> httpx.Auth | None:
    """`auth` as httpx takes it: an httpx.Auth, a (user, password) pair, or a function of the request."""
    import httpx  # lazily, as at the top

    if auth is None or isinstance(auth, httpx.Auth):
        return auth
    if isinstance(auth, tuple) and len(auth) == 2:
        return httpx.BasicAuth(*auth)
    if callable(auth):
        return httpx.FunctionAuth(auth)
    raise TypeError(f"auth is an httpx.Auth, a (user, password) pair or a function of the request, not {auth!r}")


@dataclass(frozen=True)
class Deadline:
    at: float | None
    seconds: float | None

    def left(self, what: str) -> float | None:
        """Seconds left (None: no limit); OutboundTimeout once there are none."""
        if self.at is None:
            return None
        left = self.at - time.monotonic()
        if left <= 0:
            raise OutboundTimeout(f"{what} did not finish within {self.seconds:g}s")
        return left


def finish_within(deadline: Deadline, call: Callable[[], T], what: str) -> T:
    """`call()` on a thread of its own; the caller waits for it until the deadline.

    Resolving a hostname (getaddrinfo) takes no timeout and httpx's timeouts
    are per network operation, so neither bounds a whole call. The call's own
    waits are cut to the time left on the same deadline (`_send`), so its
    thread ends soon after the caller stopped waiting for it.
    """
    done = threading.Event()
    outcome: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as exc:  # handed to the caller, whatever it is
            outcome.append((False, exc))
        finally:
            done.set()

    left = deadline.left(what)
    threading.Thread(target=run, name="outbound-call", daemon=True).start()
    if not done.wait(left):
        raise OutboundTimeout(f"{what} did not finish within {deadline.seconds:g}s")
    finished, value = outcome[0]
    if finished:
        return value
    raise value


class OutboundClient:
    """Guarded HTTP: every request and every redirect hop goes through `check_url`.

    `allow` overrides the configured allowlist (tests pass
    `["127.0.0.1/32"]` for their loopback fakes). `timeout` is the seconds a
    call may take unless the call names its own. Environment proxies are
    ignored on purpose: a proxy would connect to a name we never checked.
    `domains` (a release's allowed domains) narrows every hop to those
    hostnames, before and on top of the guard; empty: no narrowing.
    """

    def __init__(self, *, allow: Iterable[str] | None = None, timeout: float | None = 10.0, max_redirects: int = 5,
                 max_response_bytes: int = 10 * 1024 * 1024, headers: Mapping[str, str] | None = None,
                 resolver: Resolver | None = None, verify: bool | str | ssl.SSLContext = True,
                 domains: Iterable[str] = ()):
        import httpx  # lazily, as at the top

        self.domains = tuple(domains)
        self.allow = Allowlist.parse(allow) if allow is not None else None
        self.timeout = call_seconds(timeout)
        self.max_redirects = max_redirects
        self.max_response_bytes = max_response_bytes
        self.headers = httpx.Headers({"user-agent": USER_AGENT, **(headers or {})})
        self.resolver = resolver
        self.verify = verify
        # One pool per origin: connections are keyed by the pinned address,
        # and two hostnames sharing an address must not share a TLS session.
        self._clients: dict[tuple[str, str, int], httpx.Client] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> "OutboundClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()

    def check(self, url: str | httpx.URL) -> Target:
        parsed = parse_url(url)
        if self.domains and not domain_admits(self.domains, parsed.host):
            raise OutboundRefused(str(parsed), f"{parsed.host} is not one of the agent's allowed domains")
        allow = self.allow if self.allow is not None else Allowlist.from_settings()
        return check_url(url, allow=allow, resolver=self.resolver)

    def request(self, method: str, url: str | httpx.URL, *, params: Any = None,
                headers: Mapping[str, str] | None = None, cookies: Any = None, content: Any = None,
                data: Any = None, files: Any = None, json: Any = None, auth: Any = None,
                follow_redirects: bool = True, timeout: Any = CLIENT_TIMEOUT) -> httpx.Response:
        """Send a request, following redirects through the guard; the body is read (bounded).

        The arguments are httpx's (`httpx.Client.request` without `extensions`),
        but `timeout` is the seconds the whole call may take (None: no limit;
        not given: the client's), and redirects are followed unless
        `follow_redirects=False`. Raises OutboundRefused, OutboundTimeout or
        OutboundError, never an httpx error.
        """
        import httpx  # lazily, as at the top

        seconds = self.timeout if timeout is CLIENT_TIMEOUT else call_seconds(timeout)
        flow = auth_flow(auth)
        first = httpx.Request(method, parse_url(url), params=params, headers=self._merged(headers), cookies=cookies,
                              content=content, data=data, files=files, json=json)
        first.read()
        if seconds is None:
            return self._exchange(first, flow, follow_redirects, Deadline(None, None))
        deadline = Deadline(time.monotonic() + seconds, seconds)
        return finish_within(deadline, lambda: self._exchange(first, flow, follow_redirects, deadline),
                             f"{first.method} {without_credentials(str(url))}")

    def get(self, url: str | httpx.URL, **kwargs: Any) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def head(self, url: str | httpx.URL, **kwargs: Any) -> httpx.Response:
        return self.request("HEAD", url, **kwargs)

    def options(self, url: str | httpx.URL, **kwargs: Any) -> httpx.Response:
        return self.request("OPTIONS", url, **kwargs)

    def post(self, url: str | httpx.URL, **kwargs: Any) -> httpx.Response:
        return self.request("POST", url, **kwargs)

    def put(self, url: str | httpx.URL, **kwargs: Any) -> httpx.Response:
        return self.request("PUT", url, **kwargs)

    def patch(self, url: str | httpx.URL, **kwargs: Any) -> httpx.Response:
        return self.request("PATCH", url, **kwargs)

    def delete(self, url: str | httpx.URL, **kwargs: Any) -> httpx.Response:
        return self.request("DELETE", url, **kwargs)

    def request_json(self, method: str, url: str | httpx.URL, **kwargs: Any) -> Any:
        """`request`, then the decoded JSON body; an error status raises OutboundHTTPError."""
        response = self.request(method, url, **kwargs)
        if response.status_code >= 400:
            raise OutboundHTTPError(response)
        if not response.content:
            return None
        try:
            return jsonlib.loads(response.content)
        except ValueError as exc:
            raise OutboundError(f"{method} {without_credentials(str(url))} answered {response.status_code} with a body "
                                "that is not JSON") from exc

    def _merged(self, headers: Mapping[str, str] | None) -> httpx.Headers:
        merged = self.headers.copy()
        merged.update(headers or {})
        return merged

    def _exchange(self, request: httpx.Request, auth: httpx.Auth | None, follow: bool,
                  deadline: Deadline) -> httpx.Response:
        """Step 4: each request of the auth flow, sent (and its redirects followed) by `_follow`."""
        if auth is None:
            return self._follow(request, follow, deadline)
        flow = auth.sync_auth_flow(request)
        try:
            request = next(flow)
            while True:
                request.read()
                response = self._follow(request, follow, deadline)
                try:
                    request = flow.send(response)
                except StopIteration:
                    return response
        finally:
            flow.close()

    def _follow(self, request: httpx.Request, follow: bool, deadline: Deadline) -> httpx.Response:
        """Step 3: send `request`, then each redirect hop, each through the guard."""
        import httpx  # lazily, as at the top

        method, current, hop_headers, body = request.method, request.url, request.headers, request.content
        for _ in range(self.max_redirects + 1):
            response = self._send(method, current, hop_headers, body, deadline)
            location = response.headers.get("location")
            if not follow or response.status_code not in REDIRECT_STATUSES or not location:
                return response
            following = current.join(location)
            if response.status_code == 303 or (response.status_code in (301, 302) and method not in ("GET", "HEAD")):
                method, body = ("HEAD" if method == "HEAD" else "GET"), b""
                hop_headers = httpx.Headers({k: v for k, v in hop_headers.items()
                                             if k.lower() not in ("content-type", "content-length")})
            if (following.scheme, following.host, following.port) != (current.scheme, current.host, current.port):
                hop_headers = httpx.Headers({k: v for k, v in hop_headers.items()
                                             if k.lower() not in CREDENTIAL_HEADERS})
            current = following
        raise OutboundError(f"more than {self.max_redirects} redirects from {request.url}")

    def _client_for(self, target: Target) -> httpx.Client:
        import httpx  # lazily, as at the top

        key = (target.url.scheme, target.host, target.port)
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                # No client-wide timeout: each request carries the time left on its call.
                client = httpx.Client(follow_redirects=False, trust_env=False, verify=self.verify)
                self._clients[key] = client
            return client

    def _send(self, method: str, url: httpx.URL, headers: httpx.Headers, body: bytes,
              deadline: Deadline) -> httpx.Response:
        """Step 2: one hop, to the checked address, every wait cut to the time left on the call."""
        import httpx  # lazily, as at the top

        what = f"{method} {without_credentials(str(url))}"
        deadline.left(what)
        target = self.check(url)
        pinned = url.copy_with(host=target.address)
        hop_headers = httpx.Headers(headers)
        hop_headers["host"] = url.netloc.decode("ascii")
        extensions: dict[str, Any] = {"timeout": httpx.Timeout(deadline.left(what)).as_dict()}
        if url.scheme == "https":
            # httpcore verifies the certificate against the SNI name, not the address.
            extensions["sni_hostname"] = target.host
        request = httpx.Request(method, pinned, headers=hop_headers, content=body, extensions=extensions)
        try:
            response = self._client_for(target).send(request, stream=True)
            try:
                chunks, size = [], 0
                for chunk in response.iter_bytes():
                    size += len(chunk)
                    if size > self.max_response_bytes:
                        raise OutboundError(f"{what} answered more than {self.max_response_bytes} bytes")
                    deadline.left(what)
                    chunks.append(chunk)
            finally:
                response.close()
        except httpx.TimeoutException as exc:
            raise OutboundTimeout(f"{what} timed out: {exc}") from exc
        except httpx.HTTPError as exc:
            raise OutboundError(f"{what} failed: {exc}") from exc
        # The body is decoded now; rebuild the response around the URL the
        # caller asked for (not the pinned address) without encoding headers.
        kept = [(k, v) for k, v in response.headers.multi_items()
                if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")]
        return httpx.Response(response.status_code, headers=kept, content=b"".join(chunks),
                              request=httpx.Request(method, url, headers=headers))
