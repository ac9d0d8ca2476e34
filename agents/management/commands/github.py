"""`manage.py github replay DIR --url URL`: post recorded GitHub deliveries to a channel.

Each `<event>.<action>.json` (or `<event>.json`) under DIR is one delivery's
body, posted as it is with `X-GitHub-Event: <event>`; a sidecar
`<name>.headers.json` gives the recorded headers instead (its
`X-GitHub-Event` wins over the file name). `--secret-env NAME` signs each body
with the secret in that variable (X-Hub-Signature-256), as GitHub does; without
it the deliveries go unsigned, which only a `serve --dev` server takes, from
loopback. Each post gets a fresh X-GitHub-Delivery, so replaying twice acts
twice; `--keep-delivery-id` sends the recorded one instead (a redelivery).
"""
from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import httpx
from django.core.management.base import BaseCommand, CommandError

from agents.integrations.signatures import hmac_sha256_hex
from agents.redaction import scrub, userinfo_is_ambiguous, without_credentials

SIDECAR = ".headers.json"


def deliveries(source: Path) -> list[Path]:
    """The delivery bodies under `source` (a folder, or one file), in name order."""
    if source.is_file():
        return [source]
    if not source.is_dir():
        raise CommandError(f"{source} is neither a folder of deliveries nor a delivery file")
    found = sorted(p for p in source.iterdir() if p.suffix == ".json" and not p.name.endswith(SIDECAR))
    if not found:
        raise CommandError(f"{source} holds no <event>.<action>.json deliveries")
    return found


def recorded_headers(body_file: Path) -> dict[str, str]:
    sidecar = body_file.with_name(body_file.name[: -len(".json")] + SIDECAR)
    if not sidecar.exists():
        return {}
    try:
        data = json.loads(sidecar.read_text())
    except ValueError as exc:
        raise CommandError(f"{sidecar.name} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise CommandError(f"{sidecar.name} must map header names to values")
    return {str(k): str(v) for k, v in data.items()}


def delivery_headers(body_file: Path, body: bytes, secret: str | None, keep_id: bool) -> dict[str, str]:
    recorded = {k.lower(): v for k, v in recorded_headers(body_file).items()}
    headers = {"content-type": recorded.get("content-type", "application/json"),
               "x-github-event": recorded.get("x-github-event") or body_file.name.split(".", 1)[0],
               "x-github-delivery": (recorded.get("x-github-delivery") if keep_id else None) or str(uuid.uuid4()),
               "user-agent": "GitHub-Hookshot/agentsite-replay"}
    for name in ("x-github-hook-id", "x-github-hook-installation-target-id",
                 "x-github-hook-installation-target-type"):
        if name in recorded:
            headers[name] = recorded[name]
    if secret:
        headers["x-hub-signature-256"] = "sha256=" + hmac_sha256_hex(secret, body)
    return headers


def summary(response: httpx.Response) -> str:
    try:
        text = json.dumps(response.json(), separators=(",", ":"))
    except ValueError:
        text = response.text
    return text if len(text) <= 200 else text[:199] + "…"


class Command(BaseCommand):
    help = "GitHub channel tools: `replay DIR --url URL` posts recorded deliveries to a channel."
    # A client of a server, perhaps elsewhere: this machine's own site and database are not its concern.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: Any) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        replay = actions.add_parser("replay", help="post recorded deliveries to a GitHub channel",
                                    description=__doc__)
        replay.add_argument("source", metavar="DIR", help="a folder of <event>.<action>.json files (or one file)")
        replay.add_argument("--url", required=True,
                            help="the channel, e.g. http://127.0.0.1:8000/<slug>/v1/channels/github")
        replay.add_argument("--secret-env", metavar="NAME",
                            help="sign with the secret in this environment variable (e.g. GITHUB_WEBHOOK_SECRET)")
        replay.add_argument("--keep-delivery-id", action="store_true",
                            help="send the recorded X-GitHub-Delivery (from the sidecar) instead of a fresh one")
        replay.add_argument("--timeout", type=float, default=30.0, help="seconds per request (default 30)")

    def handle(self, *args: Any, **opts: Any) -> None:
        if userinfo_is_ambiguous(opts["url"]):
            raise CommandError(f"--url {without_credentials(opts['url'])}: an '@' follows the host, so where the "
                               "user and password end cannot be told: percent-encode '/', '?', '#' and '@' in them")
        secret = None
        if opts["secret_env"]:
            secret = os.environ.get(opts["secret_env"])
            if not secret:
                raise CommandError(f"--secret-env {opts['secret_env']}: that variable is not set")
        files = deliveries(Path(opts["source"]))
        failed = 0
        with httpx.Client(timeout=opts["timeout"]) as client:
            for body_file in files:
                body = body_file.read_bytes()
                headers = delivery_headers(body_file, body, secret, opts["keep_delivery_id"])
                try:
                    response = client.post(opts["url"], content=body, headers=headers)
                except (httpx.HTTPError, httpx.InvalidURL) as exc:
                    failed += 1
                    self.stdout.write(f"{body_file.name}  error  {scrub(str(exc), opts['url'])}")
                    continue
                if response.status_code >= 300:
                    failed += 1
                self.stdout.write(f"{body_file.name}  {response.status_code}  {summary(response)}")
        if failed:
            raise CommandError(f"{failed} of {len(files)} deliveries failed")
        self.stdout.write(f"{len(files)} deliveries accepted")
