"""Releases in the admin: the list with where each came from, Activate and Roll back, the diff page."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from agents.discovery.releases import scratch_release
from agents.models import Agent, Deployment
from sessions.models import Schedule
from tests.agents.release_support import three_releases, write_release

CHANGELIST = "/admin/agents/deployment/"


@pytest.fixture
def releases(db, tmp_path):
    return three_releases(tmp_path)


@pytest.fixture
def operator(db) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("ops", "ops@example.com", "not-used"))
    return client


@pytest.fixture
def viewer(db) -> Client:
    """Staff who may view releases and nothing more."""
    user = User.objects.create_user("vera", password="not-used", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=["view_deployment", "view_agent"]))
    client = Client()
    client.force_login(user)
    return client


def action(client: Client, changelist: str, name: str, *pks):
    return client.post(changelist, {"action": name, "_selected_action": [str(pk) for pk in pks]}, follow=True)


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def active_version() -> int:
    return Agent.objects.get(slug="helper").active_deployment.version


def test_the_list_shows_each_release_with_its_source_and_who_deployed_it(operator, releases):
    Deployment.objects.filter(version=2).update(source_kind="repo", source="https://example.com/a.git",
                                                source_ref="main", source_commit="0123456789abcdef", deployed_by="olga")

    page = operator.get(CHANGELIST).content.decode()

    assert "https://example.com/a.git@main (0123456789ab)" in page and "olga" in page
    assert page.count("diff with v") == 3
    assert "Activate the selected release" in page and "Roll back the agents" in page


def test_activate_an_older_release(operator, releases):
    response = action(operator, CHANGELIST, "activate", releases[0].pk)

    assert messages_of(response) == ["helper: v1 is active."]
    assert active_version() == 1
    assert Schedule.objects.get(schedule_id="daily").active


def test_activate_wants_one_release_and_refuses_the_active_one(operator, releases):
    assert messages_of(action(operator, CHANGELIST, "activate", releases[0].pk, releases[1].pk)) == [
        "Select exactly one release to activate."]
    assert messages_of(action(operator, CHANGELIST, "activate", releases[2].pk)) == [
        "helper v3 is already the active release of 'helper'"]
    assert active_version() == 3


def test_roll_back_from_the_release_list_and_from_the_agent_list(operator, releases):
    assert messages_of(action(operator, CHANGELIST, "roll_back", releases[0].pk)) == ["helper: rolled back to v2."]
    assert active_version() == 2
    agent = Agent.objects.get(slug="helper")
    assert messages_of(action(operator, "/admin/agents/agent/", "roll_back", agent.pk)) == [
        "helper: rolled back to v3."]
    assert active_version() == 3


def test_staff_who_may_only_view_get_no_actions_but_see_the_diff(viewer, releases):
    page = viewer.get(CHANGELIST)
    assert page.status_code == 200
    assert "Activate the selected release" not in page.content.decode()
    action(viewer, CHANGELIST, "activate", releases[0].pk)
    assert active_version() == 3
    assert viewer.get(f"{CHANGELIST}{releases[1].pk}/diff/").status_code == 200


def test_the_diff_page_shows_a_changed_instruction_line(operator, releases):
    page = operator.get(f"{CHANGELIST}{releases[1].pk}/diff/").content.decode()  # v2 against v1, the one before

    assert "Changed from v1 to v2: instructions, schedules, files." in page
    assert "Be&nbsp;thorough." in page and "Be&nbsp;brief." in page
    assert 'id="section-tools"' in page and "(unchanged)" in page


def test_the_diff_page_compares_with_the_version_asked_for(operator, releases):
    page = operator.get(f"{CHANGELIST}{releases[2].pk}/diff/", {"with": "2"}).content.decode()

    assert "Changed from v2 to v3: instructions, files." in page


def test_a_release_alone_has_nothing_to_compare(operator, releases):
    Deployment.objects.exclude(version=1).delete()

    page = operator.get(f"{CHANGELIST}{releases[0].pk}/diff/").content.decode()

    assert "has no other release to compare with" in page


def test_the_first_release_is_compared_with_the_one_after(operator, releases):
    page = operator.get(f"{CHANGELIST}{releases[0].pk}/diff/").content.decode()

    assert "Changed from v2 to v1: instructions, schedules, files." in page


def test_a_scratch_copy_of_a_folder_is_not_among_the_agents_releases(operator, releases, tmp_path):
    """What `run --dir` tried (version 0, never activated) is on neither release page of the admin."""
    copy = scratch_release(write_release(tmp_path / "draft" / "helper", "You help.\nBe a draft."))
    assert copy.scratch and copy.agent.slug == "helper"

    agent_page = operator.get(f"/admin/agents/agent/{copy.agent_id}/change/").content.decode()
    assert all(f"/admin/agents/deployment/{d.pk}/change/" in agent_page for d in releases)
    assert f"/admin/agents/deployment/{copy.pk}/change/" not in agent_page
    assert f"/admin/agents/deployment/{copy.pk}/change/" not in operator.get(CHANGELIST).content.decode()
