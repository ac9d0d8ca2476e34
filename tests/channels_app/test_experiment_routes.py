"""`GET /<slug>/v1/abs` and `/<slug>/v1/abs/<name>`: an agent's experiments and their results,
read alike by the member whose sessions gave the samples, another member and an operator;
anonymous gets 401, an unknown experiment 404."""
from __future__ import annotations

import pytest

from agents.discovery import deploy_agent_folder
from sessions.turn.admission import start_session
from sessions.models import Experiment
from sessions.principal import Principal
from tests.channels_app.roles_support import anonymous, person
from tests.sessions.experiment_support import write_ab_agent

transactional = pytest.mark.django_db(transaction=True)


@pytest.fixture
def ab_agent(db, tmp_path):
    return deploy_agent_folder(write_ab_agent(tmp_path, tmp_path / "samples.jsonl")).agent


@transactional
def test_owner_member_and_operator_read_the_results_and_anonymous_gets_401(ab_agent, sync_turns):
    owner, member, operator = person("mia"), person("max"), person("olga", operator=True)
    mia = Principal(authenticator="token", principal_id=str(owner.user.pk))
    for variant in ("terse", "terse", "control", "control", "control"):
        start_session(ab_agent, mia, f"[ab:{variant}]\n/call which_variant {{}}")
    start_session(ab_agent, mia, "not in the experiment")

    bodies = []
    for who in (owner, member, operator):
        listed = who.client.get("/abtest/v1/abs")
        assert listed.status_code == 200, listed.content
        [summary] = listed.json()["experiments"]
        assert (summary["name"], summary["control"], summary["sessions"], summary["stoppedAt"]) == ("tone", "control", 5, None)
        assert [v["id"] for v in summary["variants"]] == ["control", "terse"]
        assert summary["metrics"][-1] == "variantChecks"
        got = who.client.get("/abtest/v1/abs/tone")
        assert got.status_code == 200, got.content
        bodies.append(got.json())
    assert bodies[0] == bodies[1] == bodies[2]
    control, terse = bodies[0]["variants"]
    assert (control["id"], control["control"], control["sessions"], control["vsControl"]) == ("control", True, 3, None)
    assert (terse["sessions"], terse["metrics"]["toolCalls"]["mean"], terse["metrics"]["turns"]["n"]) == (2, 1.0, 2)
    assert terse["vsControl"]["variantChecks"] == {"diff": 0.0, "low": 0.0, "high": 0.0}
    assert set(terse["metrics"]["wallTimeMs"]) == {"n", "mean", "low", "high"}
    assert (terse["metrics"]["costUsd"]["mean"], terse["unpricedSamples"]) == (0.0, 0)
    assert (bodies[0]["interval"], bodies[0]["difference"]) == ("student-t-95", "welch-95")

    assert anonymous().get("/abtest/v1/abs").status_code == 401
    assert anonymous().get("/abtest/v1/abs/tone").status_code == 401
    missing = member.client.get("/abtest/v1/abs/nope")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "experiment_not_found"

    Experiment.stop(ab_agent, "tone")
    assert member.client.get("/abtest/v1/abs/tone").json()["stoppedAt"] is not None
