"""Skills (three forms, loaded on demand through built-in tools) and subagents
(delegated to through the `delegate` built-in): discovery, /info, and real
turns of the scripted model calling the built-ins."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.discovery import AgentFolderError, deploy_agent_folder, load_agent_folder
from sessions.turn.engine import TurnRunner
from sessions.eventlog.events import read_events
from sessions.models import Turn

transactional = pytest.mark.django_db(transaction=True)

REFUNDS_BODY = "# Refunds\n\n1. Check the order was delivered.\n2. Read references/policy.md before refunding."
POLICY = "Refunds within 30 days, in full.\n"
TRIAGE_BODY = "Sort tickets by urgency, then by age."
TONE_BODY = "# Keep replies short and warm\n\nTwo sentences at most."

FILES = {
    "agent/instructions.md": "You run a shop's support desk.\n",
    "agent/agent.py": 'from agents.sdk import Agent\nagent = Agent(model="scripted:echo", description="Shop desk.")\n',
    "agent/tools/count_words.py": (
        "from pydantic import BaseModel\nfrom agents.sdk import tool\n\n"
        "class Input(BaseModel):\n    text: str\n\n"
        '@tool(description="Count the words of a text.")\n'
        "def count_words(input: Input, ctx) -> int:\n    return len(input.text.split())\n"
    ),
    # flat, with front matter
    "agent/skills/triage.md": f"---\ndescription: Sort incoming tickets.\n---\n{TRIAGE_BODY}\n",
    # flat, described by its first line
    "agent/skills/tone.md": TONE_BODY + "\n",
    # packaged, with sibling files
    "agent/skills/refunds/SKILL.md": f"---\ndescription: How to issue a refund.\n---\n{REFUNDS_BODY}\n",
    "agent/skills/refunds/references/policy.md": POLICY,
    "agent/skills/refunds/templates/email.txt": "Dear customer,\n",
    # generated
    "agent/skills/glossary.py": (
        "from agents.sdk import Skill\n"
        "TERMS = {'RMA': 'return authorization'}\n"
        "skill = Skill(description='Shop jargon.', markdown='Terms: ' + ', '.join(TERMS),\n"
        "              files={'terms.csv': 'RMA,return authorization\\n'})\n"
    ),
    "agent/subagents/researcher/agent.py": 'from agents.sdk import Agent\nagent = Agent(description="Finds facts.")\n',
    "agent/subagents/researcher/instructions.md": "You research.\n",
    "agent/subagents/writer/agent.py": (
        'from agents.sdk import Agent\nagent = Agent(description="Drafts emails.", model="scripted:echo")\n'
    ),
    "agent/subagents/writer/instructions.md": "You write.\n",
    # A subagent's own tools are ignored (with a warning): it uses the parent's.
    "agent/subagents/writer/tools/secret.py": (
        "from pydantic import BaseModel\nfrom agents.sdk import tool\n\n"
        "class Input(BaseModel):\n    x: int = 0\n\n"
        '@tool(description="Never offered.")\ndef secret(input: Input, ctx) -> str:\n    return "leaked"\n'
    ),
    "agent/subagents/writer/skills/house-style.md": "---\ndescription: Never offered either.\n---\nBe terse.\n",
}


def write_folder(root: Path, files: dict[str, str | None]) -> Path:
    for rel, content in files.items():
        if content is None:
            continue
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    return root


def problems_of(root: Path) -> list[str]:
    with pytest.raises(AgentFolderError) as raised:
        load_agent_folder(root)
    return [str(p) for p in raised.value.problems]


@pytest.fixture
def desk(db, tmp_path) -> Path:
    root = write_folder(tmp_path / "desk", FILES)
    deploy_agent_folder(root)
    return root


def post_json(client, path: str, body: dict):
    return client.post(path, json.dumps(body), content_type="application/json")


def run_turn(client, message: str) -> list[dict]:
    response = post_json(client, "/desk/v1/session", {"message": message})
    assert response.status_code == 201, response.content
    found = read_events(response.json()["sessionId"])
    assert [e["index"] for e in found] == list(range(len(found)))
    assert found[-2]["type"] == "turn.completed" and found[-1]["type"] == "session.waiting", [e["type"] for e in found]
    return found


def call_line(tool: str, arguments: dict) -> str:
    return f"/call {tool} {json.dumps(arguments)}"


def reply(found: list[dict]) -> str:
    return [e for e in found if e["type"] == "message.completed"][-1]["data"]["text"]


def results(found: list[dict]) -> list[dict]:
    return [e["data"] for e in found if e["type"] == "action.result"]


# --- discovery ------------------------------------------------------------------


def test_all_three_skill_forms_are_discovered_with_their_descriptions_and_files(tmp_path):
    loaded = load_agent_folder(write_folder(tmp_path / "desk", FILES))

    assert {name: s.description for name, s in loaded.skills.items()} == {
        "glossary": "Shop jargon.",
        "refunds": "How to issue a refund.",
        "tone": "Keep replies short and warm",
        "triage": "Sort incoming tickets.",
    }
    assert loaded.skills["triage"].markdown == TRIAGE_BODY
    assert loaded.skills["tone"].markdown == TONE_BODY
    assert loaded.skills["refunds"].markdown == REFUNDS_BODY
    assert loaded.skills["refunds"].files == {"references/policy.md": POLICY, "templates/email.txt": "Dear customer,\n"}
    assert loaded.skills["refunds"].source == "agent/skills/refunds/SKILL.md"
    assert loaded.skills["glossary"].files == {"terms.csv": "RMA,return authorization\n"}
    assert loaded.skills["glossary"].markdown == "Terms: RMA"


def test_subagents_are_discovered_and_their_own_tools_and_skills_are_ignored_with_a_warning(tmp_path):
    loaded = load_agent_folder(write_folder(tmp_path / "desk", FILES))

    assert {a.id: (a.description, a.model) for a in loaded.subagents.values()} == {
        "researcher": ("Finds facts.", "scripted:echo"),  # the parent's model
        "writer": ("Drafts emails.", "scripted:echo"),
    }
    assert loaded.subagents["researcher"].instructions == "You research."
    assert [(w.path, w.message) for w in loaded.warnings] == [
        ("agent/subagents/writer/tools", "ignored: subagents use the parent's tools and skills"),
        ("agent/subagents/writer/skills", "ignored: subagents use the parent's tools and skills"),
    ]
    assert set(loaded.tools) == {"count_words"}
    assert "house-style" not in loaded.skills


def test_a_packaged_skill_without_a_description_is_an_error_naming_skill_md(tmp_path):
    root = write_folder(tmp_path / "desk", {**FILES, "agent/skills/refunds/SKILL.md": "# Refunds\nNo front matter.\n"})

    assert problems_of(root) == [
        "agent/skills/refunds/SKILL.md: add `description:` front matter (required for packaged skills)",
    ]


def test_a_skill_folder_without_skill_md_and_a_generated_skill_escaping_its_root_are_errors(tmp_path):
    root = write_folder(tmp_path / "desk", {
        **FILES,
        "agent/skills/empty/notes.md": "stray\n",
        "agent/skills/sneaky.py": "from agents.sdk import Skill\nskill = Skill(description='x', markdown='y', "
                                  "files={'../../etc/passwd': 'no'})\n",
    })

    problems = problems_of(root)
    assert "agent/skills/empty/SKILL.md: missing: a packaged skill needs SKILL.md with a description" in problems
    assert any(p.startswith("agent/skills/sneaky.py: file '../../etc/passwd' must be a relative path") for p in problems)


def test_a_subagent_without_a_description_is_an_error_naming_its_agent_py(tmp_path):
    root = write_folder(tmp_path / "desk", {
        **FILES, "agent/subagents/researcher/agent.py": "from agents.sdk import Agent\nagent = Agent()\n",
    })

    assert problems_of(root) == [
        "agent/subagents/researcher/agent.py: add a description: the parent reads it to decide when to delegate",
    ]


def test_a_subagent_without_agent_py_or_instructions_is_an_error(tmp_path):
    root = write_folder(tmp_path / "desk", {**FILES, "agent/subagents/lonely/instructions.md": ""})

    problems = problems_of(root)
    assert "agent/subagents/lonely/agent.py: missing: define `agent = Agent(description=...)`" in problems
    assert any(p.startswith("agent/subagents/lonely/instructions.md: missing or empty") for p in problems)


def test_nested_subagents_are_an_error(tmp_path):
    root = write_folder(tmp_path / "desk", {
        **FILES,
        "agent/subagents/researcher/subagents/intern/agent.py": FILES["agent/subagents/researcher/agent.py"],
        "agent/subagents/researcher/subagents/intern/instructions.md": "You fetch.\n",
    })

    assert problems_of(root) == [
        "agent/subagents/researcher/subagents: nested subagents are not supported: move them up to agent/subagents/",
    ]


def test_a_subagent_on_an_unknown_provider_is_an_error(tmp_path):
    root = write_folder(tmp_path / "desk", {
        **FILES,
        "agent/subagents/researcher/agent.py": 'from agents.sdk import Agent\n'
                                               'agent = Agent(description="x", model="nowhere:model")\n',
    })

    [problem] = problems_of(root)
    assert problem.startswith("agent/subagents/researcher/agent.py: ")


# --- what callers and the model see -------------------------------------------------


@transactional
def test_info_lists_the_skills_and_subagents(alice, desk):
    info = alice.get("/desk/v1/info").json()

    assert {s["name"]: (s["description"], s["files"]) for s in info["skills"]} == {
        "glossary": ("Shop jargon.", ["terms.csv"]),
        "refunds": ("How to issue a refund.", ["references/policy.md", "templates/email.txt"]),
        "tone": ("Keep replies short and warm", []),
        "triage": ("Sort incoming tickets.", []),
    }
    assert [(a["id"], a["description"]) for a in info["subagents"]] == [
        ("researcher", "Finds facts."), ("writer", "Drafts emails."),
    ]
    # Built-ins are the engine's, not the agent's tools.
    assert [t["name"] for t in info["tools"]] == ["count_words"]


@transactional
def test_the_model_sees_skill_and_subagent_descriptions_but_not_the_bodies(alice, desk, sync_turns):
    found = run_turn(alice, "hello")
    turn = Turn.objects.get(pk=found[-1]["turnId"])
    runner = TurnRunner(turn)
    from agents.discovery import load_deployment

    system = runner.system_prompt(load_deployment(turn.session.deployment))

    assert system.startswith("You run a shop's support desk.")
    for line in ("- triage: Sort incoming tickets.", "- tone: Keep replies short and warm",
                 "- refunds: How to issue a refund.", "- glossary: Shop jargon.",
                 "- researcher: Finds facts.", "- writer: Drafts emails."):
        assert line in system
    assert "Check the order was delivered" not in system and POLICY.strip() not in system


@transactional
def test_load_skill_returns_the_body_of_each_form(alice, desk, sync_turns):
    found = run_turn(alice, "\n".join(call_line("load_skill", {"name": n}) for n in ("triage", "tone", "refunds", "glossary")))

    outputs = [r["output"] for r in results(found)]
    assert outputs == [
        TRIAGE_BODY,
        TONE_BODY,
        REFUNDS_BODY + "\n\nFiles (read with read_skill_file):\n- references/policy.md\n- templates/email.txt",
        "Terms: RMA\n\nFiles (read with read_skill_file):\n- terms.csv",
    ]
    assert [r["toolName"] for r in results(found)] == ["load_skill"] * 4
    assert "load_skill (ok): Sort tickets by urgency" in reply(found)


@transactional
def test_load_skill_of_an_unknown_skill_is_an_error_the_model_sees(alice, desk, sync_turns):
    [result] = results(run_turn(alice, call_line("load_skill", {"name": "juggling"})))

    assert result["error"] == "LookupError: no skill 'juggling'; skills: glossary, refunds, tone, triage"


@transactional
def test_read_skill_file_reads_siblings_and_refuses_paths_outside_the_skill(alice, desk, sync_turns):
    found = run_turn(alice, "\n".join([
        call_line("read_skill_file", {"skill": "refunds", "path": "references/policy.md"}),
        call_line("read_skill_file", {"skill": "glossary", "path": "terms.csv"}),
        call_line("read_skill_file", {"skill": "refunds", "path": "../triage.md"}),
        call_line("read_skill_file", {"skill": "refunds", "path": "references/../../../instructions.md"}),
        call_line("read_skill_file", {"skill": "refunds", "path": "/etc/passwd"}),
        call_line("read_skill_file", {"skill": "refunds", "path": "SKILL.md"}),
    ]))

    read = results(found)
    assert [r.get("output") for r in read[:2]] == [POLICY, "RMA,return authorization\n"]
    for refused in read[2:]:
        assert "output" not in refused
        assert refused["error"].startswith("LookupError: skill 'refunds' has no file")
    assert "Refunds within 30 days" not in json.dumps(read[2:])


@transactional
def test_delegate_runs_the_subagent_and_returns_its_reply(alice, desk, sync_turns):
    found = run_turn(alice, call_line("delegate", {"subagent": "researcher", "task": "find the refund window"}))

    types = [e["type"] for e in found]
    at = types.index("actions.requested")
    assert types[at:at + 4] == ["actions.requested", "subagent.called", "subagent.completed", "action.result"]
    called, completed, result = (found[at + i]["data"] for i in (1, 2, 3))
    assert called == {"subagent": "researcher", "task": "find the refund window"}
    assert completed["subagent"] == "researcher" and completed["error"] is None
    assert completed["reply"] == "You said: find the refund window"
    assert completed["usage"]["inputTokens"] > 0
    assert result["toolName"] == "delegate" and result["output"] == "You said: find the refund window"
    assert reply(found) == "Tool results:\ndelegate (ok): You said: find the refund window"
    assert {e["turnId"] for e in found[at:]} == {found[-1]["turnId"]}


@transactional
def test_a_subagent_uses_the_parents_tools_not_its_own_and_cannot_delegate(alice, desk, sync_turns):
    task = "\n".join([
        call_line("count_words", {"text": "one two three"}),
        call_line("secret", {}),
        call_line("delegate", {"subagent": "researcher", "task": "x"}),
    ])
    found = run_turn(alice, call_line("delegate", {"subagent": "writer", "task": task}))

    completed = next(e["data"] for e in found if e["type"] == "subagent.completed")
    assert completed["reply"] == (
        "Tool results:\n"
        "count_words (ok): 3\n"
        "secret (error): unknown tool 'secret'\n"
        "delegate (error): unknown tool 'delegate'"
    )
    assert [e["data"]["subagent"] for e in found if e["type"] == "subagent.called"] == ["writer"], "no nesting"


@transactional
def test_a_failing_subagent_is_reported_to_the_parent_as_a_tool_error(alice, desk, sync_turns):
    found = run_turn(alice, call_line("delegate", {"subagent": "researcher", "task": "/fail source unreachable"}))

    completed = next(e["data"] for e in found if e["type"] == "subagent.completed")
    assert completed["error"] == "source unreachable" and completed["reply"] == ""
    [result] = results(found)
    assert result["error"] == "RuntimeError: subagent researcher failed: source unreachable"


@transactional
def test_delegating_to_an_unknown_subagent_is_an_error_the_model_sees(alice, desk, sync_turns):
    found = run_turn(alice, call_line("delegate", {"subagent": "ghost", "task": "boo"}))

    assert "subagent.called" not in [e["type"] for e in found]
    [result] = results(found)
    assert result["error"] == "LookupError: no subagent 'ghost'; subagents: researcher, writer"
