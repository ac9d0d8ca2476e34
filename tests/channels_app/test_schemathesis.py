"""The OpenAPI document against the server it describes: Schemathesis, every check.

A real `manage.py serve` runs on the embedded default (SQLite) and scaled
out (PostgreSQL + Redis), and Schemathesis generates requests from
`/api/schema/` in all its phases (coverage, fuzzing, stateful: it creates
sessions and follows the ids it gets back). Every answer must be documented
(status, content type, body schema, headers), valid input must be taken,
invalid input refused, undeclared methods answered 405 with `Allow`, and
nothing may be a 500. The narrow exceptions, and why, are in
`schemathesis.toml` next to this file.

It runs as a member with a personal token (an agent's releases, which are for operators,
get their seeded requests as an operator). Before the generated run, each
operation that takes an id only a conversation makes (a parked call, an
artifact, a running turn, an armed reminder) gets one request with a real
one, under every check (tests/channels_app/schemathesis_seed.py). Then every
operation must have answered 2xx at least once, there or in the run's HAR:
each was reached with input it takes, not only refused.

The seed is fixed so a run is repeatable; set AGENTSITE_SCHEMATHESIS_SEED to
explore other inputs.
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
import pytest

import schemathesis
from schemathesis.config import SchemathesisConfig

from tests.channels_app.schemathesis_seed import Seeds, real_id_cases, seed
from tests.support import Server, backend_env, child_env, run_server

pytestmark = pytest.mark.slow  # minutes: see tests/conftest.py

CONFIG = Path(__file__).with_name("schemathesis.toml")
MAX_EXAMPLES = 10  # per operation, in fuzzing and stateful: the suite has a time budget; coverage still runs every operation


BACKENDS = ("sqlite", "postgres+redis")
# Development mode, so the routes that fire timers by hand (403 `dev_mode_required` otherwise)
# are reached with real ids too. The running-turn cap is on (the suite turns it off elsewhere),
# above the turns the seeds keep running or parked.
SERVE_ARGS = ("--dev",)
SERVE_ENV = {"AGENTSITE_MAX_RUNNING_TURNS": "10"}


@pytest.fixture(scope="module")
def servers(tmp_path_factory) -> Iterator[dict[str, tuple[Server, Seeds]]]:
    with contextlib.ExitStack() as stack:
        started = {}
        for backend in BACKENDS:
            env = {**SERVE_ENV, **backend_env(stack, backend)}
            server = stack.enter_context(run_server(
                tmp_path_factory.mktemp(f"schemathesis-{backend.replace('+', '-')}"), *SERVE_ARGS, env=env))
            started[backend] = (server, env)
        yield {backend: (server, seed(server, env)) for backend, (server, env) in started.items()}


def schemathesis_command(server: Server, seeds: Seeds, folder: Path) -> list[str]:
    return [
        sys.executable, "-m", "schemathesis.cli", "--config-file", str(CONFIG),
        "run", f"{server.base_url}/api/schema/",
        "--header", f"Authorization: Bearer {seeds.token}",
        "--report", "har", "--report-har-path", str(folder / "run.har"),
        "--checks", "all",
        "--max-examples", str(MAX_EXAMPLES),
        "--seed", os.environ.get("AGENTSITE_SCHEMATHESIS_SEED", "20260131"),
        "--workers", "1",
        "--request-timeout", "10",
        "--generation-database", "none",
        "--no-color",
    ]


@pytest.mark.timeout(600)  # whole Schemathesis runs; on a busy machine they can take minutes
def test_the_server_answers_as_its_openapi_document_says(servers: dict[str, tuple[Server, Seeds]], tmp_path: Path):
    reached = {backend: reached_with_real_ids(server, seeds) for backend, (server, seeds) in servers.items()}
    # Both backends at once: each run mostly waits on its server, so together they take about as long as one.
    folders = {backend: tmp_path / backend.replace("+", "-") for backend in servers}
    runs = {}
    for backend, (server, seeds) in servers.items():
        folders[backend].mkdir()
        runs[backend] = subprocess.Popen(schemathesis_command(server, seeds, folders[backend]), cwd=folders[backend],
                                         env=child_env(), text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    reports = {backend: run.communicate(timeout=540)[0] for backend, run in runs.items()}

    for backend, run in runs.items():
        server = servers[backend][0]
        assert run.returncode == 0, (f"schemathesis found problems on {backend}:\n{reports[backend]}\n"
                                     f"--- server log ---\n{server.output()[-5000:]}")
        assert "Internal Server Error" not in server.output(), backend
        assert "Traceback" not in server.output(), backend
        never = [op for op in never_accepted(server, folders[backend] / "run.har") if op not in reached[backend]]
        assert never == [], f"on {backend}, these operations never answered 2xx: {never}"


def reached_with_real_ids(server: Server, seeds: Seeds) -> set[str]:
    """Each seeded case through Schemathesis, every check on: its operations ("GET /path"), all 2xx."""
    schema = schemathesis.openapi.from_url(f"{server.base_url}/api/schema/", config=SchemathesisConfig.from_path(CONFIG))
    for case in real_id_cases(seeds):
        operation = schema[case.path][case.method]
        auth = {"Authorization": f"Bearer {seeds.operator_token if case.operator else seeds.token}"}
        call = operation.Case(path_parameters=case.path_parameters, headers=auth,
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
    return [f"{method} {path}" for method, path in operations if (method, path) not in accepted]
