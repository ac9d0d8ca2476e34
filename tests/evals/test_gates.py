"""Each gate of `t` against a conversation played back: what passes, and the message of what fails."""
from __future__ import annotations

import re

import pytest

from agents.evals.trial import Trial
from agents.sdk import GateFailed, includes, satisfies


class PlayedBack:
    session_id = "ses_test"
    playground_url = None

    def __init__(self, *turns: list[dict]):
        self.turns = list(turns)
        self.sent: list[tuple[str, list]] = []

    def send(self, message, files):
        self.sent.append((message, files))
        return self.turns.pop(0)


def event(kind: str, **data) -> dict:
    return {"type": kind, "turnId": "turn_1", "index": 0, "data": data}


COMPLETED = [
    event("actions.requested", calls=[{"callId": "c1", "toolName": "lookup_order", "input": {"order_id": "A100"}}]),
    event("message.completed", text="Order A100 was delivered."),
    event("turn.completed"),
]
FAILED = [event("turn.failed", code="provider_error", error="model down")]


def failure(check) -> GateFailed:
    with pytest.raises(GateFailed) as caught:
        check()
    return caught.value


def test_a_completed_turn_passes_its_gates():
    t = Trial(PlayedBack(COMPLETED))
    assert t.send("where is A100?", workspace_files={"a.txt": "x", "b.bin": b"\0"}) == "Order A100 was delivered."
    t.succeeded()
    t.called_tool("lookup_order")
    t.not_called_tool("refund_order")
    t.check(t.reply, includes("delivered") | includes("shipped"))
    t.check(t.reply, includes(re.compile(r"A\d{3}")) & satisfies(lambda r: len(r) < 100))
    t.metric("reply_length", len(t.reply))
    assert t.metrics == {"reply_length": 25.0}
    assert t._conversation.sent[0][1] == [{"path": "a.txt", "content": "x"},
                                          {"path": "b.bin", "content": "AA==", "encoding": "base64"}]


def test_each_gate_fails_with_a_readable_message():
    t = Trial(PlayedBack(FAILED))
    assert failure(t.succeeded).message == "nothing was sent: call t.send(...) first"
    t.send("hi")
    gate = failure(t.succeeded)
    assert (gate.gate, gate.message) == ("succeeded", "the turn did not complete, it is failed: provider_error model down")
    t = Trial(PlayedBack(COMPLETED))
    t.send("hi")
    gate = failure(lambda: t.called_tool("refund_order"))
    assert (gate.gate, gate.message) == ("called_tool", "refund_order was not called (calls: lookup_order)")
    gate = failure(lambda: t.not_called_tool("lookup_order"))
    assert (gate.gate, gate.message) == ("not_called_tool", "lookup_order was called, and must not be")
    gate = failure(lambda: t.check(t.reply, includes("refunded")))
    assert (gate.gate, gate.message) == ("check", "'Order A100 was delivered.' does not satisfy: includes 'refunded'")
    gate = failure(lambda: t.check(t.reply, satisfies(str.isupper, "all capitals")))
    assert gate.message == "'Order A100 was delivered.' does not satisfy: satisfies all capitals"


def test_a_parked_turn_is_not_a_success():
    t = Trial(PlayedBack([event("actions.requested", calls=[{"toolName": "cancel_order"}]),
                          event("action.approval_requested", callId="c1")]))
    t.send("cancel")
    assert t.status == "awaiting_approval"
    assert failure(t.succeeded).message == "the turn did not complete, it is awaiting_approval"
