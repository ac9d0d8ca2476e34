"""The operators' dashboard in the admin (sessions.dashboard): the numbers on the page for turns
of known status, timings, usage and end (tests/sessions/dashboard_support.py), the same figures
on PostgreSQL, an empty database, the trace links, and who may see it."""
from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import path

from sessions.dashboard.charts import nice_ceiling
from sessions.dashboard.figures import WINDOWS, dashboard_figures, percentile
from sessions.dashboard.views import dashboard
from sessions.models import Turn
from sessions.principal import OPERATORS_GROUP
from sessions.dashboard.spend import spend_figures
from tests.sessions.dashboard_support import (RATE_LIMITED, TRACE, comparable, expected, make_spending, make_turns,
                                              spend_comparable, turn_id)
from tests.sessions.test_concurrent_appends import database, run

pytestmark = pytest.mark.django_db
URL = "/admin/dashboard/"


class Tables(HTMLParser):
    """The text of each table's body cells, by the id of the section holding it."""

    def __init__(self, html: str):
        super().__init__()
        self.rows: dict[str, list[list[str]]] = {}
        self.section, self.row, self.cell = "", None, None
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        if tag == "section":
            self.section = dict(attrs).get("id", "")
        elif tag == "tr":
            self.row = []
        elif tag == "td" and self.row is not None:
            self.cell = ""

    def handle_endtag(self, tag):
        if tag == "td" and self.cell is not None:
            self.row.append(self.cell.strip())
            self.cell = None
        elif tag == "tr" and self.row:
            self.rows.setdefault(self.section, []).append(self.row)
            self.row = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data


def login(username: str, *, staff: bool = False, operator: bool = False, superuser: bool = False) -> Client:
    user = User.objects.create_user(username, password="pw", is_staff=staff or superuser, is_superuser=superuser)
    if operator:
        user.groups.add(Group.objects.get_or_create(name=OPERATORS_GROUP)[0])
    client = Client(HTTP_HOST="127.0.0.1:8000")
    client.force_login(user)
    return client


def session_of(name: str) -> str:
    return Turn.objects.get(pk=turn_id(name)).session_id


def figure(html: str, name: str) -> str:
    return re.search(rf'data-figure="{name}"><b>([^<]*)</b>', html).group(1)


@pytest.fixture
def ops() -> Client:
    return login("sam", staff=True)


def test_the_page_shows_the_windows_counts_percentiles_tokens_slowest_turns_and_failures(ops):
    make_turns()

    response = ops.get(URL)

    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-window="24h" class="current"' in html
    assert [figure(html, n) for n in ("turns", "completed", "failed", "interrupted")] == ["9", "5", "3", "1"]
    assert [figure(html, n) for n in ("totalP50", "totalP95", "queueP50", "queueP95")] == [
        "400.0", "5000.0", "40.0", "70.0"]
    tables = Tables(html).rows
    assert tables["by-agent"] == [["alpha", "4", "1", "0", "200.0", "5000.0", "20.0", "40.0"],
                                  ["beta", "5", "2", "1", "600.0", "800.0", "60.0", "70.0"]]
    # agent, model, turns, turns with usage, input, output: the largest total first
    assert tables["tokens"] == [["beta", "anthropic:big", "2", "1", "500", "50"],
                                ["alpha", "scripted:echo", "4", "3", "350", "30"],
                                ["beta", "openai:small", "3", "2", "310", "31"]]
    slowest = tables["slowest"]
    assert [row[0] for row in slowest] == [turn_id(n) for n in ("A4", "B3", "B2", "B4", "B1", "A3", "A2", "A1")]
    assert slowest[0][1:5] == ["alpha", "failed", "5000.0", "40.0"] and slowest[0][6] == TRACE
    assert slowest[0][7] == RATE_LIMITED and slowest[1][4] == "–"  # B3's queue wait is unknown
    assert (f'<a href="/playground/alpha/session/{session_of("A4")}/trace#{turn_id("A4")}">'
            f'{turn_id("A4")}</a>') in html
    assert tables["failures"] == [
        ["failed", RATE_LIMITED, "2", "2", tables["failures"][0][4]],
        ["interrupted", "turn interrupted", "1", "1", tables["failures"][1][4]],
        ["failed", "database error: OperationalError", "1", "1", tables["failures"][2][4]],
    ]


def test_the_charts_are_svg_drawn_on_the_server(ops):
    make_turns()

    html = ops.get(URL).content.decode()

    assert html.count("<svg class=\"chart\"") == 7 and "<script" not in html.split('id="content-main"')[1]
    turns_chart = html.split('id="turns-over-time"')[1].split("</svg>")[0]
    drawn = {s: sum(int(n) for n in re.findall(rf"UTC: (\d+) {s}</title>", turns_chart))
             for s in ("completed", "failed", "interrupted")}
    assert drawn == {"completed": 5, "failed": 3, "interrupted": 1}
    duration = html.split('id="duration-over-time"')[1].split("</svg>")[0]
    assert 'data-line="totalP50"' in duration and 'data-line="totalP95"' in duration
    assert "p95 5000.0 ms" in duration
    tokens = html.split('id="tokens"')[1].split("</svg>")[0]
    assert tokens.count("<g data-row=") == 3 and "500 input tokens" in tokens


@pytest.mark.parametrize("window", list(WINDOWS))
def test_each_window_counts_the_turns_that_ended_in_it(window):
    now = make_turns()
    got = comparable(dashboard_figures(WINDOWS[window], now))
    assert {k: got[k] for k in ("totals", "spread", "bucketed")} == expected(window)


def test_the_figures_take_six_queries_however_many_turns(django_assert_num_queries):
    """Counted, summed and grouped in the database: no query per turn, agent or bucket."""
    now = make_turns()
    with django_assert_num_queries(6):  # buckets, agents, timings, tokens, slowest, failures
        figures = dashboard_figures(WINDOWS["7d"], now)
    assert figures["totals"]["turns"] == 10


def test_the_window_is_chosen_by_the_selector_and_an_unknown_one_is_the_default(ops):
    make_turns()
    hour = ops.get(URL, {"window": "1h"}).content.decode()
    assert 'data-window="1h" class="current"' in hour and figure(hour, "turns") == "5"
    week = ops.get(URL, {"window": "7d"}).content.decode()
    assert figure(week, "turns") == "10" and figure(week, "totalP95") == "9999.0"
    assert 'data-window="24h" class="current"' in ops.get(URL, {"window": "1y"}).content.decode()


def test_the_same_figures_on_postgresql(tmp_path):
    with database("postgres", tmp_path / "state") as (env, _):
        out = json.loads(run("import django\ndjango.setup()\nfrom tests.sessions.dashboard_support import main\n"
                             "main()\n", env, timeout=120).strip().splitlines()[-1])
    now = make_turns()  # and here, on SQLite: every figure, not only the hand-worked ones, must agree
    make_spending(now)
    for key, window in WINDOWS.items():
        assert {k: out[key][k] for k in ("totals", "spread", "bucketed")} == expected(key)
        assert out[key] == comparable(dashboard_figures(window, now)), key
        assert out["spend"][key] == spend_comparable(spend_figures(now - window.span, now)), key
        assert out["pages"][key] == [200, 7]


def test_percentiles_past_the_cap_are_of_the_latest_turns_and_the_page_says_so(ops, monkeypatch):
    make_turns()
    monkeypatch.setattr("sessions.dashboard.figures.MAX_TIMED", 3)

    html = ops.get(URL).content.decode()

    # counts are of every turn; percentiles of the newest three: B1, A1 and A2
    assert figure(html, "turns") == "9" and [figure(html, "totalP50"), figure(html, "totalP95")] == ["200.0", "400.0"]
    assert "Percentiles are of the latest 3 of the window's 9 turns." in html
    monkeypatch.setattr("sessions.dashboard.figures.MAX_TIMED", 10)
    assert 'id="capped"' not in ops.get(URL, {"window": "7d"}).content.decode()  # its 10 turns: all read


def test_an_empty_database_renders_every_section(ops):
    for window in WINDOWS:
        response = ops.get(URL, {"window": window})
        html = response.content.decode()
        assert response.status_code == 200
        assert figure(html, "turns") == "0" and figure(html, "totalP50") == "–"
        assert "No turns ended in this window." in html and "No failures in this window." in html


def test_a_trace_id_links_to_the_trace_url_when_one_is_set(ops, settings):
    make_turns()
    assert f'<td class="trace">{TRACE}</td>' in ops.get(URL).content.decode()

    settings.AGENTSITE_TRACE_URL = "http://localhost:16686/trace/{traceId}"
    linked = ops.get(URL).content.decode()
    assert f'<a href="http://localhost:16686/trace/{TRACE}" rel="noopener">{TRACE}</a>' in linked

    settings.AGENTSITE_TRACE_URL = "javascript:alert(1)//{traceId}"
    assert "javascript:" not in ops.get(URL).content.decode()


def test_operators_by_staff_or_group_and_superusers_see_it(ops):
    for client in (ops, login("olga", operator=True), login("root", superuser=True)):
        assert client.get(URL).status_code == 200


def test_members_are_refused_the_owner_of_the_sessions_too_and_an_anonymous_caller_is_sent_to_log_in():
    make_turns()  # every session on the page is mia's
    for member in (login("mia"), login("max")):
        refused = member.get(URL)
        assert refused.status_code == 403 and b"data-figure" not in refused.content

    response = Client(HTTP_HOST="agents.example.com", REMOTE_ADDR="10.0.0.5").get(URL, {"window": "1h"})
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/admin/dashboard/%3Fwindow%3D1h"


# The view mounted without its door, as a URL conf that forgot the wrapper would.
urlpatterns = [path("bare/dashboard/", dashboard)]


@pytest.mark.urls(__name__)
def test_the_view_without_its_door_shows_nothing_even_to_an_operator():
    make_turns()
    for client in (login("mia"), login("olga", operator=True), login("root", superuser=True)):
        refused = client.get("/bare/dashboard/")
        assert refused.status_code == 403 and b"data-figure" not in refused.content


def test_the_loopback_caller_of_the_embedded_default_sees_it_as_it_reads_the_metrics():
    assert Client(HTTP_HOST="127.0.0.1:8000", REMOTE_ADDR="127.0.0.1").get(URL).status_code == 200


def test_the_admin_index_links_the_dashboard(ops):
    assert f'href="{URL}"' in ops.get("/admin/").content.decode()


def test_percentiles_are_nearest_rank_and_axes_end_on_round_numbers():
    values = [float(v) for v in range(1, 21)]
    assert (percentile(values, 50), percentile(values, 95), percentile([7.0], 95), percentile([], 50)) == (
        10.0, 19.0, 7.0, None)
    assert [nice_ceiling(v) for v in (0, 3, 7, 19, 240, 5001)] == [1, 5, 10, 20, 250, 10000]
