import pytest

from sessions.models import Event, Session


@pytest.mark.django_db(transaction=True)
def test_a_turn_streams_the_documented_event_sequence(local, support_agent, sync_turns):
    response = local.post("/support/v1/session", {"message": "hello"}, content_type="application/json")
    assert response.status_code == 201, response.content
    body = response.json()
    session = Session.objects.get(pk=body["sessionId"])
    types = list(Event.objects.filter(session=session).order_by("index").values_list("type", flat=True))
    assert types == [
        "session.started", "agent.bound", "message.received", "turn.started", "step.started",
        "message.appended", "message.completed", "step.completed", "turn.completed", "session.waiting",
    ]
    indexes = list(Event.objects.filter(session=session).order_by("index").values_list("index", flat=True))
    assert indexes == list(range(len(types)))
    session.refresh_from_db()
    assert session.status == "waiting"
