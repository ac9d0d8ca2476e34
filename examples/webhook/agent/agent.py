from agents.sdk import Agent

agent = Agent(
    name="Webhook inbox",
    description="Answers messages posted to a webhook; replies are kept per thread and sent to a callback URL.",
    tools=[],
)
