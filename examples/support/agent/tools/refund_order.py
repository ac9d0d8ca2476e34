from pydantic import BaseModel, Field

from agents.sdk import tool


class Input(BaseModel):
    order_id: str = Field(description="The order to refund", pattern=r"^[A-Z]\d{3}$", examples=["A100"])
    reason: str = Field(description="Why the customer wants a refund", max_length=500, examples=["arrived broken"])


@tool(
    description="Refund a delivered order in full.",
    effect="write",
    dry_run_result={"refunded": False, "dryRun": True},
)
def refund_order(input: Input, ctx) -> dict:
    return {"orderId": input.order_id, "refunded": True, "reason": input.reason, "at": ctx.now().isoformat()}
