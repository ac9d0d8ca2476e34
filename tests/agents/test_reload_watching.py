"""What the reloading process does with a change (agents.discovery.watching), in process.

The live loop (a served folder saved, a new session on the new release) is in
tests/agentsite/test_serve_reload.py; here: which folders a change names, a folder added
to a folder of agents, and the problems kept on the agent from the first failing save to
the fix.
"""
from __future__ import annotations

import logging
import textwrap
import threading
import time
from pathlib import Path

import pytest

from agents.discovery import deploy_release, find_agent_folders
from agents.discovery.watching import Watched, redeploy, watch
from agents.models import Agent
from tests.agents.folder_support import GOOD_TOOL, make_agent, minimal

pytestmark = pytest.mark.django_db(transaction=True)


def watched_over(*dirs: Path) -> Watched:
    watched = Watched([d.resolve() for d in dirs])
    for root in find_agent_folders(list(dirs)):
        watched.slugs[root] = redeploy(root, watched).slug
    return watched


def test_a_change_names_its_agent_folder_and_an_agent_added_beside_it(tmp_path):
    first = make_agent(tmp_path / "agents", minimal(), name="first")
    watched = watched_over(tmp_path / "agents")
    assert watched.roots_of([str(first / "agent" / "instructions.md")]) == [first.resolve()]
    assert watched.roots_of([str(tmp_path / "agents" / "notes.txt")]) == []  # beside the agents, not in one

    second = make_agent(tmp_path / "agents", minimal(), name="second")
    assert watched.added() == [second.resolve()] and watched.added() == []
    assert watched.roots_of([str(second / "agent" / "instructions.md")]) == [second.resolve()]
    outcome = redeploy(second.resolve(), watched)
    assert outcome.deployed is not None and outcome.slug == "second"
    assert Agent.objects.get(slug="second").active_deployment.version == 1


def test_problems_are_kept_from_the_first_failing_save_to_the_fix(tmp_path):
    root = make_agent(tmp_path, minimal(**{"agent/tools/weather.py": GOOD_TOOL}), name="weather").resolve()
    watched = watched_over(root)
    tool = root / "agent" / "tools" / "weather.py"

    tool.write_text("def weather(:\n")
    failed = redeploy(root, watched)
    assert failed.deployed is None and [p.path for p in failed.problems] == ["agent/tools/weather.py"]
    agent = Agent.objects.get(slug="weather")
    assert agent.active_deployment.version == 1  # the last good release still serves
    assert agent.folder_problems == [{"path": "agent/tools/weather.py", "message": failed.problems[0].message}]
    since = agent.folder_problems_since

    tool.write_text("x = 1\n")  # broken another way: the problems change, the time stays the first failure's
    redeploy(root, watched)
    agent.refresh_from_db()
    assert "define exactly one tool" in agent.folder_problems[0]["message"]
    assert agent.folder_problems_since == since

    tool.write_text(textwrap.dedent(GOOD_TOOL).replace("sunny", "rainy"))
    fixed = redeploy(root, watched)
    agent.refresh_from_db()
    assert fixed.deployed is not None and fixed.deployed.deployment.version == 2
    assert (agent.folder_problems, agent.folder_problems_since, agent.active_deployment.version) == ([], None, 2)


def test_the_watch_deploys_a_save_and_ignores_the_state_root_inside_a_served_folder(tmp_path, settings, caplog):
    caplog.set_level(logging.INFO, logger="agents.discovery.watching")
    root = make_agent(tmp_path, minimal(), name="inside").resolve()
    settings.STATE_ROOT = str(root / ".agentsite")  # `serve --agents .` from the agent's own folder
    (root / ".agentsite").mkdir()
    watched = watched_over(root)
    stop = threading.Event()
    watching = threading.Thread(target=watch, args=(watched,), kwargs={"stop_event": stop})
    watching.start()
    try:
        time.sleep(0.3)  # the watch is set up (a change before it would be missed, not misread)
        (root / ".agentsite" / "db-journal").write_text("written by the server")
        time.sleep(0.5)  # apart from the save: were it seen, it would be deployed (again) on its own
        (root / "agent" / "instructions.md").write_text("You help with the rain.")
        deadline = time.monotonic() + 20
        while Agent.objects.get(slug="inside").active_deployment.version < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        watching.join(10)
    agent = Agent.objects.get(slug="inside")
    assert agent.active_deployment.version == 2
    assert [r.getMessage().split(" from ")[0] for r in caplog.records] == ["agent inside: v2 deployed"]


def test_a_save_made_while_no_watch_was_set_up_is_deployed_at_the_first_quiet_look(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="agents.discovery.watching")
    root = make_agent(tmp_path, minimal(), name="between").resolve()
    watched = watched_over(root)
    # Saved after the last deploy and before the watch starts (as when the watch is set up again for an
    # agent added beside it): no event will ever name it.
    time.sleep(0.02)  # a modification time apart from the deploy's look, on file systems that keep them coarse
    (root / "agent" / "instructions.md").write_text("Saved between two watches.")
    stop = threading.Event()
    watching = threading.Thread(target=watch, args=(watched,), kwargs={"stop_event": stop})
    watching.start()
    try:
        wait_for(lambda: version("between") == 2)
        time.sleep(1.5)  # another quiet look: the folder is as deployed, nothing more is deployed
    finally:
        stop.set()
        watching.join(10)
    assert version("between") == 2
    assert [r.getMessage().split(" from ")[0] for r in caplog.records] == ["agent between: v2 deployed"]


def wait_for(condition, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)


def version(slug: str) -> int | None:
    return Agent.objects.filter(slug=slug).values_list("active_deployment__version", flat=True).first()


def test_the_watch_deploys_an_agent_added_a_folder_replaced_and_outlives_a_tool_that_exits(tmp_path):
    agents = tmp_path / "agents"
    first = make_agent(agents, minimal(), name="first").resolve()
    watched = watched_over(agents)
    stop = threading.Event()
    watching = threading.Thread(target=watch, args=(watched,), kwargs={"stop_event": stop})
    watching.start()
    try:
        make_agent(agents, minimal(), name="second")  # added beside it: deployed within the second's look
        wait_for(lambda: version("second") == 1)
        assert version("second") == 1

        (first / "agent" / "tools").mkdir()
        (first / "agent" / "tools" / "bye.py").write_text("raise SystemExit(3)\n")
        wait_for(lambda: Agent.objects.get(slug="first").folder_problems)
        assert "failed to import: SystemExit: 3" in Agent.objects.get(slug="first").folder_problems[0]["message"]

        # Replaced whole, as a checkout of another branch does: the new folder is deployed and watched.
        replacement = make_agent(tmp_path / "elsewhere", minimal(**{"agent/instructions.md": "Branch two."}),
                                 name="first")
        old = first.with_name("first-old")
        first.rename(old)
        replacement.rename(first)
        wait_for(lambda: version("first") == 2)
        assert version("first") == 2 and Agent.objects.get(slug="first").folder_problems == []
        (first / "agent" / "instructions.md").write_text("Branch two, edited.")
        wait_for(lambda: version("first") == 3)
        assert version("first") == 3
    finally:
        stop.set()
        watching.join(10)
    assert not watching.is_alive()


def test_a_deploy_that_validates_clears_the_problems_and_they_show_only_while_folders_are_watched(tmp_path, settings,
                                                                                                 local):
    root = make_agent(tmp_path, minimal(), name="stale").resolve()
    watched = watched_over(root)
    (root / "agent" / "agent.py").write_text("agent = \n")
    redeploy(root, watched)
    client = local
    settings.AGENTSITE_RELOAD = True
    [problem] = client.get("/stale/v1/info").json()["folderError"]["problems"]
    assert problem["path"] == "agent/agent.py"
    settings.AGENTSITE_RELOAD = False  # a server that does not watch would never clear them
    assert client.get("/stale/v1/info").json()["folderError"] is None
    assert client.get("/stale/v1/release").json()["folderError"] is None

    (root / "agent" / "agent.py").unlink()  # fixed while no server watched, then deployed by hand
    deploy_release(root)
    settings.AGENTSITE_RELOAD = True
    assert client.get("/stale/v1/release").json()["folderError"] is None
    assert Agent.objects.get(slug="stale").folder_problems == []
