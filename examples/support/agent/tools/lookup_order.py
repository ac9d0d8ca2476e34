from pydantic import BaseModel, Field

from agents.sdk import tool

ORDERS = {
    "A100": {"status": "delivered", "items": ["teapot"], "total": 34.5},
    "A101": {"status": "shipped", "items": ["mug", "mug"], "total": 18.0},
    "A102": {"status": "processing", "items": ["kettle"], "total": 59.9},
}


class Input(BaseModel):
    order_id: str = Field(description="The order id, e.g. A100", pattern=r"^[A-Z]\d{3}$", examples=["A100"])


@tool(description="Look up an order's status, items and total by its id.", effect="read")
def lookup_order(input: Input, ctx) -> dict:
    order = ORDERS.get(input.order_id)
    if order is None:
        raise LookupError(f"no order {input.order_id}")
    return {"orderId": input.order_id, **order}
