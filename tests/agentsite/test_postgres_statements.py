"""On PostgreSQL a connection prepares the statements it repeats, unless AGENTSITE_DB_PREPARED=0.

A Django process on the real settings runs the same ORM read and a written-out
event append a few times, then asks its own connection what PostgreSQL holds
prepared for it (pg_prepared_statements is per connection).
"""
from __future__ import annotations

import json

import pytest

from tests.sessions.test_concurrent_appends import database, run
from tests.support import ROOT

SCRIPT = """
import json
import django
django.setup()
from django.core.management import call_command
from django.db import connection, transaction
from agents.discovery import deploy_agent_folder
from sessions.eventlog.events import append_event
from sessions.models import Event, Session

call_command("migrate", verbosity=0)
deployment = deploy_agent_folder(sys.argv[1])
session = Session.objects.create(agent=deployment.agent, deployment=deployment, principal_id="p", authenticator="t")
with transaction.atomic():  # one connection from the pool for all of it
    for i in range(8):
        append_event(session.id, "test.appended", {"i": i, "text": "it's \\"quoted\\""})
        Session.objects.filter(pk=session.pk, next_event_index__gte=0).exists()
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements")
        prepared = cursor.fetchone()[0]
stored = [e.data for e in Event.objects.filter(session=session).order_by("index")]
print(json.dumps({"prepared": prepared, "stored": stored}))
"""


@pytest.mark.parametrize("setting, prepares", [(None, True), ("0", False)])
def test_repeated_statements_are_prepared_on_the_server_unless_turned_off(setting, prepares, tmp_path):
    with database("postgres", tmp_path / "state") as (env, _):
        if setting is not None:
            env["AGENTSITE_DB_PREPARED"] = setting
        out = json.loads(run(SCRIPT, env, str(ROOT / "examples" / "support")).strip())

    assert (out["prepared"] > 0) is prepares, out["prepared"]
    assert out["stored"] == [{"i": i, "text": 'it\'s "quoted"'} for i in range(8)]
