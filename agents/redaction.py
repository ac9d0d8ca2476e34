"""URLs and text as they are shown or logged: without the credentials a URL carries.

A URL's credentials (its userinfo) run from `scheme://` to the `@` before its
host. The standard parse ends the authority at the first `/`, `?` or `#`, so a
password holding one unencoded (`https://user:S3cret/Passw0rd@host/r.git`)
reads as a host and a path, and its credentials as no credentials at all. Here
the userinfo runs to the last `@` that a host follows (the text after it holds
no `@` before the next `/`, `?`, `#` or the end): a URL with an `@` in its path
is shown with too little, never with its password.
"""
from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)(.*)$", re.DOTALL)
# An `@` with a host after it: no whitespace or `@` up to the next `/`, `?`, `#`, whitespace or the end.
_BEFORE_HOST = r"@(?=[^\s/?#@]*(?:[/?#\s]|$))"
_LAST_AT = re.compile(rf".*{_BEFORE_HOST}", re.DOTALL)
# A URL written in some text, through its last `@` before a host (greedy: the last one of the word).
_IN_TEXT = re.compile(rf"(?i)\b([a-z][a-z0-9+.-]*://)\S*{_BEFORE_HOST}")
# Shorter pieces are not masked where they stand alone: they would mask ordinary words.
_SHORTEST_MASKED = 6


def split_userinfo(url: str) -> tuple[str, str]:
    """(`url` without its userinfo, the userinfo): the userinfo runs to the last `@` before a host."""
    found = _SCHEME.match(url)
    if not found:
        return url, ""
    scheme, rest = found.groups()
    at = _LAST_AT.match(rest)
    if not at:
        return url, ""
    return scheme + rest[at.end():], rest[:at.end() - 1]


def without_credentials(url: str) -> str:
    """`url` with any user and password removed, whatever characters they hold."""
    return split_userinfo(url)[0]


def userinfo_is_ambiguous(url: str) -> bool:
    """Whether an `@` follows the standard parse's authority: a user or password holding an unencoded
    `/`, `?` or `#`, or a path or query holding an `@`. Which of the two cannot be told."""
    found = _SCHEME.match(url)
    if not found:
        return False
    rest = found.group(2)
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    return "@" in rest[end:]


def scrub(text: str, url: str = "") -> str:
    """`text` with credentials removed: those of every URL written in it, and `url`'s wherever they
    appear (a program may echo the password alone, or the URL as it parsed it)."""
    if url:
        text = text.replace(url, without_credentials(url))
        userinfo = split_userinfo(url)[1]
        try:
            standard = urlsplit(url).password or ""
        except ValueError:  # an unbalanced `[`: no standard reading
            standard = ""
        # The password as each `@` of the userinfo would end it, when it is ambiguous.
        ends = [i for i, c in enumerate(userinfo) if c == "@"] + [len(userinfo)]
        secrets = {userinfo, standard, *(userinfo[:end].partition(":")[2] for end in ends)}
        secrets |= {unquote(s) for s in secrets}
        for secret in sorted(secrets, key=len, reverse=True):
            if len(secret) >= _SHORTEST_MASKED:
                text = text.replace(secret, "***")
    return _IN_TEXT.sub(r"\1", text)
