"""Moving a live session from one model to another: reviewed first, all-or-nothing.

`review` says what a handoff would keep, lose and change (read-only);
`materialize` re-makes the transcript for the target; `perform` does it
under the session's lock or leaves the session exactly as it was; `abandon`
is the recovery sweep's part for a handoff whose process died.
"""
from agents.providers.transcript import materialize
from sessions.handoff.perform import abandon, confirm, perform
from sessions.handoff.review import ready_models, review

__all__ = ["abandon", "confirm", "materialize", "perform", "ready_models", "review"]
