"""An agent's secrets: the keys they are encrypted with (`keys`), and how code reads a credential (`lookup`).

The rows are `agents.models.Secret`.
"""
