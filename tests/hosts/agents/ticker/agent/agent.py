from agents.sdk import Agent

agent = Agent(
    name="Ticker",
    description="A schedule every minute, for the several-hosts tests.",
    model="scripted:echo",
    tools=[],
)
