from agents.sdk import Schedule


def run(ctx):
    """Every hour: look at payments, and open a conversation only if it is not ok."""
    status = ctx.call_tool("check_service", {"service": "payments"})
    if status["status"] != "ok":
        ctx.receive(f"payments is {status['status']}: follow the incident checklist", title="payments watch")


schedule = Schedule(cron="0 * * * *", run=run, title="Payments watch")
