"""`manage.py eval --url` against a live server: passing and failing suites, the reports, selection,
concurrency, the purpose in /metrics, and a captured session run as a case."""
from __future__ import annotations

import json
import re
import time
from datetime import datetime, timezone
from pathlib import Path

import jsonschema
import pytest
from django.contrib.auth.models import User
from lxml import etree

from agents.pricing.model import ModelPrice
from sessions.models import PersonalToken
from tests.command_line import run_command_line
from tests.evals.projects import PRICED_MODEL, SLEEP_CASES, SLEEP_CONCURRENCY, make_projects, manage
from tests.server_database import on_server_database
from tests.support import ROOT, read_stream_until, run_server

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
RUN_SCHEMA = json.loads((HERE / "run_schema.json").read_text())


def eval_json(*args: str) -> tuple[int, dict]:
    """`manage.py eval ... --json` in this process: with --url the command is only an HTTP client of the server.
    The table's test runs it in a real process."""
    code, out, err = run_command_line("eval", *args, "--json")
    try:
        return code, json.loads(out)
    except json.JSONDecodeError:
        raise AssertionError(f"not JSON (exit {code}):\n{out}\n{err}") from None


@pytest.fixture(scope="module")
def projects(tmp_path_factory):
    return make_projects(tmp_path_factory.mktemp("projects"))


# The example agents whose evals run here; support's run here and on the command's own server
# (tests/evals/test_eval_ephemeral.py).
EXAMPLES = ("notes", "ops", "reviewer", "webhook")


@pytest.fixture(scope="module")
def server(projects, tmp_path_factory, django_db_blocker):
    # No schedules: the ops example's hourly one would start sessions of another purpose.
    examples = [str(ROOT / "examples" / name) for name in ("support", *EXAMPLES)]
    with run_server(tmp_path_factory.mktemp("state"), "--no-examples", "--no-schedules", "--workers",
                    str(SLEEP_CONCURRENCY), "--agents", *examples,
                    *(str(projects[name]) for name in ("shop", "sleepy", "priced"))) as running:
        # Before any turn: a process reads the operators' prices once for a while (agents.pricing.overrides).
        with on_server_database(running.state_root, django_db_blocker):
            ModelPrice.objects.create(model=PRICED_MODEL, input_per_mtok=2, output_per_mtok=8,
                                      effective_from=datetime(2020, 1, 1, tzinfo=timezone.utc))
        yield running


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_example_agents_evals_pass(server, example):
    code, report = eval_json(str(ROOT / "examples" / example), "--url", server.base_url)
    assert code == 0, report
    assert report["passed"] and report["total"] >= 1


def test_a_passing_suite_exits_zero_with_json_and_junit_reports(server, tmp_path):
    junit = tmp_path / "report.xml"
    code, report = eval_json(str(ROOT / "examples" / "support"), "--url", server.base_url, "--junit", str(junit))
    jsonschema.validate(report, RUN_SCHEMA)
    assert code == 0 and report["passed"] and report["failed"] == 0
    assert [c["id"] for c in report["cases"]] == [
        "orders/cancel-needs-approval", "orders/lookup", "orders/unknown", "refund"]
    assert report["cases"][1]["toolCalls"] == ["lookup_order"] and report["cases"][1]["tags"] == ["smoke", "orders"]
    # The scripted model is free: every case costs 0, the one left waiting for an approval too.
    assert [(c["costUsd"], c["unpricedCalls"]) for c in report["cases"]] == [(0.0, 0)] * 4
    assert report["totals"] == {"costUsd": 0.0, "unpricedCalls": 0}
    schema = etree.XMLSchema(etree.parse(str(HERE / "junit.xsd")))
    document = etree.parse(str(junit))
    schema.assertValid(document)
    assert document.getroot().get("tests") == "4" and document.getroot().get("failures") == "0"


def test_each_gate_kind_fails_once_with_a_readable_message(server, projects, tmp_path):
    junit = tmp_path / "report.xml"
    code, report = eval_json(str(projects["shop"]), "--url", server.base_url, "--junit", str(junit))
    jsonschema.validate(report, RUN_SCHEMA)
    assert code == 1 and report["total"] == 7 and report["failed"] == 6
    by_id = {c["id"].removeprefix("gates/"): c for c in report["cases"]}
    assert by_id["fine"]["passed"] and by_id["fine"]["gate"] is None
    gates = {name: (c["gate"]["kind"], c["gate"]["message"]) for name, c in by_id.items() if not c["passed"]}
    assert gates == {
        "succeeded": ("succeeded", "the turn did not complete, it is failed: scripted_failure the model is down"),
        "called-tool": ("called_tool", "refund_order was not called (calls: lookup_order)"),
        "not-called-tool": ("not_called_tool", "refund_order was called, and must not be"),
        "includes": ("check", "'all good' does not satisfy: includes /order [A-Z]\\d{3}/"),
        "satisfies": ("check", "'short' does not satisfy: satisfies longer than 20 characters"),
        "error": ("error", gates["error"][1]),
    }
    assert gates["error"][1].startswith("KeyError: 'missing' (") and "gates_eval.py:" in gates["error"][1]
    failed = by_id["called-tool"]
    assert failed["playgroundUrl"] == f"{server.base_url}/playground/shop?sessionId={failed['sessionId']}"
    with server.client() as client:
        assert client.get(failed["playgroundUrl"]).status_code == 200
    schema = etree.XMLSchema(etree.parse(str(HERE / "junit.xsd")))
    document = etree.parse(str(junit))
    schema.assertValid(document)
    assert document.xpath("//testcase[@name='called-tool']/failure/@type") == ["called_tool"]
    assert document.xpath("//testcase[@name='called-tool']/failure/text()") == ['lookup_order({\'order_id\': \'A100\'})']
    assert document.xpath("//testcase[@name='error']/error/@type") == ["error"]


def test_the_table_shows_each_failure_with_its_trajectory(server, projects):
    done = manage("eval", str(projects["shop"]), "gates/called-tool", "--url", server.base_url)
    assert done.returncode == 1
    assert "refund_order was not called (calls: lookup_order)" in done.stdout
    assert "lookup_order({'order_id': 'A100'})" in done.stdout
    assert f"{server.base_url}/playground/shop?sessionId=ses_" in done.stdout
    assert "0 passed, 1 failed" in done.stdout


def test_a_case_on_a_priced_model_costs_what_its_usage_says(server, projects):
    code, report = eval_json(str(projects["priced"]), "--url", server.base_url)
    assert code == 0, report
    [case] = report["cases"]
    with server.client() as client:
        usage = client.get(f"/priced/v1/session/{case['sessionId']}").json()["usage"]
    assert usage["inputTokens"] > 0 and usage["outputTokens"] > 0
    expected = (usage["inputTokens"] * 2 + usage["outputTokens"] * 8) / 1e6  # both turns, at $2 in and $8 out
    assert case["costUsd"] == pytest.approx(expected) and case["costUsd"] == pytest.approx(usage["costUsd"])
    assert report["totals"] == {"costUsd": case["costUsd"], "unpricedCalls": 0}
    done = manage("eval", str(projects["priced"]), "--url", server.base_url)
    assert done.returncode == 0 and "1 passed, 0 failed in" in done.stdout
    assert case["costUsd"] < 0.01 and f" s, ${case['costUsd']:.6f}" in done.stdout  # a sub-cent amount, in full


def test_tags_and_case_ids_select_the_cases_run(server, projects):
    code, report = eval_json(str(projects["shop"]), "--url", server.base_url, "--tag", "fine")
    assert code == 0 and [c["id"] for c in report["cases"]] == ["gates/fine"]
    code, report = eval_json(str(projects["shop"]), "gates/fine", "gates/includes", "--url", server.base_url)
    assert code == 1 and [c["id"] for c in report["cases"]] == ["gates/fine", "gates/includes"]
    code, listed, _ = run_command_line("eval", str(projects["shop"]), "--list", "--tag", "gates")
    assert code == 0 and listed.splitlines()[0] == "gates/called-tool  [gates]"
    assert run_command_line("eval", str(projects["shop"]), "--list", "--tag", "nothing")[0] != 0


def overlap(intervals: list[tuple[datetime, datetime]]) -> int:
    """The most intervals open at one instant."""
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def test_cases_run_concurrently_up_to_the_limit(server, projects):
    started = time.monotonic()
    code, report = eval_json(str(projects["sleepy"]), "--url", server.base_url)
    elapsed = time.monotonic() - started
    assert code == 0, report
    ideal = SLEEP_CASES / SLEEP_CONCURRENCY  # seconds: each case sleeps one
    assert ideal <= report["durationSeconds"] < ideal + 1.5, report["durationSeconds"]
    intervals = []
    with server.client() as client:
        for case in report["cases"]:
            lines = client.get(f"/sleepy/v1/session/{case['sessionId']}/events").text.splitlines()
            at = {e["type"]: datetime.fromisoformat(e["at"].replace("Z", "+00:00"))
                  for e in map(json.loads, lines)}
            intervals.append((at["turn.started"], at["turn.completed"]))
    assert overlap(intervals) == SLEEP_CONCURRENCY
    print(f"{SLEEP_CASES} one-second cases at concurrency {SLEEP_CONCURRENCY}: {report['durationSeconds']:.2f} s "
          f"run, {elapsed:.2f} s with the command's start")


def scrape(server, name: str, **labels: str) -> float:
    with server.client() as client:
        text = client.get("/metrics").text
    total = 0.0
    for line in text.splitlines():
        match = re.match(rf"^{name}\{{(.*)\}} ([0-9.e+]+)$", line)
        if match and all(f'{k}="{v}"' in match.group(1).split(",") for k, v in labels.items()):
            total += float(match.group(2))
    return total


def test_eval_sessions_carry_their_purpose_in_metrics(server, projects):
    code, _ = eval_json(str(projects["shop"]), "gates/fine", "--url", server.base_url)
    assert code == 0
    with server.client() as client:
        created = client.post("/shop/v1/session", json={"message": "/reply plain"}).json()
        read_stream_until(client, created["streamUrl"], "turn.completed")
    assert scrape(server, "agentsite_sessions_total", agent="shop", purpose="eval") >= 1
    assert scrape(server, "agentsite_sessions_total", agent="shop", purpose="live") >= 1
    assert scrape(server, "agentsite_turns_total", agent="shop", purpose="eval", status="completed") >= 1
    assert scrape(server, "agentsite_turns_total", agent="shop", purpose="live", status="completed") >= 1
    for name in ("agentsite_turn_duration_seconds_count", "agentsite_model_first_token_seconds_count",
                 "agentsite_tokens_total"):
        assert scrape(server, name, agent="shop", purpose="eval") >= 1, name
    with server.client() as client:
        purposes = set(re.findall(r'purpose="([^"]*)"', client.get("/metrics").text))
    assert purposes == {"eval", "live"}


def test_a_captured_session_is_a_case_that_passes(server, tmp_path, django_db_blocker):
    with server.client() as client:
        created = client.post("/shop/v1/session", json={
            "message": 'Where is A102?\n/call lookup_order {"order_id": "A102"}',
            "workspaceFiles": [{"path": "notes.txt", "content": "customer is in a hurry"}]}).json()
        read_stream_until(client, created["streamUrl"], "turn.completed")
        downloaded = client.get(f"/playground/shop/session/{created['sessionId']}/eval-case")
    project = tmp_path / "captured"
    out = project / "evals" / "where_eval.py"
    with on_server_database(server.state_root, django_db_blocker):
        code, _, err = run_command_line("eval_capture", created["sessionId"], "--out", str(out))
    assert code == 0, err
    text = out.read_text()
    assert downloaded.status_code == 200 and downloaded.text == text
    assert downloaded.headers["Content-Disposition"].endswith('_eval.py"')
    assert "t.called_tool('lookup_order')" in text and "t.succeeded()" in text and "customer is in a hurry" in text
    code, report = eval_json(str(project), "--agent", "shop", "--url", server.base_url)
    assert code == 0 and [c["id"] for c in report["cases"]] == ["where"]
    assert report["cases"][0]["toolCalls"] == ["lookup_order"]
    with on_server_database(server.state_root, django_db_blocker):
        code, _, err = run_command_line("eval_capture", created["sessionId"], "--out", str(out))
    assert code != 0 and "exists" in err


def operator_and_member_tokens(server, db_blocker) -> tuple[str, str]:
    """Personal tokens in the server's database: an operator's (staff) and a member's.

    Made by this process: `createtoken` itself is tested in tests/sessions/test_personal_token.py.
    """
    with on_server_database(server.state_root, db_blocker):
        ada = User.objects.create_superuser("ada", "ada@example.com", "pw-0123456789")
        bert = User.objects.create_user("bert", password="pw")
        return PersonalToken.issue(ada, "evals")[1], PersonalToken.issue(bert, "evals")[1]


def test_a_token_must_be_an_operators(server, projects, django_db_blocker):
    staff, member = operator_and_member_tokens(server, django_db_blocker)
    code, report = eval_json(str(projects["shop"]), "gates/fine", "--url", server.base_url, "--token", staff)
    assert code == 0 and report["passed"]
    code, report = eval_json(str(projects["shop"]), "gates/fine", "--url", server.base_url, "--token", member)
    assert code == 1 and report["cases"][0]["gate"]["kind"] == "error"
    assert "403" in report["cases"][0]["gate"]["message"] and "purpose_refused" in report["cases"][0]["gate"]["message"]
