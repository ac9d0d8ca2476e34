"""Reminders over HTTP and through tools called directly: listing, cancelling, refusing, disarming lost
handlers, and the model cancelling its own. Helpers and the clock: test_reminders."""
from __future__ import annotations

import shutil
import socket
import subprocess
from datetime import timedelta

import pytest

from agents.discovery import deploy_agent_folder
from sessions.eventlog.events import read_events
from sessions.models import Reminder
from sessions.timers.schedules import _handlers, create_reminder, disarm_lost_handlers, fire_due, owner_id
from tests.conftest import EXAMPLE
from tests.sessions.test_reminders import T0, WATCH_TOOL, chat_session, post_json, received, transactional
from tests.sessions.test_schedules import write_agent


# --- over HTTP ---------------------------------------------------------------------------


@transactional
def test_reminders_are_listed_and_cancelled_by_their_owner_only(alice, bob, support_agent, sync_turns):
    session = chat_session(alice)
    url = f"/support/v1/session/{session.id}/reminders"
    response = post_json(alice, url, {"every": "2h", "prompt": "Re-check the refund.", "until": "it is refunded"})
    assert response.status_code == 201, response.content
    made = response.json()
    assert (made["kind"], made["spec"], made["form"], made["status"], made["fireCount"]) == ("every", "2h", "prompt", "armed", 0)
    assert (made["sessionId"], made["until"], made["title"]) == (session.id, "it is refunded", "Re-check the refund.")
    rid = made["reminderId"]

    listed = alice.get(url)
    assert listed.status_code == 200
    assert [r["reminderId"] for r in listed.json()["reminders"]] == [rid]

    assert bob.get(url).status_code == 403
    assert post_json(bob, url, {"delay": "5m", "prompt": "mine now"}).status_code == 403
    refused = bob.delete(f"/support/v1/reminders/{rid}")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    unknown = alice.delete("/support/v1/reminders/rem_nope")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "reminder_not_found"

    assert alice.delete(f"/support/v1/reminders/{rid}").status_code == 204
    again = alice.delete(f"/support/v1/reminders/{rid}")
    assert again.status_code == 409 and again.json()["error"]["code"] == "reminder_not_armed"
    row = Reminder.objects.get(pk=rid)
    assert (row.status, row.reason, row.next_fire_at) == ("cancelled", "cancelled", None)
    assert fire_due(now=T0 + timedelta(days=3650)) == 0
    assert alice.get(url).json()["reminders"][0]["status"] == "cancelled"


@transactional
def test_a_task_session_takes_no_reminders(alice, support_agent, sync_turns):
    session = chat_session(alice, mode="task")
    response = post_json(alice, f"/support/v1/session/{session.id}/reminders", {"delay": "5m", "prompt": "x"})
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "task_session"
    assert not Reminder.objects.exists()


@transactional
def test_deleting_a_session_cancels_its_reminders(alice, support_agent, sync_turns):
    session = chat_session(alice)
    kept = chat_session(alice)
    gone = [create_reminder(session, every="1h", prompt="a", now=T0), create_reminder(session, delay="5m", prompt="b", now=T0)]
    other = create_reminder(kept, delay="5m", prompt="c", now=T0)

    assert alice.delete(f"/support/v1/session/{session.id}").status_code == 204

    for reminder in gone:
        reminder.refresh_from_db()
        assert (reminder.status, reminder.reason, reminder.next_fire_at) == ("cancelled", "session_deleted", None)
    assert fire_due(now=T0 + timedelta(hours=2)) == 1, "only the other session's reminder fires"
    other.refresh_from_db()
    assert other.status == "done"


@pytest.mark.parametrize("body, says", [
    ({"delay": "20", "prompt": "x"}, "not a duration"),
    ({"delay": "0m", "prompt": "x"}, "not a duration"),
    ({"every": "-5m", "prompt": "x"}, "not a duration"),
    ({"delay": "20 minutes", "prompt": "x"}, "not a duration"),
    ({"delay": "9999999999999999999d", "prompt": "x"}, "too long"),
    ({"every": "100000000d", "prompt": "x"}, "too long"),
    ({"cron": "* * * *", "prompt": "x"}, "exactly 5 fields"),
    ({"cron": "garbage is not a cron", "prompt": "x"}, "not a valid cron"),
    ({"cron": "0 0 30 2 *", "prompt": "x"}, "never fires"),
    ({"delay": "١m", "prompt": "x"}, "not a duration"),
    ({"every": "٣h", "prompt": "x"}, "not a duration"),
    ({"delay": "20m", "every": "30m", "prompt": "x"}, "exactly one of"),
    ({"prompt": "x"}, "exactly one of"),
    ({"delay": "20m"}, "prompt"),
    ({"delay": "20m", "prompt": ""}, "prompt"),
    ({"delay": 20, "prompt": "x"}, "delay"),
])
@transactional
def test_bad_reminders_get_a_400_that_says_what_is_wrong(alice, support_agent, sync_turns, body, says):
    session = chat_session(alice)
    response = post_json(alice, f"/support/v1/session/{session.id}/reminders", body)
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert says in error["message"], error
    assert not Reminder.objects.exists()


@transactional
def test_a_tool_called_directly_on_a_session_can_set_a_reminder(alice, tmp_path, sync_turns):
    """`POST /tools/<name>/call` with a sessionId gives the tool the same `ctx.host.reminders` a turn does."""
    deploy_agent_folder(write_agent(tmp_path / "watcher", {"agent/tools/watch.py": WATCH_TOOL}))
    session = chat_session(alice, "watcher")

    response = post_json(alice, "/watcher/v1/tools/watch/call", {"input": {"every": "1h"}, "sessionId": session.id})

    assert response.status_code == 200, response.content
    reminder = Reminder.objects.get(pk=response.json()["output"]["reminderId"])
    assert (reminder.session_id, reminder.kind, reminder.spec, reminder.is_run_form) == (session.id, "every", "1h", True)
    assert fire_due(now=reminder.next_fire_at) == 1
    assert [w["text"] for w in received(session)] == ["Re-check CI (firing 1)."]


@transactional
def test_run_form_reminders_whose_handler_is_gone_are_disarmed_saying_why(alice, support_agent, sync_turns):
    session = chat_session(alice)
    child = subprocess.Popen(["true"])
    child.wait()  # a pid of this host whose process has exited
    dead = create_reminder(session, every="1h", run=lambda ctx: "skip", now=T0)
    forgotten = create_reminder(session, every="1h", run=lambda ctx: "skip", now=T0)
    alive = create_reminder(session, every="1h", run=lambda ctx: "skip", now=T0)
    elsewhere = create_reminder(session, every="1h", run=lambda ctx: "skip", now=T0)
    Reminder.objects.filter(pk=dead.pk).update(handler_owner=f"{socket.gethostname()}:{child.pid}")
    _handlers.pop(forgotten.id)  # this process's handler table no longer has it (a restarted worker, same pid)
    Reminder.objects.filter(pk=elsewhere.pk).update(handler_owner="another-host:1")

    assert disarm_lost_handlers() == 2

    states = {r.pk: (r.status, r.reason) for r in Reminder.objects.all()}
    assert states[dead.pk] == states[forgotten.pk] == ("disarmed", "handler_lost_on_restart")
    assert states[alive.pk] == ("armed", "") and alive.handler_owner == owner_id()
    assert states[elsewhere.pk] == ("armed", ""), "another host's process cannot be checked from here"
    # The other host's reminder is left to its own process: this one never fires it.
    assert fire_due(now=T0 + timedelta(hours=1)) == 1


@pytest.mark.django_db(transaction=True)
def test_the_model_cancels_its_own_reminder_when_until_is_met(local, tmp_path, sync_turns):
    root = tmp_path / "minder"
    shutil.copytree(EXAMPLE / "agent", root / "agent", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "agent" / "agent.py").write_text("from agents.sdk import Agent\nagent = Agent(reminders_tool=True)\n")
    deploy_agent_folder(root)
    created = local.post("/minder/v1/session", {"message": '/call remind_me {"every": "30m", "prompt": "check", "until": "shipped"}'},
                         content_type="application/json")
    session_id = created.json()["sessionId"]
    reminder = Reminder.objects.get(session_id=session_id)

    local.post(f"/minder/v1/session/{session_id}/message",
               {"message": f'/call cancel_reminder {{"reminder_id": "{reminder.id}"}}'}, content_type="application/json")
    local.post(f"/minder/v1/session/{session_id}/message",
               {"message": '/call cancel_reminder {"reminder_id": "rem_not_mine"}'}, content_type="application/json")

    reminder.refresh_from_db()
    assert reminder.status == Reminder.Status.CANCELLED
    results = [e["data"] for e in read_events(session_id) if e["type"] == "action.result"]
    assert results[1]["output"] == {"reminderId": reminder.id, "cancelled": True}
    assert "no armed reminder 'rem_not_mine'" in results[2]["error"]
