"""`Agent(model=..., models=[...], fallback=[...], peers=[...])` as a folder declares them: what loads,
what each mistake says, and a release that keeps the default model it was deployed with whatever
the environment of the process that later runs it says."""
from __future__ import annotations

import json
import subprocess
import sys
from typing import Iterator

import psycopg
import pytest

from agents.discovery import deploy_agent_folder, load_agent_folder, load_deployment
from agents.discovery.releases import _cache
from tests.providers.loopback import LoopbackModelServer, Reply, oa_text
from tests.support import ROOT, child_env, postgres_database

from .folder_support import make_agent, minimal, only_problem, problems_of


def agent_py(args: str) -> dict[str, str]:
    return minimal(**{"agent/agent.py": f"from agents.sdk import Agent\nagent = Agent({args})\n"})


def test_a_list_of_models_loads_with_the_first_as_the_default(tmp_path):
    loaded = load_agent_folder(make_agent(tmp_path, agent_py("models=['scripted:echo', 'openai:gpt-4.1-mini']")))

    assert loaded.model == "scripted:echo"
    assert loaded.models == ["scripted:echo", "openai:gpt-4.1-mini"]
    manifest = loaded.manifest()
    assert manifest["model"] == "scripted:echo"
    assert manifest["models"] == ["scripted:echo", "openai:gpt-4.1-mini"]
    assert "fallback" not in manifest and "peers" not in manifest


def test_model_among_models_names_the_default(tmp_path):
    loaded = load_agent_folder(make_agent(tmp_path, agent_py(
        "model='openai:gpt-4.1-mini', models=['scripted:echo', 'openai:gpt-4.1-mini']")))

    assert loaded.model == "openai:gpt-4.1-mini"
    assert loaded.models == ["openai:gpt-4.1-mini", "scripted:echo"]


def test_one_model_keeps_the_manifest_agents_always_had(tmp_path):
    loaded = load_agent_folder(make_agent(tmp_path, agent_py("model='scripted:echo'")))

    assert loaded.models == ["scripted:echo"]
    assert "models" not in loaded.manifest()


def test_fallback_and_peers_load_into_the_manifest(tmp_path):
    loaded = load_agent_folder(make_agent(tmp_path, agent_py(
        "model='anthropic:claude-sonnet-4-5', fallback=['openai:gpt-4.1-mini'], peers=['researcher', 'writer-2']")))

    assert loaded.fallback == ["openai:gpt-4.1-mini"]
    assert loaded.peers == ["researcher", "writer-2"]
    assert loaded.manifest()["fallback"] == ["openai:gpt-4.1-mini"]
    assert loaded.manifest()["peers"] == ["researcher", "writer-2"]


def test_peers_on_other_servers_load_by_url_with_the_secret_their_token_is(tmp_path):
    loaded = load_agent_folder(make_agent(tmp_path, agent_py(
        "peers=['writer', 'https://agents.example.com/research/', "
        "{'url': 'https://b.example/support/.well-known/agent-card.json', 'token': '${B_TOKEN}'}]")))

    assert loaded.peers == ["writer"]
    assert loaded.manifest()["remotePeers"] == [{"url": "https://agents.example.com/research"},
                                                {"url": "https://b.example/support", "token": "${B_TOKEN}"}]


def test_a_model_outside_models_is_one_problem_naming_the_fix(tmp_path):
    problem = only_problem(make_agent(tmp_path, agent_py(
        "model='anthropic:claude-sonnet-4-5', models=['scripted:echo', 'openai:gpt-4.1-mini']")))

    assert problem.path == "agent/agent.py"
    assert "'anthropic:claude-sonnet-4-5' is not in models" in problem.message
    assert "add it to models" in problem.message


@pytest.mark.parametrize("args,expected", [
    ("models=['scripted:echo', 'gpt-4.1-mini']", "'gpt-4.1-mini' must look like 'provider:model'"),
    ("models=['nosuchprovider:x']", "unknown provider 'nosuchprovider'"),
    ("models='scripted:echo'", "models must be a list"),
    ("models=['scripted:echo', 'scripted:echo']", "models lists a model twice"),
    ("fallback=['openai:gpt-4.1-mini', 'openai:gpt-4.1-mini']", "fallback lists a model twice"),
    ("fallback=['gpt-4.1-mini']", "'gpt-4.1-mini' must look like 'provider:model'"),
    ("fallback='openai:gpt-4.1-mini'", "fallback must be a list"),
    ("peers=['Research Desk']", "peer 'Research Desk' is not an agent slug"),
    ("peers=['my-agent']", "peer 'my-agent' is this agent"),
    ("peers=['writer', 'writer']", "peers lists an agent twice"),
    ("peers='writer'", "peers must be a list of agent slugs"),
    ("peers=['ftp://agents.example.com/x']", "peer 'ftp://agents.example.com/x' is not an agent slug"),
    ("peers=[{'url': 'https://a.example/x', 'token': 'ast_plain'}]", "token names a secret as '${NAME}'"),
    ("peers=[{'url': 'https://a.example/x', 'key': 'K'}]", "give a slug, a URL, or {'url': URL"),
    ("peers=['https://a.example/x', {'url': 'https://a.example/x/'}]", "peers lists an agent's URL twice"),
])
def test_each_mistake_is_one_problem_in_agent_py_that_says_what_is_wrong(tmp_path, args, expected):
    problem = only_problem(make_agent(tmp_path, agent_py(args)))

    assert problem.path == "agent/agent.py"
    assert expected in problem.message


def test_every_mistake_of_the_selection_is_reported_at_once(tmp_path):
    problems = problems_of(make_agent(tmp_path, agent_py(
        "models=['scripted:echo', 'bad'], fallback=['x:y'], peers=['my-agent']")))

    assert len(problems) == 3, problems
    assert {p.path for p in problems} == {"agent/agent.py"}


@pytest.mark.django_db
def test_a_loaded_release_keeps_its_deployed_default_when_this_process_says_another(tmp_path, settings):
    settings.AGENTSITE_DEFAULT_MODEL = "openai:gpt-deployed"
    deployment = deploy_agent_folder(make_agent(tmp_path, minimal()))
    _cache.clear()
    settings.AGENTSITE_DEFAULT_MODEL = "scripted:echo"

    loaded = load_deployment(deployment)

    assert loaded.model == "openai:gpt-deployed"
    assert deployment.models == ["openai:gpt-deployed"]
    # A folder loaded afresh (a new deploy) takes this environment's default.
    assert load_agent_folder(make_agent(tmp_path / "again", minimal())).model == "scripted:echo"


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT, env=child_env(**env),
                          capture_output=True, text=True, timeout=180)


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    """One PostgreSQL database for both deploys, a copy of a migrated one: each deploys an agent of its own."""
    with postgres_database(migrated=True) as url:
        yield url


@pytest.mark.parametrize("deploy_env,deployed", [
    ({"AGENTSITE_DEFAULT_MODEL": "openai:gpt-deployed"}, "gpt-deployed"),
    ({"OPENAI_API_KEY": "sk-deploying-host"}, "gpt-4.1-mini"),  # no setting: the provider key chose it
], ids=["setting", "provider-key"])
def test_a_turn_in_another_process_runs_on_the_default_the_release_was_deployed_with(tmp_path, database, deploy_env,
                                                                                      deployed):
    """Deployed by one process whose environment picks an OpenAI model; run by `manage.py run` in
    another whose environment says scripted:echo: the turn is bound to, and calls, the deployed one."""
    slug = f"helper-{deployed.replace('.', '-')}"
    folder = make_agent(tmp_path, minimal(), name=slug)
    with LoopbackModelServer("openai") as server:
        server.replies.append(Reply(events=oa_text("the deployed model answers")))
        deploying = {"AGENTSITE_STATE_ROOT": str(tmp_path / "host-a"), "DATABASE_URL": database, **deploy_env}
        done = manage(deploying, "deploy", str(folder), "--json")
        assert done.returncode == 0, done.stderr

        running = {"AGENTSITE_STATE_ROOT": str(tmp_path / "host-b"), "DATABASE_URL": database,
                   "AGENTSITE_DEFAULT_MODEL": "scripted:echo",
                   "OPENAI_BASE_URL": server.url + "/v1", "OPENAI_API_KEY": "sk-running-host"}
        ran = manage(running, "run", slug, "--json", "-m", "which model are you?")

        assert ran.returncode == 0, ran.stderr
        trajectory = json.loads(ran.stdout)
        assert trajectory["turns"][0]["reply"] == "the deployed model answers"
        assert [r["body"]["model"] for r in server.requests] == [deployed]
        with psycopg.connect(database) as conn:
            bound = conn.execute("SELECT data FROM agent_sessions_event WHERE session_id = %s AND type = %s",
                                 [trajectory["sessionId"], "agent.bound"]).fetchone()[0]
            model = conn.execute("SELECT model FROM agent_sessions_session WHERE id = %s",
                                 [trajectory["sessionId"]]).fetchone()[0]
        assert bound["model"] == model == f"openai:{deployed}"
