"""An experiment's results on hand-computed samples: per-session values (sums, firstTokenMs a mean),
Student's t intervals per variant, Welch's interval for the difference from control."""
from __future__ import annotations

import math

import pytest

from sessions.experiments.results import estimate, results, t_quantile, welch
from sessions.models import ExperimentSample

METRICS = ["turns", "toolCalls", "firstTokenMs", "inputTokens"]


def sample(variant: str, session: str, turn: str, **metrics) -> ExperimentSample:
    return ExperimentSample(agent="shop", experiment="tone", variant=variant, session_id=session, turn_id=turn,
                            metrics=metrics)


@pytest.mark.parametrize(("df", "table"), [(1, 12.7062), (2, 4.3027), (3, 3.1824), (5, 2.5706), (10, 2.2281),
                                            (30, 2.0423), (120, 1.9799)])
def test_t_quantiles_match_the_table(df, table):
    assert t_quantile(df) == pytest.approx(table, abs=5e-4)


def test_a_variants_interval_is_students_t():
    # Values 2, 4, 6: mean 4, s = 2, t(0.975, 2) = 4.3027, half-width 4.3027 * 2 / sqrt(3) = 4.9683.
    e = estimate([2.0, 4.0, 6.0])
    assert (e.n, e.mean) == (3, 4.0)
    assert (e.low, e.high) == (pytest.approx(4 - 4.9683, abs=1e-3), pytest.approx(4 + 4.9683, abs=1e-3))
    assert estimate([5.0]) == estimate([5.0]).__class__(1, 5.0, None, None)


def test_the_difference_is_welchs():
    # Treatment 1, 2, 3 (mean 2, var 1); control 2, 4, 6, 8 (mean 5, var 20/3).
    # se = sqrt(1/3 + 20/12) = sqrt(2); df = 2^2 / ((1/3)^2/2 + (5/3)^2/3) = 4 / (1/18 + 25/27) = 4.0755.
    d = welch([1.0, 2.0, 3.0], [2.0, 4.0, 6.0, 8.0])
    assert d.diff == -3.0
    half = t_quantile(4 / (1 / 18 + 25 / 27)) * math.sqrt(2)
    # t(0.975, 4.0755) = 2.7563 by integrating the t density numerically; interpolating the table is within 0.1%.
    assert t_quantile(4.0755) == pytest.approx(2.7563, rel=1e-3)
    assert (d.low, d.high) == (pytest.approx(-3 - half), pytest.approx(-3 + half))


@pytest.mark.django_db
def test_results_aggregate_samples_per_session_before_the_statistics():
    ExperimentSample.objects.bulk_create([
        # Control: session c1 has two turns (2 and 1 tool calls, first tokens 100 and 300 ms); c2 and c3 one each.
        sample("control", "c1", "t1", turns=1, toolCalls=2, firstTokenMs=100, inputTokens=10),
        sample("control", "c1", "t2", turns=1, toolCalls=1, firstTokenMs=300, inputTokens=None),
        sample("control", "c2", "t3", turns=1, toolCalls=0, firstTokenMs=50, inputTokens=20),
        sample("control", "c3", "t4", turns=1, toolCalls=3, firstTokenMs=250, inputTokens=30),
        sample("terse", "s1", "t5", turns=1, toolCalls=1, firstTokenMs=90, inputTokens=5),
        sample("terse", "s2", "t6", turns=1, toolCalls=1, firstTokenMs=110, inputTokens=7),
        sample("terse", "s2", "t7", turns=1, toolCalls=2, firstTokenMs=None, inputTokens=9),
        ExperimentSample(agent="shop", experiment="other", variant="control", session_id="x", turn_id="t8",
                         metrics={"turns": 1}),
    ])
    control, terse = results("shop", "tone", {"control": "Baseline", "terse": "Terse"}, "control", METRICS)
    assert (control.sessions, terse.sessions) == (3, 2)
    # Per session: control toolCalls 3, 0, 3; turns 2, 1, 1; firstTokenMs means 200, 50, 250; tokens 10, 20, 30.
    assert control.metrics["toolCalls"].mean == 2.0
    assert control.metrics["turns"].mean == pytest.approx(4 / 3)
    assert control.metrics["firstTokenMs"].mean == pytest.approx(500 / 3)
    assert control.metrics["inputTokens"].mean == 20.0  # the unknown count adds nothing
    # Terse: toolCalls 1, 3 (mean 2, s = sqrt(2)); firstTokenMs 90, 110 (s2's unknown second turn left out).
    assert terse.metrics["toolCalls"].mean == 2.0
    half = 12.7062 * math.sqrt(2) / math.sqrt(2)
    assert terse.metrics["toolCalls"].high == pytest.approx(2 + half, abs=1e-3)
    assert terse.metrics["firstTokenMs"].mean == 100.0
    assert terse.vs_control["toolCalls"] == welch([1.0, 3.0], [3.0, 0.0, 3.0])
    assert terse.vs_control["inputTokens"].diff == pytest.approx(-9.5)  # (5 + 16) / 2 - 20
    assert control.vs_control == {}
