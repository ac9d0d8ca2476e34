"""Shared feeds (sessions.eventlog.feeds): many followers of a session in one process, on real databases.

A child process per database (a SQLite file as the server uses, with its
doorbells; a throwaway PostgreSQL database, with its NOTIFY listener) runs the
scenarios of tests/sessions/feeds_child.py, a group at a time on an event loop,
as a web process holds its streams, and reports what every follower received and
what the feeds read. Polls are set far apart (60 s) where the wake-ups are
what is tested, and the safety net is set close (0.3 s) where wake-ups are lost.
"""
from __future__ import annotations

import json
from typing import Any

import pytest

from tests.sessions.test_concurrent_appends import database, run
from tests.support import ROOT

CHILD = "import django\ndjango.setup()\nfrom tests.sessions.feeds_child import main\nmain()\n"


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    ran: dict[str, dict[str, Any]] = {}

    def of(kind: str, group: str) -> dict[str, Any]:
        if kind not in ran:  # both groups in one child: one start, one migrated database
            with database(kind, tmp_path_factory.mktemp(kind), migrated=True) as (env, _):
                ran[kind] = json.loads(run(CHILD, env, str(ROOT / "examples" / "support"), "hinted", "unhinted",
                                           timeout=240))
        return ran[kind][group]
    return of


KINDS = ["sqlite", "postgres"]


def received_in_order(follower: dict[str, Any], last: int) -> bool:
    return follower["indexes"] == list(range(follower["start"], last + 1))


@pytest.mark.parametrize("kind", KINDS)
def test_every_follower_of_a_session_gets_every_event_once_in_order_from_its_start(kind, outcomes):
    out = outcomes(kind, "hinted")["many_followers"]
    assert len(out["followers"]) == 50
    assert {f["start"] for f in out["followers"]} == {0, 1, 2}
    for follower in out["followers"]:
        assert received_in_order(follower, out["last"]), follower


@pytest.mark.parametrize("kind", KINDS)
def test_one_read_per_wake_up_whatever_the_number_of_followers(kind, outcomes):
    out = outcomes(kind, "hinted")["many_followers"]
    # 20 appends, each its own commit and wake-up, followed 50 times: a read per wake-up, never per follower
    # (1,000). A wake-up that lands while the read it asks for is running marks the feed again: one more read.
    assert 1 <= out["counts"]["feed_reads"] <= 2 * out["appends"]
    assert out["counts"]["gap_reads"] == 0


@pytest.mark.parametrize("kind", KINDS)
def test_a_follower_slower_than_the_buffer_reads_the_gap_and_misses_nothing(kind, outcomes):
    out = outcomes(kind, "hinted")["slow_follower"]
    fast, slow = out["followers"]
    assert received_in_order(fast, out["last"])
    assert received_in_order(slow, out["last"])
    assert out["counts"]["gap_reads"] >= 1  # the slow one fell behind the buffer of 5 lines


@pytest.mark.parametrize("kind", KINDS)
def test_deleting_a_followed_session_ends_its_followers(kind, outcomes):
    out = outcomes(kind, "hinted")["deleted_while_followed"]
    assert [f["ended"] for f in out["followers"]] == [True, True, True]
    assert all(f["indexes"] == [0, 1] for f in out["followers"])


def test_events_written_while_the_listener_was_killed_still_arrive(outcomes):
    out = outcomes("postgres", "hinted")["listener_killed"]
    assert out["killed"] >= 1
    assert received_in_order(out["followers"][0], out["last"])


@pytest.mark.parametrize("kind", KINDS)
def test_events_whose_wake_ups_were_lost_arrive_through_the_safety_net(kind, outcomes):
    out = outcomes(kind, "unhinted")["lost_wakeups"]
    for follower, last in zip(out["followers"], out["last"]):
        assert received_in_order(follower, last), follower
    assert out["counts"]["net_reads"] >= 1
