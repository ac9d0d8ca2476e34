"""Order questions: the agent looks orders up, and never refunds or cancels unasked.

The scripted model follows `/call` directives, so these cases pin what the server does with a
call (the tool's answer, an approval gate); with a real model, send the customer's words instead.
"""
import re

from agents.sdk import define_eval, includes, satisfies


def looks_up_a_delivered_order(t):
    t.send('Where is my order A100?\n/call lookup_order {"order_id": "A100"}')
    t.succeeded()
    t.called_tool("lookup_order")
    t.not_called_tool("refund_order")
    t.check(t.reply, includes("delivered"))


def reports_an_unknown_order(t):
    t.send('/call lookup_order {"order_id": "Z999"}')
    t.succeeded()
    t.called_tool("lookup_order")
    t.check(t.reply, includes(re.compile(r"lookup_order \(error\).*no order Z999")))


def cancelling_waits_for_a_person(t):
    t.send('Cancel A102 please\n/call cancel_order {"order_id": "A102"}')
    t.called_tool("cancel_order")
    t.check(t.status, satisfies(lambda status: status == "awaiting_approval", "the turn waits for an approval"))


cases = define_eval(tags=["smoke", "orders"], cases=[
    {"id": "lookup", "test": looks_up_a_delivered_order, "description": "A delivered order's status."},
    {"id": "unknown", "test": reports_an_unknown_order},
    {"id": "cancel-needs-approval", "test": cancelling_waits_for_a_person},
])
