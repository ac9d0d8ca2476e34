"""A shallow checkout of a repository to deploy from: `checkout(url, ref)`.

1. Only https:// and file:// URLs are taken (ssh and the rest are refused).
2. The git CLI clones one commit into a temporary folder: a branch or tag
   with `clone --depth 1 --branch`, a full commit id with `init` and
   `fetch --depth 1 origin <id>`, the default branch when no ref is given.
   Git never prompts for credentials and speaks no other protocol.
3. The resolved commit is read back, and a link out of the checkout is
   refused; the folder is removed when the caller is done with it.

A URL's credentials (`https://user:token@host/...`) reach git alone, and not
on its command line, which any user of the machine can read: git gets the URL
without them and an `Authorization` header in its environment (`_auth_env`).
The URL the caller gets to store and show is `without_credentials(url)`, and git's own
output passes through `scrub` before it is shown (agents.redaction: whatever
characters the credentials hold). A URL whose credentials cannot be told from
its path (an unencoded `/`, `?` or `#` in a password) is refused, never guessed at.
"""
from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator
from urllib.parse import unquote, urlsplit

from agents.redaction import scrub, userinfo_is_ambiguous, without_credentials

SCHEMES = ("https", "file")
FULL_COMMIT = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
TIMEOUT_SECONDS = 300


class RepositoryError(Exception):
    """A repository that cannot be checked out; the message is one line, without credentials."""


def check_repository_url(url: str) -> None:
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError as exc:  # "Invalid IPv6 URL"
        raise RepositoryError(f"{without_credentials(url)}: not a URL ({exc})") from None
    if scheme not in SCHEMES:
        named = f"scheme {scheme!r}" if scheme else "no scheme"
        raise RepositoryError(f"{without_credentials(url)}: {named}; an https:// or file:// URL is needed "
                              "(ssh is not supported)")
    if userinfo_is_ambiguous(url):
        raise RepositoryError(f"{without_credentials(url)}: an '@' follows the host, so where the user and "
                              "password end cannot be told: percent-encode '/', '?', '#' and '@' in them "
                              "(%2F, %3F, %23, %40), and '@' in the path (%40)")


def repository_name(url: str) -> str:
    """The last part of the URL's path without `.git`: the folder name, hence the default slug."""
    name = urlsplit(url).path.rstrip("/").rsplit("/", 1)[-1]
    return name[:-4] if name.endswith(".git") else name or "repository"


def _auth_env(url: str) -> dict[str, str]:
    """The URL's credentials as an HTTP Basic header in git's configuration, through the environment."""
    parts = urlsplit(url)
    if parts.scheme.lower() != "https" or parts.username is None:
        return {}
    pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
    return {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "http.extraHeader",
            "GIT_CONFIG_VALUE_0": f"Authorization: Basic {base64.b64encode(pair).decode()}"}


@contextmanager
def checkout(url: str, ref: str = "") -> Iterator[tuple[Path, str]]:
    """The checked-out folder and its commit id, for the time of the `with` block."""
    check_repository_url(url)
    clean, auth = without_credentials(url), _auth_env(url)
    scratch = Path(tempfile.mkdtemp(prefix="agentsite-repo-"))
    folder = scratch / repository_name(url)
    try:
        if FULL_COMMIT.match(ref):
            folder.mkdir()
            _git(["init", "-q"], url, ref, cwd=folder)
            _git(["remote", "add", "origin", clean], url, ref, cwd=folder)
            _git(["fetch", "-q", "--depth", "1", "origin", ref], url, ref, cwd=folder, auth=auth)
            _git(["checkout", "-q", "FETCH_HEAD"], url, ref, cwd=folder)
        else:
            _git(["clone", "-q", "--depth", "1", "--single-branch", *(["--branch", ref] if ref else []),
                  "--", clean, str(folder)], url, ref, cwd=scratch, auth=auth)
        commit = _git(["rev-parse", "HEAD"], url, ref, cwd=folder).strip()
        refuse_links_out(folder, without_credentials(url))
        yield folder, commit
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def refuse_links_out(folder: Path, url: str) -> None:
    """A release is copied from the checkout following its links: one that points outside the
    checkout (`instructions.md -> /etc/passwd`) would copy the server's own files into it."""
    root = folder.resolve()
    for path in folder.rglob("*"):
        if path.is_symlink() and not path.resolve().is_relative_to(root):
            raise RepositoryError(f"{url}: {path.relative_to(folder)} is a link to outside the repository; "
                                  "a release takes only the repository's own files")


def _git(args: list[str], url: str, ref: str, *, cwd: Path, auth: dict[str, str] | None = None) -> str:
    # No prompt for a password (fail instead), no configuration of the user's
    # or the machine's, and no transport but https and file (no ext::, no ssh).
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
           "GIT_ASKPASS": "", "SSH_ASKPASS": "", "LC_ALL": "C", **(auth or {})}
    command = ["git", "-c", "protocol.allow=never", "-c", "protocol.https.allow=always",
               "-c", "protocol.file.allow=always", "-c", "advice.detachedHead=false", *args]
    try:
        done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_SECONDS)
    except FileNotFoundError:
        raise RepositoryError("git is not installed: install it to deploy from a repository") from None
    except subprocess.TimeoutExpired:
        raise RepositoryError(f"{without_credentials(url)}: git did not finish within {TIMEOUT_SECONDS} s") from None
    if done.returncode != 0:
        raise RepositoryError(_failure(scrub(done.stderr, url), without_credentials(url), ref))
    return done.stdout


def _failure(stderr: str, url: str, ref: str) -> str:
    """One line saying why git failed, in the user's terms where git's are known."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    said = " ".join(lines).lower()
    if ref and ("not found in upstream" in said or "couldn't find remote ref" in said
                or "not our ref" in said or "unadvertised object" in said):
        hint = "" if FULL_COMMIT.match(ref) else " (a commit is named by its full id)"
        return f"{url}: no branch, tag or commit {ref!r}{hint}"
    if "does not appear to be a git repository" in said or "not found" in said or "could not read" in said:
        return f"{url}: no repository there, or it needs credentials"
    last = next((line for line in reversed(lines) if line.lower().startswith(("fatal:", "error:"))), lines[-1] if lines else "")
    return f"{url}: git failed: {last.removeprefix('fatal: ').removeprefix('error: ')}"
