"""Run one `execution="agent"` tool as a script: `python -m agents.agent_tool <tool file> '<json input>'`.

The launchers in a local workspace's `.tools/` call this, so the model runs an
agent tool with `shell` in its workspace. The input is the JSON argument (or
stdin when there is none), validated by the tool's input model; the result
is printed as JSON. A refusal or an error goes to stderr with exit status 1
(2 for bad usage). No Django, no server state: only the tool's own code runs.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from pydantic import ValidationError

from agents.definitions import Tool, ToolContext
from agents.modules import find_in_file


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print("usage: <tool> '<json input>'  (or the JSON on stdin)", file=sys.stderr)
        return 2
    path = Path(argv[0])
    raw = argv[1] if len(argv) == 2 else sys.stdin.read()
    problems: list[str] = []
    tools = find_in_file(path, f"agentsite_agent_tool_{path.stem}", Tool, problems.append)
    if not tools:
        print(f"cannot load the tool {path.stem}: {'; '.join(problems) or 'no @tool in its file'}", file=sys.stderr)
        return 1
    tool = tools[0]
    try:
        data = json.loads(raw) if raw.strip() else {}
        validated = tool.input_model.model_validate(data)
    except json.JSONDecodeError as exc:
        print(f"the input is not JSON: {exc}", file=sys.stderr)
        return 2
    except ValidationError as exc:
        print("invalid input: " + "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'input'}: {e['msg']}"
                                             for e in exc.errors()), file=sys.stderr)
        return 2
    try:
        output = tool(validated, ToolContext(session=None, call_id="shell"))
    except Exception as exc:  # the model reads the error and can act on it
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if hasattr(output, "model_dump"):
        output = output.model_dump(mode="json")
    print(json.dumps(output, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
