"""`manage.py eval` with no --url: a server of its own on a temporary state root, stopped after the run."""
from __future__ import annotations

import json

import pytest

from tests.evals.projects import manage
from tests.support import ROOT

pytestmark = pytest.mark.slow


def test_an_example_agents_evals_pass_on_an_ephemeral_server():
    # One example: the others' evals run against a live server (tests/evals/test_eval_live.py),
    # sparing a server started and migrated for each.
    done = manage("eval", str(ROOT / "examples" / "support"), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["passed"] and report["total"] >= 1
    # The server is gone: its sessions are not linked.
    assert all(case["playgroundUrl"] is None for case in report["cases"])
