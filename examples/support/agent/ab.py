"""An A/B experiment: do briefer replies change how support conversations go?

Only sessions whose first message carries `#beta` take part (testers opt in),
and of those 10% are held out; the rest split evenly between the agent as it
is (control) and briefer instructions. Results: GET /support/v1/abs/brief-replies
and the playground's A/B page.
"""
import logging
from pathlib import Path

from agents.sdk import define_ab, split_by_session_hash, split_if

INSTRUCTIONS = Path(__file__).with_name("instructions.md").read_text(encoding="utf-8")
log = logging.getLogger("support.ab")


def refunds(event):
    """Refunds issued: a derived metric counted from the turn's events."""
    return 1 if event.type == "action.result" and event.data.get("toolName") == "refund_order" else None


def report(sample):
    log.info("ab %s %s turn=%s toolCalls=%s wallTimeMs=%s refunds=%s", sample.experiment, sample.variant,
             sample.turn_id, sample.metrics["toolCalls"], sample.metrics["wallTimeMs"], sample.metrics["refunds"])


experiment = define_ab(
    "brief-replies",
    variants={
        "control": {"label": "As written"},
        "brief": {"label": "Two sentences at most",
                  "instructions": INSTRUCTIONS + "\nKeep every reply to two sentences at most.\n"},
    },
    split=split_if(lambda session: "#beta" in session.message, then=split_by_session_hash(holdout=0.1)),
    derive={"refunds": refunds},
    on_sample=report,
)
