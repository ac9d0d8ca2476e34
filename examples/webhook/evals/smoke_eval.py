from agents.sdk import includes


def test(t):
    """A message is answered, and a follow-up continues the same conversation."""
    t.send("hello inbox")
    t.succeeded()
    t.check(t.reply, includes("hello inbox"))
    t.send("/reply second")
    t.succeeded()
    t.check(t.reply, includes("second"))
