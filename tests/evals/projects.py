"""Eval projects the tests run: a copy of the support agent with a suite where each gate kind fails
once, an agent whose cases each sleep a second (for concurrency), and one on a model the tests
give a price (`PRICED_MODEL`)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support import ROOT, child_env

GATES_SUITE = '''\
import re

from agents.sdk import define_eval, includes, satisfies


def fine(t):
    t.send('/call lookup_order {"order_id": "A101"}')
    t.succeeded()
    t.called_tool("lookup_order")
    t.check(t.reply, includes("shipped"))


def model_fails(t):
    t.send("/fail the model is down")
    t.succeeded()


def wrong_tool(t):
    t.send('/call lookup_order {"order_id": "A100"}')
    t.called_tool("refund_order")


def tempting_tool(t):
    t.send('/call refund_order {"order_id": "A100", "reason": "broken"}')
    t.not_called_tool("refund_order")


def reply_lacks(t):
    t.send("/reply all good")
    t.check(t.reply, includes(re.compile(r"order [A-Z]\\d{3}")))


def reply_unsatisfying(t):
    t.send("/reply short")
    t.check(t.reply, satisfies(lambda reply: len(reply) > 20, "longer than 20 characters"))


def case_breaks(t):
    t.send("hello")
    {}["missing"]


cases = define_eval(tags=["gates"], cases=[
    {"id": "fine", "test": fine, "tags": ["fine"]},
    {"id": "succeeded", "test": model_fails},
    {"id": "called-tool", "test": wrong_tool},
    {"id": "not-called-tool", "test": tempting_tool},
    {"id": "includes", "test": reply_lacks},
    {"id": "satisfies", "test": reply_unsatisfying},
    {"id": "error", "test": case_breaks},
])
'''

SLEEP_CASES = 8
SLEEP_CONCURRENCY = 4
SLEEP_SUITE = f'''\
from agents.sdk import define_eval


def sleep(t):
    t.send("/sleep 1000\\n/reply awake")
    t.succeeded()


cases = define_eval(cases=[{{"id": f"nap{{n}}", "test": sleep}} for n in range({SLEEP_CASES})])
'''

PRICED_MODEL = "scripted:priced"  # free as scripted, unless an operator's price says otherwise
PRICED_SUITE = '''\
from agents.sdk import define_eval


def twice(t):
    t.send("/reply one")
    t.send("/reply two")
    t.succeeded()


cases = define_eval(cases=[{"id": "twice", "test": twice}])
'''


def make_projects(base: Path) -> dict[str, Path]:
    shop = base / "shop"
    shutil.copytree(ROOT / "examples" / "support" / "agent", shop / "agent")
    (shop / "evals").mkdir()
    (shop / "evals" / "gates_eval.py").write_text(GATES_SUITE)
    sleepy = base / "sleepy"
    (sleepy / "agent").mkdir(parents=True)
    (sleepy / "agent" / "instructions.md").write_text("Answer briefly.\n")
    (sleepy / "evals").mkdir()
    (sleepy / "evals" / "naps_eval.py").write_text(SLEEP_SUITE)
    (sleepy / "evals" / "config.py").write_text(f"max_concurrency = {SLEEP_CONCURRENCY}\n")
    priced = base / "priced"
    (priced / "agent").mkdir(parents=True)
    (priced / "agent" / "instructions.md").write_text("Answer briefly.\n")
    (priced / "agent" / "agent.py").write_text(
        f"from agents.sdk import Agent\nagent = Agent(model={PRICED_MODEL!r}, tools=[])\n")
    (priced / "evals").mkdir()
    (priced / "evals" / "priced_eval.py").write_text(PRICED_SUITE)
    return {"shop": shop, "sleepy": sleepy, "priced": priced}


def manage(*args: str, env: dict[str, str] | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT, env=child_env(**(env or {})),
                          capture_output=True, text=True, timeout=timeout)


def eval_json(*args: str) -> tuple[int, dict]:
    done = manage("eval", *args, "--json")
    try:
        return done.returncode, json.loads(done.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"not JSON (exit {done.returncode}):\n{done.stdout}\n{done.stderr}") from None
