"""Evals: cases in a project's `evals/` that send fixed input to an agent and gate on its trajectory.

Needs no Django: `agents.sdk` re-exports what eval files use, and the runner speaks HTTP.
"""
