from agents.sdk import Agent

agent = Agent(
    name="Ops desk",
    description="Watches the shop's services, follows runbooks and sets reminders.",
    reminders_tool=True,
    # Services are checked through agent/tools/ only: no workspace files, no shell.
    tools=[],
)
