"""`manage.py init`: every template writes a project that validates, deploys and answers a turn."""
from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from agents.discovery import deploy_agent_folder
from agents.scaffold import TEMPLATES, TRY
from sessions.eventlog.events import read_events
from sessions.models import KVEntry
from tests.command_line import run_command_line
from tests.evals.projects import manage

transactional = pytest.mark.django_db(transaction=True)


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


def post_json(client, path: str, body: dict):
    return client.post(path, json.dumps(body), content_type="application/json")


def turn_of(client, slug: str, message: str) -> list[dict]:
    created = post_json(client, f"/{slug}/v1/session", {"message": message})
    assert created.status_code == 201, created.content
    return read_events(created.json()["sessionId"])


def reply(found: list[dict]) -> str:
    return [e["data"]["text"] for e in found if e["type"] == "message.completed"][-1]


def results(found: list[dict]) -> list:
    return [e["data"].get("output", e["data"].get("error")) for e in found if e["type"] == "action.result"]


def made(tmp_path, template: str, name: str | None = None):
    path = tmp_path / (name or f"my-{template}")
    out = run("init", str(path), "--template", template)
    assert f"{path}: a {template} agent." in out
    validated = run("validate", str(path))
    assert validated.startswith(f"{path}: ok (my-{template}, scripted:echo")
    assert (path / "README.md").read_text().startswith("# My ")
    return path


@transactional
def test_the_chat_template_answers(tmp_path, local, sync_turns):
    deploy_agent_folder(made(tmp_path, "chat"))

    found = turn_of(local, "my-chat", "Hello!")

    assert reply(found) == "You said: Hello!"
    assert [e["type"] for e in found][-1] == "session.waiting"


@transactional
def test_the_tools_template_calls_its_typed_tool(tmp_path, local, sync_turns):
    deploy_agent_folder(made(tmp_path, "tools"))

    found = turn_of(local, "my-tools", '/call convert_temperature {"value": 100, "unit": "C"}')

    assert results(found) == [{"value": 212.0, "unit": "F"}]
    info = local.get("/my-tools/v1/info").json()
    [tool] = info["tools"]
    assert tool["inputSchema"]["required"] == ["value", "unit"]
    assert [t["name"] for t in info["offeredTools"]] == ["convert_temperature"]


@transactional
def test_the_notes_template_keeps_notes_across_sessions(tmp_path, local, sync_turns):
    deploy_agent_folder(made(tmp_path, "notes"))

    turn_of(local, "my-notes", '/call note {"action": "add", "text": "buy milk"}')
    found = turn_of(local, "my-notes", '/call note {"action": "list"}')

    assert results(found) == [{"notes": ["buy milk"]}]
    assert KVEntry.objects.get(key="notes").value == ["buy milk"]


@transactional
def test_the_webhook_template_answers_a_thread_through_its_channel(tmp_path, local, sync_turns):
    deploy_agent_folder(made(tmp_path, "webhook"))

    posted = post_json(local, "/my-webhook/v1/channels/inbox/messages", {"text": "Hello!", "thread": "t-1"})
    assert posted.status_code == 200, posted.content
    assert posted.json()["created"] is True

    thread = local.get("/my-webhook/v1/channels/inbox/threads/t-1").json()
    assert thread["sessionId"] == posted.json()["sessionId"]
    assert reply(read_events(thread["sessionId"])) == "You said: Hello!"


CALLS = {"chat": [], "tools": ["convert_temperature"], "notes": ["note"], "webhook": []}


@pytest.mark.slow
@pytest.mark.parametrize("template", TEMPLATES)
def test_a_fresh_project_of_every_template_passes_its_eval(tmp_path, template):
    path = tmp_path / f"my-{template}"
    run("init", str(path), "--template", template)

    done = manage("eval", str(path), "--json")

    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert (report["passed"], report["total"]) == (True, 1)
    assert report["cases"][0]["toolCalls"] == CALLS[template]


@transactional
@pytest.mark.parametrize("template", TEMPLATES)
def test_a_fresh_project_of_every_template_runs_its_readme_message_without_a_deploy(tmp_path, template):
    path = tmp_path / f"my-{template}"
    run("init", str(path), "--template", template)
    assert f"manage.py run --dir {path} -m " in (path / "README.md").read_text()

    code, out, err = run_command_line("run", "--dir", str(path), "-m", TRY[template])

    assert code == 0, err
    assert out.splitlines()[-1].startswith("status: waiting")
    assert "error:" not in out


def test_every_template_is_tested():
    assert set(CALLS) == set(TEMPLATES)
    assert TEMPLATES == ("chat", "tools", "notes", "webhook")


def test_init_refuses_a_non_empty_folder_and_leaves_it_alone(tmp_path):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")

    with pytest.raises(CommandError, match=r"taken is not empty; pick a new path \(init never overwrites\)"):
        run("init", str(tmp_path / "taken"))

    assert [p.name for p in (tmp_path / "taken").iterdir()] == ["notes.txt"]


def test_init_writes_into_an_empty_folder(tmp_path):
    (tmp_path / "fresh").mkdir()
    run("init", str(tmp_path / "fresh"))
    assert (tmp_path / "fresh" / "agent" / "instructions.md").is_file()


@pytest.mark.parametrize("name, message", [
    ("Bad.Name", "the folder's name is the agent's slug: 'bad.name' is not a valid agent slug"),
    ("admin", "the folder's name is the agent's slug: 'admin' is reserved"),
])
def test_init_refuses_a_folder_name_that_is_no_slug(tmp_path, name, message):
    with pytest.raises(CommandError, match=message):
        run("init", str(tmp_path / name))
    assert not (tmp_path / name).exists()


def test_init_refuses_a_file_and_an_unknown_template(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(CommandError, match="exists and is not a folder"):
        run("init", str(tmp_path / "file"))
    with pytest.raises(CommandError, match="invalid choice: 'bots'"):
        run("init", str(tmp_path / "new"), "--template", "bots")
