"""The limits a team sets on each principal, read from the environment when the settings load.

`AGENTSITE_RATE_SESSIONS` and `AGENTSITE_RATE_MESSAGES` are rates such as
`30/min` (a count per `sec`, `min` or `hour`, or per several of them as `10/5min`;
`off` or empty: no limit), and so are the limits on failed logins and bearer tokens;
`AGENTSITE_MAX_RUNNING_TURNS` is a count (`0` or `off`: no cap). Between agents,
`AGENTSITE_AGENT_HOP_LIMIT` and `AGENTSITE_AGENT_TURN_BUDGET` are counts of at least 1 and
`AGENTSITE_AGENT_MESSAGE_RATE` a rate per conversation. `AGENTSITE_BUDGET_PRINCIPAL_DAILY`
and `_MONTHLY` are US dollars each person may spend on models (unset, empty or `off`: no
budget; they are off by default, since prices are the team's to judge). A value that
does not parse raises `LimitSettingInvalid` while the settings load, so every
process refuses to start with a message naming the setting, as production
mode's missing settings do (`manage.py` and `agentsite.asgi` print it alone).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from django.core.exceptions import ImproperlyConfigured

# A small team's defaults: far above what a person at the playground or a
# script with a loop and a sleep sends, low enough to stop a runaway loop
# before it spends much on a model.
DEFAULT_RATE_SESSIONS = "60/min"
DEFAULT_RATE_MESSAGES = "120/min"
DEFAULT_MAX_RUNNING_TURNS = "4"
# Agents messaging each other (sessions.messaging): messages in a row between agents since a
# person or a trigger last spoke, turns agents may start from one person's (or trigger's) message
# across every conversation it fans into, and messages per conversation (a pair of sessions).
DEFAULT_AGENT_HOP_LIMIT = "4"
DEFAULT_AGENT_TURN_BUDGET = "20"
DEFAULT_AGENT_MESSAGE_RATE = "30/min"
# Failed logins and refused bearer tokens (channels_app.lockout): per client address and
# account (a person mistyping stays far below it), and per address whatever the account.
DEFAULT_AUTH_FAILURES_PER_ACCOUNT = "10/5min"
DEFAULT_AUTH_FAILURES_PER_ADDRESS = "50/5min"

UNITS = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60, "h": 3600, "hour": 3600}
OFF = ("", "off", "none", "0")
# What follows the slash of a rate: a unit, or a whole number of them (`min`, `5min`, `15 min`).
_WINDOW = re.compile(r"(?P<times>[0-9]*)\s*(?P<unit>[a-z]+)")


class LimitSettingInvalid(ImproperlyConfigured):
    """A limit's setting does not parse."""


@dataclass(frozen=True)
class Rate:
    """At most `count` requests per `seconds`, counted in fixed windows of that length."""

    count: int
    seconds: int
    text: str

    def __str__(self) -> str:
        return self.text


def parse_rate(name: str, value: str | None, default: str) -> Rate | None:
    """`N/sec|min|hour` as a Rate; None for off. Raises LimitSettingInvalid naming `name`."""
    raw = (default if value is None else value).strip().lower()
    if raw in OFF:
        return None
    count, _, per = raw.partition("/")
    window = _WINDOW.fullmatch(per.strip())
    if (not count.strip().isdigit() or int(count) < 1 or window is None or window["unit"] not in UNITS
            or int(window["times"] or 1) < 1):
        raise LimitSettingInvalid(
            f"{name}={value!r} is not a rate: write a count per sec, min or hour (or per several, "
            f"as 10/5min) such as {default!r}, or 'off' for no limit")
    times, unit = int(window["times"] or 1), window["unit"]
    return Rate(int(count), times * UNITS[unit], f"{int(count)}/{times if times > 1 else ''}{unit}")


def parse_cap(name: str, value: str | None, default: str) -> int:
    """A count of at least 1, or 0 for off. Raises LimitSettingInvalid naming `name`."""
    raw = (default if value is None else value).strip().lower()
    if raw in OFF:
        return 0
    if not raw.isdigit():
        raise LimitSettingInvalid(f"{name}={value!r} is not a count: write a number such as {default!r}, "
                                  "or 'off' for no cap")
    return int(raw)


def parse_count(name: str, value: str | None, default: str) -> int:
    """A count of at least 1 (a loop guard cannot be turned off). Raises LimitSettingInvalid naming `name`."""
    raw = (default if value is None else value).strip()
    if not (raw.isascii() and raw.isdigit()) or int(raw) < 1:
        raise LimitSettingInvalid(f"{name}={value!r} is not a count: write a whole number of at least 1 "
                                  f"such as {default!r}")
    return int(raw)


def parse_per_minute(name: str, value: str | None, default: str) -> Rate | None:
    """A rate as parse_rate reads it, where a bare count means per minute (`30` is `30/min`)."""
    raw = (value or "").strip()
    if raw.isascii() and raw.isdigit() and int(raw) > 0:
        value = f"{int(raw)}/min"
    return parse_rate(name, value, default)


def parse_dollars(name: str, value: str | None) -> Decimal | None:
    """An amount of US dollars above 0, or None for no budget. Raises LimitSettingInvalid naming `name`."""
    raw = (value or "").strip().lower().lstrip("$")
    if raw in OFF or not raw:
        return None
    try:
        amount = Decimal(raw)
    except InvalidOperation:
        amount = Decimal(-1)
    if not amount.is_finite() or amount <= 0:
        raise LimitSettingInvalid(f"{name}={value!r} is not an amount of dollars: write one such as '25' or '7.50', "
                                  "or 'off' for no budget")
    return amount
