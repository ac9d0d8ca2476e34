"""deployments, activate and rollback: listing releases and moving the agent between them."""
from __future__ import annotations

import json
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from agents.models import Agent, Deployment
from sessions.models import Schedule
from tests.agents.release_support import three_releases

MANAGE = Path(__file__).resolve().parents[2] / "manage.py"


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


def active_version(slug: str = "helper") -> int:
    return Agent.objects.get(slug=slug).active_deployment.version


@pytest.mark.django_db
def test_deployments_lists_releases_newest_first_marking_the_active_one(tmp_path):
    v1, v2, v3 = three_releases(tmp_path)
    Deployment.objects.filter(pk=v2.pk).update(deployed_by="olga")

    lines = run("deployments", "helper").splitlines()

    assert [line[:4] for line in lines] == ["* v3", "  v2", "  v1"]
    assert v2.content_hash[:12] in lines[1]
    assert "by olga" in lines[1] and str(tmp_path / "helper") in lines[1]
    assert "activated " in lines[0] and "created " in lines[0]


@pytest.mark.django_db
def test_deployments_json_says_where_each_release_came_from(tmp_path):
    three_releases(tmp_path)
    Deployment.objects.filter(version=1).update(source_kind="repo", source="https://example.com/a.git",
                                                source_ref="main", source_commit="abc123", source_path="agents/a")

    listed = json.loads(run("deployments", "helper", "--json"))

    assert listed["agent"] == "helper"
    assert [(d["version"], d["active"]) for d in listed["deployments"]] == [(3, True), (2, False), (1, False)]
    v1 = listed["deployments"][2]
    assert (v1["sourceKind"], v1["source"], v1["sourceRef"], v1["sourceCommit"], v1["sourcePath"]) == (
        "repo", "https://example.com/a.git", "main", "abc123", "agents/a")
    assert v1["activatedAt"] and v1["createdAt"]


@pytest.mark.django_db
def test_activate_makes_an_older_release_active_and_its_schedules_follow(tmp_path):
    three_releases(tmp_path)
    assert not Schedule.objects.get(schedule_id="daily").active  # v2 and v3 dropped it

    out = run("activate", "helper", "1")

    assert out.strip().startswith("helper: v1 (") and out.strip().endswith("is active (was v3)")
    assert active_version() == 1
    assert Schedule.objects.get(schedule_id="daily").active


@pytest.mark.django_db
def test_rollback_activates_the_release_active_before_and_again_goes_back(tmp_path):
    three_releases(tmp_path)

    assert run("rollback", "helper").strip().startswith("helper: rolled back from v3 to v2")
    assert active_version() == 2
    run("rollback", "helper")  # the release active before v2 is now v3
    assert active_version() == 3


@pytest.mark.django_db
def test_rollback_to_a_named_release(tmp_path):
    three_releases(tmp_path)

    run("rollback", "helper", "--to", "v1")

    assert active_version() == 1
    assert Schedule.objects.get(schedule_id="daily").active


@pytest.mark.django_db
def test_rollback_with_one_release_says_there_is_nothing_to_go_back_to(tmp_path):
    three_releases(tmp_path)
    Deployment.objects.exclude(version=3).delete()

    with pytest.raises(CommandError, match="no earlier active release.*--to VERSION"):
        run("rollback", "helper")


@pytest.mark.django_db
@pytest.mark.parametrize("args, message", [
    (("activate", "nobody", "1"), "no agent 'nobody'"),
    (("activate", "helper", "9"), r"has no release '9' \(releases: v1, v2, v3\)"),
    (("activate", "helper", "two"), "has no release 'two'"),
    (("activate", "helper", "3"), "helper v3 is already the active release"),
    (("rollback", "nobody"), "no agent 'nobody'"),
    (("rollback", "helper", "--to", "7"), "has no release '7'"),
    (("rollback", "helper", "--to", "3"), "already the active release"),
    (("deployments", "nobody"), "no agent 'nobody'"),
])
def test_every_bad_argument_is_a_command_error_and_changes_nothing(tmp_path, args, message):
    three_releases(tmp_path)

    with pytest.raises(CommandError, match=message):
        run(*args)

    assert active_version() == 3


def test_a_bad_argument_on_a_fresh_state_root_prints_one_line_and_exits_non_zero(tmp_path):
    env = {"AGENTSITE_STATE_ROOT": str(tmp_path / "state"), "PATH": "/usr/bin:/bin"}  # never migrated

    done = subprocess.run([sys.executable, str(MANAGE), "activate", "nobody", "1"], env=env,
                          capture_output=True, text=True)

    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == ["CommandError: no agent 'nobody' on this server"]
    assert "Traceback" not in done.stderr
