from pydantic import BaseModel, Field

from agents.sdk import tool


class Input(BaseModel):
    order_id: str = Field(description="The order to cancel", pattern=r"^[A-Z]\d{3}$", examples=["A102"])


@tool(
    description="Cancel an order that has not shipped yet. A person must approve each cancellation.",
    effect="write",
    needs_approval=True,
    dry_run_result={"cancelled": False, "dryRun": True},
)
def cancel_order(input: Input, ctx) -> dict:
    return {"orderId": input.order_id, "cancelled": True, "at": ctx.now().isoformat()}
