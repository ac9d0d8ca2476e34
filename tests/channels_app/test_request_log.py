"""The web process's log lines about a session carry its id (AGENTSITE_LOG_FORMAT=json)."""
from __future__ import annotations

import io
import json
import logging

from sessions.plumbing.logcontext import JsonFormatter
from tests.channels_app.roles_support import people, start_as  # noqa: F401 (a fixture)


def test_a_line_logged_while_serving_a_request_about_a_session_names_it(people):  # noqa: F811
    session_id = start_as(people.mia.client)
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())  # formats as it is logged, inside the request
    logger = logging.getLogger("sessions.retention.deletion")
    logger.addHandler(handler)
    try:
        assert people.olga.client.delete(f"/support/v1/session/{session_id}").status_code == 204
    finally:
        logger.removeHandler(handler)

    (line,) = [json.loads(text) for text in out.getvalue().splitlines()]
    assert line["sessionId"] == session_id and "operator olga" in line["message"]
    assert "turnId" not in line


def test_a_request_about_no_session_names_none(people):  # noqa: F811
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("django.request")
    logger.addHandler(handler)
    try:
        assert people.max.client.get("/nope/v1/info").status_code == 404
    finally:
        logger.removeHandler(handler)

    assert all("sessionId" not in json.loads(text) for text in out.getvalue().splitlines())
