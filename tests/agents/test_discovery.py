"""Agent folders: what loads, and how each mistake is reported (the file and the fix)."""
from __future__ import annotations

from pathlib import Path

import pytest

from agents.discovery import AgentFolderError, deploy_agent_folder, deploy_release, find_agent_folders, load_agent_folder
from agents.models import Agent, Deployment

from .folder_support import EXAMPLE, GOOD_TOOL, make_agent, minimal, only_problem, problems_of


# -- folders that load ------------------------------------------------------------------

def test_a_folder_with_only_instructions_loads_with_the_default_model(tmp_path):
    loaded = load_agent_folder(make_agent(tmp_path, minimal()))

    assert loaded.slug == "my-agent"
    assert loaded.instructions == "You help with the weather."
    assert loaded.model == "scripted:echo"
    assert loaded.tools == {}
    assert len(loaded.content_hash) == 64


def test_a_full_folder_loads_its_config_and_tools(tmp_path):
    root = make_agent(tmp_path, minimal(**{
        "agent/agent.py": """
            from agents.sdk import Agent
            agent = Agent(model="scripted:echo", name="Weather", description="Knows the weather.", max_steps=3)
        """,
        "agent/tools/weather.py": GOOD_TOOL,
        "agent/tools/__init__.py": "",
        "agent/tools/_shared.py": "HELPER = 1\n",
        "agent/lib/helpers.py": "def f():\n    return 1\n",
    }))

    loaded = load_agent_folder(root)

    assert loaded.config.description == "Knows the weather."
    assert loaded.config.max_steps == 3
    assert set(loaded.tools) == {"weather"}
    manifest = loaded.manifest()
    assert manifest["name"] == "Weather"
    [tool] = manifest["tools"]
    assert tool["name"] == "weather"
    assert tool["file"] == "agent/tools/weather.py"
    assert tool["effect"] == "read"
    assert tool["inputSchema"]["properties"]["city"]["type"] == "string"


def test_the_example_support_agent_loads(tmp_path):
    loaded = load_agent_folder(EXAMPLE)

    assert loaded.slug == "support"
    assert set(loaded.tools) == {"cancel_order", "lookup_order", "refund_order"}
    assert loaded.tools["refund_order"].effect == "write"


def test_a_tool_with_time_args_naming_its_fields_loads(tmp_path):
    root = make_agent(tmp_path, minimal(**{"agent/tools/book.py": """
        from datetime import datetime
        from pydantic import BaseModel
        from agents.sdk import tool

        class Input(BaseModel):
            when: datetime

        @tool(description="Book a slot.", effect="write", time_args=["when"])
        def book(input: Input, ctx) -> str:
            return "booked"
    """}))

    assert load_agent_folder(root).tools["book"].time_args == ("when",)


def test_the_content_hash_follows_the_files(tmp_path):
    root = make_agent(tmp_path, minimal())
    before = load_agent_folder(root).content_hash

    assert load_agent_folder(root).content_hash == before
    (root / "agent" / "instructions.md").write_text("You help with the tides.")
    assert load_agent_folder(root).content_hash != before


# -- folders that do not load: each problem names the file and the fix -------------------

def test_a_folder_without_agent_dir_says_to_create_it(tmp_path):
    root = tmp_path / "my-agent"
    root.mkdir()
    (root / "instructions.md").write_text("misplaced")

    problem = only_problem(root)

    assert problem.path == "agent/"
    assert "create an agent/ folder with instructions.md" in problem.message


def test_missing_instructions_says_to_write_them(tmp_path):
    problem = only_problem(make_agent(tmp_path, {"agent/tools/weather.py": GOOD_TOOL}))

    assert problem.path == "agent/instructions.md"
    assert "missing" in problem.message and "system prompt" in problem.message


@pytest.mark.parametrize("content", ["", "   \n\n\t"])
def test_empty_instructions_say_to_write_them(tmp_path, content):
    problem = only_problem(make_agent(tmp_path, {"agent/instructions.md": content}))

    assert problem.path == "agent/instructions.md"
    assert "empty" in problem.message and "system prompt" in problem.message


def test_instructions_that_are_not_utf8_say_to_save_as_utf8(tmp_path):
    root = make_agent(tmp_path, {})
    (root / "agent").mkdir()
    (root / "agent" / "instructions.md").write_bytes(b"caf\xe9")

    problem = only_problem(root)

    assert problem.path == "agent/instructions.md"
    assert "UTF-8" in problem.message


@pytest.mark.parametrize("source", [
    "from agents.sdk import Agent\nconfig = Agent()\n",
    "agent = {'model': 'scripted:echo'}\n",
    "",
])
def test_agent_py_without_an_agent_says_to_define_one(tmp_path, source):
    problem = only_problem(make_agent(tmp_path, minimal(**{"agent/agent.py": source})))

    assert problem.path == "agent/agent.py"
    assert "agent = Agent(...)" in problem.message


def test_agent_py_that_fails_to_import_names_the_error(tmp_path):
    root = make_agent(tmp_path, minimal(**{"agent/agent.py": "import no_such_module_for_agentsite\n"}))

    problem = only_problem(root)

    assert problem.path == "agent/agent.py"
    assert "failed to import" in problem.message
    assert "ModuleNotFoundError" in problem.message
    assert "no_such_module_for_agentsite" in problem.message


def test_agent_py_with_a_syntax_error_names_the_error(tmp_path):
    problem = only_problem(make_agent(tmp_path, minimal(**{"agent/agent.py": "agent = Agent(\n"})))

    assert problem.path == "agent/agent.py"
    assert "SyntaxError" in problem.message


@pytest.mark.parametrize("model,expected", [
    ("gpt-4.1-mini", "must look like 'provider:model'"),
    ("scripted:", "must look like 'provider:model'"),
    (":echo", "must look like 'provider:model'"),
    ("nosuchprovider:model-x", "unknown provider 'nosuchprovider'"),
])
def test_a_bad_model_id_says_what_a_model_id_looks_like(tmp_path, model, expected):
    root = make_agent(tmp_path, minimal(**{"agent/agent.py": f"""
        from agents.sdk import Agent
        agent = Agent(model={model!r})
    """}))

    problem = only_problem(root)

    assert problem.path == "agent/agent.py"
    assert expected in problem.message
    assert repr(model) in problem.message


def test_an_unknown_provider_lists_the_known_ones(tmp_path):
    root = make_agent(tmp_path, minimal(**{"agent/agent.py": "from agents.sdk import Agent\nagent = Agent(model='x:y')\n"}))

    assert "scripted" in only_problem(root).message


@pytest.mark.parametrize("max_steps", [0, 101, "3"])
def test_max_steps_out_of_range_says_the_range(tmp_path, max_steps):
    root = make_agent(tmp_path, minimal(**{"agent/agent.py": f"""
        from agents.sdk import Agent
        agent = Agent(max_steps={max_steps!r})
    """}))

    problem = only_problem(root)

    assert problem.path == "agent/agent.py"
    assert "between 1 and 100" in problem.message



@pytest.mark.parametrize("folder", ["v1", "api", "_private", "my.agent", "-agent"])
def test_a_folder_name_that_is_not_a_valid_slug_says_to_rename_the_folder(tmp_path, folder):
    root = make_agent(tmp_path, minimal(), name=folder)

    problem = only_problem(root)

    assert problem.path == str(root.resolve())
    assert "rename the folder" in problem.message
    assert repr(folder) in problem.message


def test_an_explicit_slug_overrides_the_folder_name(tmp_path):
    root = make_agent(tmp_path, minimal(), name="my.agent")

    assert load_agent_folder(root, slug="weather").slug == "weather"
    with pytest.raises(AgentFolderError):
        load_agent_folder(root, slug="admin")


def test_every_problem_of_a_folder_is_reported_at_once(tmp_path):
    root = make_agent(tmp_path, {
        "agent/instructions.md": "",
        "agent/agent.py": "from agents.sdk import Agent\nagent = Agent(model='nope')\n",
        "agent/tools/weather.py": GOOD_TOOL.replace('description="Say the weather in a city."', 'description=""'),
        "agent/tools/Bad.py": GOOD_TOOL,
    }, name="v1")

    problems = problems_of(root)

    assert {p.path for p in problems} == {
        str(root.resolve()), "agent/instructions.md", "agent/agent.py", "agent/tools/weather.py", "agent/tools/Bad.py",
    }
    assert str(AgentFolderError(root, problems)).count("\n") == len(problems) - 1


def test_find_agent_folders_accepts_a_folder_or_a_folder_of_them(tmp_path):
    one = make_agent(tmp_path, minimal(), name="one")
    two = make_agent(tmp_path, minimal(), name="two")
    (tmp_path / "not-an-agent").mkdir()

    assert find_agent_folders([one]) == [one.resolve()]
    assert find_agent_folders([tmp_path]) == [one.resolve(), two.resolve()]
    with pytest.raises(AgentFolderError) as raised:
        find_agent_folders([tmp_path / "missing"])
    assert "not a folder" in raised.value.problems[0].message


# -- deploy_agent_folder -------------------------------------------------------------------

@pytest.mark.django_db
def test_deploying_the_same_content_twice_creates_one_deployment(tmp_path):
    root = make_agent(tmp_path, minimal(**{"agent/tools/weather.py": GOOD_TOOL}))

    first = deploy_agent_folder(root)
    second = deploy_agent_folder(root)

    assert second.pk == first.pk
    assert Deployment.objects.count() == 1
    agent = Agent.objects.get(slug="my-agent")
    assert agent.active_deployment_id == first.pk
    assert first.version == 1
    assert first.status == Deployment.Status.RUNNING
    assert first.activated_at is not None
    assert first.manifest["tools"][0]["name"] == "weather"
    assert first.source == str(root.resolve())


@pytest.mark.django_db
def test_deploying_changed_content_creates_version_2_and_activates_it(tmp_path):
    root = make_agent(tmp_path, minimal())
    first = deploy_agent_folder(root)

    (root / "agent" / "instructions.md").write_text("You help with the tides.")
    second = deploy_agent_folder(root)

    assert second.pk != first.pk
    assert second.version == 2
    assert second.content_hash != first.content_hash
    assert Agent.objects.get(slug="my-agent").active_deployment_id == second.pk
    assert second.manifest["instructions"] == "You help with the tides."
    assert Deployment.objects.get(pk=first.pk).manifest["instructions"] == "You help with the weather."


@pytest.mark.django_db
def test_deploying_the_content_of_an_earlier_release_reactivates_it_instead_of_a_new_version(tmp_path):
    root = make_agent(tmp_path, minimal())
    first = deploy_agent_folder(root)
    (root / "agent" / "instructions.md").write_text("You help with the tides.")
    second = deploy_agent_folder(root)
    (root / "agent" / "instructions.md").write_text("You help with the weather.")

    back = deploy_release(root)

    assert back.reused is True
    assert back.deployment.pk == first.pk
    assert Deployment.objects.count() == 2
    assert Agent.objects.get(slug="my-agent").active_deployment_id == first.pk
    again = deploy_release(root)
    assert (again.deployment.pk, again.reused) == (first.pk, True)
    assert deploy_release(root, allowed_domains=["api.example.com"]).reused is False  # the domains are the release's
    assert Deployment.objects.get(pk=second.pk).version == 2


@pytest.mark.django_db
def test_a_deployment_runs_from_its_snapshot_not_the_source_folder(tmp_path):
    root = make_agent(tmp_path, minimal())
    deployment = deploy_agent_folder(root)

    (root / "agent" / "instructions.md").write_text("Changed after deploying.")

    snapshot = deployment.snapshot_dir()
    assert (snapshot / "agent" / "instructions.md").read_text() == "You help with the weather."
    assert load_agent_folder(snapshot, deployment.agent.slug).instructions == "You help with the weather."


@pytest.mark.django_db
def test_the_agent_row_takes_name_and_description_from_agent_py(tmp_path):
    root = make_agent(tmp_path, minimal(**{"agent/agent.py": """
        from agents.sdk import Agent
        agent = Agent(name="Weather", description="Knows the weather.")
    """}))

    deployment = deploy_agent_folder(root)

    agent = Agent.objects.get(slug="my-agent")
    assert (agent.name, agent.description) == ("Weather", "Knows the weather.")
    assert deployment.agent.active_deployment == deployment


@pytest.mark.django_db
def test_an_invalid_folder_deploys_nothing(tmp_path):
    root = make_agent(tmp_path, {"agent/instructions.md": ""})

    with pytest.raises(AgentFolderError):
        deploy_agent_folder(root)

    assert not Agent.objects.exists()
    assert not Deployment.objects.exists()


@pytest.mark.django_db
def test_an_invalid_new_version_leaves_the_active_one_in_place(tmp_path):
    root = make_agent(tmp_path, minimal())
    first = deploy_agent_folder(root)

    (root / "agent" / "agent.py").write_text("raise RuntimeError('half-written')\n")
    with pytest.raises(AgentFolderError):
        deploy_agent_folder(root)

    assert Deployment.objects.count() == 1
    assert Agent.objects.get(slug="my-agent").active_deployment_id == first.pk
