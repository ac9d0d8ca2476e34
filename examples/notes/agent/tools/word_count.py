from pydantic import BaseModel, Field

from agents.sdk import tool


class Input(BaseModel):
    text: str = Field(description="The text to count")


# execution="agent": not a tool the model calls, but a script it runs in its
# workspace with `shell` (.tools/word_count '{"text": "..."}').
@tool(description="Count the words and lines of a text.", execution="agent")
def word_count(input: Input, ctx) -> dict:
    return {"words": len(input.text.split()), "lines": len(input.text.splitlines())}
