"""The playground's server-rendered pages, through Django's test client.

Each page runs the route's auth chain and ownership: the owner gets the page,
a caller no policy admits is sent to the login page, another principal's session is 403, and
an unknown agent or session is 404. The conversation itself streams in over
the websocket (test_websocket.py; the page in Chromium: tests/browser/).
"""
from __future__ import annotations

import json
import re

import pytest
from django.test import Client

from agents.discovery import deploy_agent_folder
from sessions.models import Event, Session, Turn

transactional = pytest.mark.django_db(transaction=True)

LOOKUP_A100 = '/call lookup_order {"order_id": "A100"}'


def start(client: Client, message: str = "hello", **fields) -> str:
    response = client.post("/support/v1/session", json.dumps({"message": message, **fields}),
                           content_type="application/json")
    assert response.status_code == 201, response.content
    return response.json()["sessionId"]


def follow_up(client: Client, session_id: str, message: str) -> None:
    response = client.post(f"/support/v1/session/{session_id}/message", json.dumps({"message": message}),
                           content_type="application/json")
    assert response.status_code == 202, response.content


@pytest.fixture
def nobody(two_principals) -> Client:
    """A loopback caller without a token: the bearer chain admits nobody without one."""
    return Client(HTTP_HOST="127.0.0.1:8000", REMOTE_ADDR="127.0.0.1")


@pytest.fixture
def alices_session(alice, support_agent, sync_turns) -> str:
    return start(alice, "hello")


def html(response) -> str:
    return response.content.decode()


# -- /playground/ ---------------------------------------------------------------------

@transactional
def test_the_agents_page_lists_deployed_agents(alice, support_agent):
    response = alice.get("/playground/")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    page = html(response)
    assert 'data-slug="support"' in page
    assert 'href="/playground/support"' in page
    assert "Shop support" in page


@transactional
def test_the_agents_page_sends_a_caller_no_policy_admits_to_log_in(nobody, support_agent):
    response = nobody.get("/playground/")

    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/playground/"
    assert b"support" not in response.content, "nothing about the agents leaks"


def signs_in(response) -> bool:
    return response.status_code == 302 and response["Location"].startswith("/accounts/login/?next=")


@transactional
def test_the_root_redirects_to_the_playground(alice):
    response = alice.get("/")

    assert response.status_code == 302
    assert response["Location"] == "/playground/"


# -- /playground/<slug> ----------------------------------------------------------------

@transactional
def test_the_agent_page_lists_the_callers_sessions_and_a_composer(alice, alices_session):
    response = alice.get("/playground/support")

    assert response.status_code == 200
    page = html(response)
    assert f'data-session="{alices_session}"' in page
    assert f'href="/playground/support/session/{alices_session}"' in page
    assert 'id="new-session"' in page and 'data-slug="support"' in page
    assert 'name="message"' in page and 'name="dryRun"' in page and 'name="mode"' in page


@transactional
def test_the_agent_page_offers_one_click_prompts_for_the_scripted_model(alice, support_agent):
    page = html(alice.get("/playground/support"))

    hints = dict(re.findall(r'<button type="button" class="hint" data-text="([^"]*)">([^<]*)</button>', page))
    prompts = {label: text.replace("&quot;", '"') for text, label in hints.items()}
    assert prompts["call cancel_order (approval)"] == '/call cancel_order {"order_id": "A102"}'
    assert prompts["call lookup_order"] == '/call lookup_order {"order_id": "A100"}'
    assert prompts["call refund_order"] == '/call refund_order {"order_id": "A100", "reason": "arrived broken"}'
    assert prompts["echo"] == "Hello!"
    assert prompts["slow reply (try Stop)"].startswith("/sleep ")
    assert "reasoning" in prompts and "model error" in prompts


@transactional
def test_the_agent_page_shows_the_info_panel(alice, support_agent):
    page = html(alice.get("/playground/support"))

    panel = page.split('class="side-col card info-panel"')[1]
    assert "scripted:echo" in panel
    for tool in ("lookup_order", "refund_order", "cancel_order"):
        assert f"<code>{tool}</code>" in panel
    assert 'badge warn">approval' in panel, "the approval-gated tool is marked"
    assert "&quot;order_id&quot;" in panel, "tool input schemas are shown"


@transactional
def test_the_agent_page_shows_another_principal_none_of_alices_sessions(bob, alices_session):
    response = bob.get("/playground/support")

    assert response.status_code == 200
    assert alices_session not in html(response)
    assert 'id="no-sessions"' in html(response)


@transactional
def test_the_agent_page_refuses_a_caller_no_policy_admits(nobody, support_agent):
    assert signs_in(nobody.get("/playground/support"))


@transactional
def test_an_unknown_agent_page_is_404(alice, support_agent):
    response = alice.get("/playground/nosuchagent")

    assert response.status_code == 404
    assert "No such agent" in html(response)


# -- /playground/<slug>/session/<id> and the ?sessionId= deep link --------------------------

@transactional
def test_the_pages_name_each_sessions_channel(alice, alices_session):
    """A session the MCP door started is on channel `mcp`, as the list and its page say."""
    other = start(alice, "from an MCP client")
    Session.objects.filter(pk=other).update(channel="mcp")

    listed = html(alice.get("/playground/support"))
    rows = dict(re.findall(r'<tr data-session="([^"]+)">.*?<td class="channel">([^<]+)</td>', listed, re.S))
    assert rows == {alices_session: "http", other: "mcp"}
    page = html(alice.get(f"/playground/support/session/{other}"))
    assert '<span id="channel" class="badge" title="where the session\'s messages come from">mcp</span>' in page


@transactional
def test_the_session_page_renders_for_its_owner(alice, alices_session):
    response = alice.get(f"/playground/support/session/{alices_session}")

    assert response.status_code == 200
    page = html(response)
    assert f'id="session" data-slug="support" data-session="{alices_session}"' in page
    assert 'id="conversation"' in page and 'id="approvals"' in page
    assert '<button id="stop" type="button" disabled>Stop</button>' in page
    assert f'href="/playground/support/session/{alices_session}/trace"' in page
    assert f'href="/support/v1/session/{alices_session}/events" download="{alices_session}.ndjson"' in page
    assert 'id="follow-up"' in page, "a chat session takes follow-ups"
    assert 'class="side-col card info-panel"' in page
    assert "playground/playground.js" in page


@transactional
def test_the_session_pages_download_link_serves_the_ndjson_log(alice, alices_session):
    response = alice.get(f"/support/v1/session/{alices_session}/events")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in response.content.decode().splitlines()]
    assert [e["index"] for e in lines] == list(range(Event.objects.filter(session_id=alices_session).count()))


@transactional
def test_a_task_session_page_has_no_follow_up_composer(alice, support_agent, sync_turns):
    session_id = start(alice, "do it", mode="task")

    page = html(alice.get(f"/playground/support/session/{session_id}"))

    assert 'id="follow-up"' not in page
    assert "Task sessions take no follow-ups." in page


@transactional
def test_the_session_page_lists_its_artifacts_with_download_links(alice, tmp_path, sync_turns):
    from tests.channels_app.views.test_session_artifacts import REPORT_TOOL, call
    from tests.sessions.test_schedules import write_agent

    deploy_agent_folder(write_agent(tmp_path / "reporter", {"agent/tools/make_report.py": REPORT_TOOL}))
    body = {"message": "\n".join([call(name="q3.md", text="# Q3"), call(name='<b>"odd" été.txt', text="x")])}
    session_id = alice.post("/reporter/v1/session", json.dumps(body), content_type="application/json").json()["sessionId"]

    page = html(alice.get(f"/playground/reporter/session/{session_id}"))
    box = page.split('id="artifacts"')[1].split("</div>")[0]
    assert "hidden" not in box.split(">")[0]
    assert f'href="/reporter/v1/session/{session_id}/artifacts/q3.md" download="q3.md">q3.md</a>' in box
    assert "text/markdown; charset=utf-8 · 4" in box
    odd = f"/reporter/v1/session/{session_id}/artifacts/%3Cb%3E%22odd%22%20%C3%A9t%C3%A9.txt"
    assert f'href="{odd}"' in box, "names are percent-encoded in links"
    assert "&lt;b&gt;&quot;odd&quot; été.txt</a>" in box, "and escaped in text"
    assert "<b>" not in box
    assert alice.get(odd).content == b"x", "the link downloads the artifact"


@transactional
def test_a_session_without_artifacts_hides_the_list_until_one_is_saved(alice, alices_session):
    page = html(alice.get(f"/playground/support/session/{alices_session}"))

    assert '<div id="artifacts" class="artifacts" aria-live="polite" hidden>' in page
    assert 'id="artifact-list"' in page, "the page's script adds links as artifact.saved events arrive"


@transactional
def test_the_session_id_deep_link_renders_the_session(alice, alices_session):
    response = alice.get(f"/playground/support?sessionId={alices_session}")

    assert response.status_code == 200
    assert f'data-session="{alices_session}"' in html(response)
    assert 'id="conversation"' in html(response)


@transactional
def test_the_playground_url_of_a_new_session_is_its_deep_link(alice, support_agent, sync_turns):
    body = alice.post("/support/v1/session", json.dumps({"message": "hi"}), content_type="application/json").json()
    path = body["playgroundUrl"].removeprefix("http://127.0.0.1:8000")

    response = alice.get(path)

    assert response.status_code == 200
    assert f'data-session="{body["sessionId"]}"' in html(response)


@transactional
def test_the_session_page_refuses_another_principal_with_403(bob, alices_session):
    for path in (f"/playground/support/session/{alices_session}", f"/playground/support?sessionId={alices_session}"):
        response = bob.get(path)
        assert response.status_code == 403, path
        assert "Not your session" in html(response)
        assert "hello" not in html(response)


@transactional
def test_the_session_page_refuses_a_caller_no_policy_admits(nobody, alices_session):
    assert signs_in(nobody.get(f"/playground/support/session/{alices_session}"))
    assert signs_in(nobody.get(f"/playground/support?sessionId={alices_session}"))


@transactional
def test_an_unknown_session_page_is_404(alice, alices_session, tmp_path):
    assert alice.get("/playground/support/session/ses_nope").status_code == 404
    assert alice.get("/playground/support?sessionId=ses_nope").status_code == 404


@transactional
def test_a_session_under_another_agents_slug_is_404(alice, alices_session, tmp_path):
    from agents.discovery import deploy_agent_folder

    (tmp_path / "other" / "agent").mkdir(parents=True)
    (tmp_path / "other" / "agent" / "instructions.md").write_text("Other.\n")
    deploy_agent_folder(tmp_path / "other")

    assert alice.get(f"/playground/other/session/{alices_session}").status_code == 404
    assert alice.get(f"/playground/other/session/{alices_session}/trace").status_code == 404


@transactional
def test_pages_run_the_loopback_default_chain(local, support_agent, sync_turns):
    """Under local_dev_strict(): the loopback caller owns its sessions; a rebound Host logs in."""
    session_id = start(local)
    assert local.get(f"/playground/support/session/{session_id}").status_code == 200

    rebound = Client(HTTP_HOST="rebind.example:8000", REMOTE_ADDR="127.0.0.1")
    assert signs_in(rebound.get("/playground/"))
    assert signs_in(rebound.get(f"/playground/support/session/{session_id}"))


# -- /playground/<slug>/session/<id>/trace ---------------------------------------------------

@transactional
def test_the_trace_lists_turns_steps_and_tool_calls(alice, support_agent, sync_turns):
    session_id = start(alice, LOOKUP_A100)
    follow_up(alice, session_id, "/fail the model is down")
    first, second = Turn.objects.filter(session_id=session_id).order_by("created_at")

    response = alice.get(f"/playground/support/session/{session_id}/trace")

    assert response.status_code == 200
    page = html(response)
    events = Event.objects.filter(session_id=session_id).count()
    assert f"{events} events · 2 turns" in page
    sections = page.split('<section class="card trace-turn" ')[1:]
    assert [s.split('"')[1] for s in sections] == [first.id, second.id], "one section per turn, in order"

    ok, failed = sections
    assert "status-completed" in ok and "/call lookup_order" in ok.replace("&quot;", '"')
    lanes = re.findall(r'<div class="lane (\w+)[^"]*">\s*<span class="label">([^<]*)</span>', ok)
    assert lanes == [("step", "step 1"), ("tool", "lookup_order"), ("step", "step 2")]
    assert "tokens" in ok, "usage is shown"
    assert re.search(r"[\d.]+ ms", ok), "durations are shown"

    assert "status-failed" in failed
    assert "the model is down" in failed


@transactional
def test_the_trace_marks_a_failed_tool_call(alice, support_agent, sync_turns):
    session_id = start(alice, '/call lookup_order {"order_id": "Z999"}')

    page = html(alice.get(f"/playground/support/session/{session_id}/trace"))

    assert re.search(r'<div class="lane tool failed">\s*<span class="label">lookup_order</span>', page)


@transactional
def test_the_trace_of_a_session_with_no_turn_yet(alice, support_agent):
    """Without a worker the first turn stays queued: the trace is empty but renders."""
    session_id = start(alice, "hello")
    assert Session.objects.get(pk=session_id).status == Session.Status.RUNNING

    response = alice.get(f"/playground/support/session/{session_id}/trace")

    assert response.status_code == 200
    assert "No turns yet." in html(response)


@transactional
def test_the_trace_refuses_others(bob, nobody, alices_session):
    assert bob.get(f"/playground/support/session/{alices_session}/trace").status_code == 403
    assert signs_in(nobody.get(f"/playground/support/session/{alices_session}/trace"))


@transactional
def test_the_trace_of_an_unknown_session_is_404(alice, support_agent):
    assert alice.get("/playground/support/session/ses_nope/trace").status_code == 404


@transactional
def test_the_trace_bars_use_css_numbers_whatever_the_language(alice, support_agent, sync_turns):
    """A decimal comma (German formats) in a style attribute would break every bar."""
    from django.utils import translation

    session_id = start(alice, LOOKUP_A100)

    with translation.override("de"):
        page = html(alice.get(f"/playground/support/session/{session_id}/trace"))

    styles = re.findall(r'<span class="bar" style="([^"]*)">', page)
    assert len(styles) == 3 + page.count('<div class="lane wf-'), "the events' bars and the waterfall's"
    for style in styles:
        assert re.fullmatch(r"margin-left: \d+(\.\d+)?%; width: \d+(\.\d+)?%", style), style
