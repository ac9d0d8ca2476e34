"""Custom channels: what `agent/channels/<id>.py` declares, and its validation.

    # agent/channels/inbox.py
    from pydantic import BaseModel
    from agents.sdk import Channel, POST, bearer_auth

    class Incoming(BaseModel):
        text: str
        thread: str

    def incoming(req):
        handle = req.send(req.body.text, continuation_token=f"thread:{req.body.thread}")
        return {"sessionId": handle.session_id}

    channel = Channel(
        routes=[POST("/messages", body=Incoming, handler=incoming)],
        auth=[bearer_auth("s3cret")],
        events={"message.completed": lambda event, channel, ctx: ...},
    )

Everything here is data: the routes, their pydantic schemas and the auth
policies are described, and the layers above turn them into views
(`channels_app.custom_channels`) and sessions (`sessions.custom_channels`).
Auth policies are `AuthPolicy` values for that reason: `agents` is below the
code that reads requests and names principals.
"""
from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, Sequence

from pydantic import BaseModel

from agents.hooks import Hook
from agents.modules import find_in_file

@functools.lru_cache(maxsize=256)
def _schema_of(model: type[BaseModel]) -> dict[str, Any]:
    return model.model_json_schema()


CHANNEL_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
# Channel names sessions already use for the built-in surfaces.
RESERVED_IDS = frozenset({"http", "schedule", "reminder", "tool", "agent"})
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
SEGMENT = re.compile(r"^(?::[a-zA-Z_][a-zA-Z0-9_]*|[A-Za-z0-9._~-]+)$")
EVENT_KEY = re.compile(r"^[a-z_]+(\.[a-z_]+)+$")

PolicyKind = Literal["local_dev_strict", "local_dev", "loopback_only", "bearer_auth", "allow_all", "public_endpoint"]


@dataclass(frozen=True)
class AuthPolicy:
    """One policy of a channel's chain, as declared; `channels_app.auth.compile_policy` runs it."""

    kind: PolicyKind
    # bearer_auth: the accepted tokens (never shown anywhere) or a verifier.
    tokens: tuple[str, ...] = field(default=(), repr=False)
    verifier: Callable[[str], Any] | None = field(default=None, repr=False)

    def describe(self) -> dict[str, Any]:
        """What /info shows: the kind, never a token."""
        found: dict[str, Any] = {"kind": self.kind}
        if self.kind == "bearer_auth":
            found["verifier"] = self.verifier is not None
        return found


def local_dev_strict() -> AuthPolicy:
    """Loopback callers with no forwarding headers and a loopback Host (the default)."""
    return AuthPolicy("local_dev_strict")


def local_dev() -> AuthPolicy:
    """`local_dev_strict()` without the Host check (DNS rebinding is then possible)."""
    return AuthPolicy("local_dev")


def loopback_only() -> AuthPolicy:
    """A loopback peer; forwarding headers are ignored (dev relays that carry them)."""
    return AuthPolicy("loopback_only")


def bearer_auth(token: str | Sequence[str] | None = None, *,
                verifier: Callable[[str], Any] | None = None) -> AuthPolicy:
    """`Authorization: Bearer <token>`, compared in constant time.

    `verifier(presented)` decides instead: it returns None (refused), a
    principal id, or a dict with `principal_id`, `principal_type`, `attributes`.
    """
    tokens = (token,) if isinstance(token, str) else tuple(token or ())
    return AuthPolicy("bearer_auth", tokens=tokens, verifier=verifier)


def allow_all() -> AuthPolicy:
    """Everyone, as the anonymous principal (for surfaces protected upstream)."""
    return AuthPolicy("allow_all")


def public_endpoint() -> AuthPolicy:
    """Everyone, on this channel's routes only: the handler must verify the caller (a signature).

    Its principal is one no other route admits, so it never opens the session API.
    """
    return AuthPolicy("public_endpoint")


@dataclass(frozen=True)
class Route:
    """One route of a channel: `GET("/items/:id", query=Q, handler=f)`."""

    method: str
    path: str
    handler: Callable[[Any], Any]
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    description: str = ""
    # The body is not parsed: the handler gets the bytes (`raw_body`) and the headers, for
    # providers that sign the exact bytes or send forms (Slack's interactivity payloads).
    raw: bool = False

    @property
    def segments(self) -> tuple[str, ...]:
        return tuple(s for s in self.path.strip("/").split("/") if s)

    def match(self, parts: Sequence[str]) -> dict[str, str] | None:
        """The `:param` values if `parts` (the path below the channel) is this route's."""
        if len(parts) != len(self.segments):
            return None
        params: dict[str, str] = {}
        for pattern, part in zip(self.segments, parts):
            if pattern.startswith(":"):
                params[pattern[1:]] = part
            elif pattern != part:
                return None
        return params

    def describe(self, prefix: str) -> dict[str, Any]:
        return {
            "method": self.method,
            "path": self.path if self.path.startswith("/") else f"/{self.path}",
            "url": f"{prefix}{'/' + '/'.join(self.segments) if self.segments else ''}",
            "description": self.description or (self.handler.__doc__ or "").strip().split("\n")[0],
            "bodySchema": _schema_of(self.body) if _is_model(self.body) else None,
            "querySchema": _schema_of(self.query) if _is_model(self.query) else None,
            "rawBody": self.raw,
        }


def _route(method: str) -> Callable[..., Route]:
    def make(path: str, *, handler: Callable[[Any], Any], body: type[BaseModel] | None = None,
             query: type[BaseModel] | None = None, description: str = "", raw: bool = False) -> Route:
        return Route(method, path, handler, body=body, query=query, description=description, raw=raw)

    make.__name__ = method
    make.__doc__ = f"A {method} route of a channel."
    return make


GET = _route("GET")
POST = _route("POST")
PUT = _route("PUT")
PATCH = _route("PATCH")
DELETE = _route("DELETE")

EventHandler = Callable[[dict[str, Any], Any, Any], Any]


@dataclass(frozen=True)
class Channel:
    """What `agent/channels/<id>.py` declares as `channel = Channel(...)`.

    `auth`: the chain every route runs (None: the server's default chain).
    `events`: event type (or "*") → handler(event, channel, ctx), run after the
    event is stored, outside the turn, for the sessions this channel owns.
    `state`: the starting per-session channel state (JSON).
    `on_start(ctx)` / `on_stop()`: when the web process mounts the channel and when it stops.
    `connection(ctx)`: a transport to the provider the server keeps open in one process of the
    deployment at a time (Slack's Socket Mode): it returns an object whose `tick()` the holding
    process calls about every second (to reconnect; it must not block), whose `close()` ends it,
    and whose `connected` (optional, a bool) /info shows.
    `kind`: what /info calls it; "custom" for an authored channel, a provider's name
    ("github", "slack", ...) for a channel a provider library builds.
    `shared_sessions`: False (the default): a continuation key, and a session id, reach
    only the sessions of the principal acting (another caller's same key opens its own
    session); True: every caller the chain admits reaches every session of the channel,
    for chains whose callers are one shared identity (a signed webhook, a bot, a fixed
    token). True needs an authored `auth=`: the server's chain admits each person as themself.
    """

    routes: Sequence[Route] = ()
    auth: Sequence[AuthPolicy | Callable[[Any], Any]] | None = None
    events: Mapping[str, EventHandler] = field(default_factory=dict)
    state: Mapping[str, Any] = field(default_factory=dict)
    on_start: Callable[[Any], Any] | None = None
    on_stop: Callable[[], Any] | None = None
    connection: Callable[[Any], Any] | None = None
    description: str = ""
    kind: str = "custom"
    shared_sessions: bool = False
    # A provider channel's settings: an object whose describe() /info shows (names of
    # the environment variables holding secrets and whether each is set, never a value).
    config: Any = None


@dataclass(frozen=True)
class ChannelHook(Hook):
    """A channel's events map among the agent's hooks: the event path hands the
    sessions of `channel_id` to the channel's handlers (see sessions.custom_channels)."""

    channel_id: str = ""


@dataclass(frozen=True)
class LoadedChannel:
    id: str
    channel: Channel

    @property
    def routes(self) -> Sequence[Route]:
        return self.channel.routes

    def handlers_for(self, event_type: str) -> list[EventHandler]:
        events = self.channel.events
        return [h for key, h in events.items() if key == "*" or key == event_type]

    def hook(self) -> ChannelHook | None:
        if not self.channel.events:
            return None
        return ChannelHook(events=tuple(self.channel.events), function=_no_op, channel_id=self.id)

    def describe(self, slug: str) -> dict[str, Any]:
        prefix = f"/{slug}/v1/channels/{self.id}"
        return {
            "id": self.id,
            "kind": self.channel.kind,
            "description": self.channel.description,
            "file": f"agent/channels/{self.id}.py",
            "routes": [route.describe(prefix) for route in self.channel.routes],
            "events": sorted(self.channel.events),
            "auth": None if self.channel.auth is None else [_describe_policy(p) for p in self.channel.auth],
            "sharedSessions": self.channel.shared_sessions,
            "hasOnStart": self.channel.on_start is not None,
            "hasOnStop": self.channel.on_stop is not None,
            "hasConnection": self.channel.connection is not None,
            **({"config": self.channel.config.describe()} if self.channel.config is not None else {}),
        }


def _no_op(envelope: dict[str, Any]) -> None:
    """Channel hooks are delivered per batch by the event path, never called one by one."""


def _describe_policy(policy: Any) -> dict[str, Any]:
    if isinstance(policy, AuthPolicy):
        return policy.describe()
    return {"kind": "custom", "name": getattr(policy, "__name__", type(policy).__name__)}


def _is_model(value: Any) -> bool:
    return isinstance(value, type) and issubclass(value, BaseModel)


def load_channels(folder: Path, namespace: str, problems: list[tuple[str, str]]) -> dict[str, LoadedChannel]:
    """`agent/channels/<id>.py`, each defining `channel = Channel(...)`, validated."""
    found: dict[str, LoadedChannel] = {}
    if not folder.is_dir():
        return found
    for path in sorted(folder.iterdir()):
        if path.name.startswith((".", "_")) or path.name == "__pycache__":
            continue
        rel = f"agent/channels/{path.name}"
        if not path.is_file() or path.suffix != ".py":
            problems.append((rel, "channels are <id>.py files defining `channel = Channel(...)` "
                                  "(move helpers to agent/lib/)"))
            continue
        if not CHANNEL_ID.match(path.stem):
            problems.append((rel, "rename it: channel ids are lowercase letters, digits, '-' and '_'"))
            continue
        if path.stem in RESERVED_IDS:
            problems.append((rel, f"{path.stem!r} is the name of a built-in surface: rename the file"))
            continue
        channels = find_in_file(path, channel_module(namespace, path.stem), Channel,
                                lambda message, rel=rel: problems.append((rel, message)), name="channel")
        if channels is None:
            continue
        if not channels:
            problems.append((rel, "define `channel = Channel(routes=[...])` (from agents.sdk import Channel, POST)"))
            continue
        found_problems = channel_problems(channels[0])
        problems.extend((rel, message) for message in found_problems)
        if not found_problems:
            found[path.stem] = LoadedChannel(path.stem, channels[0])
    return found


def channel_module(namespace: str, channel_id: str) -> str:
    """The module a release's `agent/channels/<id>.py` is imported as; it binds the declaration to `channel`."""
    return f"{namespace}.channels.{channel_id.replace('-', '_')}"


def channel_problems(channel: Channel) -> list[str]:
    """Everything incoherent in a declaration, each with its fix (fail closed)."""
    problems: list[str] = []
    seen: set[tuple[str, tuple[str, ...]]] = set()
    for route in channel.routes:
        if not isinstance(route, Route):
            problems.append(f"routes= takes GET(...), POST(...), PUT(...), PATCH(...) or DELETE(...), not {route!r}")
            continue
        where = f"{route.method} {route.path}"
        if route.method not in METHODS:
            problems.append(f"{where}: the method must be one of {', '.join(METHODS)}")
        if not isinstance(route.path, str) or not route.path.startswith("/"):
            problems.append(f"{where}: the path must start with '/' (it is below /<slug>/v1/channels/<id>)")
            continue
        bad = [s for s in route.segments if not SEGMENT.match(s)]
        if bad:
            problems.append(f"{where}: {bad[0]!r} is not a path segment (letters, digits, '.', '_', '~', '-', "
                            "or ':name' for a parameter)")
        names = [s[1:] for s in route.segments if s.startswith(":")]
        if len(names) != len(set(names)):
            problems.append(f"{where}: a path parameter is named twice")
        key = (route.method, tuple(":" if s.startswith(":") else s for s in route.segments))
        if key in seen:
            problems.append(f"{where}: another route has the same method and path")
        seen.add(key)
        if not callable(route.handler):
            problems.append(f"{where}: handler= must be a function taking the request arguments")
        for name in ("body", "query"):
            value = getattr(route, name)
            if value is not None and not _is_model(value):
                problems.append(f"{where}: {name}= must be a pydantic model class (use a model with no fields, "
                                "or one with extra='allow', for an open surface)")
        if route.method == "GET" and route.query is None:
            problems.append(f"{where}: a GET route declares its query schema: query=Model "
                            "(a model with no fields if it takes none)")
        if route.method == "GET" and route.body is not None:
            problems.append(f"{where}: a GET route has no body: remove body=")
        if route.raw and route.body is not None:
            problems.append(f"{where}: raw=True hands the handler the bytes: remove body= (validate in the handler)")
        if route.method in ("POST", "PUT", "PATCH") and route.body is None and not route.raw:
            problems.append(f"{where}: a {route.method} route declares its body schema: body=Model "
                            "(a model with no fields if it takes none), or raw=True to read the bytes")
    if channel.auth is not None:
        chain = list(channel.auth)
        if not chain:
            problems.append("auth=[] admits nobody: remove auth= to use the server's default chain, "
                            "or list the policies (local_dev_strict(), bearer_auth(...), ...)")
        for policy in chain:
            if isinstance(policy, AuthPolicy):
                if policy.kind == "bearer_auth" and not policy.tokens and policy.verifier is None:
                    problems.append("bearer_auth() needs a token or verifier=: as written it admits nobody")
                if policy.kind == "bearer_auth" and any(not isinstance(t, str) or not t for t in policy.tokens):
                    problems.append("bearer_auth tokens must be non-empty strings")
            elif not callable(policy):
                problems.append(f"auth= takes policies from agents.sdk (local_dev_strict(), bearer_auth(...), ...) "
                                f"or functions of the request, not {policy!r}")
    if not isinstance(channel.shared_sessions, bool):
        problems.append("shared_sessions= is True or False")
    elif channel.shared_sessions and channel.auth is None:
        problems.append("shared_sessions=True lets every caller reach every session of the channel, but the "
                        "server's default chain admits each person as themself: author the chain of the shared "
                        "identity (auth=[public_endpoint()] with a signature check, bearer_auth(token), ...) "
                        "or remove shared_sessions")
    if not isinstance(channel.events, Mapping):
        problems.append("events= maps an event type (or '*') to a handler(event, channel, ctx)")
    else:
        for key, handler in channel.events.items():
            if key != "*" and not (isinstance(key, str) and EVENT_KEY.match(key)):
                problems.append(f"events: {key!r} is not an event type such as 'message.completed' (or '*' for all)")
            if not callable(handler):
                problems.append(f"events[{key!r}] must be a function handler(event, channel, ctx)")
    try:
        if not isinstance(channel.state, Mapping):
            raise TypeError
        json.dumps(dict(channel.state))
    except (TypeError, ValueError):
        problems.append("state= is the starting per-session state: a dict of JSON values")
    for name in ("on_start", "on_stop", "connection"):
        value = getattr(channel, name)
        if value is not None and not callable(value):
            problems.append(f"{name}= must be a function")
    if not (isinstance(channel.kind, str) and CHANNEL_ID.match(channel.kind)) or channel.kind == "http":
        problems.append(f"kind={channel.kind!r}: name the kind of channel in lowercase letters ('custom' by default)")
    if not channel.routes and not channel.events and channel.on_start is None and channel.connection is None:
        problems.append("the channel declares nothing: add routes=[...], events={...}, on_start= or connection=")
    return problems
