"""Eval cases kept in a real server's admin, run with `manage.py eval --url … --agent SLUG` and no project
folder: each step's message (and files) goes to the agent, each gate is checked on its turn, and a failing
gate fails the run with its case named, as a folder's cases do; and replacements of the set at once, on
SQLite and on PostgreSQL, each answer and leave one whole set."""
from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.agents.test_stored_eval_cases import REFUND
from tests.support import ROOT, backend_env, child_env, run_server

WRONG = {"id": "wrong", "steps": [{"message": "hi", "expect": [{"gate": "replyIncludes", "text": "goodbye"}]}]}


def evaluate(server, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "manage.py"), "eval", "--url", server.base_url, *args],
                          cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=120)


def test_the_cases_kept_in_the_admin_run_against_their_agent(tmp_path):
    with run_server(tmp_path / "state") as server, server.client() as client:
        none_yet = evaluate(server, "--agent", "support")
        assert none_yet.returncode != 0 and "has no eval cases kept in the admin" in none_yet.stderr, none_yet.stderr

        saved = client.put("/v1/agents/support/eval-cases", json={"cases": [REFUND, WRONG]})
        assert saved.status_code == 200, saved.text

        ran = evaluate(server, "--agent", "support", "--json")
        assert ran.returncode == 1, ran.stdout + ran.stderr
        report = {case["id"]: case for case in json.loads(ran.stdout)["cases"]}
        assert report["refund"]["passed"] is True, report["refund"]
        assert report["refund"]["toolCalls"] == ["lookup_order"]
        assert (report["wrong"]["passed"], report["wrong"]["gate"]["kind"]) == (False, "check")
        assert "goodbye" in report["wrong"]["gate"]["message"]

        chosen = evaluate(server, "--agent", "support", "--case", "refund", "--tag", "billing")
        assert chosen.returncode == 0, chosen.stdout + chosen.stderr
        assert "refund" in chosen.stdout and "wrong" not in chosen.stdout

        nobody = evaluate(server, "--agent", "nobody")
        assert nobody.returncode != 0 and "404" in nobody.stderr, nobody.stderr
        unnamed = evaluate(server)
        assert unnamed.returncode != 0 and "--agent SLUG" in unnamed.stderr, unnamed.stderr


@pytest.mark.parametrize("backend", ["sqlite", "postgres+redis"])
def test_replacements_at_once_each_answer_and_one_whole_set_is_left(tmp_path, backend):
    sets = [[{"id": f"case-{n}-{i}", "steps": [{"message": "hi"}]} for i in range(5)] for n in range(6)]
    with contextlib.ExitStack() as stack:
        env = backend_env(stack, backend, migrated=True)
        server = stack.enter_context(run_server(tmp_path / "state", env=env))
        with server.client() as client, ThreadPoolExecutor(len(sets)) as pool:
            answers = list(pool.map(lambda cases: client.put("/v1/agents/support/eval-cases", json={"cases": cases}),
                                    sets))
            assert [a.status_code for a in answers] == [200] * len(sets), [a.text for a in answers]
            left = [case["id"] for case in client.get("/v1/agents/support/eval-cases").json()["cases"]]
    assert left in [sorted(case["id"] for case in cases) for cases in sets], left
    assert "Traceback" not in server.output()
