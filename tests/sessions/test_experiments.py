"""A/B experiments on live turns: enrollment once at creation (`ab.assigned`), the variant's
overrides on every turn, `ctx.session.abs`, one sample per settled turn handed to `on_sample`,
derived metrics, eval sessions left out, a stopped experiment, samples outliving their session."""
from __future__ import annotations

import json

import pytest

from agents.discovery import deploy_agent_folder
from agents.providers.scripted import ScriptedProvider
from sessions.turn.admission import start_session
from sessions.retention.deletion import delete_session
from sessions.eventlog.events import read_events
from sessions.models import Experiment, ExperimentSample, Session
from tests.conftest import ALICE
from tests.sessions.experiment_support import handed, write_ab_agent

transactional = pytest.mark.django_db(transaction=True)


@pytest.fixture
def samples(tmp_path):
    return tmp_path / "samples.jsonl"


@pytest.fixture
def ab_agent(db, tmp_path, samples):
    return deploy_agent_folder(write_ab_agent(tmp_path, samples)).agent


@pytest.fixture
def requests_seen(monkeypatch):
    """Every model request the scripted provider receives: (model, system prompt, params)."""
    seen: list[tuple[str, str, dict]] = []
    original = ScriptedProvider.stream

    def stream(self, request):
        seen.append((request.model, request.system, dict(request.params)))
        return original(self, request)

    monkeypatch.setattr(ScriptedProvider, "stream", stream)
    return seen


def post_json(client, path: str, body: dict):
    return client.post(path, json.dumps(body), content_type="application/json")


def start(client, message: str, **extra) -> str:
    response = post_json(client, "/abtest/v1/session", {"message": message, **extra})
    assert response.status_code == 201, response.content
    return response.json()["sessionId"]


def follow_up(client, session_id: str, message: str) -> None:
    response = post_json(client, f"/abtest/v1/session/{session_id}/message", {"message": message})
    assert response.status_code == 202, response.content


def types(session_id: str) -> list[str]:
    return [e["type"] for e in read_events(session_id)]


@transactional
def test_an_enrolled_session_gets_ab_assigned_once_and_its_variant_on_every_turn(alice, ab_agent, sync_turns,
                                                                                   requests_seen):
    session_id = start(alice, "[ab:terse] hello")
    follow_up(alice, session_id, "and again")

    events = read_events(session_id)
    assigned = [e for e in events if e["type"] == "ab.assigned"]
    assert [e["data"] for e in assigned] == [{"experiment": "tone", "variant": "terse", "label": "Terse"}]
    assert [e["type"] for e in events][:3] == ["session.started", "agent.bound", "ab.assigned"]
    assert Session.objects.get(pk=session_id).ab_variants == {"tone": "terse"}
    # Both turns ran under the variant: its instructions replace the agent's, its params are merged in.
    assert len(requests_seen) == 2
    for model, system, params in requests_seen:
        assert system.startswith("TERSE: answer in five words.") and "BASE" not in system
        assert params == {"style": "terse"}


@transactional
def test_split_if_leaves_other_sessions_alone(alice, ab_agent, sync_turns, requests_seen, samples):
    session_id = start(alice, "hello")
    assert "ab.assigned" not in types(session_id)
    assert Session.objects.get(pk=session_id).ab_variants == {}
    assert requests_seen[0][1].startswith("BASE: you help.")
    assert handed(samples) == [] and not ExperimentSample.objects.exists()


@transactional
def test_a_tool_reads_the_sessions_variants(alice, ab_agent, sync_turns):
    session_id = start(alice, "[ab:control]\n/call which_variant {}")
    [result] = [e for e in read_events(session_id) if e["type"] == "action.result"]
    assert result["data"]["output"] == {"abs": {"tone": "control"}}


@transactional
def test_on_sample_gets_each_settled_turn_exactly_once_with_derived_counts(alice, ab_agent, sync_turns, samples):
    session_id = start(alice, "[ab:terse]\n/call which_variant {}")
    follow_up(alice, session_id, "/call which_variant {}\n/call which_variant {}")
    follow_up(alice, session_id, "/fail the model broke")

    got = handed(samples)
    turns = [e["turnId"] for e in read_events(session_id) if e["type"] in ("turn.completed", "turn.failed")]
    assert [s["turnId"] for s in got] == turns and len(set(turns)) == 3
    assert {(s["experiment"], s["variant"], s["sessionId"]) for s in got} == {("tone", "terse", session_id)}
    first, second, failed = (s["metrics"] for s in got)
    assert (first["toolCalls"], first["variantChecks"], first["errors"]) == (1, 1, 0)
    assert (second["toolCalls"], second["variantChecks"]) == (2, 2)
    assert (failed["errors"], failed["toolCalls"]) == (1, 0)
    for m in (first, second):
        assert m["turns"] == 1 and m["inputTokens"] > 0 and m["outputTokens"] > 0
        assert m["wallTimeMs"] > 0 and m["firstTokenMs"] is not None
        assert m["costUsd"] == 0.0  # the scripted model is free
    # Stored durably, one row per turn, with what was handed over.
    rows = ExperimentSample.objects.filter(session_id=session_id).order_by("at", "id")
    assert [r.turn_id for r in rows] == turns
    assert [r.metrics for r in rows] == [s["metrics"] for s in got]


@transactional
def test_a_failing_on_sample_is_logged_and_the_turn_still_completes(alice, ab_agent, sync_turns, samples, caplog):
    samples.mkdir()  # appending to a directory raises in on_sample
    session_id = start(alice, "[ab:terse] hello")
    assert types(session_id)[-2:] == ["turn.completed", "session.waiting"]
    assert ExperimentSample.objects.filter(session_id=session_id).count() == 1
    assert any("on_sample of experiment tone failed" in r.getMessage() for r in caplog.records)


@transactional
def test_eval_sessions_are_never_enrolled(ab_agent, sync_turns, samples):
    # Straight through admission: RunOptions.purpose is what an eval run sets on the sessions it makes.
    session_id = start_session(ab_agent, ALICE, "[ab:terse] hello", options={"purpose": "eval"}).session.id
    assert "ab.assigned" not in types(session_id)
    assert handed(samples) == []


@transactional
def test_sessions_an_eval_run_creates_over_http_stay_out_of_the_results(local, ab_agent, sync_turns, samples):
    evaluated = start(local, "[ab:terse] hello", purpose="eval")  # the loopback principal may mark an eval
    enrolled = start(local, "[ab:terse] hello")

    assert "ab.assigned" not in types(evaluated) and "turn.completed" in types(evaluated)
    assert Session.objects.get(pk=evaluated).ab_variants in ({}, None)
    results = local.get("/abtest/v1/abs/tone").json()
    counts = {v["id"]: v["sessions"] for v in results["variants"]}
    assert sum(counts.values()) == 1 and counts["terse"] == 1
    assert not ExperimentSample.objects.filter(session_id=evaluated).exists()
    assert ExperimentSample.objects.filter(session_id=enrolled).count() == 1


@transactional
def test_a_stopped_experiment_sends_new_sessions_to_control_and_keeps_existing_ones(alice, ab_agent, sync_turns,
                                                                                    requests_seen):
    before = start(alice, "[ab:terse] hello")
    assert Experiment.stop(ab_agent, "tone") and not Experiment.stop(ab_agent, "tone")
    after = start(alice, "[ab:terse] hello")
    assert Session.objects.get(pk=after).ab_variants == {"tone": "control"}
    follow_up(alice, before, "still terse?")
    assert Session.objects.get(pk=before).ab_variants == {"tone": "terse"}
    assert [r[1].split(":")[0] for r in requests_seen] == ["TERSE", "BASE", "TERSE"]


@transactional
def test_samples_outlive_their_session(alice, ab_agent, sync_turns):
    session_id = start(alice, "[ab:terse] hello")
    delete_session(Session.objects.get(pk=session_id))
    assert not Session.objects.filter(pk=session_id).exists()
    assert ExperimentSample.objects.filter(session_id=session_id).count() == 1


@transactional
def test_the_hash_split_end_to_end_fills_both_variants(alice, ab_agent, sync_turns):
    chosen = [Session.objects.get(pk=start(alice, f"[ab] number {i}")).ab_variants["tone"] for i in range(40)]
    assert 8 <= chosen.count("terse") <= 32, chosen
