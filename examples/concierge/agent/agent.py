from agents.sdk import Agent

# `peers`: the agents this one may message, and no other. With peers it gets the
# built-in tools list_agents, send_message and read_notifications.

agent = Agent(
    name="Concierge",
    description="Greets visitors and answers their questions, asking the librarian about books.",
    peers=["librarian"],
    # No workspace: no files, no shell.
    tools=[],
)
