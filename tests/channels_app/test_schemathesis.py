"""The OpenAPI document against the server it describes: Schemathesis, every check.

A real `manage.py serve` runs on the embedded default (SQLite) and scaled
out (PostgreSQL + Redis), and Schemathesis generates requests from
`/api/schema/` in all its phases (coverage, fuzzing, stateful: it creates
sessions and follows the ids it gets back). Every answer must be documented
(status, content type, body schema, headers), valid input must be taken,
invalid input refused, undeclared methods answered 405 with `Allow`, and
nothing may be a 500. The two narrow exceptions, and why, are in
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
MAX_EXAMPLES = 6  # per operation, in fuzzing and stateful: about 40 s a backend on an idle machine


@pytest.fixture(scope="module", params=["sqlite", "postgres+redis"])
def server(request, tmp_path_factory) -> Iterator[Server]:
    with contextlib.ExitStack() as stack:
        env = backend_env(stack, request.param)
        root = tmp_path_factory.mktemp(f"schemathesis-{request.param.replace('+', '-')}")
        yield stack.enter_context(run_server(root, env=env))


@pytest.mark.timeout(400)  # a whole Schemathesis run; on a busy machine it can take minutes
def test_the_server_answers_as_its_openapi_document_says(server: Server, tmp_path: Path):
    command = [
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
    result = subprocess.run(command, cwd=tmp_path, env=child_env(), capture_output=True, text=True, timeout=300)

    report = result.stdout + result.stderr
    assert result.returncode == 0, f"schemathesis found problems:\n{report}\n--- server log ---\n{server.output()[-5000:]}"
    assert "Internal Server Error" not in server.output()
