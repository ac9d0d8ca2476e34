"""Agents that message each other: `list_agents`, `send_message` and `read_notifications`,
built-in tools offered to an agent that declares `Agent(peers=[...])`.

- `tools`: the three tools, bound to the agent's peers (its allowlist: fail closed);
- `delivery`: a message into the target agent's conversation, as a turn of its own;
- `limits`: the loop guards (hops in a row between agents, messages per conversation);
- `turns`: what the engine records for a turn a message started (its sender, its reply).

Nothing here is imported by this package's `__init__`: the engine imports only `turns`.
"""
