"""Agents defined by data (the console's, `POST /v1/agents`): a spec (`spec`), written as an agent
folder (`folder`) and deployed as a release like any folder (`saving`)."""
