from agents.sdk import Agent

# No model named: the server's default (scripted:echo unless a provider key is set).

agent = Agent(
    name="Shop support",
    description="Answers questions about orders and issues refunds.",
    # Orders are reached through the tools in agent/tools/ only: no workspace files, no shell.
    tools=[],
)
