"""Deployment.activate: the one conditional update every way of activating a release goes through."""
from __future__ import annotations

import threading
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection

from agents.discovery import deploy_agent_folder
from agents.discovery.activation import ReleaseError, activate_release, find_agent, find_release
from agents.models import Agent, Deployment


def named_release(root: Path, name: str, description: str) -> Path:
    (root / "agent").mkdir(parents=True, exist_ok=True)
    (root / "agent" / "instructions.md").write_text(f"You are {name}.")
    (root / "agent" / "agent.py").write_text(
        f"from agents.sdk import Agent\nagent = Agent(name={name!r}, description={description!r})\n")
    return root


@pytest.fixture
def two_names(db, tmp_path) -> tuple[Deployment, Deployment]:
    root = tmp_path / "greeter"
    v1 = deploy_agent_folder(named_release(root, "Greeter", "Says hello."))
    v2 = deploy_agent_folder(named_release(root, "Host", "Welcomes guests."))
    return v1, v2


def test_the_agents_name_and_description_follow_the_release_activated(two_names):
    v1, v2 = two_names
    agent = Agent.objects.get(slug="greeter")
    assert (agent.name, agent.description) == ("Host", "Welcomes guests.")

    call_command("rollback", "greeter", stdout=StringIO())

    agent.refresh_from_db()
    assert (agent.active_deployment_id, agent.name, agent.description) == (v1.pk, "Greeter", "Says hello.")
    call_command("activate", "greeter", "2", stdout=StringIO())
    agent.refresh_from_db()
    assert (agent.active_deployment_id, agent.name, agent.description) == (v2.pk, "Host", "Welcomes guests.")


def test_of_two_activations_of_one_release_only_the_first_changes_anything(two_names):
    v1, _ = two_names
    first, second = Deployment.objects.get(pk=v1.pk), Deployment.objects.get(pk=v1.pk)  # both read before either ran

    assert first.activate() is True
    stamp = Deployment.objects.get(pk=v1.pk).activated_at
    assert second.activate() is False

    assert Agent.objects.get(slug="greeter").active_deployment_id == v1.pk
    assert Deployment.objects.get(pk=v1.pk).activated_at == stamp
    assert second.activated_at != stamp  # the loser's copy was not stamped either


def test_activating_the_active_release_changes_nothing(two_names):
    _, v2 = two_names
    Agent.objects.filter(slug="greeter").update(name="Renamed by hand")
    before = Deployment.objects.get(pk=v2.pk).activated_at

    assert Deployment.objects.get(pk=v2.pk).activate() is False

    assert Agent.objects.get(slug="greeter").name == "Renamed by hand"
    assert Deployment.objects.get(pk=v2.pk).activated_at == before


@pytest.mark.django_db(transaction=True)
def test_two_operators_activating_one_release_at_once_one_wins_the_other_hears_it_is_active(tmp_path):
    root = tmp_path / "greeter"
    v1 = deploy_agent_folder(named_release(root, "Greeter", "Says hello."))
    deploy_agent_folder(named_release(root, "Host", "Welcomes guests."))
    start = threading.Barrier(2)
    outcomes: list[str] = []

    def operator() -> None:
        try:
            release = find_release(find_agent("greeter"), 1)
            start.wait()
            try:
                activate_release(release)
                outcomes.append("activated")
            except ReleaseError as exc:
                outcomes.append(exc.code)
        finally:
            connection.close()

    operators = [threading.Thread(target=operator) for _ in range(2)]
    for t in operators:
        t.start()
    for t in operators:
        t.join(60)

    assert sorted(outcomes) == ["activated", "already_active"]
    agent = Agent.objects.get(slug="greeter")
    assert (agent.active_deployment_id, agent.name) == (v1.pk, "Greeter")
