"""Parsing what clients send: JSON bodies, websocket frames, cursors and counts.

Every JSON document from outside goes through `load_json`, which refuses
what would crash or half-store later instead of failing deep inside a view
or a turn: nesting past MAX_JSON_DEPTH (the decoder and every recursive walk
after it would hit Python's recursion limit), non-finite or enormous
numbers, and text neither database can store (see sessions.eventlog.storable).
"""
from __future__ import annotations

import json
import math
import re
import sys
from itertools import accumulate
from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from channels_app.errors import APIError
from sessions.eventlog.storable import find_problem

MAX_JSON_DEPTH = 64

# A JSON string literal; what is left once they are removed holds the brackets that nest.
STRING_LITERAL = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
NOT_A_BRACKET = re.compile(r"[^\[\]{}]+")
BRACKET_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
# `\u0000` and surrogate escapes: the only ways bad text gets into a decoded document.
BAD_ESCAPE = re.compile(r"\\u(?:0000|[dD][89abcdefABCDEF])")
COUNT = re.compile(r"[0-9]{1,18}")  # ASCII digits only: int() also takes '٣', ' 3', '+3' and '1_0'


class JSONRefused(ValueError):
    def __init__(self, code: str, message: str, details: Any = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details


def nesting_depth(text: str) -> int:
    """How deep arrays and objects nest in `text`, counted without recursion."""
    brackets = NOT_A_BRACKET.sub("", STRING_LITERAL.sub("", text))
    return max(accumulate(map(BRACKET_STEP.__getitem__, brackets)), default=0)


def _finite(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise JSONRefused("invalid_number", f"the number {literal[:40]} is out of range: numbers must be finite")
    return value


def _integer(literal: str) -> int:
    limit = sys.get_int_max_str_digits() or 4300
    if len(literal) > limit:
        raise JSONRefused("invalid_number", f"an integer has {len(literal)} digits; at most {limit} are accepted")
    return int(literal)


def _no_constant(name: str) -> Any:
    raise JSONRefused("invalid_number", f"{name} is not a JSON number: numbers must be finite")


def load_json(text: str, what: str = "body") -> Any:
    """Decode one JSON document from outside. Raises JSONRefused (with a code) or ValueError (bad syntax)."""
    # Counting brackets is cheaper than scanning for their nesting, and usually enough.
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH and nesting_depth(text) > MAX_JSON_DEPTH:
        raise JSONRefused("body_too_deep", f"the {what} nests arrays and objects more than {MAX_JSON_DEPTH} deep",
                          {"maxDepth": MAX_JSON_DEPTH})
    value = json.loads(text, parse_float=_finite, parse_int=_integer, parse_constant=_no_constant)
    if BAD_ESCAPE.search(text) and (refused := bad_text(value, what)):
        raise refused
    return value


def bad_text(value: Any, what: str = "body") -> JSONRefused | None:
    """The refusal of a decoded value holding text no database stores (a NUL, a lone surrogate), or None."""
    found = find_problem(value)
    if not found:
        return None
    path, problem = found
    field = what if path == "value" else path
    return JSONRefused("invalid_text", f"{field} {problem}; send valid Unicode text without NUL", {"field": field})


class BoundedJSONParser(JSONParser):
    """DRF's JSON parser with `load_json`'s limits; each refusal is a 400 with its own code."""

    def parse(self, stream, media_type=None, parser_context=None) -> Any:
        raw = stream.read() if stream is not None else b""
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ParseError(f"the body is not UTF-8 ({exc.reason} at byte {exc.start})") from None
        try:
            return load_json(text)
        except JSONRefused as exc:
            raise APIError(400, exc.code, exc.message, exc.details) from None
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None


def parse_count(raw: str | None) -> int | None:
    """A non-negative integer written in ASCII digits (at most 18, so it fits a 64-bit column), or None."""
    if raw is None or not COUNT.fullmatch(raw):
        return None
    return int(raw)


def parse_start_index(raw: str | None, last_event_id: str | None = None, *, resume: bool = False) -> int:
    """Where a reader of the event log starts: `startIndex` (default 0), or one past an SSE `Last-Event-ID`.

    A `Last-Event-ID` that is neither empty nor a count is refused wherever it
    is sent; it sets the start only for a resuming (SSE) reader without a
    `startIndex`. Anything but a count is a 400 `invalid_start_index`.
    """
    last = parse_count(last_event_id) if last_event_id else None
    if last_event_id and last is None:
        raise APIError(400, "invalid_start_index", "Last-Event-ID must be a non-negative integer")
    if raw is None and resume and last is not None:
        return last + 1
    start = parse_count("0" if raw is None else raw)
    if start is None:
        raise APIError(400, "invalid_start_index", "startIndex must be a non-negative integer")
    return start


def parse_flag(raw: str | None, name: str) -> bool:
    """A yes/no query parameter: absent, `0` or `false` is no; `1` or `true` is yes; anything else a 400."""
    if raw is None or raw in ("0", "false"):
        return False
    if raw in ("1", "true"):
        return True
    raise APIError(400, "invalid_query", f"{name} must be 1 or 0 (true or false)")
