"""Eval cases kept in the admin (agents.evals.stored): an operator writes one in the admin or replaces an
agent's set over REST, and each is checked as the runner reads it (a problem named by its field).
`test_stored_eval_cases_live.py` runs them with `manage.py eval --url … --agent SLUG`."""
from __future__ import annotations

import json

import pytest

from django.test import Client

from agents.models import Agent, StoredEvalCase
from sessions.models import PersonalToken
from tests.agents.test_secret_admin import login
from tests.channels_app.roles_support import HOST, PEER, anonymous, people  # noqa: F401

ADD = "/admin/agents/storedevalcase/add/"
REFUND = {"id": "refund", "description": "A refund question finds the order first.", "tags": ["billing"],
          "steps": [{"message": "/call lookup_order {\"order_id\": \"A100\"}",
                     "expect": [{"gate": "succeeded"}, {"gate": "calledTool", "tool": "lookup_order"}]},
                    {"message": "thanks", "files": {"notes.txt": "from the customer"},
                     # Each step's gates are on its own turn: lookup_order was called by the first, not this one.
                     "expect": [{"gate": "replyMatches", "pattern": "thanks?"}, {"gate": "notCalledTool",
                                                                                 "tool": "lookup_order"}]}]}


def put(client, slug: str, body) -> object:
    return client.put(f"/v1/agents/{slug}/eval-cases", json.dumps(body), content_type="application/json")


@pytest.mark.django_db
def test_an_operator_replaces_an_agents_cases_and_reads_them_back_signed(people):  # noqa: F811
    ops = people.olga.client
    saved = put(ops, "support", {"cases": [REFUND, {"id": "hello", "steps": [{"message": "hi"}]}]})
    assert saved.status_code == 200, saved.content
    listed = ops.get("/v1/agents/support/eval-cases").json()
    assert listed["agent"] == "support"
    assert [c["id"] for c in listed["cases"]] == ["hello", "refund"]
    refund = listed["cases"][1]
    assert refund["steps"][1]["files"] == {"notes.txt": "from the customer"}
    assert refund["steps"][0]["expect"][1] == {"gate": "calledTool", "tool": "lookup_order"}
    assert set(StoredEvalCase.objects.values_list("updated_by", flat=True)) == {"olga"}
    # The whole set is replaced: what the new body leaves out is gone.
    assert put(ops, "support", {"cases": [REFUND]}).status_code == 200
    assert list(StoredEvalCase.objects.values_list("case_id", flat=True)) == ["refund"]


@pytest.mark.django_db
@pytest.mark.parametrize("case, field", [
    ({**REFUND, "id": "no spaces"}, "cases.0.id"),
    ({**REFUND, "steps": []}, "cases.0.steps"),
    ({**REFUND, "steps": [{"message": "hi", "expect": [{"gate": "calledTool"}]}]}, "cases.0.steps.0.expect.0"),
    ({**REFUND, "steps": [{"message": "hi", "expect": [{"gate": "replied"}]}]}, "cases.0.steps.0.expect.0"),
    ({**REFUND, "steps": [{"message": "hi", "expect": [{"gate": "replyMatches", "pattern": "("}]}]},
     "cases.0.steps.0.expect.0.replyMatches.pattern"),
    ({**REFUND, "steps": [{"message": ""}]}, "cases.0.steps.0.message"),
    ({**REFUND, "colour": "blue"}, "cases.0.colour"),
])
def test_a_bad_case_is_refused_naming_its_field_and_nothing_changes(people, case, field):  # noqa: F811
    ops = people.olga.client
    assert put(ops, "support", {"cases": [REFUND]}).status_code == 200
    refused = put(ops, "support", {"cases": [case]})
    assert refused.status_code == 400, refused.content
    error = refused.json()["error"]
    assert error["code"] == "invalid_request"
    assert any(d["field"].startswith(field) for d in error["details"]), error
    assert list(StoredEvalCase.objects.values_list("case_id", flat=True)) == ["refund"]


@pytest.mark.django_db
def test_two_cases_of_one_name_and_an_unknown_agent_are_refused(people):  # noqa: F811
    ops = people.olga.client
    twice = put(ops, "support", {"cases": [REFUND, REFUND]})
    assert twice.status_code == 400 and "two cases are named 'refund'" in twice.json()["error"]["message"]
    assert ops.get("/v1/agents/nobody/eval-cases").status_code == 404
    assert put(ops, "nobody", {"cases": []}).status_code == 404


@pytest.mark.django_db
def test_a_case_written_past_the_checks_is_named_not_a_server_error(people, support_agent):  # noqa: F811
    StoredEvalCase.objects.create(agent=support_agent, case_id="by-hand", steps=[{"message": ""}])
    listed = people.olga.client.get("/v1/agents/support/eval-cases")
    assert listed.status_code == 409, listed.content
    assert listed.json()["error"]["code"] == "invalid_eval_case" and "'by-hand'" in listed.json()["error"]["message"]


@pytest.mark.django_db
def test_only_operators_may_read_or_replace_them(people):  # noqa: F811
    assert put(people.olga.client, "support", {"cases": [REFUND]}).status_code == 200
    for person in (people.mia, people.max):
        assert person.client.get("/v1/agents/support/eval-cases").status_code == 403
        assert put(person.client, "support", {"cases": []}).status_code == 403
    assert StoredEvalCase.objects.count() == 1


@pytest.mark.django_db
def test_an_operator_writes_a_case_in_the_admin_and_a_bad_one_is_shown_on_its_field(support_agent):
    client = login("olga", operators=True, staff=False)
    form = {"agent": support_agent.pk, "case_id": "refund", "description": "finds the order",
            "tags": json.dumps(["billing"]), "steps": json.dumps(REFUND["steps"])}
    added = client.post(ADD, form)
    assert added.status_code == 302, added.content.decode()[-3000:]
    row = StoredEvalCase.objects.get()
    assert (row.case_id, row.updated_by, row.tags) == ("refund", "olga", ["billing"])
    assert b"refund" in client.get("/admin/agents/storedevalcase/").content

    bad = client.post(ADD, {**form, "case_id": "other", "steps": json.dumps([{"message": "hi", "expect": [
        {"gate": "calledTool"}]}])})
    assert bad.status_code == 200 and StoredEvalCase.objects.count() == 1
    assert b"0.expect.0.calledTool.tool" in bad.content, bad.content.decode()[-3000:]
    again = client.post(ADD, form)
    assert again.status_code == 200 and StoredEvalCase.objects.count() == 1, "one id per agent"
    nul = client.post(ADD, {**form, "case_id": "nul", "steps": json.dumps([{"message": "a\u0000b"}])})
    assert nul.status_code == 200 and StoredEvalCase.objects.count() == 1
    assert b"NUL character" in nul.content


@pytest.mark.django_db
def test_someone_outside_the_operators_cannot_open_the_admins_cases(support_agent):
    client = login("sam", staff=True)
    assert client.get(ADD).status_code == 403


def keep(client, session_id: str):
    return client.post(f"/playground/support/session/{session_id}/eval-case")


@pytest.mark.django_db(transaction=True)
def test_an_operator_keeps_a_playground_session_as_a_case_to_tighten_in_the_admin(people, sync_turns):  # noqa: F811
    mia = people.mia.client
    created = mia.post("/support/v1/session", json.dumps({"message": "/call lookup_order {\"order_id\": \"A100\"}",
                                                          "workspaceFiles": [{"path": "notes.txt",
                                                                              "content": "from the customer"}]}),
                       content_type="application/json")
    assert created.status_code == 201, created.content
    session_id, token = created.json()["sessionId"], created.json()["continuationToken"]
    followed = mia.post("/support/v1/session", json.dumps({"message": "thanks", "continuationToken": token}),
                        content_type="application/json")
    assert followed.status_code == 202, followed.content

    kept = keep(people.olga.client, session_id)
    assert kept.status_code == 302, kept.content
    row = StoredEvalCase.objects.get()
    assert kept["Location"] == f"/admin/agents/storedevalcase/{row.pk}/change/"
    assert row.updated_by == "olga" and session_id in row.description
    assert row.steps == [
        {"message": "/call lookup_order {\"order_id\": \"A100\"}", "files": {"notes.txt": "from the customer"},
         "expect": [{"gate": "succeeded"}, {"gate": "calledTool", "tool": "lookup_order"}]},
        {"message": "thanks", "expect": [{"gate": "succeeded"}]},
    ]
    row.spec()  # what the runner reads: it validates
    assert keep(people.olga.client, session_id).status_code == 302
    assert sorted(StoredEvalCase.objects.values_list("case_id", flat=True)) == [row.case_id, f"{row.case_id}_2"]

    # The owner downloads the file as before, but keeps nothing in the admin; nobody else sees the session.
    assert mia.get(f"/playground/support/session/{session_id}/eval-case").status_code == 200
    assert keep(mia, session_id).status_code == 403
    assert keep(people.max.client, session_id).status_code == 403
    assert StoredEvalCase.objects.count() == 2
    # An operator's token scoped to agents (this one or another) keeps nothing; nor does nobody.
    Agent.objects.create(slug="elsewhere", name="Elsewhere")
    for agents in (["support"], ["elsewhere"]):
        secret = PersonalToken.issue(people.olga.user, f"scoped-{agents[0]}", agents=agents)[1]
        scoped = Client(HTTP_AUTHORIZATION=f"Bearer {secret}", HTTP_HOST=HOST, REMOTE_ADDR=PEER)
        assert keep(scoped, session_id).status_code == 403
    nobody = keep(anonymous(), session_id)
    assert nobody.status_code == 302 and nobody["Location"].startswith("/accounts/login/")
    assert StoredEvalCase.objects.count() == 2
    page = people.olga.client.get(f"/playground/support/session/{session_id}").content.decode()
    assert 'id="keep-case"' in page
    assert 'id="keep-case"' not in mia.get(f"/playground/support/session/{session_id}").content.decode()
