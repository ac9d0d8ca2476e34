"""`manage.py serve` as a user runs it: a real process tree, real HTTP, real signals."""
from __future__ import annotations

import io
import signal
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import httpx
import psutil
import pytest

from django.core.management import call_command
from django.core.management.base import CommandError

from agents.models import Agent
from agentsite.management.commands import serve
from agentsite.management.commands.serve import agent_dirs
from tests.sessions.test_live_stream import is_type, read_ndjson
from tests.support import ROOT, Server, child_env, free_port, premigrate, run_server

TOKEN = "serve-test-token-8f2c1e"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def write_agent(root: Path, instructions: str | None = "Greet people.\n", agent_py: str | None = None) -> Path:
    (root / "agent").mkdir(parents=True)
    if instructions is not None:
        (root / "agent" / "instructions.md").write_text(instructions)
    if agent_py is not None:
        (root / "agent" / "agent.py").write_text(agent_py)
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    """serve with a bearer token and an extra agent folder, on an empty state root it migrates itself
    (the other live servers of the suite start from a copy of a migrated database: tests.support.premigrate)."""
    greeter = write_agent(
        tmp_path_factory.mktemp("agents") / "greeter",
        agent_py='from agents.sdk import Agent\nagent = Agent(model="scripted:echo", description="Says hello.")\n',
    )
    with run_server(tmp_path_factory.mktemp("state"), "--bearer-token", TOKEN, "--agents", str(greeter),
                    migrated=False) as s:
        yield s


def alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    """Processes still running; a zombie has exited, it only waits to be reaped."""
    out = []
    for p in processes:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def test_serve_prints_its_urls_and_answers_healthz(server):
    output = server.output()
    base = server.base_url
    assert f"agentsite serving on {base}" in output
    for url in (f"{base}/v1/agents", f"{base}/api/docs/", f"{base}/admin/", f"{base}/healthz"):
        assert url in output
    # Liveness needs no credentials, even when the API does.
    response = httpx.get(f"{base}/healthz", timeout=10)
    assert response.status_code == 200 and response.json() == {"status": "ok"}


def test_a_bearer_token_is_required_and_accepted(server):
    with server.client() as client:
        missing = client.post("/support/v1/session", json={"message": "hi"})
        assert missing.status_code == 401
        assert missing.json()["error"]["code"] == "unauthorized"
        assert missing.headers["WWW-Authenticate"].startswith("Bearer")
        wrong = client.post("/support/v1/session", json={"message": "hi"}, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401

        created = client.post("/support/v1/session", json={"message": "hi"}, headers=AUTH)
        assert created.status_code == 201, created.text
        session_id = created.json()["sessionId"]
        assert client.get(f"/support/v1/session/{session_id}/stream").status_code == 401
        assert client.get(f"/support/v1/session/{session_id}/events").status_code == 401
        client.headers.update(AUTH)
        events = read_ndjson(client, f"/support/v1/session/{session_id}/stream", until=is_type("session.waiting"))
        assert events[-2]["type"] == "turn.completed"


def test_children_get_only_the_token_digest(server):
    children = psutil.Process(server.process.pid).children(recursive=True)
    assert children
    for child in children:
        assert TOKEN not in " ".join(child.cmdline())
        assert TOKEN not in "".join(f"{k}={v}" for k, v in child.environ().items())


def test_agents_dir_deploys_an_extra_agent(server):
    assert "agent greeter: v1 (scripted:echo)" in server.output()
    # Outside production the examples come too (the Quickstart's `serve`), each said with its folder.
    assert f"agent support: v1 (scripted:echo) from {ROOT / 'examples' / 'support'}" in server.output()
    with server.client(headers=AUTH) as client:
        agents = {a["slug"]: a for a in client.get("/v1/agents").json()["agents"]}
        assert {"greeter", "support"} <= set(agents)
        assert agents["greeter"]["description"] == "Says hello."

        created = client.post("/greeter/v1/session", json={"message": "hi greeter"})
        assert created.status_code == 201, created.text
        events = read_ndjson(client, f"/greeter/v1/session/{created.json()['sessionId']}/stream",
                             until=is_type("session.waiting"))
        assert next(e for e in events if e["type"] == "message.completed")["data"]["text"] == "You said: hi greeter"


def test_sigint_stops_the_web_server_qcluster_and_its_workers_with_exit_code_0(tmp_path):
    # INFO logs show django-q2's own account of its stop.
    with run_server(tmp_path / "state", env={"AGENTSITE_LOG_LEVEL": "INFO"}) as server:
        with server.client() as client:
            # A finished turn proves the workers are up before we count them.
            created = client.post("/support/v1/session", json={"message": "warm up"})
            assert created.status_code == 201, created.text
            read_ndjson(client, f"/support/v1/session/{created.json()['sessionId']}/stream",
                        until=is_type("session.waiting"))
        serve = psutil.Process(server.process.pid)
        tree = serve.children(recursive=True)
        direct = serve.children()
        web = [p for p in direct if "agentsite web (uvicorn)" in " ".join(p.cmdline())]  # the default server
        cluster = [p for p in direct if "qcluster" in " ".join(p.cmdline())]
        assert len(web) == 1 and len(cluster) == 1, [p.cmdline() for p in direct]
        # qcluster's sentinel, and under it the workers, monitor and pusher.
        assert len(cluster[0].children(recursive=True)) >= 4
        # Only the web process listens: once it stops, the port refuses connections.
        assert [c.status for c in cluster[0].net_connections("tcp")].count(psutil.CONN_LISTEN) == 0
        assert [c.status for c in web[0].net_connections("tcp")].count(psutil.CONN_LISTEN) == 1

        assert server.stop(signal.SIGINT, timeout=60) == 0
        gone, still = psutil.wait_procs(tree, timeout=20)
        assert not alive(still), [(p.pid, p.cmdline()) for p in alive(still)]
        output = server.output()
        assert "agentsite stopped" in output
        # django-q2 finished its own orderly stop (it was not killed part-way).
        assert "has stopped" in output, output


def test_sigint_with_a_turn_in_flight_and_a_stream_open_still_leaves_no_process(tmp_path):
    with run_server(tmp_path / "state") as server:
        with server.client() as client:
            created = client.post("/support/v1/session", json={"message": "/sleep 60000"})
            assert created.status_code == 201, created.text
            url = f"/support/v1/session/{created.json()['sessionId']}/stream"
            with client.stream("GET", url) as stream:
                # Wait until a worker is inside the turn's model call.
                for line in stream.iter_lines():
                    if '"step.started"' in line:
                        break
                tree = psutil.Process(server.process.pid).children(recursive=True)
                # The worker will not finish its task by itself: serve's grace period ends it.
                assert server.stop(signal.SIGINT, timeout=60) == 0
        gone, still = psutil.wait_procs(tree, timeout=20)
        assert not alive(still), [(p.pid, p.cmdline()) for p in alive(still)]
        assert "agentsite stopped" in server.output()


def run_serve(state_root: Path, *args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    state_root.mkdir(parents=True, exist_ok=True)
    premigrate(state_root)
    return subprocess.run(
        [sys.executable, "manage.py", "serve", "--port", str(free_port()), "--state-root", str(state_root), *args],
        cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=timeout,
    )


def test_an_invalid_agents_folder_makes_serve_exit_non_zero_naming_the_file_and_the_fix(tmp_path):
    bad = write_agent(tmp_path / "broken", instructions=None, agent_py="agent = 42\n")
    done = run_serve(tmp_path / "state", "--agents", str(bad))

    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert str(bad) in output
    assert "agent/instructions.md" in output and "write the agent's system prompt" in output
    assert "agent/agent.py" in output and "agent = Agent(...)" in output
    assert "agentsite serving" not in output

    missing = run_serve(tmp_path / "state", "--agents", str(tmp_path / "nowhere"))
    assert missing.returncode != 0
    assert str(tmp_path / "nowhere") in missing.stderr and "not a folder" in missing.stderr


# -- which folders a start deploys (in process: no server needed) ------------------------------

def deploy_as_serve(**opts) -> list[str]:
    out = io.StringIO()
    serve.Command(stdout=out).deploy({"agents": [], "examples": False, "no_examples": False, **opts})
    return out.getvalue().splitlines()


@pytest.mark.django_db
def test_production_deploys_no_examples_unless_asked_and_says_what_it_serves(settings, tmp_path):
    greeter = write_agent(tmp_path / "greeter")
    settings.AGENTSITE_ENV = "production"

    assert deploy_as_serve() == ["no agent folders deployed (the example agents are deployed in production only "
                                 "with --examples); add yours with --agents DIR"]
    assert not Agent.objects.exists()
    assert deploy_as_serve(agents=[str(greeter)]) == [f"agent greeter: v1 (scripted:echo) from {greeter}"]
    assert set(Agent.objects.values_list("slug", flat=True)) == {"greeter"}

    asked = deploy_as_serve(examples=True)
    assert f"agent support: v1 (scripted:echo) from {ROOT / 'examples' / 'support'}" in asked
    assert f"agent greeter: v1 deployed earlier from {greeter}" in asked
    assert deploy_as_serve(agents=[str(greeter)])[0] == f"agent greeter: v1 (scripted:echo) from {greeter} (unchanged)"

    settings.AGENTSITE_ENV = "development"
    assert agent_dirs({"agents": [], "no_examples": False}) == [ROOT / "examples"]
    assert agent_dirs({"agents": [], "no_examples": True}) == []


def test_examples_and_no_examples_together_are_refused():
    with pytest.raises(CommandError, match="--examples or --no-examples"):
        call_command("serve", "--examples", "--no-examples")
