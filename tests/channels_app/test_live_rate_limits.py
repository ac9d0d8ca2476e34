"""The rate limits hold across web processes: two servers on one PostgreSQL and one
Redis are two web processes of one deployment, and requests alternate between them.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import httpx
import pytest

from tests.support import Server, backend_env, run_server

ALICE = "alice-token-0123456789"
BOB = "bob-token-9876543210"


@pytest.fixture(scope="module")
def servers(tmp_path_factory) -> Iterator[tuple[Server, Server]]:
    with contextlib.ExitStack() as stack:
        # Per hour, so no window ends while the test runs.
        env = {**backend_env(stack, "postgres+redis", migrated=True),
               "AGENTSITE_RATE_SESSIONS": "3/hour", "AGENTSITE_RATE_MESSAGES": "2/hour"}
        # The second is a web process only: the first one's turn workers take turns from the shared queue.
        both = tuple(
            stack.enter_context(run_server(tmp_path_factory.mktemp(f"state-{n}"), "--bearer-token", ALICE,
                                           "--bearer-token", BOB, *extra, env=env))
            for n, extra in ((1, ()), (2, ("--no-workers",))))
        yield both


def client(server: Server, token: str) -> httpx.Client:
    return server.client(timeout=20, headers={"Authorization": f"Bearer {token}"})


def assert_rate_limited(response: httpx.Response, limit: str) -> None:
    assert response.status_code == 429, response.text
    assert 1 <= int(response.headers["Retry-After"]) <= 3600
    error = response.json()["error"]
    assert error["code"] == "rate_limited" and limit in error["message"]


def test_the_limits_hold_across_two_web_processes_and_per_principal(servers):
    one, two = servers
    with client(one, ALICE) as a1, client(two, ALICE) as a2, client(one, BOB) as b1, client(two, BOB) as b2:
        created = [c.post("/support/v1/session", json={"message": "hi"}) for c in (a1, a2, a1)]
        assert [r.status_code for r in created] == [201, 201, 201], [r.text for r in created]
        assert_rate_limited(a2.post("/support/v1/session", json={"message": "hi"}), "3/hour")
        assert_rate_limited(a1.post("/support/v1/session", json={"message": "hi"}), "3/hour")

        # Bob's budget is his own.
        assert b2.post("/support/v1/session", json={"message": "hi"}).status_code == 201

        session = created[0].json()["sessionId"]
        sent = a2.post(f"/support/v1/session/{session}/message", json={"message": "one", "admission": "coalesce"})
        assert sent.status_code == 202, sent.text
        sent = a1.post("/support/v1/session", json={"message": "two", "admission": "coalesce",
                                                    "continuationToken": sent.json()["continuationToken"]})
        assert sent.status_code == 202, sent.text
        assert_rate_limited(a2.post(f"/support/v1/session/{session}/message", json={"message": "three"}), "2/hour")
        bobs = b1.post("/support/v1/session", json={"message": "hi"}).json()["sessionId"]
        assert b2.post(f"/support/v1/session/{bobs}/message", json={"message": "one"}).status_code == 202
