from agents.sdk import includes


def test(t):
    """Over HTTP the reviewer answers without tools of its own."""
    t.send("/tools")
    t.succeeded()
    t.not_called_tool("shell")
    t.check(t.reply, includes("Tools:"))
