"""An operator makes an agent in the playground's editor, in real headless Chromium against a real
`manage.py serve`: creates it, previews its instructions, talks to it, edits its instructions and sees
the new release and what changed, keeps an old session on its release, and rolls back; a member
cannot open the editor."""
from __future__ import annotations

import re
from typing import Iterator

import pytest
from django.contrib.auth.models import Group, User

from sessions.principal import OPERATORS_GROUP
from tests.browser.conftest import sign_in
from tests.browser.test_playground_browser import ARTIFACTS, expect
from tests.server_database import on_server_database
from tests.support import Server, run_server

PASSWORD = "a-console-password-1"
pytestmark = pytest.mark.timeout(150)


@pytest.fixture(scope="module")
def server(tmp_path_factory, django_db_blocker) -> Iterator[Server]:
    state = tmp_path_factory.mktemp("console-state")
    with run_server(state, "--no-examples", "--bearer-token", "not-for-browsers") as server:
        with on_server_database(state, django_db_blocker):
            olga = User.objects.create_user("olga", password=PASSWORD)
            olga.groups.add(Group.objects.get_or_create(name=OPERATORS_GROUP)[0])
            User.objects.create_user("max", password=PASSWORD)
        yield server


def signed_in(new_context, server: Server, username: str, path: str):
    page = new_context(base_url=server.base_url, viewport={"width": 1280, "height": 1000}).new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(f"/accounts/login/?next={path}")
    sign_in(page, username, PASSWORD)
    page.wait_for_url(re.compile(re.escape(path) + "$"))
    return page, errors


def test_an_operator_makes_an_agent_edits_it_and_rolls_back(new_context, server):
    page, errors = signed_in(new_context, server, "olga", "/playground/")
    page.click("#new-agent")
    page.wait_for_url(re.compile(r"/playground/agents/new$"))
    page.fill("input[name=slug]", "helper")
    page.fill("input[name=name]", "Helper")
    page.fill("textarea[name=instructions]", "You help.\n\nBe **brief**.")
    page.click("#preview-button")
    expect(page.locator("#preview strong")).to_have_text("brief")
    page.click("#save")
    page.wait_for_url(re.compile(r"/playground/helper/edit\?saved=1$"))
    expect(page.locator("#saved")).to_have_text("Saved: v1 is active.")
    expect(page.locator("#releases tr.active")).to_contain_text("v1")
    expect(page.locator("textarea[name=instructions]")).to_have_value("You help.\n\nBe **brief**.")

    page.goto("/playground/helper")
    page.fill("#new-message", "hello")
    page.click("#new-session button[type=submit]")
    page.wait_for_url(re.compile(r"/playground/helper/session/ses_\w+$"))
    old_session = page.url.rsplit("/", 1)[1]
    expect(page.locator(".msg.assistant").last).to_contain_text("You said: hello")

    page.goto("/playground/helper/edit")
    page.fill("textarea[name=instructions]", "You help.\n\nBe **thorough**.")
    page.click("fieldset[data-noun=skill] details summary")
    page.fill("textarea[name=skills]", "[1")  # a field that is not JSON is named, and nothing is saved
    page.click("#save")
    expect(page.locator("#problems li[data-field=skills]")).to_contain_text("not JSON")
    expect(page.locator("fieldset[data-noun=skill] button.add")).to_be_disabled()  # the typed JSON is not written over
    page.fill("textarea[name=skills]", "")
    # A schedule written a field at a time, as a record of the list: no JSON typed.
    schedules = page.locator("fieldset[data-noun=schedule]")
    schedules.locator("button.add").click()
    schedules.locator(".record [data-field=id]").fill("daily")
    schedules.locator(".record [data-field=cron]").fill("0 9 * * *")
    schedules.locator(".record [data-field=prompt]").fill("Say good morning.")
    page.click("#save")
    page.wait_for_url(re.compile(r"/playground/helper/edit\?saved=2$"))
    expect(page.locator("#releases tr.active")).to_contain_text("v2")
    definition = page.request.get("/v1/agents/helper/definition").json()["definition"]
    assert definition["schedules"] == [{"id": "daily", "cron": "0 9 * * *", "prompt": "Say good morning.", "title": ""}]
    expect(schedules.locator(".record [data-field=cron]")).to_have_value("0 9 * * *")  # drawn again from the release
    instructions = page.locator("#changes section[data-section=instructions]")
    expect(instructions).to_contain_text("Be **brief**.")
    expect(instructions).to_contain_text("Be **thorough**.")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "console-editor.png"), full_page=True)

    page.goto(f"/playground/helper/session/{old_session}")
    page.fill("#message", "still there?")
    page.click("#follow-up button[type=submit]")
    expect(page.locator(".msg.assistant").last).to_contain_text("You said: still there?")
    detail = page.request.get(f"/helper/v1/session/{old_session}").json()
    assert detail["deployment"]["version"] == 1, "an old session stays on the release it started on"

    page.goto("/playground/helper/edit")
    page.locator("#releases tr[data-version='1'] button.activate").click()
    expect(page.locator("#releases tr.active")).to_contain_text("v1")
    expect(page.locator("textarea[name=instructions]")).to_have_value("You help.\n\nBe **brief**.")
    assert errors == []


def test_a_member_cannot_open_the_editor(new_context, server):
    page, _ = signed_in(new_context, server, "max", "/playground/")
    expect(page.locator("#new-agent")).to_have_count(0)
    for path in ("/playground/agents/new", "/playground/helper/edit"):
        response = page.goto(path)
        assert response.status == 403, path
        expect(page.locator("h1")).to_have_text("Operators only")
