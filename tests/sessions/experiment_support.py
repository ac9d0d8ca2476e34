"""An agent folder with one A/B experiment (`tone`) for the experiment tests.

Its split is `split_if` on the first message: a message with `[ab]` takes part,
`[ab:terse]` and `[ab:control]` choose the variant, plain `[ab]` goes by hash.
`on_sample` appends each sample to a file, so a test reads what it was handed.
"""
from __future__ import annotations

import json
from pathlib import Path

EXPERIMENT = '''\
import json
from agents.sdk import define_ab, split_by_session_hash, split_if


def chosen(ctx):
    for variant in ("terse", "control"):
        if f"[ab:{{variant}}]" in ctx.message:
            return variant
    return split_by_session_hash()(ctx)


def record(sample):
    with open({samples!r}, "a") as f:
        f.write(json.dumps({{"experiment": sample.experiment, "variant": sample.variant,
                            "sessionId": sample.session_id, "turnId": sample.turn_id,
                            "metrics": dict(sample.metrics)}}) + "\\n")


experiment = define_ab(
    "tone",
    variants={{
        "control": {{"label": "Baseline"}},
        "terse": {{"label": "Terse", "instructions": "TERSE: answer in five words.", "params": {{"style": "terse"}}}},
    }},
    split=split_if(lambda ctx: "[ab" in ctx.message, then=chosen),
    derive={{"variantChecks": lambda event: 1 if event.type == "action.result"
             and event.data.get("toolName") == "which_variant" else None}},
    on_sample=record,
)
'''

TOOL = '''\
from pydantic import BaseModel
from agents.sdk import tool


class Input(BaseModel):
    pass


@tool(description="Say which A/B variants this session runs.")
def which_variant(input: Input, ctx) -> dict:
    return {"abs": ctx.session.abs}
'''


def write_ab_agent(root: Path, samples: Path, name: str = "abtest") -> Path:
    agent = root / name / "agent"
    (agent / "tools").mkdir(parents=True)
    (agent / "ab").mkdir()
    (agent / "instructions.md").write_text("BASE: you help.\n")
    (agent / "agent.py").write_text('from agents.sdk import Agent\nagent = Agent(model="scripted:echo")\n')
    (agent / "tools" / "which_variant.py").write_text(TOOL)
    (agent / "ab" / "tone.py").write_text(EXPERIMENT.format(samples=str(samples)))
    return root / name


def handed(samples: Path) -> list[dict]:
    return [json.loads(line) for line in samples.read_text().splitlines()] if samples.exists() else []
