from agents.sdk import Agent

agent = Agent(description="Writes short incident summaries for people who were not there.")
