"""The OpenAPI document against the server it describes: Schemathesis, every check.

A real `manage.py serve` runs on the embedded default (SQLite) and scaled
out (PostgreSQL + Redis), and Schemathesis generates requests from
`/api/schema/` in all its phases (coverage, fuzzing, stateful: it creates
sessions and follows the ids it gets back). Every answer must be documented
(status, content type, body schema, headers), valid input must be taken,
invalid input refused, undeclared methods answered 405 with `Allow`, and
nothing may be a 500. The narrow exceptions, and why, are in
`schemathesis.toml` next to this file.

The seed is fixed so a run is repeatable; set AGENTSITE_SCHEMATHESIS_SEED to
explore other inputs.
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from tests.support import Server, backend_env, child_env, run_server

CONFIG = Path(__file__).with_name("schemathesis.toml")
MAX_EXAMPLES = 10  # per operation, in fuzzing and stateful: the suite has a time budget; coverage still runs every operation


BACKENDS = ("sqlite", "postgres+redis")
# The embedded server runs in development mode, so the routes that fire timers by hand (403
# `dev_mode_required` otherwise) are reached with real ids too; the scaled-out one runs as in production.
SERVE_ARGS = {"sqlite": ("--dev",), "postgres+redis": ()}


@pytest.fixture(scope="module")
def servers(tmp_path_factory) -> Iterator[dict[str, Server]]:
    with contextlib.ExitStack() as stack:
        yield {
            backend: stack.enter_context(run_server(
                tmp_path_factory.mktemp(f"schemathesis-{backend.replace('+', '-')}"), *SERVE_ARGS[backend],
                env=backend_env(stack, backend)))
            for backend in BACKENDS
        }


def schemathesis_command(server: Server) -> list[str]:
    return [
        sys.executable, "-m", "schemathesis.cli", "--config-file", str(CONFIG),
        "run", f"{server.base_url}/api/schema/",
        "--checks", "all",
        "--max-examples", str(MAX_EXAMPLES),
        "--seed", os.environ.get("AGENTSITE_SCHEMATHESIS_SEED", "20260131"),
        "--workers", "1",
        "--request-timeout", "10",
        "--generation-database", "none",
        "--no-color",
    ]


@pytest.mark.timeout(600)  # whole Schemathesis runs; on a busy machine they can take minutes
def test_the_server_answers_as_its_openapi_document_says(servers: dict[str, Server], tmp_path: Path):
    # Both backends at once: each run mostly waits on its server, so together they take about as long as one.
    runs = {
        backend: subprocess.Popen(schemathesis_command(server), cwd=tmp_path, env=child_env(), text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for backend, server in servers.items()
    }
    reports = {backend: run.communicate(timeout=540)[0] for backend, run in runs.items()}

    for backend, run in runs.items():
        server = servers[backend]
        assert run.returncode == 0, (f"schemathesis found problems on {backend}:\n{reports[backend]}\n"
                                     f"--- server log ---\n{server.output()[-5000:]}")
        assert "Internal Server Error" not in server.output(), backend
