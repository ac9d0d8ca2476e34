"""What turns spend on models, and the budgets that bound it (docs/costs-and-budgets.md).

`budgets`: which budgets a turn is under and how much of each is spent, read from
the ledger (`sessions.models.Spend`); `meter`: a turn's model calls charged to the
ledger, in the turn's settle transaction, or as each call ends when a budget applies.
"""
