"""`manage.py handoff SESSION_ID MODEL [--dry-run]`: the review printed, then the handoff, or a one-line refusal."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from sessions.models import Event, Handoff, Session
from tests.conftest import ROOT
from tests.sessions.handoff_support import deploy_on_models

transactional = pytest.mark.django_db(transaction=True)
ECHO, OTHER = "scripted:echo", "scripted:other"


@pytest.fixture
def session_id(local, sync_turns, tmp_path) -> str:
    deploy_on_models(tmp_path, [ECHO, OTHER])
    created = local.post("/duo/v1/session", {"message": "hello"}, content_type="application/json")
    assert created.status_code == 201
    return created.json()["sessionId"]


def run(*args: str) -> str:
    out = StringIO()
    call_command("handoff", *args, stdout=out)
    return out.getvalue()


@transactional
def test_dry_run_prints_the_review_and_changes_nothing(session_id):
    printed = json.loads(run(session_id, OTHER, "--dry-run"))
    assert (printed["from"], printed["to"], printed["refusal"]) == (ECHO, OTHER, None)
    assert printed["carriesOver"]["messages"] == 2
    assert Session.objects.get(pk=session_id).model == ECHO and Handoff.objects.count() == 0


@transactional
def test_without_dry_run_it_hands_over_as_the_operator(session_id):
    printed = run(session_id, OTHER)
    last = printed.strip().splitlines()[-1]
    assert last.startswith(f"handed {session_id} over from {ECHO} to {OTHER}")
    assert Session.objects.get(pk=session_id).model == OTHER
    event = Event.objects.get(session_id=session_id, type="session.handoff")
    assert event.data["status"] == "completed" and event.data["requestedBy"]["authenticator"] == "cli"


@transactional
def test_a_refusal_is_one_line_and_changes_nothing(session_id):
    with pytest.raises(CommandError) as refused:
        run(session_id, "openai:gpt-elsewhere")
    assert str(refused.value).startswith("model_not_allowed: ") and "\n" not in str(refused.value)
    with pytest.raises(CommandError, match="^no session"):
        run("ses_missing", OTHER)
    assert Session.objects.get(pk=session_id).model == ECHO


def test_it_runs_from_any_working_directory_and_exits_non_zero_on_refusal(tmp_path):
    env = {**os.environ, "AGENTSITE_STATE_ROOT": str(tmp_path / "state")}
    done = subprocess.run([sys.executable, str(ROOT / "manage.py"), "handoff", "ses_missing", OTHER, "--dry-run"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1] == "CommandError: no session 'ses_missing'"
