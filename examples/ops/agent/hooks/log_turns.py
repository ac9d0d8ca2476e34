import logging

from agents.sdk import hook

log = logging.getLogger("agentsite.examples.ops")


@hook("turn.completed", "turn.failed")
def log_turn(event: dict) -> None:
    log.info("ops turn %s ended with %s", event["turnId"], event["type"])
