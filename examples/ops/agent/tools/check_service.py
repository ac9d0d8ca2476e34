from typing import Literal

from pydantic import BaseModel, Field

from agents.sdk import tool

STATUS = {"web": "ok", "payments": "degraded", "search": "ok"}


class Input(BaseModel):
    service: Literal["web", "payments", "search"] = Field(description="Which service", examples=["payments"])


@tool(description="Report a service's health: ok, degraded or down.", effect="read")
def check_service(input: Input, ctx) -> dict:
    return {"service": input.service, "status": STATUS[input.service], "checkedAt": ctx.now().isoformat()}
