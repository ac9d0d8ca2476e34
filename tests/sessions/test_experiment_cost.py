"""What a variant costs: each sample carries its turn's `costUsd`, and the results give each variant's
mean cost per session; a variant on a model without a price is reported as unknown, never as free."""
from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from agents.discovery import deploy_agent_folder
from agents.pricing.model import ModelPrice
from sessions.experiments.results import results
from sessions.experiments.samples import turn_cost
from sessions.models import ExperimentSample
from tests.providers.conftest import loopback_provider
from tests.providers.loopback import Reply, oa_text

transactional = pytest.mark.django_db(transaction=True)

EXPERIMENT = '''\
from agents.sdk import define_ab, split_if


def chosen(ctx):
    return next(v for v in ("control", "priced", "unpriced") if f"[ab:{v}]" in ctx.message)


experiment = define_ab(
    "cost",
    variants={
        "control": {"label": "Scripted"},
        "priced": {"label": "Priced", "model": "openai:gpt-test"},
        "unpriced": {"label": "Unpriced", "model": "openai:house-model"},
    },
    split=split_if(lambda ctx: "[ab:" in ctx.message, then=chosen),
)
'''
# openai:gpt-test at $2 in and $8 out per million tokens: a turn of 100 tokens in and 10 out costs $0.00028.
TURN_COST = (100 * 2 + 10 * 8) / 1e6
PER_VARIANT = 3


@pytest.fixture
def openai_server(monkeypatch):
    yield from loopback_provider(monkeypatch, "openai")


@pytest.fixture
def cost_agent(db, tmp_path):
    agent = tmp_path / "costab" / "agent"
    (agent / "ab").mkdir(parents=True)
    (agent / "instructions.md").write_text("You help.\n")
    (agent / "agent.py").write_text('from agents.sdk import Agent\nagent = Agent(model="scripted:echo", tools=[])\n')
    (agent / "ab" / "cost.py").write_text(EXPERIMENT)
    return deploy_agent_folder(tmp_path / "costab").agent


def start(client, message: str) -> str:
    response = client.post("/costab/v1/session", json.dumps({"message": message}), content_type="application/json")
    assert response.status_code == 201, response.content
    return response.json()["sessionId"]


@transactional
def test_each_variants_mean_cost_and_an_unpriced_variants_cost_unknown(local, cost_agent, openai_server, sync_turns):
    ModelPrice.objects.create(model="openai:gpt-test", input_per_mtok=2, output_per_mtok=8,
                              effective_from=timezone.now() - timedelta(hours=1))
    openai_server.replies.extend(Reply(events=oa_text("fine", prompt=100, completion=10))
                                 for _ in range(2 * PER_VARIANT))
    for variant in ("control", "priced", "unpriced"):
        for _ in range(PER_VARIANT):
            start(local, f"[ab:{variant}] hello")

    costs = {}
    for row in ExperimentSample.objects.filter(agent="costab", experiment="cost"):
        costs.setdefault(row.variant, []).append(row.metrics["costUsd"])
    assert costs["control"] == [0.0] * PER_VARIANT  # the scripted model is free
    assert costs["priced"] == [pytest.approx(TURN_COST)] * PER_VARIANT
    assert costs["unpriced"] == [None] * PER_VARIANT  # unknown, not 0

    body = local.get("/costab/v1/abs/cost").json()
    assert "costUsd" in body["metrics"]
    by_id = {v["id"]: v for v in body["variants"]}
    control, priced, unpriced = (by_id[v] for v in ("control", "priced", "unpriced"))
    assert control["metrics"]["costUsd"] == {"n": PER_VARIANT, "mean": 0.0, "low": 0.0, "high": 0.0}
    assert (priced["metrics"]["costUsd"]["n"], priced["metrics"]["costUsd"]["mean"]) == (
        PER_VARIANT, pytest.approx(TURN_COST))
    assert priced["vsControl"]["costUsd"]["diff"] == pytest.approx(TURN_COST)
    assert unpriced["metrics"]["costUsd"] == {"n": 0, "mean": None, "low": None, "high": None}
    assert unpriced["vsControl"]["costUsd"]["diff"] is None
    assert unpriced["sessions"] == PER_VARIANT and unpriced["metrics"]["turns"]["n"] == PER_VARIANT
    assert [v["unpricedSamples"] for v in (control, priced, unpriced)] == [0, 0, PER_VARIANT]

    page = local.get("/playground/costab/abs/cost")
    assert page.status_code == 200, page.content
    html = page.content.decode()
    assert 'data-metric="costUsd"' in html and "mean 0.000280" in html
    assert ('<tr data-variant="unpriced"><td>unpriced</td><td>Unpriced</td><td>3</td>'
            '<td class="ab-unpriced">3</td>') in html


def test_a_turns_cost_is_known_only_when_every_call_had_a_price():
    tokens = {"inputTokens": 10, "outputTokens": 2, "cacheReadTokens": 0, "cacheWriteTokens": 0}
    assert turn_cost({**tokens, "costUsd": 0.25}) == 0.25
    assert turn_cost({**tokens, "costUsd": 0.0}) == 0.0
    assert turn_cost({**tokens, "costUsd": 0.25, "unpricedCalls": 1}) is None  # a lower bound, not the cost
    assert turn_cost({**tokens, "costUsd": None, "unpricedCalls": 2}) is None
    assert turn_cost(None) is None  # tokens never reported


@pytest.mark.django_db
def test_a_session_with_any_turn_of_unknown_cost_is_left_out_of_the_mean():
    def sample(variant: str, session: str, turn: str, **metrics) -> ExperimentSample:
        return ExperimentSample(agent="shop", experiment="tone", variant=variant, session_id=session,
                                turn_id=turn, metrics={"turns": 1, **metrics})

    ExperimentSample.objects.bulk_create([
        sample("control", "c1", "t1", costUsd=0.5),
        sample("control", "c1", "t2", costUsd=0.25),
        sample("control", "c2", "t3", costUsd=1.0),
        sample("control", "c2", "t4", costUsd=None),  # c2 is left out: its sum would understate it
        sample("control", "c3", "t5"),  # sampled before costs were recorded: unknown too
    ])
    [control] = results("shop", "tone", {"control": "Baseline"}, "control", ["turns", "costUsd"])
    assert control.sessions == 3 and control.metrics["turns"].n == 3
    assert (control.metrics["costUsd"].n, control.metrics["costUsd"].mean) == (1, 0.75)
    assert control.unpriced_samples == 2
