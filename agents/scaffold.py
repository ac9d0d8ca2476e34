"""`manage.py init`: a new agent project to start from, one template per kind of agent.

Each template is a working agent folder (it validates and answers with the offline
`scripted` model), one eval case that passes (`evals/<name>_eval.py`, run by
`manage.py eval`) and a README that says how to run it and where to go next:

- chat: instructions and `agent.py`, nothing else;
- tools: one typed tool the model may call;
- notes: a tool that keeps notes in the agent's durable key-value store (`ctx.host.kv`);
- webhook: a custom channel a service posts messages to, one session per thread.
"""
from __future__ import annotations

import json
import shlex
from pathlib import Path

from django.core.exceptions import ValidationError

from agents.models import validate_slug

TEMPLATES = ("chat", "tools", "notes", "webhook")


class ScaffoldError(Exception):
    """Why a project cannot be written there; one line."""


AGENT_PY = '''\
from agents.sdk import Agent

# `scripted:echo` answers offline (no key needed): it echoes, and `/call <tool> <json>` calls a tool.
# Swap in a real model when you have a key, e.g. "openai:gpt-4.1-mini" or "anthropic:claude-sonnet-4-5".
agent = Agent(
    model="scripted:echo",
    name="{name}",
    description="{description}",
    # No workspace tools (files, shell): only the tools in agent/tools/. Remove this line to offer them.
    tools=[],
)
'''

CONVERT_TOOL = '''\
from typing import Literal

from pydantic import BaseModel, Field

from agents.sdk import tool


class Input(BaseModel):
    value: float = Field(description="The temperature to convert")
    unit: Literal["C", "F"] = Field(description="The unit `value` is in")


@tool(description="Convert a temperature between Celsius and Fahrenheit.", effect="read")
def convert_temperature(input: Input, ctx) -> dict:
    if input.unit == "C":
        return {"value": round(input.value * 9 / 5 + 32, 2), "unit": "F"}
    return {"value": round((input.value - 32) * 5 / 9, 2), "unit": "C"}
'''

NOTE_TOOL = '''\
from typing import Literal

from pydantic import BaseModel, Field

from agents.sdk import tool


class Input(BaseModel):
    action: Literal["add", "list"] = Field(description="add a note, or list the notes kept so far")
    text: str = Field(default="", max_length=2000, description="The note to add (for add)")


# The notes live in the agent's durable key-value store: they outlast sessions and restarts.
@tool(description="Keep a note, or list the notes kept so far.", effect="write")
def note(input: Input, ctx) -> dict:
    notes = ctx.host.kv.get("notes", [])
    if input.action == "add":
        if not input.text.strip():
            raise ValueError("give the note's text")
        notes = [*notes, input.text.strip()]
        ctx.host.kv.set("notes", notes)
    return {"notes": notes}
'''

WEBHOOK_CHANNEL = '''\
"""A webhook: a service posts {text, thread}; each thread is one session, its replies kept.

    POST /__SLUG__/v1/channels/inbox/messages       {"text": "...", "thread": "t-1"}
    GET  /__SLUG__/v1/channels/inbox/threads/t-1    the thread's session and the replies so far
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from agents.sdk import GET, POST, Channel


class Incoming(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=20_000, description="The message")
    thread: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._:-]+$",
                        description="The conversation it belongs to")


class NoQuery(BaseModel):
    pass


def receive_message(req):
    """Start the thread's session, or continue it."""
    body: Incoming = req.body
    handle = req.send(body.text, continuation_token=f"thread:{body.thread}", admission="coalesce",
                      title=f"thread {body.thread}", state={"thread": body.thread, "replies": []})
    return {"thread": body.thread, "sessionId": handle.session_id, "created": handle.created}


def read_thread(req):
    """The thread's session and the replies delivered so far."""
    handle = req.find_continuation(f"thread:{req.params['thread']}")
    if handle is None:
        return {"thread": req.params["thread"], "sessionId": None, "replies": []}
    return {"thread": req.params["thread"], "sessionId": handle.session_id, "status": handle.status,
            "replies": handle.state.get().get("replies", [])}


def keep_reply(event, channel, ctx):
    """After each reply is stored: keep it with the thread (post it back to your service here)."""
    text = event["data"].get("text", "")
    channel.state.modify(lambda s: {**s, "replies": [*s.get("replies", []), text]})


channel = Channel(
    description="Messages from another service, one session per thread.",
    routes=[
        POST("/messages", body=Incoming, handler=receive_message),
        GET("/threads/:thread", query=NoQuery, handler=read_thread),
    ],
    events={"message.completed": keep_reply},
    state={"replies": []},
    # No `auth=`: the server's own chain admits callers (loopback by default). For a real
    # service, check its signature or token (`auth=[bearer_auth(...)]`; see the channels docs).
    # A thread is its caller's own: another caller naming it gets a thread of its own.
)
'''

INSTRUCTIONS = {
    "chat": "You are {name}, a friendly assistant. Answer briefly and ask when something is unclear.\n",
    "tools": ("You are {name}. When the user gives a temperature, convert it with the `convert_temperature` "
              "tool and answer with the result.\n"),
    "notes": ("You are {name}, a note keeper. Save what the user asks you to remember with the `note` tool "
              "(action `add`), and list the notes (action `list`) when they ask what you kept.\n"),
    "webhook": ("You are {name}. Messages come from another service through a webhook, one conversation per "
                "thread. Answer each in a sentence or two.\n"),
}
DESCRIPTIONS = {
    "chat": "A chat assistant.",
    "tools": "Converts temperatures with a typed tool.",
    "notes": "Keeps notes that outlast sessions.",
    "webhook": "Answers messages posted to a webhook, one session per thread.",
}
# One message to try, per template: with the scripted model it shows the template's part working.
TRY = {
    "chat": "Hello!",
    "tools": '/call convert_temperature {"value": 21, "unit": "C"}',
    "notes": '/call note {"action": "add", "text": "buy milk"}',
    "webhook": "Hello!",
}

EVAL = '''\
"""One case `manage.py eval {path}` runs: a message, and gates on what the agent did.

`scripted:echo` follows `/call <tool> <json>` as written. Once agent/agent.py names a real
model, ask in words instead, e.g. {words!r},
and keep the gates: they check what the agent did, not its wording.
"""
from agents.sdk import includes


def test(t):
    t.send({message!r})
    t.succeeded(){tool_gate}
    t.check(t.reply, includes({expected!r}))
'''
# Per template: the eval file's name, what a real model would be asked, the tool it must call
# (none for chat and webhook) and what the reply must include.
EVALS = {
    "chat": ("greeting", "Hello!", "", "Hello!"),
    "tools": ("convert", "What is 21 degrees Celsius in Fahrenheit?", "convert_temperature", "69.8"),
    "notes": ("remember", "Remember to buy milk.", "note", "buy milk"),
    "webhook": ("reply", "Hello!", "", "Hello!"),
}

README = '''\
# {name}

An agent for agentsite, made with `manage.py init --template {template}`. {description}

```
{slug}/
  agent/
    instructions.md      the system prompt
    agent.py             the model and settings (`scripted:echo` answers offline){extra_tree}
  evals/
    {eval_name}_eval.py{eval_pad}one case: a message and gates on the turn (`manage.py eval`)
```

## Run it

From the agentsite checkout (every command works from any directory):

```bash
.venv/bin/python manage.py validate {path}            # problems name the file and the fix
.venv/bin/python manage.py run --dir {path} -m {try_shell}   # one turn, not deployed
.venv/bin/python manage.py eval {path}                # its evals, on a server of their own
.venv/bin/python manage.py serve --agents {path}      # serve it beside the examples
```

Open http://127.0.0.1:8000/playground/{slug} and send:

```
{try_message}
```

Or over HTTP:

```bash
curl -s -X POST http://127.0.0.1:8000/{slug}/v1/session -H 'content-type: application/json' \\
  -d '{{"message": {try_json}}}'
```
{extra_section}
## Next

- Swap `model=` in `agent/agent.py` for a real one once its key is set (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`).
- Add tools (`agent/tools/<name>.py`), skills, schedules and channels: see the agentsite docs.
- Deploy a new release with `manage.py deploy {path}`; `manage.py deployments {slug}` lists the
  releases and `manage.py rollback {slug}` goes back to the one before.
'''

EXTRA_TREE = {
    "chat": "",
    "tools": "\n    tools/convert_temperature.py   one typed tool: its pydantic Input is the schema the model sees",
    "notes": "\n    tools/note.py        keeps notes in the agent's key-value store (ctx.host.kv)",
    "webhook": "\n    channels/inbox.py    the webhook: routes under /{slug}/v1/channels/inbox/",
}
WEBHOOK_SECTION = '''
## The webhook

```bash
curl -s -X POST http://127.0.0.1:8000/{slug}/v1/channels/inbox/messages -H 'content-type: application/json' \\
  -d '{{"text": "Hello!", "thread": "t-1"}}'
curl -s http://127.0.0.1:8000/{slug}/v1/channels/inbox/threads/t-1
```
'''


def project_files(slug: str, template: str, path: str) -> dict[str, str]:
    """Relative path → text of a new project of `template` for the agent `slug`."""
    name = slug.replace("-", " ").replace("_", " ").title()
    description = DESCRIPTIONS[template]
    eval_name, words, tool, expected = EVALS[template]
    tool_gate = f"\n    t.called_tool({tool!r})" if tool else ""
    files = {
        "agent/instructions.md": INSTRUCTIONS[template].format(name=name),
        "agent/agent.py": AGENT_PY.format(name=name, description=description),
        "README.md": README.format(
            name=name, template=template, description=description, slug=slug, path=path,
            extra_tree=EXTRA_TREE[template].format(slug=slug), try_message=TRY[template],
            try_json=json.dumps(TRY[template]).replace("'", "'\\''"),
            extra_section=WEBHOOK_SECTION.format(slug=slug) if template == "webhook" else "",
            eval_name=eval_name, eval_pad=" " * max(1, 21 - len(f"{eval_name}_eval.py")),
            try_shell=shlex.quote(TRY[template])),
        f"evals/{eval_name}_eval.py": EVAL.format(path=path, words=words, message=TRY[template],
                                                  tool_gate=tool_gate, expected=expected),
    }
    if template == "tools":
        files["agent/tools/convert_temperature.py"] = CONVERT_TOOL
    elif template == "notes":
        files["agent/tools/note.py"] = NOTE_TOOL
    elif template == "webhook":
        files["agent/channels/inbox.py"] = WEBHOOK_CHANNEL.replace("__SLUG__", slug)
    return files


def scaffold(path: Path, template: str = "chat") -> list[Path]:
    """Write a new agent project at `path` (absent or an empty folder); its folder name is the agent's slug."""
    if template not in TEMPLATES:
        raise ScaffoldError(f"unknown template {template!r}: choose one of {', '.join(TEMPLATES)}")
    path = path.expanduser().resolve()
    if path.exists() and not path.is_dir():
        raise ScaffoldError(f"{path} exists and is not a folder; pick a new path")
    if path.is_dir() and any(path.iterdir()):
        raise ScaffoldError(f"{path} is not empty; pick a new path (init never overwrites)")
    slug = path.name.lower()
    try:
        validate_slug(slug)
    except ValidationError as exc:
        raise ScaffoldError(f"the folder's name is the agent's slug: {exc.messages[0]}") from None
    written = []
    for relative, text in project_files(slug, template, str(path)).items():
        target = path / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        written.append(target)
    return written
