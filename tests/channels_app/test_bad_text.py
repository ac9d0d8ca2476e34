"""Text the databases cannot store, deep nesting, odd numbers and odd bodies: a 400, never a 500."""
from __future__ import annotations

import json

import pytest

from sessions.models import Reminder, Session
from tests.channels_app.bad_input import (  # noqa: F401  (session is a fixture)
    SESSION_ROUTES, call, error_of, post_json, post_raw, session,
)


# -- text the databases cannot store, nesting, numbers -------------------------------------------

def raw_json(value) -> str:
    """As a client sends it: NUL and lone surrogates travel as \\u escapes."""
    return json.dumps(value)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path,body,field", [
    ("/support/v1/session", {"message": "a\x00b"}, "message"),
    ("/support/v1/session", {"message": "a\ud800b"}, "message"),
    ("/support/v1/session", {"message": "hi", "title": "\udfff"}, "title"),
    ("/support/v1/session", {"message": "hi", "continuationToken": "ct_ses_x\x00.y"}, "continuationToken"),
    ("/support/v1/session", {"message": "hi", "\x00": 1}, "body"),
    ("/support/v1/session/{sid}/message", {"message": "\x00"}, "message"),
    ("/support/v1/session/{sid}/approvals/call_1", {"decision": "deny", "reason": "\ud800"}, "reason"),
    ("/support/v1/session/{sid}/reminders", {"delay": "1h", "prompt": "wake\x00"}, "prompt"),
    ("/support/v1/tools/lookup_order/call", {"input": {"order_id": "A100", "notes": ["ok", "\x00"]}}, "input.notes[1]"),
    ("/support/v1/tools/lookup_order/call", {"input": {"order_id": "A100"}, "sessionId": "ses_\x00"}, "sessionId"),
])
def test_text_with_nul_or_a_lone_surrogate_gets_400_invalid_text_naming_the_field(local, session, path, body, field):
    events_before = session.next_event_index

    error = error_of(post_raw(local, path.format(sid=session.pk), raw_json(body)), 400)

    assert error["code"] == "invalid_text"
    assert error["details"] == {"field": field}
    assert error["message"].startswith(field)
    assert Session.objects.count() == 1
    session.refresh_from_db()
    assert session.next_event_index == events_before
    assert not Reminder.objects.exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("method,suffix", [*SESSION_ROUTES, ("get", "/approvals"), ("post", "/approvals/call_1"),
                                           ("get", "/reminders")])
def test_a_nul_in_a_path_id_gets_400_naming_it(local, session, method, suffix):
    error = error_of(call(local, method, f"/support/v1/session/ses_x%00{suffix}"), 400)

    assert (error["code"], error["details"]) == ("invalid_text", {"field": "sessionId"})


@pytest.mark.django_db
@pytest.mark.parametrize("path,field", [
    ("/support/v1/session/{sid}/approvals/call%00", "callId"),
    ("/support/v1/reminders/rem_%00", "reminderId"),
    ("/support/v1/tools/look%00up/call", "toolName"),
    ("/support/v1/sessions?cursor=%00", "cursor"),
    ("/playground/support?sessionId=ses_%00", "sessionId"),
])
def test_a_nul_in_any_other_id_or_query_parameter_gets_400_naming_it(local, session, path, field):
    response = local.delete(path.format(sid=session.pk)) if "reminders/" in path else (
        local.get(path) if "?" in path else post_json(local, path.format(sid=session.pk), {"decision": "deny"}))

    error = error_of(response, 400)

    assert (error["code"], error["details"]) == ("invalid_text", {"field": field})


@pytest.mark.django_db
@pytest.mark.parametrize("raw", [
    "[" * 50_000 + "]" * 50_000,
    '{"a":' * 50_000 + "1" + "}" * 50_000,
    "[" * 50_000,
    '{"message": "hi", "title": ' + "[" * 65 + "]" * 65 + "}",
])
def test_a_body_nested_past_the_limit_gets_400_body_too_deep(local, support_agent, raw):
    error = error_of(post_raw(local, "/support/v1/session", raw), 400)

    assert (error["code"], error["details"]) == ("body_too_deep", {"maxDepth": 64})
    assert Session.objects.count() == 0


@pytest.mark.django_db
def test_a_body_nested_up_to_the_limit_is_taken(local, support_agent):
    deep: list = []
    for _ in range(61):  # 62 arrays, in the body and `input` objects: 64 levels
        deep = [deep]

    response = post_json(local, "/support/v1/tools/lookup_order/call", {"input": {"order_id": "A100", "deep": deep}})

    assert response.status_code == 200, response.content
    assert response.json()["output"]["orderId"] == "A100"


@pytest.mark.django_db
@pytest.mark.parametrize("raw", [
    '{"message": 1e999}', '{"message": "hi", "dryRun": -1e999}', '{"message": NaN}', '{"message": Infinity}',
    '{"message": "hi", "x": ' + "7" * 5000 + "}",
])
def test_numbers_that_are_not_finite_or_too_long_get_400_invalid_number(local, support_agent, raw):
    error = error_of(post_raw(local, "/support/v1/session", raw), 400)

    assert error["code"] == "invalid_number"
    assert Session.objects.count() == 0


@pytest.mark.django_db
def test_the_message_limit_is_read_from_the_setting(local, session, settings):
    settings.AGENTSITE_MAX_MESSAGE_CHARS = 10

    assert post_json(local, "/support/v1/session", {"message": "x" * 10}).status_code == 201
    for path in ("/support/v1/session", f"/support/v1/session/{session.pk}/message"):
        error = error_of(post_json(local, path, {"message": "x" * 11}), 400)
        assert [(d["field"], d["type"]) for d in error["details"]] == [("message", "string_too_long")]
        assert "at most 10 characters" in error["message"]
    error = error_of(post_json(local, f"/support/v1/session/{session.pk}/reminders", {"delay": "1h", "prompt": "x" * 11}), 400)
    assert error["details"][0]["field"] == "prompt"


# -- never a 500 -------------------------------------------------------------------------------

NASTY_BODIES = [
    "", "{}", "[]", "null", "0", '""', "{", "}", '{"message": {}}', '{"message": "hi", "": 1}',
    '{"message": "\\ud800"}', '{"message": "hi", "title": null, "mode": null}', '{"message": "hi", "asOf": ""}',
    '{"message": "hi", "asOf": "2026-13-45T99:99:99Z"}', '{"message": "hi", "continuationToken": ""}',
    '{"message": "hi", "continuationToken": "ct_ses_"}', '{"message": "hi", "continuationToken": "ct_ses_.x"}',
    '{"message": "' + "x" * 300 + '", "continuationToken": "' + "y" * 300 + '"}', '{"message": 1e999}',
    '{"message": "hi", "dryRun": null}', '{"__proto__": {"message": "hi"}}',
]


@pytest.mark.django_db
@pytest.mark.parametrize("raw", NASTY_BODIES)
def test_odd_bodies_never_get_a_500(local, session, raw):
    for path in ("/support/v1/session", f"/support/v1/session/{session.pk}/message"):
        response = post_raw(local, path, raw)
        assert 200 <= response.status_code < 500, (path, raw, response.content)
        if response.status_code >= 400:
            error_of(response, response.status_code)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("session_id", ["x", "ses_", "ses_" + "0" * 200, "%00", "ses_%F0%9F%98%80", "..", "a b"])
def test_odd_session_ids_never_get_a_500(local, support_agent, session_id):
    for method, suffix in SESSION_ROUTES:
        response = call(local, method, f"/support/v1/session/{session_id}{suffix}")
        assert response.status_code in (400, 404), (method, suffix, response.content)
        error_of(response, response.status_code)


def test_the_error_shape_is_used_by_the_404_handler_outside_drf():
    from django.test import RequestFactory

    from channels_app.errors import handler404

    response = handler404(RequestFactory().get("/x/y"))

    assert response.status_code == 404
    assert json.loads(response.content) == {"error": {"code": "not_found", "message": "no route for /x/y", "details": None}}
