"""A session's model over HTTP: chosen once at `POST /session` from the agent's models (400
naming the allowed ones otherwise), shown by the session and `/info`, kept by every turn and
by new deployments; a follow-up naming another model is a 409 `handoff_required`.

The agent `duo` runs on `scripted:echo` (its default) or `openai:gpt-loop`, an OpenAI-compatible
loopback server driven by the official client: which one answered a turn is what it replied
and what the loopback server was asked."""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Iterator

import pytest
from django.core.management import call_command

from asgiref.sync import async_to_sync

from agents.discovery import deploy_agent_folder
from sessions.eventlog.events import read_events
from sessions.models import Session, Turn
from tests.channels_app.roles_support import (  # noqa: F401 (people is a fixture)
    CHANNEL, HOST, PEER, SCHEDULE, People, anonymous, people, start_for,
)
from tests.channels_app.test_websocket import receive_until, socket, ws_path
from tests.channels_app.views.test_turn_in_one_request import post as post_streamed
from tests.conftest import EXAMPLE
from tests.providers.conftest import loopback_provider
from tests.providers.loopback import LoopbackModelServer, Reply, oa_text

DEFAULT, OTHER = "scripted:echo", "openai:gpt-loop"
ALLOWED = [DEFAULT, OTHER]
# Turns run in this process (sync_turns) once their admission commits.
transactional = pytest.mark.django_db(transaction=True)


def write_duo(root: Path, models: list[str]) -> Path:
    if not root.exists():
        shutil.copytree(EXAMPLE / "agent", root / "agent", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "agent" / "agent.py").write_text(
        "from agents.sdk import Agent\n"
        f"agent = Agent(models={models!r}, fallback=['scripted:echo'], peers=['support'], tools=[])\n")
    return root


@pytest.fixture
def duo(people, tmp_path) -> Path:
    root = write_duo(tmp_path / "duo", ALLOWED)
    deploy_agent_folder(root)
    return root


@pytest.fixture
def loop(monkeypatch) -> Iterator[LoopbackModelServer]:
    yield from loopback_provider(monkeypatch, "openai")


def create(client, body: dict, **headers):
    return client.post("/duo/v1/session", body, content_type="application/json", **headers)


def created(client, model: str | None = None, message: str = "hello") -> dict:
    body = {"message": message, **({"model": model} if model else {})}
    response = create(client, body)
    assert response.status_code == 201, response.content
    return response.json()


def follow_up(client, session: dict, model: str | None = None, route: str = "message"):
    body = {"message": "and then?", "continuationToken": session["continuationToken"],
            **({"model": model} if model else {})}
    if route == "message":
        return client.post(f"/duo/v1/session/{session['sessionId']}/message", body, content_type="application/json")
    return create(client, body)


def bound(session_id: str) -> list[str]:
    return [e["data"]["model"] for e in read_events(session_id) if e["type"] == "agent.bound"]


def replies(session_id: str) -> list[str]:
    return [e["data"]["text"] for e in read_events(session_id) if e["type"] == "message.completed"]


# -- creating a session on a model ---------------------------------------------------------

@transactional
def test_a_session_created_on_an_allowed_model_is_bound_to_it_and_its_turns_run_on_it(duo, people, loop,
                                                                                       sync_turns):
    loop.replies.extend([Reply(events=oa_text("gpt-loop here")), Reply(events=oa_text("still gpt-loop"))])
    mia = people.mia.client

    session = created(mia, OTHER)

    assert session["model"] == OTHER
    assert bound(session["sessionId"]) == [OTHER]
    assert [r["body"]["model"] for r in loop.requests] == ["gpt-loop"]
    assert replies(session["sessionId"]) == ["gpt-loop here"]
    detail = mia.get(f"/duo/v1/session/{session['sessionId']}").json()
    assert detail["model"] == OTHER and detail["lastTurn"]["status"] == "completed"
    # A follow-up naming the same model is an ordinary follow-up, on that model.
    again = follow_up(mia, session, OTHER)
    assert again.status_code == 202, again.content
    assert [r["body"]["model"] for r in loop.requests] == ["gpt-loop", "gpt-loop"]
    assert replies(session["sessionId"]) == ["gpt-loop here", "still gpt-loop"]


@transactional
def test_a_session_that_names_no_model_runs_on_the_default(duo, people, loop, sync_turns):
    session = created(people.mia.client, message="plain")

    assert session["model"] == DEFAULT
    assert bound(session["sessionId"]) == [DEFAULT]
    assert replies(session["sessionId"]) == ["You said: plain"]
    assert loop.requests == []


@pytest.mark.parametrize("who", ["mia", "max", "olga", "sam"])
def test_each_member_and_operator_may_create_on_an_allowed_model(duo, people, who):
    client = getattr(people, who).client

    session = created(client, OTHER)

    assert Session.objects.get(pk=session["sessionId"]).model == OTHER
    assert client.get(f"/duo/v1/session/{session['sessionId']}").json()["model"] == OTHER


@pytest.mark.parametrize("who", ["mia", "max", "olga", "sam"])
def test_a_model_outside_the_list_is_a_400_naming_the_allowed_ones_and_creates_nothing(duo, people, who):
    response = create(getattr(people, who).client, {"message": "hello", "model": "anthropic:claude-sonnet-4-5"})

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "model_not_allowed"
    assert error["details"] == {"allowed": ALLOWED}
    assert "'anthropic:claude-sonnet-4-5'" in error["message"]
    assert all(model in error["message"] for model in ALLOWED)
    assert not Session.objects.filter(agent__slug="duo").exists()
    assert not Turn.objects.exists()


def test_the_streamed_form_refuses_a_model_outside_the_list_with_the_same_json_error(duo, people):
    for accept in ("application/x-ndjson", "text/event-stream"):
        response = create(people.mia.client, {"message": "hello", "model": "openai:gpt-4o"}, HTTP_ACCEPT=accept)

        assert response.status_code == 400
        assert response["Content-Type"].startswith("application/json")
        assert response.json()["error"]["code"] == "model_not_allowed"
        assert response.json()["error"]["details"] == {"allowed": ALLOWED}
    assert not Session.objects.filter(agent__slug="duo").exists()


@transactional
@pytest.mark.parametrize("accept", ["application/x-ndjson", "text/event-stream"])
def test_a_turn_in_one_request_runs_on_the_model_it_names(duo, people, loop, sync_turns, accept):
    loop.replies.append(Reply(events=oa_text("streamed from gpt-loop")))

    refused = post_streamed("/duo/v1/session", {"message": "hi", "model": "openai:gpt-4o"}, accept=accept,
                            token=people.mia.secret)
    answer = post_streamed("/duo/v1/session", {"message": "hi", "model": OTHER}, accept=accept,
                           token=people.mia.secret)

    assert refused.status == 400 and refused.json()["error"]["code"] == "model_not_allowed"
    assert answer.status == 200
    events = answer.events
    assert [e["data"]["model"] for e in events if e["type"] == "agent.bound"] == [OTHER]
    assert [e["data"]["text"] for e in events if e["type"] == "message.completed"] == ["streamed from gpt-loop"]
    assert [r["body"]["model"] for r in loop.requests] == ["gpt-loop"]
    assert Session.objects.get().model == OTHER


@pytest.mark.parametrize("model", ["", 42, None])
def test_a_model_that_is_not_a_name_is_a_400_invalid_request(duo, people, model):
    response = create(people.mia.client, {"message": "hello", "model": model})

    if model is None:  # null: the same as absent
        assert response.status_code == 201
        return
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
    assert response.json()["error"]["details"][0]["field"] == "model"


def test_anonymous_cannot_create_on_any_model(duo, people):
    for model in (OTHER, "anthropic:claude-sonnet-4-5"):
        assert create(anonymous(), {"message": "hello", "model": model}).status_code == 401
    assert not Session.objects.filter(agent__slug="duo").exists()


# -- follow-ups ----------------------------------------------------------------------------

@pytest.mark.parametrize("route", ["message", "create"])
def test_a_follow_up_naming_another_model_is_a_409_handoff_required_and_queues_nothing(duo, people, route):
    mia = people.mia.client
    session = created(mia)
    turns = Turn.objects.filter(session_id=session["sessionId"]).count()

    response = follow_up(mia, session, OTHER, route)

    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "handoff_required"
    assert error["details"] == {"model": DEFAULT, "requested": OTHER}
    assert f"/session/{session['sessionId']}/handoff?to={OTHER}" in error["message"]
    assert Turn.objects.filter(session_id=session["sessionId"]).count() == turns
    # Nothing moved: the token still works and the session keeps its model.
    assert follow_up(mia, session, DEFAULT, route).status_code == 202
    assert Session.objects.get(pk=session["sessionId"]).model == DEFAULT


@pytest.mark.parametrize("route", ["message", "create"])
def test_a_follow_up_naming_its_own_model_or_none_is_accepted(duo, people, route):
    mia = people.mia.client
    session = created(mia, OTHER)

    named = follow_up(mia, session, OTHER, route)
    assert named.status_code == 202, named.content
    session["continuationToken"] = named.json()["continuationToken"]
    assert follow_up(mia, session, None, route).status_code == 202


def test_the_streamed_follow_up_refuses_another_model_with_the_json_409(duo, people):
    session = created(people.mia.client)

    response = people.mia.client.post(
        f"/duo/v1/session/{session['sessionId']}/message",
        {"message": "x", "continuationToken": session["continuationToken"], "model": OTHER},
        content_type="application/json", HTTP_ACCEPT="application/x-ndjson")

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "handoff_required"


@transactional
def test_a_websocket_message_naming_another_model_gets_a_handoff_required_error_frame(duo, people):
    session = created(people.mia.client)
    turns = Turn.objects.filter(session_id=session["sessionId"]).count()

    async def scenario() -> tuple[dict, dict]:
        communicator = socket(ws_path(session["sessionId"], slug="duo"), token=people.mia.secret, host=HOST,
                              origin=None, peer=PEER)
        assert (await communicator.connect(timeout=15))[0]
        try:
            await communicator.send_json_to({"type": "message", "message": "switch?", "model": OTHER})
            refused = await receive_until(communicator, lambda f: f and f[-1].get("type") == "error")
            await communicator.send_json_to({"type": "message", "message": "stay", "model": DEFAULT})
            acked = await receive_until(communicator, lambda f: f and f[-1].get("type") == "ack")
            return refused[-1], acked[-1]
        finally:
            await communicator.disconnect()

    refused, acked = async_to_sync(scenario)()

    assert refused["error"]["code"] == "handoff_required"
    assert Turn.objects.get(pk=acked["turnId"]).message == "stay"
    assert Turn.objects.filter(session_id=session["sessionId"]).count() == turns + 1


@pytest.mark.parametrize("route", ["message", "create"])
def test_no_one_but_the_owner_learns_the_model_from_a_follow_up(duo, people, route):
    session = created(people.mia.client)
    turns = Turn.objects.count()

    for other in [people.max, *people.operators]:  # operators follow sessions, never post in them
        response = follow_up(other.client, session, OTHER, route)
        assert response.status_code == 403, (other.user.username, response.content)
        assert response.json()["error"]["code"] == "forbidden"
    assert follow_up(anonymous(), session, OTHER, route).status_code == 401
    assert Turn.objects.count() == turns


# -- what shows the model ------------------------------------------------------------------

def test_the_session_detail_and_list_show_its_model_to_the_owner_and_operators(duo, people):
    mine = created(people.mia.client, OTHER)["sessionId"]
    path = f"/duo/v1/session/{mine}"

    assert people.mia.client.get(path).json()["model"] == OTHER
    for operator in people.operators:
        assert operator.client.get(path).json()["model"] == OTHER
        listed = operator.client.get("/duo/v1/sessions?all=1").json()["sessions"]
        assert [(s["sessionId"], s["model"]) for s in listed] == [(mine, OTHER)]
    assert people.max.client.get(path).status_code == 403
    assert anonymous().get(path).status_code == 401
    assert [s["model"] for s in people.mia.client.get("/duo/v1/sessions").json()["sessions"]] == [OTHER]


def test_info_shows_the_default_the_models_the_fallback_and_the_peers(duo, people):
    for person in [people.mia, people.max, *people.operators]:
        info = person.client.get("/duo/v1/info").json()
        assert (info["model"], info["models"], info["fallback"], info["peers"]) == \
            (DEFAULT, ALLOWED, ["scripted:echo"], ["support"])
    assert anonymous().get("/duo/v1/info").status_code == 401
    # An agent with one model lists it alone, and nothing to fall over to or message.
    single = people.mia.client.get("/support/v1/info").json()
    assert (single["models"], single["fallback"], single["peers"]) == (["scripted:echo"], [], [])


def test_manage_py_info_lists_the_models_the_fallback_and_the_peers(duo, capsys):
    call_command("info", "duo")
    printed = __import__("json").loads(capsys.readouterr().out)

    assert (printed["model"], printed["models"], printed["fallback"], printed["peers"]) == \
        (DEFAULT, ALLOWED, ["scripted:echo"], ["support"])


# -- deployments and other doors -------------------------------------------------------------

@transactional
def test_a_new_deployment_with_another_default_leaves_existing_sessions_on_theirs(duo, people, loop, sync_turns):
    mia = people.mia.client
    earlier = created(mia, message="first")
    loop.replies.append(Reply(events=oa_text("new default")))

    deploy_agent_folder(write_duo(duo, [OTHER, DEFAULT]))  # gpt-loop becomes the default
    again = follow_up(mia, earlier)
    later = created(mia, message="second")

    assert again.status_code == 202
    assert mia.get(f"/duo/v1/session/{earlier['sessionId']}").json()["model"] == DEFAULT
    assert replies(earlier["sessionId"]) == ["You said: first", "You said: and then?"]
    assert later["model"] == OTHER and bound(later["sessionId"]) == [OTHER]
    assert replies(later["sessionId"]) == ["new default"]
    assert [r["body"]["model"] for r in loop.requests] == ["gpt-loop"]
    # Naming its own model, no longer the default, is still no handoff.
    assert follow_up(mia, {**earlier, "continuationToken": again.json()["continuationToken"]}, DEFAULT) \
        .status_code == 202


@transactional
@pytest.mark.parametrize("principal", [SCHEDULE, CHANNEL], ids=["schedule", "channel"])
def test_sessions_that_schedules_and_channels_start_run_on_the_default(duo, principal, sync_turns):
    session_id = start_for(principal, slug="duo", message="tick")

    assert Session.objects.get(pk=session_id).model == DEFAULT
    assert bound(session_id) == [DEFAULT]
    assert replies(session_id) == ["You said: tick"]
