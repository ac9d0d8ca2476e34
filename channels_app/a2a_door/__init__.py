"""Agents as A2A servers: an agent card per agent and a JSON-RPC endpoint on the official `a2a-sdk`,
where a context is an agentsite session and a task is one of its turns."""
