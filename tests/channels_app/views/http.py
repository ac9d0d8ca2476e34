"""How the route tests call the built-in HTTP channel and read what a session wrote."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient

from sessions.models import Event
from tests.conftest import ALICE_TOKEN

transactional = pytest.mark.django_db(transaction=True)

LOOKUP_A100 = '/call lookup_order {"order_id": "A100"}'


def post_json(client, path: str, body) -> object:
    return client.post(path, json.dumps(body), content_type="application/json")


def create(client, message: str = "hello", **fields):
    return post_json(client, "/support/v1/session", {"message": message, **fields})


def created(client, message: str = "hello", **fields) -> dict:
    response = create(client, message, **fields)
    assert response.status_code == 201, response.content
    return response.json()


def event_types(session_id: str) -> list[str]:
    """The session's event types in order, with runs of text deltas folded into one."""
    types: list[str] = []
    for type_ in Event.objects.filter(session_id=session_id).order_by("index").values_list("type", flat=True):
        if type_.endswith(".appended") and types and types[-1] == type_:
            continue
        types.append(type_)
    return types


def events_of(session_id: str, type_: str) -> list[dict]:
    return list(Event.objects.filter(session_id=session_id, type=type_).order_by("index").values_list("data", flat=True))


def parse_ndjson(content: bytes) -> list[dict]:
    return [json.loads(line) for line in content.decode().splitlines() if line.strip()]


def write_agent(root: Path, instructions: str = "You help.") -> Path:
    (root / "agent").mkdir(parents=True)
    (root / "agent" / "instructions.md").write_text(instructions)
    return root


def stream(path: str, *, until: str, token: str = ALICE_TOKEN, headers: dict | None = None, timeout: float = 10):
    """GET a streaming route in-process and read it until `until` appears, then leave.

    Returns (status, content type, raw bytes read).
    """

    async def read() -> tuple[int, str, bytes]:
        response = await AsyncClient().get(path, headers={"Authorization": f"Bearer {token}", **(headers or {})})
        if not response.streaming:
            return response.status_code, response["Content-Type"], response.content
        chunks = response.streaming_content
        received = b""
        try:
            async with asyncio.timeout(timeout):
                async for chunk in chunks:
                    received += chunk
                    if until.encode() in received:
                        break
        finally:
            await chunks.aclose()
        return response.status_code, response["Content-Type"], received

    return async_to_sync(read)()
