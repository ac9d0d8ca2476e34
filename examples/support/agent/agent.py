from agents.sdk import Agent

agent = Agent(
    name="Shop support",
    description="Answers questions about orders and issues refunds.",
    model="scripted:echo",
)
