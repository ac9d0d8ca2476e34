"""The settings `manage.py serve`'s flags ask for, as the environment the settings read.

serve forks its web processes and turn workers from its own, set-up process,
so the settings it loads are theirs: every flag that changes a setting
(`--state-root`, `--production`, the auth switches, `--dev`, `--reload`,
`--no-schedules`, `--workers`) must be in the environment before the settings load. manage.py
puts it there (`from_argv`); serve checks that it is (`environment`) and
starts itself again with it when it came in some other way (django-admin).
No Django here: manage.py calls this before Django starts.
"""
from __future__ import annotations

import argparse
import hashlib
from pathlib import Path
from typing import Mapping


def token_digest(token: str) -> str:
    """What a bearer token is kept as (sessions.models.hash_token): children see only digests."""
    return hashlib.sha256(token.encode()).hexdigest()


def environment(*, state_root: str | None = None, production: bool = False, bearer_token: list[str] | None = None,
                allow_anonymous: bool = False, dev: bool = False, no_schedules: bool = False,
                workers: int | None = None, reload: bool = False, no_reload: bool = False, **_other) -> dict[str, str]:
    """The variables the flags set (keyword names as serve's options): only those a flag asks for."""
    wanted: dict[str, str] = {}
    if state_root:
        wanted["AGENTSITE_STATE_ROOT"] = str(Path(state_root).resolve())
    if production:
        wanted["AGENTSITE_ENV"] = "production"
    if bearer_token:
        wanted["AGENTSITE_AUTH"] = "bearer"
        wanted["AGENTSITE_BEARER_TOKEN_HASHES"] = ",".join(token_digest(t) for t in bearer_token)
    elif allow_anonymous:
        wanted["AGENTSITE_AUTH"] = "allow_all"
    if dev:
        wanted["AGENTSITE_DEV"] = "1"
    if no_reload:
        wanted["AGENTSITE_RELOAD"] = "0"
    elif reload or dev:
        wanted["AGENTSITE_RELOAD"] = "1"
    if no_schedules:
        wanted["AGENTSITE_SCHEDULES"] = "0"
    if workers:
        wanted["AGENTSITE_WORKERS"] = str(workers)
    return wanted


def from_argv(argv: list[str], environ: Mapping[str, str]) -> dict[str, str]:
    """`environment` for a `manage.py serve ...` command line; {} for any other command.

    Only these flags are read; serve's own parser reads them all again and refuses what it must:
    flags it refuses together are left out here, so its refusal (naming the flags) is what the user reads.
    """
    if len(argv) < 2 or argv[1] != "serve":
        return {}
    parser = _QuietParser(prog="manage.py serve", add_help=False, allow_abbrev=False)
    parser.add_argument("--state-root")
    parser.add_argument("--production", action="store_true")
    parser.add_argument("--bearer-token", action="append", default=[])
    parser.add_argument("--allow-anonymous", action="store_true")
    parser.add_argument("--dev", action="store_true")
    parser.add_argument("--no-schedules", action="store_true")
    parser.add_argument("--workers", type=int)
    parser.add_argument("--reload", action="store_true")
    parser.add_argument("--no-reload", action="store_true")
    try:
        known, _ = parser.parse_known_args(argv[2:])
    except ValueError:  # a malformed flag: serve's own parser says what is wrong
        return {}
    production = known.production or environ.get("AGENTSITE_ENV", "").strip().lower() == "production"
    if known.allow_anonymous and (known.bearer_token or production):
        known.allow_anonymous, known.bearer_token = False, []
    return environment(**vars(known))


class _QuietParser(argparse.ArgumentParser):
    def error(self, message):
        raise ValueError(message)
