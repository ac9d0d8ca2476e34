"""What the bad-input tests share: request helpers, the error shape check, one queued session."""
from __future__ import annotations

import base64
import json

import pytest

from sessions.models import Session

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



SESSION_ROUTES = [
    ("get", ""), ("delete", ""), ("post", "/message"), ("post", "/stop"), ("get", "/events"), ("get", "/stream"),
    ("get", "/artifacts"), ("get", "/artifacts/report.md"),
]


def call(client, method: str, path: str):
    if method == "post":
        return post_json(client, path, {"message": "hi"})
    return getattr(client, method)(path)
