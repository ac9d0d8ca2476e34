from agents.sdk import includes


def test(t):
    """A refund goes through refund_order with the customer's reason."""
    t.send('My teapot arrived broken\n/call refund_order {"order_id": "A100", "reason": "arrived broken"}')
    t.succeeded()
    t.called_tool("refund_order")
    t.not_called_tool("cancel_order")
    t.check(t.reply, includes('"refunded": true'))
