"""Bad input gets a 4xx that says what is wrong, in the one error shape; never a 500."""
from __future__ import annotations

import base64
import json

import pytest
from django.conf import settings as django_settings

from agents.discovery import deploy_agent_folder
from sessions.models import Reminder, Session, Turn

MISSING = "ses_000000000000000000000000"


def post_raw(client, path: str, body: str | bytes, content_type: str = "application/json"):
    return client.post(path, body, content_type=content_type)


def post_json(client, path: str, body):
    return post_raw(client, path, json.dumps(body))


def error_of(response, status: int) -> dict:
    """The error object, after checking the status and the documented shape."""
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "details"}
    assert isinstance(body["error"]["code"], str) and body["error"]["code"]
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return body["error"]


def b64(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


@pytest.fixture
def session(local, support_agent) -> Session:
    """One session of the local principal whose turn is still queued."""
    response = post_json(local, "/support/v1/session", {"message": "hello"})
    assert response.status_code == 201
    return Session.objects.get(pk=response.json()["sessionId"])


# -- request bodies --------------------------------------------------------------------

INVALID_CREATE_BODIES = [
    pytest.param({}, "message", "missing", id="no message"),
    pytest.param({"message": 5}, "message", "string_type", id="message as number"),
    pytest.param({"message": ["hi"]}, "message", "string_type", id="message as list"),
    pytest.param({"message": None}, "message", "string_type", id="message null"),
    pytest.param({"message": ""}, "message", "string_too_short", id="empty message"),
    pytest.param({"message": "  \n\t "}, "message", "value_error", id="blank message"),
    pytest.param({"message": "x" * 100_001}, "message", "string_too_long", id="message too long"),
    pytest.param({"message": "hi", "colour": "red"}, "colour", "extra_forbidden", id="unknown field"),
    pytest.param({"message": "hi", "dry_run": True}, "dry_run", "extra_forbidden", id="snake_case field"),
    pytest.param({"message": "hi", "mode": "batch"}, "mode", "literal_error", id="unknown mode"),
    pytest.param({"message": "hi", "dryRun": "yes"}, "dryRun", "bool_type", id="dryRun as string"),
    pytest.param({"message": "hi", "dryRun": 1}, "dryRun", "bool_type", id="dryRun as number"),
    pytest.param({"message": "hi", "title": 7}, "title", "string_type", id="title as number"),
    pytest.param({"message": "hi", "title": "t" * 201}, "title", "string_too_long", id="title too long"),
    pytest.param({"message": "hi", "asOf": "2026-01-31T12:00:00"}, "asOf", "value_error", id="asOf without timezone"),
    pytest.param({"message": "hi", "asOf": "last tuesday"}, "asOf", "value_error", id="asOf not a date"),
    pytest.param({"message": "hi", "asOf": 1767225600}, "asOf", "string_type", id="asOf as number"),
    pytest.param({"message": "hi", "admission": "shove"}, "admission", "literal_error", id="unknown admission"),
    pytest.param({"message": "hi", "continuationToken": 12}, "continuationToken", "string_type", id="token as number"),
]


@pytest.mark.django_db
@pytest.mark.parametrize("body,field,error_type", INVALID_CREATE_BODIES)
def test_an_invalid_create_body_gets_400_naming_the_field(local, support_agent, body, field, error_type):
    error = error_of(post_json(local, "/support/v1/session", body), 400)

    assert error["code"] == "invalid_request"
    assert [(d["field"], d["type"]) for d in error["details"]] == [(field, error_type)]
    assert field in error["message"]
    assert Session.objects.count() == 0


@pytest.mark.django_db
def test_as_of_without_a_timezone_says_to_add_one(local, support_agent):
    error = error_of(post_json(local, "/support/v1/session", {"message": "hi", "asOf": "2026-01-31T12:00:00"}), 400)

    assert "asOf needs a timezone" in error["message"]


@pytest.mark.django_db
@pytest.mark.parametrize("raw", ['{"message": "hi"', "{message: 'hi'}", "hello", '{"message": "hi"} trailing', "\x00"])
def test_malformed_json_gets_400_invalid_json(local, support_agent, raw):
    error = error_of(post_raw(local, "/support/v1/session", raw), 400)

    assert error["code"] == "invalid_json"
    assert "not valid JSON" in error["message"]


@pytest.mark.django_db
def test_a_body_that_is_not_utf8_gets_400(local, support_agent):
    error = error_of(post_raw(local, "/support/v1/session", b'{"message": "\xff\xfe"}'), 400)

    assert error["code"] == "invalid_json"


@pytest.mark.django_db
@pytest.mark.parametrize("raw", ["[]", '["hi"]', '"hi"', "5", "null", "true"])
def test_json_that_is_not_an_object_gets_400(local, support_agent, raw):
    error = error_of(post_raw(local, "/support/v1/session", raw), 400)

    assert error["code"] == "invalid_request"
    assert error["details"][0]["field"] == "body"


@pytest.mark.django_db
def test_an_empty_body_gets_400_asking_for_the_message(local, support_agent):
    error = error_of(post_raw(local, "/support/v1/session", ""), 400)

    assert error["code"] == "invalid_request"
    assert error["details"][0]["field"] == "message"


@pytest.mark.django_db
@pytest.mark.parametrize("body,field", [
    ({"message": 5}, "message"),
    ({"message": " "}, "message"),
    ({"continuationToken": "x"}, "message"),
    ({"message": "hi", "mode": "task"}, "mode"),  # mode is fixed when the session starts
    ({"message": "hi", "continuationToken": ["x"]}, "continuationToken"),
    ({"message": "hi", "admission": "later"}, "admission"),
])
def test_an_invalid_follow_up_body_gets_400_naming_the_field(local, session, body, field):
    error = error_of(post_json(local, f"/support/v1/session/{session.pk}/message", body), 400)

    assert error["code"] == "invalid_request"
    assert error["details"][0]["field"] == field
    assert Turn.objects.filter(session=session).count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize("raw", ["{", "[1, 2]"])
def test_a_malformed_follow_up_gets_400(local, session, raw):
    response = post_raw(local, f"/support/v1/session/{session.pk}/message", raw)

    assert error_of(response, 400)["code"] in ("invalid_json", "invalid_request")


# -- content type and size ---------------------------------------------------------------------

@pytest.mark.django_db
@pytest.mark.parametrize("content_type,body", [
    ("text/plain", '{"message": "hi"}'),
    ("application/x-www-form-urlencoded", "message=hi"),
    ("application/xml", "<message>hi</message>"),
])
def test_a_body_that_is_not_json_gets_415(local, support_agent, content_type, body):
    error = error_of(post_raw(local, "/support/v1/session", body, content_type), 415)

    assert error["code"] == "unsupported_media_type"
    assert Session.objects.count() == 0


@pytest.mark.django_db
def test_a_multipart_body_gets_415(local, support_agent):
    error = error_of(local.post("/support/v1/session", {"message": "hi"}), 415)

    assert error["code"] == "unsupported_media_type"


@pytest.mark.django_db
def test_a_follow_up_that_is_not_json_gets_415(local, session):
    response = post_raw(local, f"/support/v1/session/{session.pk}/message", "message=hi", "application/x-www-form-urlencoded")

    assert error_of(response, 415)["code"] == "unsupported_media_type"


@pytest.mark.django_db
def test_a_body_over_the_upload_limit_gets_413(local, support_agent):
    limit = django_settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    body = json.dumps({"message": "x" * (limit + 1)})

    error = error_of(post_raw(local, "/support/v1/session", body), 413)

    assert error["code"] == "body_too_large"
    assert Session.objects.count() == 0


@pytest.mark.django_db
def test_a_lowered_upload_limit_is_enforced(local, support_agent, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000

    assert post_json(local, "/support/v1/session", {"message": "x" * 900}).status_code == 201
    assert error_of(post_json(local, "/support/v1/session", {"message": "x" * 1000}), 413)["code"] == "body_too_large"


@pytest.mark.django_db
def test_a_follow_up_over_the_upload_limit_gets_413(local, session, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000

    response = post_json(local, f"/support/v1/session/{session.pk}/message", {"message": "x" * 2000})

    assert error_of(response, 413)["code"] == "body_too_large"


# -- query parameters ---------------------------------------------------------------------------

NOT_ASCII_COUNTS = ["٣", "１", "+3", "3_0", " 3", "99999999999999999999"]


@pytest.mark.django_db
@pytest.mark.parametrize("value", ["abc", "-1", "1.5", "", " ", *NOT_ASCII_COUNTS])
def test_a_bad_start_index_on_events_gets_400(local, session, value):
    error = error_of(local.get(f"/support/v1/session/{session.pk}/events", {"startIndex": value}), 400)

    assert error["code"] == "invalid_start_index"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("value", ["abc", "-1", "1.5", *NOT_ASCII_COUNTS])
def test_a_bad_start_index_on_the_stream_gets_400(local, session, value):
    error = error_of(local.get(f"/support/v1/session/{session.pk}/stream", {"startIndex": value}), 400)

    assert error["code"] == "invalid_start_index"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("value", ["soon", "+3", "3_0", "-2"])
def test_a_bad_last_event_id_on_the_sse_stream_gets_400(local, session, value):
    response = local.get(f"/support/v1/session/{session.pk}/stream",
                         HTTP_ACCEPT="text/event-stream", HTTP_LAST_EVENT_ID=value)

    assert error_of(response, 400)["code"] == "invalid_start_index"


@pytest.mark.django_db
@pytest.mark.parametrize("value", ["0", "101", "-5", "ten", "2.5", "", "٣", "１０", "+5", "1_0"])
def test_a_bad_limit_on_the_sessions_list_gets_400(local, support_agent, value):
    error = error_of(local.get("/support/v1/sessions", {"limit": value}), 400)

    assert error["code"] == "invalid_limit"


@pytest.mark.django_db
@pytest.mark.parametrize("cursor", [
    "garbage!!",
    b64("not json"),
    b64('{"created": "2026-01-01T00:00:00+00:00"}'),
    b64('["2026-01-01T00:00:00+00:00"]'),
    b64('["yesterday", "ses_x"]'),
    b64('[12, "ses_x"]'),
    b64("null"),
    b64('["2026-01-01T00:00:00+00:00", "\\ud800"]'),
    b64('["2026-01-01T00:00:00+00:00", "ses_\\u0000"]'),
    b64('["2026-01-01T00:00:00+00:00", ["ses_x"]]'),
    b64('["0001-01-01T00:00:00+14:00", "ses_x"]'),
    b64('["9999-12-31T23:59:59-14:00", "ses_x"]'),
    b64('["2026-01-01T00:00:00", "ses_x"]'),
    b64('["2026-01-01T00:00:00+00:00", 1e999]'),
    b64("[" * 100_000 + "]" * 100_000),
    base64.urlsafe_b64encode("\udcff".encode("utf-8", "surrogatepass")).decode(),
])
def test_a_cursor_this_server_did_not_issue_gets_400(local, support_agent, cursor):
    error = error_of(local.get("/support/v1/sessions", {"cursor": cursor}), 400)

    assert error["code"] == "invalid_cursor"


@pytest.mark.django_db
def test_the_next_cursor_still_pages_through_the_sessions(local, support_agent):
    ids = [post_json(local, "/support/v1/session", {"message": f"m{i}"}).json()["sessionId"] for i in range(3)]

    first = local.get("/support/v1/sessions", {"limit": 2}).json()
    second = local.get("/support/v1/sessions", {"limit": 2, "cursor": first["nextCursor"]}).json()

    assert [s["sessionId"] for s in first["sessions"] + second["sessions"]] == ids[::-1]
    assert second["nextCursor"] is None


# -- 404s --------------------------------------------------------------------------------------

SESSION_ROUTES = [
    ("get", ""), ("delete", ""), ("post", "/message"), ("post", "/stop"), ("get", "/events"), ("get", "/stream"),
    ("get", "/artifacts"), ("get", "/artifacts/report.md"),
]


def call(client, method: str, path: str):
    if method == "post":
        return post_json(client, path, {"message": "hi"})
    return getattr(client, method)(path)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("method,path", [
    ("post", "/nobody/v1/session"),
    ("get", "/nobody/v1/sessions"),
    ("get", "/nobody/v1/info"),
    ("get", "/nobody/v1/health"),
    *[(m, f"/nobody/v1/session/{MISSING}{s}") for m, s in SESSION_ROUTES],
])
def test_an_unknown_agent_gets_404(local, support_agent, method, path):
    error = error_of(call(local, method, path), 404)

    assert (error["code"], error["message"]) == ("agent_not_found", "no agent 'nobody' on this server")


@pytest.mark.django_db
@pytest.mark.parametrize("method,path", [
    ("post", "/nobody/v1/session"), ("get", "/nobody/v1/sessions"), ("get", "/nobody/v1/info"),
])
def test_an_unknown_agent_is_named_in_the_404(local, support_agent, method, path):
    error = error_of(call(local, method, path), 404)

    assert error["code"] == "agent_not_found"
    assert "nobody" in error["message"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("method,suffix", SESSION_ROUTES)
def test_an_unknown_session_id_gets_404(local, support_agent, method, suffix):
    error = error_of(call(local, method, f"/support/v1/session/{MISSING}{suffix}"), 404)

    assert error["code"] == "session_not_found"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("method,suffix", SESSION_ROUTES)
def test_a_session_of_another_agent_gets_404(local, session, tmp_path, method, suffix):
    other = tmp_path / "other"
    (other / "agent").mkdir(parents=True)
    (other / "agent" / "instructions.md").write_text("You help too.")
    deploy_agent_folder(other)

    error = error_of(call(local, method, f"/other/v1/session/{session.pk}{suffix}"), 404)

    assert error["code"] == "session_not_found"
    assert Session.objects.filter(pk=session.pk).exists()


@pytest.mark.django_db
def test_a_continuation_token_of_another_agents_session_gets_404(local, session, tmp_path):
    other = tmp_path / "other"
    (other / "agent").mkdir(parents=True)
    (other / "agent" / "instructions.md").write_text("You help too.")
    deploy_agent_folder(other)
    token = post_json(local, "/other/v1/session", {"message": "hi"}).json()["continuationToken"]

    error = error_of(post_json(local, "/support/v1/session", {"message": "hi", "continuationToken": token}), 404)

    assert error["code"] == "session_not_found"


@pytest.mark.django_db
@pytest.mark.parametrize("path", [
    "/nope", "/support/v2/session", "/support/v1/sessionz", f"/support/v1/session/{MISSING}/frobnicate",
    "/support/v1/session/", "/support/v1/", "/v1/agents/", "/support",
])
def test_an_unknown_route_gets_404_in_the_error_shape(local, support_agent, path):
    error = error_of(local.get(path), 404)

    assert error["code"] == "not_found"
    assert path in error["message"]


@pytest.mark.django_db
@pytest.mark.parametrize("method,path,allowed", [
    ("get", "/support/v1/session", "POST, OPTIONS"),
    ("put", "/support/v1/session", "POST, OPTIONS"),
    ("delete", "/support/v1/sessions", "GET, HEAD, OPTIONS"),
    ("get", f"/support/v1/session/{MISSING}/message", "POST, OPTIONS"),
    ("post", "/support/v1/info", "GET, HEAD, OPTIONS"),
    ("post", "/v1/agents", "GET, HEAD, OPTIONS"),
])
def test_a_wrong_method_gets_405_naming_it_and_the_allowed_ones(local, support_agent, method, path, allowed):
    response = getattr(local, method)(path)
    error = error_of(response, 405)

    assert (error["code"], error["message"]) == ("method_not_allowed", f'Method "{method.upper()}" not allowed.')
    assert response["Allow"] == allowed
    assert Session.objects.count() == 0


@pytest.mark.django_db
def test_a_wrong_method_on_the_stream_gets_405_with_allow_get(local, session):
    response = local.post(f"/support/v1/session/{session.pk}/stream")
    error = error_of(response, 405)

    assert (error["code"], error["message"]) == ("method_not_allowed", "POST is not allowed here; use GET")
    assert response["Allow"] == "GET"


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

