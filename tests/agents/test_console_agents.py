"""Agents made from data (`POST /v1/agents`, `PUT /v1/agents/<slug>`): every save is a release made as a
folder deploy makes one (validated, numbered, deduplicated by content hash, who saved it recorded), an
old session stays on its release, a slug is one kind's at a time, the release exports as a folder that
deploys to the same hash, a folder agent converts to data unless it has what data cannot hold, and
only operators may do any of it."""
from __future__ import annotations

import ast
import json
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.core.management import call_command
from django.core.management.base import CommandError

from agents.discovery import content_hash, deploy_agent_folder
from agents.models import Agent, Deployment
from sessions.models import PersonalToken, Session
from tests.channels_app.roles_support import anonymous, people, person  # noqa: F401

transactional = pytest.mark.django_db(transaction=True)

HELPER = {
    "slug": "helper", "name": "Helper", "description": "Answers from data.",
    "instructions": "Be brief.", "models": ["scripted:echo", "scripted:careful"], "builtins": ["todos"],
    "skills": [{"name": "tone", "description": "How to write replies", "body": "Write plainly.",
                "files": {"references/words.md": "Use short words."}}],
    "subagents": [{"id": "summarizer", "description": "Summarizes", "instructions": "Summarize in a line."}],
    "schedules": [{"id": "daily", "cron": "0 9 * * *", "prompt": "Say good morning.", "title": "Morning"}],
    "experiments": [{"name": "brief", "holdout": 0.1,
                     "variants": {"control": {"label": "As written"},
                                  "terse": {"label": "Terse", "instructions": "One line only."}}}],
    "workspaceTools": [],
}


def definition(spec: dict) -> dict:
    return {key: value for key, value in spec.items() if key != "slug"}


def post(client, path: str, body, method: str = "post"):
    return getattr(client, method)(path, json.dumps(body), content_type="application/json")


@transactional
def test_an_operator_creates_an_agent_from_data_talks_to_it_and_every_save_is_a_release(people):  # noqa: F811
    ops = people.olga.client
    created = post(ops, "/v1/agents", HELPER)
    assert created.status_code == 201, created.content
    body = created.json()
    assert (body["slug"], body["kind"], body["release"]["version"]) == ("helper", "console", 1)
    assert body["release"]["deployedBy"] == "olga", "who saved it"
    assert body["release"]["sourceKind"] == "console" and body["release"]["active"] is True
    assert body["definition"]["instructions"] == "Be brief." and body["definition"]["skills"][0]["name"] == "tone"

    info = people.mia.client.get("/helper/v1/info").json()
    assert (info["name"], info["models"], info["builtins"]) == ("Helper", ["scripted:echo", "scripted:careful"],
                                                                ["todos"])
    assert [s["name"] for s in info["skills"]] == ["tone"] and [s["id"] for s in info["subagents"]] == ["summarizer"]
    assert info["deployment"]["sourceKind"] == "console", "/info says where the agent came from"
    [experiment] = people.mia.client.get("/helper/v1/abs").json()["experiments"]
    assert (experiment["name"], experiment["holdout"], [v["id"] for v in experiment["variants"]]) == (
        "brief", 0.1, ["control", "terse"])
    old = post(people.mia.client, "/helper/v1/session", {"message": "hello"})
    assert old.status_code == 201, old.content
    old_session = old.json()["sessionId"]

    again = post(ops, "/v1/agents/helper", definition(HELPER), "put")
    assert again.status_code == 200 and again.json()["release"]["version"] == 1, "the same data: the same release"
    changed = post(ops, "/v1/agents/helper", {**definition(HELPER), "instructions": "Be very brief."}, "put")
    assert changed.status_code == 200, changed.content
    assert changed.json()["release"]["version"] == 2
    v1, v2 = Deployment.objects.filter(agent__slug="helper").order_by("version")
    assert v1.content_hash != v2.content_hash and v2.manifest["instructions"] == "Be very brief."
    assert ops.get("/v1/agents/helper/definition").json()["definition"]["instructions"] == "Be very brief."

    # The old session stays on the release it started on; a new one starts on v2.
    assert post(people.mia.client, f"/helper/v1/session/{old_session}/message", {"message": "again"}).status_code == 202
    assert Session.objects.get(pk=old_session).deployment_id == v1.pk
    fresh = post(people.mia.client, "/helper/v1/session", {"message": "hi"}).json()["sessionId"]
    assert Session.objects.get(pk=fresh).deployment_id == v2.pk

    # Rolled back with the releases' own route, and saved again from there.
    assert ops.post("/v1/agents/helper/deployments/1/activate").status_code == 200
    assert ops.get("/v1/agents/helper/definition").json()["definition"]["instructions"] == "Be brief."


@transactional
def test_bad_data_names_the_field_and_nothing_is_released(people):  # noqa: F811
    ops = people.olga.client
    cases = [
        ({**HELPER, "instructions": ""}, "instructions"),
        ({**HELPER, "slug": "Not A Slug"}, "slug"),
        ({**HELPER, "slug": "v1"}, "slug"),
        ({**HELPER, "toolsFrom": {"support": ["../x"]}}, "toolsFrom"),
        ({**HELPER, "skills": [{**HELPER["skills"][0], "files": {"a": "x", "a/b": "y"}}]}, "skills.0.files"),
        ({**HELPER, "workspaceTools": ["teleport"]}, "workspaceTools"),
        ({**HELPER, "skills": [HELPER["skills"][0], HELPER["skills"][0]]}, "skills"),
        ({**HELPER, "skills": [{**HELPER["skills"][0], "files": {"../x.md": "x"}}]}, "skills.0.files"),
        ({**HELPER, "colour": "blue"}, "colour"),
        ({**HELPER, "models": ["nosuch:model"]}, "models"),
        ({**HELPER, "fallback": ["nosuch:model"]}, "fallback"),
        ({**HELPER, "builtins": ["teleport"]}, "builtins"),
        ({**HELPER, "budget": {"weekly": 3}}, "budget"),
        ({**HELPER, "mcpServers": {"x": {"nothing": 1}}}, "mcpServers"),
        ({**HELPER, "schedules": [{"id": "daily", "cron": "every day", "prompt": "x"}]}, "schedules[daily]"),
    ]
    for body, field in cases:
        refused = post(ops, "/v1/agents", body)
        assert refused.status_code == 400, (field, refused.content)
        error = refused.json()["error"]
        assert error["code"] == "invalid_agent"
        assert field in [d["field"] for d in error["details"]], (field, error)
    assert post(ops, "/v1/agents", [1, 2]).status_code == 400
    assert not Deployment.objects.filter(agent__slug="helper").exists()


@transactional
def test_a_slug_is_one_kinds_at_a_time(people, tmp_path):  # noqa: F811
    ops = people.olga.client
    assert post(ops, "/v1/agents", HELPER).status_code == 201
    assert post(ops, "/v1/agents", HELPER).json()["error"]["code"] == "agent_exists"
    assert post(ops, "/v1/agents/nobody", definition(HELPER), "put").status_code == 404

    over_folder = post(ops, "/v1/agents/support", definition(HELPER), "put")
    assert over_folder.status_code == 409 and over_folder.json()["error"]["code"] == "kind_conflict"
    replaced = post(ops, "/v1/agents/support?replace=true", definition(HELPER), "put")
    assert replaced.status_code == 200 and replaced.json()["kind"] == "console"

    folder = tmp_path / "helper"
    (folder / "agent").mkdir(parents=True)
    (folder / "agent" / "instructions.md").write_text("A folder now.\n")
    with pytest.raises(CommandError, match="made in the console"):
        call_command("deploy", str(folder))
    call_command("deploy", str(folder), "--replace")
    assert Agent.objects.get(slug="helper").active_deployment.source_kind == "folder"
    assert post(ops, "/v1/agents/helper", definition(HELPER), "put").json()["error"]["code"] == "kind_conflict"
    # Rolled back to its console release, it is a console agent again.
    assert ops.post("/v1/agents/helper/deployments/1/activate").status_code == 200
    assert post(ops, "/v1/agents/helper", definition(HELPER), "put").status_code == 200


@transactional
def test_an_exported_console_agent_deploys_to_the_same_content_hash(people, tmp_path):  # noqa: F811
    ops = people.olga.client
    hash_saved = post(ops, "/v1/agents", HELPER).json()["release"]["contentHash"]

    call_command("export", "helper", str(tmp_path / "copy"))
    assert (tmp_path / "copy" / "agent" / "console.json").is_file()
    copied = deploy_agent_folder(tmp_path / "copy")
    assert (copied.agent.slug, copied.content_hash) == ("copy", hash_saved)
    # Deployed as a folder, it reads back as the data it was saved from (no file was edited by hand) ...
    back = ops.get("/v1/agents/copy/definition").json()
    assert (back["kind"], back["definition"]) == ("folder", post(ops, "/v1/agents", {**HELPER, "slug": "x"}).json()[
        "definition"])
    # ... and once a file is, as a folder converted (its A/B experiment, Python, is no data).
    (tmp_path / "copy" / "agent" / "instructions.md").write_text("Edited by hand.\n")
    deploy_agent_folder(tmp_path / "copy")
    edited = ops.get("/v1/agents/copy/definition")
    assert edited.status_code == 409 and "agent/ab/brief.py" in [d["field"] for d in edited.json()["error"]["details"]]
    with pytest.raises(CommandError, match="exists"):
        call_command("export", "helper", str(tmp_path / "copy"))


@transactional
def test_a_folder_agent_converts_to_data_unless_it_holds_what_data_cannot(people, tmp_path):  # noqa: F811
    ops = people.olga.client
    notes = ops.get("/v1/agents/support/definition")
    assert notes.status_code == 409 and notes.json()["error"]["code"] == "not_convertible"
    fields = [d["field"] for d in notes.json()["error"]["details"]]
    assert "agent/tools/lookup_order.py" in fields and "agent/ab.py" in fields

    folder = tmp_path / "plain"
    (folder / "agent" / "skills").mkdir(parents=True)
    (folder / "agent" / "instructions.md").write_text("Plain.\n")
    (folder / "agent" / "skills" / "tone.md").write_text("---\ndescription: How to write\n---\nPlainly.\n")
    (folder / "agent" / "agent.py").write_text("from agents.sdk import Agent\nagent = Agent(model='scripted:echo')\n")
    deploy_agent_folder(folder)
    converted = ops.get("/v1/agents/plain/definition").json()
    assert converted["kind"] == "folder"
    assert (converted["definition"]["instructions"], converted["definition"]["models"]) == ("Plain.\n", ["scripted:echo"])
    assert converted["definition"]["skills"] == [{"name": "tone", "description": "How to write", "body": "Plainly.",
                                                  "files": {}}]
    saved = post(ops, "/v1/agents/plain?replace=true", converted["definition"], "put")
    assert saved.status_code == 200 and saved.json()["kind"] == "console"


@transactional
def test_only_operators_make_or_change_agents(people):  # noqa: F811
    _, elsewhere = PersonalToken.issue(person("ops", operator=True).user, "elsewhere", agents=["support"])
    scoped = type(people.mia)(people.olga.user, elsewhere).client
    for client, status in ((anonymous(), 401), (people.mia.client, 403), (people.max.client, 403), (scoped, 403)):
        assert post(client, "/v1/agents", HELPER).status_code == status
        assert post(client, "/v1/agents/support", definition(HELPER), "put").status_code == status
        assert client.get("/v1/agents/support/definition").status_code == status
    assert people.mia.client.get("/v1/agents").status_code == 200, "listing stays open to members"
    assert not Agent.objects.filter(slug="helper").exists()
    assert post(people.sam.client, "/v1/agents", HELPER).status_code == 201


@transactional
def test_the_instructions_preview_is_markdown_with_html_shown_as_text_for_operators_only(people):  # noqa: F811
    operator, member = Client(HTTP_HOST="agents.example.com"), Client(HTTP_HOST="agents.example.com")
    operator.force_login(people.olga.user)
    member.force_login(people.mia.user)
    shown = post(operator, "/playground/agents/preview", {"markdown": "Be **brief**. <script>x()</script>"})
    assert shown.status_code == 200
    assert "<strong>brief</strong>" in shown.json()["html"] and "<script>" not in shown.json()["html"]
    assert post(operator, "/playground/agents/preview", {"markdown": 3}).status_code == 400
    assert post(member, "/playground/agents/preview", {"markdown": "x"}).status_code == 403
    assert post(Client(HTTP_HOST="agents.example.com"), "/playground/agents/preview", {"markdown": "x"}
                ).status_code == 302, "no one: sent to log in"
    _, elsewhere = PersonalToken.issue(person("ops", operator=True).user, "elsewhere", agents=["support"])
    scoped = type(people.mia)(people.olga.user, elsewhere).client
    assert post(scoped, "/playground/agents/preview", {"markdown": "x"}).status_code == 403
    assert post(people.sam.client, "/playground/agents/preview", {"markdown": "x"}).status_code == 200
    assert operator.get("/playground/agents/preview").status_code == 405


@transactional
def test_the_admins_add_agent_opens_the_editor_and_an_agents_page_links_to_it(people):  # noqa: F811
    staff = Client()
    staff.force_login(User.objects.create_superuser("root", "root@example.com", "not-used"))
    added = staff.get("/admin/agents/agent/add/")
    assert (added.status_code, added["Location"]) == (302, "/playground/agents/new")
    page = staff.get(f"/admin/agents/agent/{Agent.objects.get(slug='support').pk}/change/")
    assert b'href="/playground/support/edit"' in page.content


@transactional
def test_a_save_is_made_on_the_release_it_was_read_from_and_keeps_the_allowed_domains(people, tmp_path):  # noqa: F811
    ops = people.olga.client
    assert post(ops, "/v1/agents", HELPER).status_code == 201
    assert post(ops, "/v1/agents/helper?baseVersion=1", {**definition(HELPER), "name": "Two"}, "put").status_code == 200
    stale = post(ops, "/v1/agents/helper?baseVersion=1", {**definition(HELPER), "name": "Three"}, "put")
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "stale_definition"
    assert post(ops, "/v1/agents/helper?replace=maybe", definition(HELPER), "put").status_code == 400
    assert post(ops, "/v1/agents/helper?baseVersion=two", definition(HELPER), "put").json()["error"]["code"] == (
        "invalid_query")

    folder = tmp_path / "held"
    (folder / "agent").mkdir(parents=True)
    (folder / "agent" / "instructions.md").write_text("Held to a domain.\n")
    call_command("deploy", str(folder), "--allow-domain", "api.example.com")
    converted = ops.get("/v1/agents/held/definition").json()["definition"]
    assert post(ops, "/v1/agents/held?replace=true", converted, "put").status_code == 200
    assert Agent.objects.get(slug="held").active_deployment.allowed_domains == ["api.example.com"]


@transactional
def test_what_a_folder_declares_in_python_is_not_converted_and_a_started_folder_leaves_a_console_agent(
        people, tmp_path):  # noqa: F811
    ops = people.olga.client
    folder = tmp_path / "noshell"
    (folder / "agent").mkdir(parents=True)
    (folder / "agent" / "instructions.md").write_text("No shell.\n")
    (folder / "agent" / "agent.py").write_text(
        "from agents.sdk import Agent, local_runtime\nagent = Agent(runtime=local_runtime(shell=False))\n")
    deploy_agent_folder(folder)
    refused = ops.get("/v1/agents/noshell/definition")
    assert refused.status_code == 409
    [problem] = refused.json()["error"]["details"]
    assert problem["field"] == "agent/agent.py" and "local_runtime(...) settings besides network (shell)" in problem["message"]

    plain = tmp_path / "plain"
    (plain / "agent" / "subagents" / "sum").mkdir(parents=True)
    (plain / "agent" / "instructions.md").write_text("Plain.\n")
    (plain / "agent" / "subagents" / "sum" / "instructions.md").write_text("Summarize.\n")
    (plain / "agent" / "subagents" / "sum" / "agent.py").write_text(
        "from agents.sdk import Agent\nagent = Agent(description='Sums up', params={'temperature': 0.2})\n")
    deploy_agent_folder(plain)
    converted = ops.get("/v1/agents/plain/definition").json()["definition"]
    assert converted["subagents"] == [{"id": "sum", "description": "Sums up", "instructions": "Summarize.\n",
                                       "model": "", "params": {"temperature": 0.2}}], "its parameters come along"
    assert post(ops, "/v1/agents/plain?replace=true", {**converted, "retentionDays": 0}, "put").status_code == 200
    assert Agent.objects.get(slug="plain").active_deployment.manifest["retentionDays"] == 0, "0: kept forever"
    out, err = StringIO(), StringIO()
    call_command("deploy", str(plain), "--keep-console-agents", stdout=out, stderr=err)
    assert "made in the console" in err.getvalue()
    assert Agent.objects.get(slug="plain").active_deployment.source_kind == "console"


@transactional
def test_a_create_checks_under_the_agents_lock_that_the_slug_is_new(db):
    from agents.console.saving import save
    from agents.console.spec import parse
    from agents.discovery.releases import AgentExists

    save("helper", parse(definition(HELPER)), saved_by="a", new_agent=True)
    with pytest.raises(AgentExists):  # what a second create, racing the first past the view's check, meets
        save("helper", parse({**definition(HELPER), "name": "Other"}), saved_by="b", new_agent=True)
    assert Deployment.objects.filter(agent__slug="helper").count() == 1


def test_the_same_agent_is_the_same_bytes_whatever_the_page_writes_back(tmp_path):
    from agents.console.folder import dumped, write
    from agents.console.spec import parse

    spec = {**definition(HELPER), "params": {"temperature": 1.0, "top_p": 0.5},
            "experiments": [{"name": "e", "variants": {"terse": {"label": "T"}, "control": {}}}]}
    a = write(parse(spec), tmp_path / "a")
    b = write(parse(json.loads(json.dumps({**spec, "params": {"temperature": 1, "top_p": 0.5}}))), tmp_path / "b")
    assert content_hash(a) == content_hash(b)
    again = write(parse(json.loads(dumped(parse(spec)))), tmp_path / "c")
    assert content_hash(again) == content_hash(a), "console.json read back writes the same folder"
    assert "variants={'terse': {'label': 'T'}, 'control': {}}" in (a / "agent" / "ab" / "e.py").read_text(), \
        "the variants keep their order"


def test_the_written_folder_is_plain_data(tmp_path):
    from agents.console.folder import write
    from agents.console.spec import parse

    spec = {**definition(HELPER), "sandboxNetwork": True, "slack": {"approvers": ["U1"]},
            "webhooks": [{"id": "tracker", "message": "issue.title", "secretEnv": "TRACKER_SECRET"}],
            "params": {"odd key ') + __import__('os')": "'; x"}}
    root = write(parse(spec), tmp_path / "helper")
    calls = {"Agent", "local_runtime", "define_ab", "split_by_session_hash", "slack_channel", "webhook_channel"}
    for path in sorted((root / "agent").rglob("*.py")):
        module = ast.parse(path.read_text())
        *imports, assigned = module.body
        assert all(isinstance(i, ast.ImportFrom) and i.module == "agents.sdk" for i in imports), path
        assert isinstance(assigned, ast.Assign), path
        # Nothing runs but the SDK's declarations: every call is one of them, every argument a literal.
        for node in ast.walk(assigned.value):
            if isinstance(node, ast.Call):
                assert node.func.id in calls and not node.args[1:], (path, ast.dump(node))
                for value in [*node.args, *(k.value for k in node.keywords)]:
                    if not isinstance(value, ast.Call):
                        ast.literal_eval(value)
    assert json.loads((root / "agent" / "console.json").read_text())["instructions"] == "Be brief."
    assert Path(root / "agent" / "skills" / "tone" / "references" / "words.md").read_text() == "Use short words."
