"""Text and numbers a database cannot store, coming from the model or from a tool.

A model's tool input holding NUL, a lone surrogate or NaN is refused like
any invalid input: the model gets the reason in the call's result and the
turn goes on. A tool's output holding them is stored cleaned. (These run on
SQLite, which can store NUL; the live fuzz test covers PostgreSQL.)
"""
from __future__ import annotations

import json

import pytest

from agents.discovery import deploy_agent_folder
from sessions.eventlog.events import read_events
from sessions.models import Session, ToolCall
from sessions.eventlog.storable import clean, find_problem
from tests.sessions.test_schedules import write_agent

transactional = pytest.mark.django_db(transaction=True)

DIRTY_TOOL = """
from pydantic import BaseModel
from agents.sdk import tool

class Input(BaseModel):
    pass

@tool(description="Returns text no database stores as is.", effect="read")
def dirty(input: Input, ctx) -> dict:
    return {"text": "a\\x00b\\ud800c", "ratio": float("nan"), "keys": {"k\\x00": float("inf")}}
"""


def post_json(client, path: str, body) -> object:
    return client.post(path, json.dumps(body), content_type="application/json")


def of_type(session_id: str, type_: str) -> list[dict]:
    return [e["data"] for e in read_events(session_id) if e["type"] == type_]


@transactional
def test_tool_input_with_nul_a_lone_surrogate_or_nan_is_refused_and_the_turn_completes(local, support_agent, sync_turns):
    message = "\n".join([
        '/call refund_order {"order_id": "A100", "reason": "lid \\u0000"}',
        '/call refund_order {"order_id": "A100", "reason": "lid \\ud800"}',
        '/call lookup_order {"order_id": "A100", "n": NaN}',
        '/call lookup_order {"order_id": "A101"}',
    ])
    response = post_json(local, "/support/v1/session", {"message": message})
    assert response.status_code == 201, response.content
    session_id = response.json()["sessionId"]

    [requested] = of_type(session_id, "actions.requested")
    assert [c["input"] for c in requested["calls"]] == [
        {"order_id": "A100", "reason": "lid \ufffd"}, {"order_id": "A100", "reason": "lid \ufffd"},
        {"order_id": "A100", "n": "nan"}, {"order_id": "A101"},
    ]
    results = of_type(session_id, "action.result")
    retry = "; retry with valid Unicode text and finite numbers"
    assert [r.get("error") for r in results[:3]] == [
        "invalid input: input.reason holds a NUL character (U+0000)" + retry,
        "invalid input: input.reason holds a lone surrogate (U+D800), which is not valid Unicode" + retry,
        "invalid input: input.n is not a finite number" + retry,
    ]
    assert results[3]["output"]["status"] == "shipped", "a good call in the same step still runs"
    assert [e["type"] for e in read_events(session_id)][-2:] == ["turn.completed", "session.waiting"]
    assert list(ToolCall.objects.filter(session_id=session_id).order_by("id").values_list("status", flat=True)) == [
        "failed", "failed", "failed", "done"]

    token = response.json()["continuationToken"]
    follow = post_json(local, f"/support/v1/session/{session_id}/message", {"message": "thanks", "continuationToken": token})
    assert follow.status_code == 202, follow.content
    assert of_type(session_id, "message.completed")[-1]["text"] == "You said: thanks"
    assert Session.objects.get(pk=session_id).status == "waiting"


@transactional
def test_a_tool_output_the_databases_cannot_store_is_stored_cleaned(local, tmp_path, sync_turns):
    deploy_agent_folder(write_agent(tmp_path / "dirty", {"agent/tools/dirty.py": DIRTY_TOOL}))

    response = post_json(local, "/dirty/v1/session", {"message": "/call dirty {}"})

    session_id = response.json()["sessionId"]
    [result] = of_type(session_id, "action.result")
    assert result["output"] == {"text": "a\ufffdb\ufffdc", "ratio": "nan", "keys": {"k\ufffd": "inf"}}
    assert [e["type"] for e in read_events(session_id)][-2:] == ["turn.completed", "session.waiting"]


def test_values_nested_deeper_than_the_recursion_limit_are_walked_without_recursion():
    deep: list = ["a\x00"]
    for _ in range(100_000):
        deep = [deep]

    assert find_problem(deep, "input") == ("input" + "[0]" * 100_001, "holds a NUL character (U+0000)")
    cleaned = clean(deep)
    for _ in range(100_000):
        cleaned = cleaned[0]
    assert cleaned == ["a\ufffd"]


def test_valid_text_and_numbers_pass_unchanged():
    value = {"emoji": "😀", "accents": "é", "n": 1.5, "big": 10**40, "list": [None, True, "ok"], "tab": "a\tb"}

    assert find_problem(value) is None
    assert clean(value) == value
