"""The OpenAPI document against the server it describes: Schemathesis, every check, no allowance.

A real `manage.py serve` runs on the embedded default (SQLite) or scaled
out (PostgreSQL + Redis), and Schemathesis generates requests from
`/api/schema/`: every answer must be documented (status, content type, body
schema, headers), valid input must be taken, invalid input refused,
undeclared methods answered 405 with `Allow`, and nothing may be a 500.
`schemathesis.toml` next to this file says how the run reads the document,
never which failures to let pass.

Each phase on each database is a test file of its own (test_schemathesis_<database>_<phase>.py),
so the workers run them side by side. It runs as a member with a personal token (an agent's
releases, which are for operators, get their seeded requests as an operator). Before the
generated run, each operation that takes an id only a conversation makes (a parked call, an
artifact, a running turn, an armed reminder) gets one request with a real one, under every
check (tests/channels_app/schemathesis_seed.py). The fuzzing phase then checks that
every operation answered 2xx at least once, there or in the run's HAR: each was reached with
input it takes, not only refused.

Seeds are random, so each run explores other inputs: Schemathesis prints the one it used,
and AGENTSITE_SCHEMATHESIS_SEED=<seed> repeats a run.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import httpx

import schemathesis
from schemathesis.config import SchemathesisConfig

from tests.channels_app.schemathesis_seed import Seeds, real_id_cases, seed
from tests.support import ROOT, Server, backend_env, child_env, run_server

CONFIG = Path(__file__).with_name("schemathesis.toml")
MAX_EXAMPLES = 25  # per operation, in fuzzing and stateful; coverage runs what it derives from each schema

# Development mode, so the routes that fire timers by hand (403 `dev_mode_required` otherwise)
# are reached with real ids too. The running-turn cap is on (the suite turns it off elsewhere),
# above the turns the seeds keep running or parked.
SERVE_ARGS = ("--dev",)
# The message and file limits the document states are lowered to sizes Hypothesis can build a
# string just over (about 10,000 characters is its most), so the negative phases test them instead
# of failing to generate one at the defaults (100,000 characters; 256 KiB, a third of a megabyte in base64).
SERVE_ENV = {"AGENTSITE_MAX_RUNNING_TURNS": "10", "AGENTSITE_MAX_MESSAGE_CHARS": "2000",
             "AGENTSITE_WORKSPACE_FILE_MAX_BYTES": "1500"}

# Hypothesis keeps the Unicode tables it derives (about 2.5 s of CPU for UTF-8's) under its storage
# folder, by default in the working directory, a new one each run: the repository's is kept instead.
# No examples are stored there (`--generation-database none`).
HYPOTHESIS_STORAGE = ROOT / ".hypothesis"


@contextlib.contextmanager
def seeded_server(root: Path, backend: str) -> Iterator[tuple[Server, Seeds]]:
    """A server on `backend` ("sqlite" or "postgres+redis") with the seeds' rows made through its API."""
    with contextlib.ExitStack() as stack:
        env = {**SERVE_ENV, **backend_env(stack, backend, migrated=True)}
        server = stack.enter_context(run_server(root, *SERVE_ARGS, env=env, ready_timeout=240))
        yield server, seed(server, env)


def check_phase(root: Path, backend: str, phase: str) -> None:
    """Seeded cases, then Schemathesis's `phase` on a fresh server on `backend`: no failure, no 500, and
    in the fuzzing phase (which tries every operation alike) every operation answered 2xx at least once,
    there or in a seeded case."""
    with seeded_server(root / "state", backend) as (server, seeds):
        reached = reached_with_real_ids(server, seeds)
        folder = root / "run"
        folder.mkdir()
        run = subprocess.run(schemathesis_command(server, seeds, folder, phase), cwd=folder,
                             env=child_env(HYPOTHESIS_STORAGE_DIRECTORY=str(HYPOTHESIS_STORAGE)),
                             text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=780)
        assert run.returncode == 0, (f"schemathesis found problems on {backend} ({phase}):\n{run.stdout}\n"
                                     f"--- server log ---\n{server.output()[-5000:]}")
        assert "Internal Server Error" not in server.output()
        assert "Traceback" not in server.output()
        if phase == "fuzzing":
            seeded = {family(operation) for operation in reached}
            never = [op for op in never_accepted(server, folder / "run.har") if op not in seeded]
            assert never == [], f"on {backend} ({phase}), these operations never answered 2xx: {never}"


def schemathesis_command(server: Server, seeds: Seeds, folder: Path, phase: str) -> list[str]:
    seed = os.environ.get("AGENTSITE_SCHEMATHESIS_SEED")
    return [
        sys.executable, "-m", "schemathesis.cli", "--config-file", str(CONFIG),
        "run", f"{server.base_url}/api/schema/",
        "--header", f"Authorization: Bearer {seeds.token}",
        # The fuzzing phase's check reads what the run sent from its HAR; the others read nothing of it.
        *(("--report", "har", "--report-har-path", str(folder / "run.har")) if phase == "fuzzing" else ()),
        "--checks", "all",
        # A follow-up names its session by the token in its body (the FollowUpByToken link): after a
        # scenario deletes that session, its 404 (`session_not_found`, the contract) reads to the
        # resource check as a created resource gone missing, since the check ties a DELETE only to
        # paths below it. The created session's own routes stay checked by every other check.
        *(("--exclude-checks", "ensure_resource_availability") if phase == "stateful" else ()),
        "--max-examples", str(MAX_EXAMPLES),
        "--phases", phase,
        # As schemathesis.toml says why; its setting alone did not reach the fuzzing phase's check.
        "--suppress-health-check", "large_base_example",
        *(("--seed", seed) if seed else ()),
        "--workers", "1",
        "--request-timeout", "10",
        "--generation-database", "none",
        "--no-color",
    ]


def reached_with_real_ids(server: Server, seeds: Seeds) -> set[str]:
    """Each seeded case through Schemathesis, every check on: its operations ("GET /path"), all 2xx."""
    schema = schemathesis.openapi.from_url(f"{server.base_url}/api/schema/", config=SchemathesisConfig.from_path(CONFIG))
    for case in real_id_cases(seeds):
        operation = schema[case.path][case.method]
        auth = {"Authorization": f"Bearer {seeds.operator_token if case.operator else seeds.token}"}
        call = operation.Case(path_parameters=case.path_parameters, headers=auth, query=case.query,
                              **({} if case.body is None else {"body": case.body, "media_type": "application/json"}))
        response = call.call_and_validate(base_url=server.base_url)
        assert 200 <= response.status_code < 300, f"{case.method} {case.path}: {response.status_code} {response.text}"
    return {f"{case.method} {case.path}" for case in real_id_cases(seeds)}


def never_accepted(server: Server, har: Path) -> list[str]:
    """The operations of the document that no request of the run (in `har`) got a 2xx from."""
    document = server.client().get("/api/schema/", headers={"Accept": "application/json"}).json()
    # Literal paths before templated ones: /support/v1/tools/lookup_order/call is its own operation.
    operations = sorted(((method.upper(), path) for path, item in document["paths"].items() for method in item
                         if method in ("get", "post", "put", "patch", "delete")), key=lambda op: op[1].count("{"))
    patterns = [(method, path, re.compile("^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(path)) + "$"))
                for method, path in operations]
    accepted = set()
    for entry in json.loads(har.read_text())["log"]["entries"]:
        if 200 <= entry["response"]["status"] < 300:
            url_path = httpx.URL(entry["request"]["url"]).path
            accepted.add(next(((m, p) for m, p, rx in patterns if m == entry["request"]["method"] and rx.match(url_path)),
                              (entry["request"]["method"], url_path)))
    reached = {family(f"{method} {path}") for method, path in accepted}
    return sorted({family(f"{method} {path}") for method, path in operations} - reached)


def family(operation: str) -> str:
    """An agent's own handoff operation as the route it is: only an agent on two models can hand a
    session over, so one agent's 2xx (the seeded `duo`) reaches them all."""
    return re.sub(r"^(\w+) /[^/{]+(/v1/session/[{]session_id[}]/handoff)$", r"\1 /{slug}\2", operation)
