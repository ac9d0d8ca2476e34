"""What the host services take: keys, paths, names, JSON values, content, and their limits.

Agent code calls these services with whatever it has; each check either
returns the value as it will be stored or raises `HostError` with a message
that says what to fix (a tool's error reaches the model, which can retry).
Limits are settings, read at call time.
"""
from __future__ import annotations

import hashlib
import json
import mimetypes
import re
from typing import Any

from django.conf import settings

from sessions.eventlog.storable import find_problem, text_problem

# C0 controls and DEL: never part of a path or a name (NUL also breaks PostgreSQL).
CONTROL = re.compile("[\x00-\x1f\x7f]")
TOKEN = r"[A-Za-z0-9!#$&^_.+-]+"
# A media type with parameters; spaces and tabs only, since it becomes a response header.
CONTENT_TYPE = re.compile(
    rf"{TOKEN}/{TOKEN}(?:[ \t]*;[ \t]*{TOKEN}=(?:{TOKEN}|\"[^\"\\\x00-\x1f\x7f]*\"))*\Z", re.ASCII)
MAX_KEY_BYTES = 512
MAX_PATH_BYTES = 1024
MAX_NAME_BYTES = 255


class HostError(ValueError):
    """A request to a host service that cannot be met; the message says what to fix."""

    def __init__(self, message: str, code: str = "invalid_host_request"):
        super().__init__(message)
        self.code = code


class FileChanged(HostError):
    """A conditional write found other content than the caller expected."""

    def __init__(self, message: str):
        super().__init__(message, "file_changed")


def limit(name: str) -> int:
    return int(getattr(settings, name))


def check_text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise HostError(f"{what} must be a string, not {type(value).__name__}")
    if problem := text_problem(value):
        raise HostError(f"{what} {value!r} {problem}")
    return value


def _utf8_size(text: str) -> int:
    return len(text.encode("utf-8"))


def check_key(key: Any) -> str:
    key = check_text(key, "a key")
    if not key:
        raise HostError("a key must not be empty")
    if _utf8_size(key) > MAX_KEY_BYTES:
        raise HostError(f"a key is at most {MAX_KEY_BYTES} bytes of UTF-8; this one has {_utf8_size(key)}")
    return key


def check_path(path: Any) -> str:
    """A relative POSIX path inside the store: `notes/2026/plan.md`."""
    path = check_text(path, "a path")
    if not path:
        raise HostError("a path must not be empty")
    if _utf8_size(path) > MAX_PATH_BYTES:
        raise HostError(f"a path is at most {MAX_PATH_BYTES} bytes of UTF-8; this one has {_utf8_size(path)}")
    if CONTROL.search(path):
        raise HostError(f"path {path!r} holds a control character")
    if "\\" in path:
        raise HostError(f"path {path!r} holds a backslash: separate folders with '/'")
    if path.startswith("/"):
        raise HostError(f"path {path!r} is absolute: paths are relative to the store, e.g. 'notes/plan.md'")
    for segment in path.split("/"):
        if segment in ("", ".", ".."):
            raise HostError(f"path {path!r} has an empty, '.' or '..' segment: give a plain relative path")
        if _utf8_size(segment) > MAX_NAME_BYTES:
            raise HostError(f"path {path!r} has a segment longer than {MAX_NAME_BYTES} bytes")
    return path


def check_prefix(prefix: Any) -> str:
    return check_text(prefix, "a prefix")


def check_name(name: Any) -> str:
    """An artifact's name: one file name, no folders (`report.md`)."""
    name = check_text(name, "an artifact name")
    if not name or name in (".", ".."):
        raise HostError(f"artifact name {name!r} is not a file name: give one like 'report.md'")
    if _utf8_size(name) > MAX_NAME_BYTES:
        raise HostError(f"an artifact name is at most {MAX_NAME_BYTES} bytes of UTF-8; this one has {_utf8_size(name)}")
    if "/" in name or "\\" in name:
        raise HostError(f"artifact name {name!r} holds a slash: an artifact is one file, without folders")
    if CONTROL.search(name):
        raise HostError(f"artifact name {name!r} holds a control character")
    if name != name.strip():
        raise HostError(f"artifact name {name!r} starts or ends with white space")
    return name


def check_value(value: Any) -> Any:
    """`value` as it will be stored and read back: JSON both databases take, within the size limit."""
    if value is None:
        raise HostError("a value must not be None: delete the key instead")
    try:
        dumped = json.dumps(value, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise HostError(f"a value must be JSON (dicts, lists, strings, finite numbers, booleans): {exc}") from None
    if unstorable := find_problem(value):
        where, problem = unstorable
        raise HostError(f"a value's {where} {problem}")
    most = limit("AGENTSITE_KV_MAX_VALUE_BYTES")
    if (size := _utf8_size(dumped)) > most:
        raise HostError(f"a value is at most {most} bytes as JSON; this one has {size}", "too_large")
    return json.loads(dumped)


def canonical(value: Any) -> str:
    """One spelling per JSON value, to compare stored values with expected ones (key order ignored)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def content_bytes(content: Any, setting: str, what: str) -> bytes:
    if isinstance(content, str):
        try:
            data = content.encode("utf-8")
        except UnicodeEncodeError:
            raise HostError(f"{what} holds a lone surrogate, which is not valid Unicode text") from None
    elif isinstance(content, bytes | bytearray | memoryview):
        data = bytes(content)
    else:
        raise HostError(f"{what} must be str or bytes, not {type(content).__name__}")
    most = limit(setting)
    if len(data) > most:
        raise HostError(f"{what} is at most {most} bytes; this one has {len(data)}", "too_large")
    return data


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def content_type_for(name: str, given: Any, is_text: bool) -> str:
    """The declared content type, else one guessed from the name; text gets its charset."""
    if given is not None:
        given = check_text(given, "a content type").strip()
        if len(given) > 255 or not CONTENT_TYPE.match(given):
            raise HostError(f"content type {given!r} is not a media type like 'text/csv' or 'application/pdf'")
        return given
    guessed, _ = mimetypes.guess_type(name, strict=False)
    if guessed is None:
        return "text/plain; charset=utf-8" if is_text else "application/octet-stream"
    if is_text and (guessed.startswith("text/") or guessed in ("application/json", "application/xml")):
        return f"{guessed}; charset=utf-8"
    return guessed
