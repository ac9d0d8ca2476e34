"""Auth policies and principals.

A route runs a chain of policies; the first that admits the request names
its principal, and none admitting is a 401. A policy is a callable taking a
`RequestInfo` (built from a Django request or an ASGI scope, so HTTP and
websockets share the chain) and returning a `Principal` or None.
"""
from __future__ import annotations

import hmac
import ipaddress
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from django.conf import settings
from rest_framework import authentication

from agents.channels import AuthPolicy
from channels_app import lockout
from channels_app.proxies import FORWARDING_HEADERS
from sessions.models import PersonalToken, hash_token
from sessions.models.token import TOKEN_PREFIX
from sessions.principal import Principal, is_operator



@dataclass(frozen=True)
class RequestInfo:
    peer: str
    host: str
    headers: Mapping[str, str]
    # The Django user of a logged-in browser (admin login), if any.
    user: Any = field(default=None, compare=False)

    @classmethod
    def from_django(cls, request) -> "RequestInfo":
        meta = request.META
        headers = {k[5:].replace("_", "-").lower(): v for k, v in meta.items() if k.startswith("HTTP_")}
        return cls(peer=meta.get("REMOTE_ADDR", ""), host=meta.get("HTTP_HOST", ""), headers=headers,
                   user=getattr(request, "user", None))

    @classmethod
    def from_scope(cls, scope: Mapping[str, Any]) -> "RequestInfo":
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        client = scope.get("client") or ("", 0)
        return cls(peer=client[0] or "", host=headers.get("host", ""), headers=headers, user=scope.get("user"))


Policy = Callable[[RequestInfo], "Principal | None"]

LOCAL_PRINCIPAL = Principal(authenticator="local", principal_id="local", principal_type="user")
ANONYMOUS = Principal(authenticator="anonymous", principal_id="anonymous", principal_type="anonymous")
# public_endpoint()'s caller: a principal no other policy names, so the sessions a public
# channel route starts are never reachable through the session API (whatever the server's flags).
PUBLIC = Principal(authenticator="public_endpoint", principal_id="public", principal_type="anonymous")


def is_loopback_address(value: str) -> bool:
    try:
        return ipaddress.ip_address(value.strip("[]")).is_loopback
    except ValueError:
        return False


def host_is_loopback(host: str) -> bool:
    if not host:
        return False
    if host.startswith("["):  # [::1]:8000
        name = host[1:].split("]", 1)[0]
    else:
        name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    return name.lower() == "localhost" or is_loopback_address(name)


def ambient(policy: Policy) -> Policy:
    """Marks a policy that admits a request for where it comes from or the login it rides with,
    not for a credential it checks: such a policy never admits a request carrying a bearer token
    that no policy verified (see `authenticate`)."""
    policy.ambient = True  # type: ignore[attr-defined]
    return policy


def presented_bearer(info: RequestInfo) -> str:
    """The value of an `Authorization: Bearer` header, or "" when there is none."""
    scheme, _, presented = info.headers.get("authorization", "").partition(" ")
    return presented.strip() if scheme.lower() == "bearer" else ""


def loopback_only() -> Policy:
    """A loopback peer; forwarding headers are ignored."""

    def policy(info: RequestInfo) -> Principal | None:
        return LOCAL_PRINCIPAL if is_loopback_address(info.peer) else None

    return ambient(policy)


def local_dev() -> Policy:
    """A loopback peer that nothing forwarded (a proxy in front makes every peer loopback)."""

    def policy(info: RequestInfo) -> Principal | None:
        if not is_loopback_address(info.peer):
            return None
        if any(h in info.headers for h in FORWARDING_HEADERS):
            return None
        return LOCAL_PRINCIPAL

    return ambient(policy)


def local_dev_strict() -> Policy:
    """`local_dev()` plus a loopback Host header, which blocks DNS rebinding."""
    inner = local_dev()

    def policy(info: RequestInfo) -> Principal | None:
        if not host_is_loopback(info.host):
            return None
        return inner(info)

    return ambient(policy)


def bearer_auth(
    tokens: Mapping[str, str] | Iterable[str] | None = None,
    *,
    hashes: Mapping[str, str] | Iterable[str] | None = None,
    verifier: Callable[[str], Principal | None] | None = None,
) -> Policy:
    """`Authorization: Bearer <token>`.

    `tokens` maps token → principal id (or lists tokens); `hashes` does the
    same with sha256 hex digests so the tokens themselves need not be kept;
    `verifier` decides on its own. Digests are compared in constant time.
    """
    known: dict[str, str] = {}
    for source, hashed in ((tokens, False), (hashes, True)):
        if source is None:
            continue
        pairs = source.items() if isinstance(source, Mapping) else ((t, "") for t in source)
        for secret, name in pairs:
            digest = secret if hashed else hash_token(secret)
            known[digest] = name or f"token:{digest[:12]}"

    def policy(info: RequestInfo) -> Principal | None:
        presented = presented_bearer(info)
        if not presented:
            return None
        lockout.check_bearer(info, presented)  # 429 while this client's wrong bearers are over a limit
        if verifier is not None:
            return lockout.counted(info, presented, verifier(presented))
        digest = hash_token(presented)
        match = None
        for candidate, name in known.items():  # no early exit: time does not tell which failed
            if hmac.compare_digest(candidate, digest):
                match = name
        found = Principal(authenticator="bearer", principal_id=match) if match else None
        return lockout.counted(info, presented, found)

    policy.counts_bearers = True  # type: ignore[attr-defined]
    return policy


def counts_bearers(chain: Sequence[Policy]) -> bool:
    """Whether a policy of `chain` counts the bearers it refuses (`bearer_auth`'s do)."""
    return any(getattr(policy, "counts_bearers", False) for policy in chain)


class Refused(Exception):
    """A policy's definite no: the chain stops there and the caller gets a 401."""


def user_principal(user, *, operator: bool | None = None, **attributes: Any) -> Principal:
    """A Django user as a principal: the same whether it logged in or sent a personal token,
    so the sessions it starts either way are its own. Staff and the operators group are operators
    (`operator`, when the caller has read it already)."""
    operator = is_operator(user) if operator is None else operator
    return Principal(authenticator="django", principal_id=user.get_username(),
                     principal_type="staff" if user.is_staff else "user", attributes=attributes, operator=operator)


def django_login() -> Policy:
    """A browser logged in to the admin (Django session): its user is the principal."""

    def policy(info: RequestInfo) -> Principal | None:
        user = info.user
        if user is None or not getattr(user, "is_authenticated", False) or not user.is_active:
            return None
        return user_principal(user)

    return ambient(policy)


def personal_token() -> Policy:
    """`Authorization: Bearer ast_...`: the token's user, with the token's agent scope.

    A bearer of that shape is meant as a personal token: an unknown, revoked or
    expired one is refused outright rather than left to the next policy (on
    loopback that would be the local principal, acting for whoever sent it).
    """

    def policy(info: RequestInfo) -> Principal | None:
        presented = presented_bearer(info)
        if not presented.startswith(TOKEN_PREFIX):
            return None
        token = PersonalToken.find(presented)
        if token is None or token.status() != PersonalToken.Status.ACTIVE or not token.user.is_active:
            lockout.token_refused(info, presented)  # a 429 once this client's wrong tokens are over a limit
            raise Refused("unknown, revoked or expired personal token")
        token.touch()
        return user_principal(token.user, operator=is_operator(token.user, in_group=token.in_operators),
                              token=token.id, agents=token.agents)

    return policy


def agent_scope(principal: Any) -> list[str] | None:
    """The slugs of the agents a personal token is scoped to; None: every agent."""
    return principal.attributes.get("agents") if isinstance(principal, Principal) else None


def allow_all() -> Policy:
    """Everyone, as the anonymous principal."""
    return lambda info: ANONYMOUS


def public_endpoint() -> Policy:
    """Everyone, on a custom channel's routes only (see `channel_chain`)."""
    return lambda info: PUBLIC


def as_principal(found: Any, authenticator: str) -> Principal | None:
    """What an authored verifier or policy function returned, as a principal.

    None or False: refused; a Principal; a string: its principal id; a mapping
    with `principal_id` (or `principalId`), `principal_type`, `attributes`.
    """
    if found is None or found is False:
        return None
    if isinstance(found, Principal):
        return found
    if isinstance(found, str) and found:
        return Principal(authenticator=authenticator, principal_id=found)
    if isinstance(found, Mapping):
        principal_id = found.get("principal_id", found.get("principalId"))
        if isinstance(principal_id, str) and principal_id:
            return Principal(authenticator=str(found.get("authenticator") or authenticator),
                             principal_id=principal_id,
                             principal_type=str(found.get("principal_type", found.get("principalType", "user"))),
                             attributes=dict(found.get("attributes") or {}))
    raise TypeError(f"an auth policy returned {found!r}: return None, a principal id, or a dict with principal_id")


def compile_policy(declared: AuthPolicy | Callable[[RequestInfo], Any]) -> Policy:
    """A channel's declared policy (agents.channels) as a policy of this module."""
    if not isinstance(declared, AuthPolicy):
        name = getattr(declared, "__name__", "custom")
        return lambda info: as_principal(declared(info), name)
    kind = declared.kind
    if kind == "local_dev_strict":
        return local_dev_strict()
    if kind == "local_dev":
        return local_dev()
    if kind == "loopback_only":
        return loopback_only()
    if kind == "allow_all":
        return allow_all()
    if kind == "public_endpoint":
        return public_endpoint()
    if kind == "bearer_auth":
        if declared.verifier is not None:
            verify = declared.verifier
            return bearer_auth(verifier=lambda presented: as_principal(verify(presented), "bearer"))
        return bearer_auth(declared.tokens)
    raise ValueError(f"unknown auth policy {kind!r}")


def channel_chain(declared: Sequence[Any] | None) -> list[Policy]:
    """A custom channel's chain: its own when it authors one (always, whatever `serve`'s
    flags), else the server's default, which `--bearer-token` / `--allow-anonymous` choose."""
    if declared is None:
        return policy_chain()
    return [compile_policy(p) for p in declared]


def policy_chain() -> list[Policy]:
    """The server-wide chain, chosen by `serve` flags through settings. A personal token
    comes first, then a login: a request that names its user is that user, on loopback too."""
    return [personal_token(), *_server_policies()]


def _server_policies() -> list[Policy]:
    custom = getattr(settings, "AGENTSITE_AUTH_POLICIES", None)
    if custom:
        return list(custom)
    mode = settings.AGENTSITE_AUTH
    if mode == "allow_all":
        return [allow_all()]
    # A logged-in admin user may always use the playground and API from the browser.
    if mode == "bearer":
        return [bearer_auth(hashes=settings.AGENTSITE_BEARER_TOKEN_HASHES), django_login()]
    return [django_login(), local_dev_strict()]


def authenticate(info: RequestInfo, chain: Sequence[Policy] | None = None) -> Principal | None:
    """The principal the first admitting policy of `chain` (default: the server's) names, or None.

    A request that presents a bearer token is admitted only by a policy that verifies it: an
    ambient policy (the loopback, a login) is passed over, and the policies after it still
    may verify the token; if none does, a wrong, stale or foreign token is refused (401)
    rather than served as the local principal or the browser's user.
    """
    bearer = presented_bearer(info)
    try:
        for policy in policy_chain() if chain is None else chain:
            if bearer and getattr(policy, "ambient", False):
                continue
            principal = policy(info)
            if principal is not None:
                return principal
    except Refused:
        pass
    return None


class PolicyChainAuthentication(authentication.SessionAuthentication):
    def authenticate(self, request):
        principal = authenticate(RequestInfo.from_django(request._request))
        if principal is None:
            return None
        if principal.authenticator == "django" and "token" not in principal.attributes:
            # Cookies ride along on cross-site requests: a session login needs the CSRF token.
            self.enforce_csrf(request)
        return (principal, None)

    def authenticate_header(self, request) -> str:
        # Makes DRF answer 401 (not 403) when no policy admits the caller.
        return 'Bearer realm="agentsite"'
