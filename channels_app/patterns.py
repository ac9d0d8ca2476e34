"""Regular expressions that let the OpenAPI document say what the server takes.

Each spells, for any regex engine, a check the server runs in code: a
duration within range (`sessions.timers.reminders.parse_duration`), a cron
expression that fires (`agents.schedules.cron_problem`, as a subset: croniter
reads more), base64 that decodes (`base64.b64decode(..., validate=True)`)
and a workspace path that stays inside (`agents.workspaces.filesystems.split_path`).
The tests hold each pattern against the check it spells.
"""
from __future__ import annotations

from sessions.host.reminders import MAX_DURATION, UNITS

SPACE = r"[ \t\n\r\f\v]"  # what `\s` is in an ASCII regex
# The end of the text: Python's `$` also matches before a last newline, which neither check takes.
END = r"(?![\s\S])"


def up_to(limit: int) -> str:
    """A regex (no anchors, no leading zeros) for the integers 1..limit."""
    digits = str(limit)
    width = len(digits)
    options = [rf"[1-9][0-9]{{0,{width - 2}}}" if width > 2 else "[1-9]"] if width > 1 else []
    for i, digit in enumerate(digits):
        low = 1 if i == 0 else 0
        if int(digit) > low:
            rest = width - i - 1
            top = int(digit) - 1
            head = f"[{low}-{top}]" if top > low else str(low)
            options.append(digits[:i] + head + (f"[0-9]{{{rest}}}" if rest else ""))
    options.append(digits)
    return "(?:" + "|".join(options) + ")"


def duration_pattern() -> str:
    """A duration `parse_duration` takes (not zero, at most MAX_DURATION), or empty (absent)."""
    most = int(MAX_DURATION.total_seconds())
    units = "|".join(f"0*{up_to(most // seconds)}{SPACE}*{unit}" for unit, seconds in UNITS.items())
    return rf"^(?:{SPACE}*(?:{units}){SPACE}*$|{END})"


def _cron_field(most: int, least: int) -> str:
    value = f"0*(?:{up_to(most)}|0)" if least == 0 else f"0*{up_to(most)}"
    item = rf"(?:\*(?:/0*[1-9][0-9]?)?|{value})"
    return f"{item}(?:,{item})*"


# minute hour day month weekday; days stop at 28 so that no month/day pair names a day that never comes.
CRON = "^" + " ".join(_cron_field(most, least) for most, least in ((59, 0), (23, 0), (28, 1), (12, 1), (7, 0))) + "$"

# Standard base64 with its padding, as `b64decode(validate=True)` takes it.
BASE64 = rf"^(?:[A-Za-z0-9+/]{{4}})*(?:[A-Za-z0-9+/]{{2}}==|[A-Za-z0-9+/]{{3}}=)?{END}"

# A relative path with no NUL or backslash, no percent-encoded byte, no '..' segment, no '/' at
# either end, and naming more than the root ('.' and '/' alone name the root).
SENT_PATH = (r"^(?!.*%[0-9A-Fa-f]{2})(?!(?:.*/)?\.\.(?:/|$))(?!(?:\.?/)*\.?$)"
             r"(?:[^\u0000\\/]+|[^\u0000\\/][^\u0000\\]*[^\u0000\\/])$")
