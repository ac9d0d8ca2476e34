"""People for the role tests: a member who owns sessions, another member, an operator by
group and one by staff, each with a personal token; sessions started by a member, a
schedule and a channel (whose principals are no user)."""
from __future__ import annotations

from dataclasses import dataclass

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from agents.models import Agent
from sessions.turn.admission import start_session
from sessions.eventlog.events import read_events
from sessions.models import PersonalToken
from sessions.principal import OPERATORS_GROUP, Principal

HOST, PEER = "agents.example.com", "10.0.0.5"
SCHEDULE = Principal(authenticator="schedule", principal_id="schedule:support/daily", principal_type="schedule")
CHANNEL = Principal(authenticator="channel", principal_id="channel:support/hooks:42", principal_type="channel")


@dataclass
class Person:
    user: User
    secret: str

    @property
    def client(self) -> Client:
        return Client(HTTP_AUTHORIZATION=f"Bearer {self.secret}", HTTP_HOST=HOST, REMOTE_ADDR=PEER)


@dataclass
class People:
    mia: Person  # a member, the owner of the member's session
    max: Person  # another member
    olga: Person  # an operator by the operators group
    sam: Person  # an operator by being staff

    @property
    def operators(self) -> list[Person]:
        return [self.olga, self.sam]


def person(username: str, *, staff: bool = False, operator: bool = False) -> Person:
    user = User.objects.create_user(username, password="pw", is_staff=staff)
    if operator:
        user.groups.add(Group.objects.get_or_create(name=OPERATORS_GROUP)[0])
    _, secret = PersonalToken.issue(user, "roles")
    return Person(user, secret)


@pytest.fixture
def people(db, support_agent) -> People:
    return People(person("mia"), person("max"), person("olga", operator=True), person("sam", staff=True))


def anonymous() -> Client:
    """No token and no login, from another machine: no policy admits it."""
    return Client(HTTP_HOST=HOST, REMOTE_ADDR=PEER)


def start_as(client: Client, slug: str = "support", message: str = "hello") -> str:
    created = client.post(f"/{slug}/v1/session", {"message": message}, content_type="application/json")
    assert created.status_code == 201, created.content
    return created.json()["sessionId"]


def start_for(principal: Principal, slug: str = "support", message: str = "tick") -> str:
    """A session as a schedule or a channel starts it (its first turn queued)."""
    return start_session(Agent.objects.get(slug=slug), principal, message).session.id


def acted(session_id: str) -> list[dict]:
    return [e["data"] for e in read_events(session_id) if e["type"] == "operator.acted"]
