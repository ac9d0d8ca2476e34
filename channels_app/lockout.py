"""Failed logins and refused bearer tokens, counted per client address and per account.

A wrong password at a login page (ours and the admin's) and a bearer token a policy refuses
count against two limits, fixed windows in the `limits` cache as the per-principal rates are
(channels_app.ratelimits, so every web process shares them): failures from one address for one
account, and failures from one address whatever the account. While either is spent, every
attempt it covers gets 429 with Retry-After before any password or chosen bearer is checked, the
right one too (else a guesser would learn a hit from the answer); refused attempts add nothing.
A personal token, which nobody guesses, is looked up first and only a wrong one gets the 429.
The address is the one channels_app.proxies derived; an IPv6 address counts as its /64.

A bearer's 429 is a `TooManyFailures` raised inside the auth chain, so it reaches whoever
admitted the request (channels_app.doors) and is answered as that surface answers any refusal:
DRF's handler and the streams as JSON, pages as the locked-out page (doors.refusal_page), the
websocket as a frame and close code 4429, each with Retry-After. The login pages' own 429 is
`throttled_login`'s. There is no limit on an account across addresses: anyone could lock a
person out from anywhere; the address limit bounds what one client can try.
"""
from __future__ import annotations

import functools
import hashlib
import hmac
import ipaddress
import logging
import math
import time
from typing import Any, Callable

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.signals import user_login_failed
from django.core.cache import caches
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from channels_app.errors import APIError
from channels_app.ratelimits import increment
from sessions.metrics import families as metrics
from sessions.models import hash_token
from sessions.models.token import TOKEN_PREFIX
from sessions.plumbing.redisdown import redis_unreachable

log = logging.getLogger(__name__)

# The limits, by name, with the setting each is read from; the account one names a person or a token.
ACCOUNT, ADDRESS = "account", "address"
SETTING = {ACCOUNT: "AGENTSITE_AUTH_FAILURES_PER_ACCOUNT", ADDRESS: "AGENTSITE_AUTH_FAILURES_PER_ADDRESS"}
WHAT = {ACCOUNT: "for this account from your address", ADDRESS: "from your address"}


class TooManyFailures(APIError):
    """429: the client spent a failure limit; `retry_after` seconds until its window ends."""

    def __init__(self, limit: str, rate: Any, retry_after: int):
        super().__init__(429, "too_many_failures",
                         f"too many failed logins or tokens {WHAT[limit]}: the limit is {rate} ({SETTING[limit]}); "
                         f"retry in {retry_after} s",
                         {"limit": str(rate), "retryAfter": retry_after}, headers={"Retry-After": str(retry_after)})
        self.retry_after = retry_after


def client_of(address: str) -> str:
    """The address as counted: an IPv6 client holds a /64 (one host's share), so it counts as that."""
    try:
        ip = ipaddress.ip_address(address.strip().strip("[]"))
    except ValueError:
        return address
    if ip.version == 6:
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


def _counters(address: str, account: str, now: float) -> list[tuple[str, Any, str, int]]:
    """(limit, rate, cache key, window) of each limit in force (settings read now)."""
    client = client_of(address)
    found = []
    for limit, subject in ((ACCOUNT, f"{client}\0{account.casefold()}"), (ADDRESS, client)):
        rate = getattr(settings, SETTING[limit])
        if rate is None or (limit == ACCOUNT and not account):
            continue
        window = int(now // rate.seconds)
        digest = hashlib.sha256(subject.encode()).hexdigest()[:32]
        found.append((limit, rate, f"lockout:{limit}:{rate.seconds}:{digest}:{window}", window))
    return found


def check(address: str, account: str, surface: str) -> None:
    """TooManyFailures if the client is over a limit for this account; otherwise nothing (and nothing counted)."""
    now = time.time()
    counters = _counters(address, account, now)
    if not counters:
        return
    try:
        counts = caches["limits"].get_many([key for _, _, key, _ in counters])
    # Redis restarting: a lockout is not worth refusing every token for those seconds (the rate limits,
    # which guard spending, answer 503 instead).
    except redis_unreachable() as exc:
        log.warning("lockout: the counters are unreachable, so this attempt is not checked: %s", exc)
        return
    spent = [(limit, rate, window) for limit, rate, key, window in counters if counts.get(key, 0) >= rate.count]
    if spent:  # the later of the windows' ends, when both are spent
        limit, rate, window = max(spent, key=lambda s: (s[2] + 1) * s[1].seconds)
        metrics.auth_locked_out(surface, limit)
        raise TooManyFailures(limit, rate, max(1, math.ceil((window + 1) * rate.seconds - now)))


def failed(address: str, account: str, surface: str) -> None:
    """Count one refused password or token against each limit."""
    metrics.auth_failed(surface)
    try:
        for _, rate, key, _ in _counters(address, account, time.time()):
            increment(key, rate.seconds)
    except redis_unreachable() as exc:
        log.warning("lockout: the counters are unreachable, so this failure is not counted: %s", exc)


# --- bearer tokens: a hook at each policy that verifies one (channels_app.auth) ---------------


def bearer_surface(headers: Any) -> str:
    return "websocket" if headers.get("upgrade", "").lower() == "websocket" else "bearer"


def bearer_account(presented: str) -> str:
    """A personal token's id (`ast_<key>_…` names it, whether or not a row has it); another
    bearer's digest, so each wrong value has its own count under the address's."""
    if presented.startswith(TOKEN_PREFIX):
        return "token:" + presented[len(TOKEN_PREFIX):].split("_", 1)[0][:32]
    return "bearer:" + hashlib.sha256(presented.encode()).hexdigest()[:16]


def check_bearer(info: Any, presented: str) -> None:
    """Before a bearer that people choose (and so may guess) is compared: 429 while its client is over a limit."""
    check(info.peer, bearer_account(presented), bearer_surface(info.headers))


def token_refused(info: Any, presented: str) -> None:
    """After a personal token was refused: 429 while its client is over a limit, else the failure counted.

    Checked after the lookup, not before: a token's secret is 256 random bits that nobody
    guesses, so the right token is served whatever its address did, at no cost per request.
    """
    check_bearer(info, presented)
    bearer_failed(info, presented)


def bearer_failed(info: Any, presented: str) -> None:
    # The metrics token on another route is a known secret in the wrong place, not a guess.
    metrics_token = getattr(settings, "AGENTSITE_METRICS_TOKEN_HASH", "") or ""
    if metrics_token and hmac.compare_digest(hash_token(presented), metrics_token):
        return
    failed(info.peer, bearer_account(presented), bearer_surface(info.headers))


def counted(info: Any, presented: str, principal: Any) -> Any:
    """What a bearer policy found, after counting a refusal (None) against the client."""
    if principal is None:
        bearer_failed(info, presented)
    return principal


# --- login pages --------------------------------------------------------------------------


def throttled_login(view: Callable[..., HttpResponse], surface: str) -> Callable[..., HttpResponse]:
    """A login view whose POSTs are refused with a 429 page while the client is locked out
    for the username it sends; its failures are counted by `count_failed_login`."""

    @functools.wraps(view)
    def login(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.method == "POST":
            request.lockout_surface = surface
            try:
                check(request.META.get("REMOTE_ADDR", ""), _username(request.POST), surface)
            except TooManyFailures as exc:
                response = render(request, "accounts/locked_out.html",
                                  {"retry_after": exc.retry_after, "minutes": math.ceil(exc.retry_after / 60),
                                   "login_url": request.get_full_path()}, status=429)
                response["Retry-After"] = str(exc.retry_after)
                return response
        return view(request, *args, **kwargs)

    return login


def _username(data: Any) -> str:
    """The username as Django looks it up (NFKC, as `AbstractBaseUser.normalize_username` and the
    login form's field make it), so `ｃａｒｏｌ` and `carol` are one account here as there."""
    value = data.get(get_user_model().USERNAME_FIELD, "")
    return AbstractBaseUser.normalize_username(value.strip()) if isinstance(value, str) else ""


def count_failed_login(sender: Any, credentials: dict[str, Any], request: HttpRequest | None = None,
                       **kwargs: Any) -> None:
    """Receives Django's `user_login_failed`, sent by `authenticate()` when no backend took the
    credentials: the login pages' wrong passwords (and a disabled account's right one)."""
    if request is None:
        return
    failed(request.META.get("REMOTE_ADDR", ""), _username(credentials),
           getattr(request, "lockout_surface", "login"))


# Connected here rather than in the app's ready(): every login page is reached through this module
# (throttled_login), and a process without them (a turn worker) then never loads the HTTP layer
# (DRF, and with it psycopg, requests and Pygments) that this module's imports bring.
user_login_failed.connect(count_failed_login, dispatch_uid="channels_app.lockout")
