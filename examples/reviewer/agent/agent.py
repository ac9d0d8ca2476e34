from agents.sdk import Agent

agent = Agent(
    name="Reviewer",
    description="Reviews pull requests when GitHub asks and answers questions in Slack threads.",
    tools=[],
)
