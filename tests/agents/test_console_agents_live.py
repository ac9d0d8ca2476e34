"""A console agent on a real `manage.py serve`: made over REST, then its eval cases (a folder of
`evals/` with no agent in it) run against it with `manage.py eval --url … --agent SLUG`, and the
MCP and A2A doors reach it as they reach any agent."""
from __future__ import annotations

import json
import subprocess
import sys

from tests.support import ROOT, child_env, run_server

CASE = '''from agents.sdk import includes


def test(t):
    """The agent made in the console answers, and a follow-up continues its conversation."""
    t.send("hello console")
    t.succeeded()
    t.check(t.reply, includes("hello console"))
    t.send("/system")
    t.succeeded()
    t.check(t.reply, includes("Made in the console."))
'''


def test_evals_run_against_a_console_agent_and_its_doors_answer(tmp_path):
    cases = tmp_path / "helper-evals"
    (cases / "evals").mkdir(parents=True)
    (cases / "evals" / "smoke_eval.py").write_text(CASE)
    with run_server(tmp_path / "state", "--no-examples") as server, server.client() as client:
        created = client.post("/v1/agents", json={"slug": "helper", "instructions": "Made in the console.",
                                                   "models": ["scripted:echo"]})
        assert created.status_code == 201, created.text

        ran = subprocess.run([sys.executable, str(ROOT / "manage.py"), "eval", str(cases), "--url", server.base_url,
                              "--agent", "helper", "--json"], cwd=ROOT, env=child_env(), capture_output=True,
                             text=True, timeout=120)
        assert ran.returncode == 0, ran.stdout + ran.stderr
        report = json.loads(ran.stdout)
        assert [(c["id"], c["passed"]) for c in report["cases"]] == [("smoke", True)], report

        card = client.get("/helper/.well-known/agent-card.json")
        assert card.status_code == 200 and card.json()["name"] == "helper", card.text
        listed = client.post("/helper/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
            headers={"Accept": "application/json, text/event-stream"})
        assert listed.status_code == 200, listed.text
