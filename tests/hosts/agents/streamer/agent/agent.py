from agents.sdk import Agent

# Replies stream in small pieces, 30 ms apart: a turn lasts long enough to be
# interrupted, or to lose its host, while it streams.
agent = Agent(
    name="Streamer",
    description="Echoes slowly, for the several-hosts tests.",
    model="scripted:echo",
    params={"chunk_delay_ms": 30},
    tools=[],
)
