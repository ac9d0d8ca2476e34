from agents.sdk import Agent

# No peers: the librarian messages nobody. Its answer to a message is its reply,
# which the sender collects with read_notifications.

agent = Agent(
    name="Librarian",
    description="Knows which books the library holds, where they are shelved and whether they are on loan.",
    tools=[],
)
