from typing import Literal

from pydantic import BaseModel, Field

from agents.sdk import tool


class Input(BaseModel):
    service: Literal["web", "payments", "search"] = Field(description="The affected service", examples=["payments"])
    summary: str = Field(description="What happened, in Markdown", examples=["Payments were slow for 20 minutes."])


@tool(description="Save an incident report the user can download; earlier reports are kept in the desk's files.",
      effect="write", dry_run_result={"saved": False, "reason": "dry run: no report written"})
def write_incident_report(input: Input, ctx) -> dict:
    # Number the service's reports with compare-and-set, so two sessions writing at once never share one.
    key = f"incidents/{input.service}/count"
    while True:
        current = ctx.host.kv.get(key)
        number = (current or 0) + 1
        if ctx.host.kv.compare_and_set(key, current, number):
            break
    text = f"# Incident {number}: {input.service}\n\n{ctx.now().isoformat()}\n\n{input.summary}\n"
    ctx.host.files.write(f"incidents/{input.service}/{number}.md", text)
    artifact = ctx.host.artifacts.save(f"incident-{input.service}-{number}.md", text)
    return {"saved": artifact.name, "number": number, "bytes": artifact.size}
