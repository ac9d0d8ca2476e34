"""What an eval run reports a case and the run cost, from the usage on the events the runner followed:
each ended turn's, a parked turn's steps', known costs summed and unpriced calls counted apart."""
from __future__ import annotations

import io
import json
from pathlib import Path

import jsonschema

from agents.evals.costs import Cost, total
from agents.evals.reports import print_table, run_json
from agents.evals.runner import CaseResult

TOKENS = {"inputTokens": 100, "outputTokens": 10, "cacheReadTokens": 0, "cacheWriteTokens": 0}


def event(kind: str, turn: str, usage: dict | None) -> dict:
    return {"type": kind, "turnId": turn, "data": {"usage": usage}}


def test_a_case_costs_its_ended_turns_and_its_parked_turns_steps():
    events = [
        event("step.completed", "t1", {**TOKENS, "costUsd": 0.25}),
        event("turn.completed", "t1", {**TOKENS, "costUsd": 0.25}),  # the step again: counted once
        event("step.completed", "t2", {**TOKENS, "costUsd": 0.5}),
        event("step.completed", "t2", {**TOKENS, "costUsd": None, "unpricedCalls": 1}),
        event("action.approval_requested", "t2", None),  # parked when the case ended
    ]
    assert Cost.of_events(events) == Cost(0.75, 1)
    assert Cost.of_events([event("turn.completed", "t1", {**TOKENS, "costUsd": 0.0})]) == Cost(0.0, 0)


def test_unknown_stays_unknown_never_zero():
    unpriced = event("turn.completed", "t1", {**TOKENS, "costUsd": None, "unpricedCalls": 2})
    assert Cost.of_events([unpriced]) == Cost(None, 2)
    assert Cost.of_events([event("turn.failed", "t1", None)]) == Cost(None, 0)  # tokens never reported
    assert Cost.of_events([]) == Cost(None, 0)  # nothing ended: nothing known
    assert total([Cost(None, 2), Cost(0.1, 0), Cost(0.2, 1)]) == Cost(0.3, 3)
    assert total([Cost(None, 1), Cost(None, 0)]) == Cost(None, 1)


def results() -> list[CaseResult]:
    return [CaseResult(id="a/free", tags=(), passed=True, duration=0.1, cost=Cost(0.0)),
            CaseResult(id="a/priced", tags=(), passed=True, duration=0.1, cost=Cost(0.00028)),
            CaseResult(id="a/unpriced", tags=(), passed=False, duration=0.1, gate="succeeded", message="no",
                       cost=Cost(None, 1))]


def test_the_json_report_gives_each_cases_cost_and_the_runs_total():
    report = run_json(results(), 0.3, links=False)
    assert [(c["costUsd"], c["unpricedCalls"]) for c in report["cases"]] == [(0.0, 0), (0.00028, 0), (None, 1)]
    assert report["totals"] == {"costUsd": 0.00028, "unpricedCalls": 1}
    jsonschema.validate(report, json.loads((Path(__file__).parent / "run_schema.json").read_text()))


def test_the_tables_summary_line_says_the_total():
    out = io.StringIO()
    print_table(results(), 0.3, out, links=False)
    assert "2 passed, 1 failed in 0.3 s, $0.000280 (1 call without a price)" in out.getvalue()
    out = io.StringIO()
    print_table(results()[2:], 0.3, out, links=False)
    assert "0 passed, 1 failed in 0.3 s, cost unknown (1 call without a price)" in out.getvalue()
    out = io.StringIO()
    print_table(results()[:1], 0.3, out, links=False)
    assert "1 passed, 0 failed in 0.3 s, $0.00" in out.getvalue()
