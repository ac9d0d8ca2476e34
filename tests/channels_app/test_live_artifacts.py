"""Artifacts against a real `manage.py serve`, on the embedded default (SQLite)
and scaled out (PostgreSQL + Redis): a turn run by a qcluster worker with
the scripted model saves an artifact through `ctx.host.artifacts`; the web
process lists and serves it to the session's principal, and refuses another
principal with 403.
"""
from __future__ import annotations

import contextlib
import json
import textwrap
from typing import Iterator

import pytest

from tests.channels_app.views.test_session_artifacts import REPORT_TOOL
from tests.support import Server, backend_env, read_stream_until, run_server

OWNER, OTHER = "owner-token-5f2c9a", "other-token-81d7e4"


@pytest.fixture(scope="module", params=["sqlite", "postgres+redis"])
def server(request, tmp_path_factory) -> Iterator[Server]:
    agents = tmp_path_factory.mktemp("agents")
    tools = agents / "reporter" / "agent" / "tools"
    tools.mkdir(parents=True)
    (agents / "reporter" / "agent" / "instructions.md").write_text("Write reports.\n")
    (tools / "make_report.py").write_text(textwrap.dedent(REPORT_TOOL))
    with contextlib.ExitStack() as stack:
        env = backend_env(stack, request.param, migrated=True)
        root = tmp_path_factory.mktemp(f"state-{request.param.replace('+', '-')}")
        yield stack.enter_context(run_server(root, "--agents", str(agents), "--bearer-token", OWNER,
                                             "--bearer-token", OTHER, env=env))


def test_a_workers_artifact_downloads_for_its_principal_and_is_403_for_another(server: Server):
    owner = server.client(headers={"Authorization": f"Bearer {OWNER}"})
    other = server.client(headers={"Authorization": f"Bearer {OTHER}"})
    message = '/call make_report {"name": "summary.csv", "text": "region,total\\neu,12\\n"}'
    created = owner.post("/reporter/v1/session", json={"message": message})
    assert created.status_code == 201, created.text
    session_id = created.json()["sessionId"]

    events = read_stream_until(owner, f"/reporter/v1/session/{session_id}/stream", "session.waiting")
    (saved,) = [e for e in events if e["type"] == "artifact.saved"]
    assert (saved["data"]["name"], saved["data"]["size"]) == ("summary.csv", 19)
    result = next(e for e in events if e["type"] == "action.result")
    assert saved["index"] < result["index"], "saved while the call ran, before its result"

    listed = owner.get(f"/reporter/v1/session/{session_id}/artifacts")
    assert listed.status_code == 200
    (item,) = listed.json()["artifacts"]
    download = owner.get(item["downloadUrl"])
    assert download.status_code == 200
    assert download.content == b"region,total\neu,12\n"
    assert download.headers["content-type"] == "text/csv; charset=utf-8"
    assert download.headers["content-disposition"] == 'attachment; filename="summary.csv"'

    for path in (f"/reporter/v1/session/{session_id}/artifacts", item["downloadUrl"]):
        refused = other.get(path)
        assert refused.status_code == 403, path
        assert json.loads(refused.content)["error"]["code"] == "forbidden"
    assert "Internal Server Error" not in server.output()
