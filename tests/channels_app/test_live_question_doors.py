"""The model's question (`ask_question`) through the protocol doors, on a real `manage.py serve`: an
MCP client that can elicit is asked it as a form (a choice among its options) and its answer resumes
the turn; one that declines leaves it waiting, answerable over HTTP; an A2A task waits on it as
`input-required` and a message on the task answers it, as text or as a data part."""
from __future__ import annotations

import json
from typing import Iterator

import mcp_types as types
import pytest
from a2a.types import a2a_pb2 as a2a
from google.protobuf.json_format import MessageToDict
from mcp.client import Client

from tests.channels_app import test_live_a2a_door as a2a_door
from tests.channels_app import test_live_mcp_door as mcp_door
from tests.sessions.test_builtin_ask_question import write_asker
from tests.support import Server, run_server

TOKEN = "question-doors-token-0123456789"
CHOICE = {"question": "Which carrier should I use?", "options": ["UPS", "DHL"]}
ASKING = "/call ask_question " + json.dumps(CHOICE)
OPEN = "/call ask_question " + json.dumps({"question": "What is the order number?"})


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    agents = tmp_path_factory.mktemp("asker-agents")
    write_asker(agents / "asker")
    with run_server(tmp_path_factory.mktemp("asker-state"), "--bearer-token", TOKEN, "--no-examples",
                    "--no-schedules", "--agents", str(agents)) as server:
        yield server


def ask(server: Server, calls, elicit=None):
    return mcp_door.Door(server, {"owner": TOKEN}, {}).ask("/asker/mcp", "owner", calls, elicit=elicit)


def events(server: Server, session: str) -> list[dict]:
    return a2a_door.Door(server, {"owner": TOKEN}).events("asker", session)


def test_an_mcp_client_is_asked_the_question_as_a_form_and_its_answer_resumes_the_turn(server: Server):
    asked = []

    async def answer(context, params):
        asked.append((params.message, params.requested_schema))
        return types.ElicitResult(action="accept", content={"answer": "DHL"})

    async def calls(client: Client):
        return await client.call_tool("ask", {"message": ASKING})

    result = ask(server, calls, elicit=answer)
    [(message, schema)] = asked
    assert message == "The agent asker asks: Which carrier should I use?"
    assert schema["properties"]["answer"]["enum"] == ["UPS", "DHL"] and schema["required"] == ["answer"]
    assert not result.is_error and result.structured_content["status"] == "completed"
    assert result.content[0].text == "Tool results:\nask_question (ok): DHL"
    found = events(server, result.structured_content["sessionId"])
    resolved = [e["data"] for e in found if e["type"] == "action.approval_resolved"]
    assert [(r["decision"], r["answer"], r["decidedBy"]["authenticator"]) for r in resolved] == [("answer", "DHL", "bearer")]


def test_a_declined_question_waits_and_is_answered_over_http(server: Server):
    async def decline(context, params):
        return types.ElicitResult(action="decline")

    async def calls(client: Client):
        return await client.call_tool("ask", {"message": OPEN})

    result = ask(server, calls, elicit=decline)
    body = result.structured_content
    assert body["status"] == "awaiting_approval"
    [pending] = body["pendingApprovals"]
    assert (pending["kind"], pending["input"]) == ("question", {"question": "What is the order number?",
                                                               "options": None})
    assert result.content[0].text.startswith("The agent asks: What is the order number?: answer it at ")
    with a2a_door.Door(server, {"owner": TOKEN}).http() as client:
        answered = client.post(f"/asker/v1/session/{body['sessionId']}/questions/{pending['callId']}",
                               json={"answer": "A102"}, headers={"Authorization": f"Bearer {TOKEN}"})
    assert answered.status_code == 200, answered.text

    async def later(client: Client):
        return await client.call_tool("ask", {"message": "thanks", "sessionId": body["sessionId"]})

    assert ask(server, later).content[0].text == "You said: thanks"
    results = [e["data"] for e in events(server, body["sessionId"]) if e["type"] == "action.result"]
    assert [r["output"] for r in results] == ["A102"]


def test_an_a2a_task_waits_on_the_question_and_a_message_answers_it(server: Server):
    async def calls(client):
        parked = await a2a_door.final(client, a2a_door.message(ASKING))
        answered = await a2a_door.final(client, a2a_door.message("DHL", parked))
        second = await a2a_door.final(client, a2a_door.message(OPEN))
        refused = None
        try:
            await a2a_door.final(client, a2a_door.message(task=second, data={"answer": "   "}))
        except Exception as exc:  # the SDK raises the JSON-RPC error it was answered with
            refused = exc
        by_data = await a2a_door.final(client, a2a_door.message(task=second, data={"answer": "A102"}))
        return parked, answered, second, refused, by_data

    parked, answered, second, refused, by_data = a2a_door.Door(server, {"owner": TOKEN}).run(
        "asker", "owner", calls, streaming=False)
    assert parked.status.state == a2a.TASK_STATE_INPUT_REQUIRED
    said = parked.status.message.parts[0].text
    assert "The agent asks (" in said and "Which carrier should I use? (options: UPS; DHL)" in said
    [pending] = MessageToDict(parked.status.message.parts[1].data)["pendingApprovals"]
    assert (pending["kind"], pending["toolName"]) == ("question", "ask_question")
    assert answered.id == parked.id and answered.status.state == a2a.TASK_STATE_COMPLETED
    assert a2a_door.reply_of(answered) == "Tool results:\nask_question (ok): DHL"
    assert second.status.state == a2a.TASK_STATE_INPUT_REQUIRED
    assert refused is not None and "invalid_answer" in str(getattr(refused, "data", "")) + str(refused)
    assert by_data.status.state == a2a.TASK_STATE_COMPLETED
    assert a2a_door.reply_of(by_data) == "Tool results:\nask_question (ok): A102"
