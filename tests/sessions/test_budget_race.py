"""Two processes race for the last of a budget: each charges one model call against it at the
same moment, on SQLite and on PostgreSQL, with the calls on different models (so on different
ledger rows: only the budget's own lock orders them). Exactly one carries on; both are charged."""
from __future__ import annotations

import subprocess

import pytest

from tests.sessions.test_concurrent_appends import database, python, run
from tests.support import ROOT

SETUP = """
import django
django.setup()
from decimal import Decimal
from django.core.management import call_command
from agents.discovery import deploy_agent_folder
from sessions.models import Spend
from sessions.models.spend import utc_day

call_command("migrate", verbosity=0)
agent = deploy_agent_folder(sys.argv[1]).agent
Spend.objects.create(day=utc_day(), principal_id="pat", authenticator="django", agent=agent, model="openai:a",
                     cost_usd=Decimal("0.99"))
print(agent.pk)
"""

CHARGER = """
import os, time
import django
django.setup()
from decimal import Decimal
from django.db import connection
from sessions.spend.budgets import Budget, Payer
from sessions.spend.meter import BudgetExceeded, Meter

agent_id, model, gate = int(sys.argv[1]), sys.argv[2], sys.argv[3]
meter = Meter(Payer("pat", "django", agent_id, (Budget("principal", "daily", Decimal("1")),)))
connection.ensure_connection()
print("ready", flush=True)
while not os.path.exists(gate):
    time.sleep(0.001)
try:
    meter.called(model, {"inputTokens": 10, "outputTokens": 1, "cacheReadTokens": 0, "cacheWriteTokens": 0,
                         "costUsd": 0.02})
except BudgetExceeded as exc:
    print("stopped", exc.code, flush=True)
else:
    print("passed", flush=True)
"""


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_of_two_calls_racing_for_the_last_of_a_budget_exactly_one_carries_on(kind, tmp_path):
    with database(kind, tmp_path / "state", migrated=True) as (env, _read):
        agent_id = run(SETUP, env, str(ROOT / "examples" / "support")).strip()
        outcomes = []
        for round_ in range(2):
            gate = tmp_path / f"go-{round_}"
            chargers = [subprocess.Popen(python(CHARGER) + [agent_id, f"openai:model-{round_}-{n}", str(gate)],
                                         cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                        for n in range(2)]
            try:
                for charger in chargers:
                    assert charger.stdout.readline().strip() == "ready", charger.stderr.read()
                gate.touch()
                said = []
                for charger in chargers:
                    out, err = charger.communicate(timeout=60)
                    assert charger.returncode == 0, err
                    said.append(out.strip())
            finally:
                for charger in chargers:
                    if charger.poll() is None:
                        charger.kill()
                        charger.wait()
            outcomes.append(sorted(said))
            # The next round starts again from a budget with 0.01 left.
            run(RESET, env, agent_id)
    assert outcomes == [["passed", "stopped budget_exceeded"]] * 2


RESET = """
import django
django.setup()
from decimal import Decimal
from sessions.models import Spend
assert Spend.objects.exclude(model="openai:a").count() == 2  # both calls were charged
Spend.objects.exclude(model="openai:a").delete()
"""
