"""The dashboard's spend section (sessions.dashboard.spend): dollars per UTC day by agent, person
and model from the ledger, the unpriced calls, and the most expensive sessions, on the page as an
operator sees it, for the rows of tests/sessions/dashboard_support.py at a fixed moment."""
from __future__ import annotations

from datetime import date, datetime, timedelta, timezone as dt_timezone
from decimal import Decimal

import pytest
import time_machine

from sessions.dashboard.charts import spend_chart, usd
from sessions.dashboard.figures import WINDOWS
from sessions.dashboard.spend import Split, spend_figures
from sessions.spend.report import Line
from tests.sessions.dashboard_support import make_spending
from tests.sessions.test_dashboard import URL, Tables, figure, login

pytestmark = pytest.mark.django_db
NOW = datetime(2025, 3, 12, 15, 0, tzinfo=dt_timezone.utc)  # a Wednesday, mid-afternoon UTC


@pytest.fixture
def clock():
    with time_machine.travel(NOW, tick=False) as traveller:
        yield traveller


@pytest.fixture
def ops(clock):
    return login("sam", staff=True)


def spend_section(html: str) -> str:
    return html.split('<section id="spend">')[1].split('<section id="slowest">')[0]


def test_the_page_shows_the_days_dollars_by_agent_person_and_model_and_the_unpriced_calls(ops):
    make_spending(NOW)

    html = ops.get(URL).content.decode()

    assert "2025-03-11 to 2025-03-12 (UTC)" in html  # the 24 hours touch two UTC days
    assert figure(html, "spendUsd") == "$4.60" and figure(html, "unpricedCalls") == "4"
    assert "4 calls had no known price" in html
    tables = Tables(html).rows
    # key, dollars, unpriced calls: the most expensive first
    assert tables["spend-agent"] == [["alpha", "$4.25", "0"], ["beta", "$0.35", "4"]]
    assert tables["spend-principal"] == [["mia", "$3.75", "0"], ["noor", "$0.85", "4"]]
    assert tables["spend-model"] == [["openai:small", "$2.35", "1"], ["anthropic:big", "$2.25", "0"],
                                     ["local:unknown", "$0.00", "3"]]


def test_the_most_expensive_sessions_of_the_window_are_listed_costliest_first_and_linked(ops):
    ids = make_spending(NOW)

    html = ops.get(URL).content.decode()

    rows = Tables(html).rows["expensive-sessions"]
    # S4 (cost null) and S5 (no cost) are left out; S6 was last active two days ago
    assert [row[:5] for row in rows] == [[ids["S2"], "beta", "noor", "$7.50", "1"],
                                         [ids["S1"], "alpha", "mia", "$3.00", "2"],
                                         [ids["S3"], "alpha", "noor", "$0.0123", "0"]]
    assert rows[0][5] == "2025-03-12 10:00:00"
    assert f'<a href="/playground/beta/session/{ids["S2"]}">{ids["S2"]}</a>' in html

    week = Tables(ops.get(URL, {"window": "7d"}).content.decode()).rows["expensive-sessions"]
    assert [row[0] for row in week] == [ids[n] for n in ("S6", "S2", "S1", "S3")]


def test_each_window_reads_the_whole_utc_days_it_touches(ops, clock):
    ids = make_spending(NOW)

    week = ops.get(URL, {"window": "7d"}).content.decode()
    assert "2025-03-05 to 2025-03-12 (UTC)" in week and figure(week, "spendUsd") == "$14.60"
    assert Tables(week).rows["spend-agent"][0] == ["alpha", "$14.25", "0"]

    hour = ops.get(URL, {"window": "1h"}).content.decode()
    assert "2025-03-12 (UTC)" in hour and " to 2025" not in spend_section(hour)
    assert figure(hour, "spendUsd") == "$2.50" and figure(hour, "unpricedCalls") == "3"
    assert [row[0] for row in Tables(hour).rows["expensive-sessions"]] == [ids["S3"]]

    clock.move_to(datetime(2025, 3, 13, 0, 30, tzinfo=dt_timezone.utc))  # past midnight: yesterday is in the hour
    past_midnight = ops.get(URL, {"window": "1h"}).content.decode()
    assert "2025-03-12 to 2025-03-13 (UTC)" in past_midnight and figure(past_midnight, "spendUsd") == "$2.50"


def test_the_spend_charts_are_svg_bars_per_day_with_each_keys_dollars(ops):
    make_spending(NOW)

    html = ops.get(URL).content.decode()

    charts = {by: html.split(f'<svg class="chart" data-by="{by}"')[1].split("</svg>")[0]
              for by in ("agent", "principal", "model")}
    assert "2025-03-12 UTC: alpha $2.25</title>" in charts["agent"]
    assert "2025-03-11 UTC: alpha $2.00</title>" in charts["agent"]
    assert "2025-03-12 UTC: beta $0.25</title>" in charts["agent"]
    assert charts["agent"].count("<rect ") == 4  # alpha and beta on both days
    assert charts["model"].count('data-key="local:unknown"') == 0  # nothing in dollars to draw
    assert ">Tue 11 Mar</text>" in charts["principal"] and ">Wed 12 Mar</text>" in charts["principal"]
    # the tallest day, $2.50 today, stands on an axis that ends at $2.50
    assert ">$2.5</text>" in charts["agent"]


def test_no_unpriced_calls_no_warning_and_an_empty_ledger_says_so(ops):
    html = ops.get(URL).content.decode()
    assert figure(html, "spendUsd") == "$0.00" and figure(html, "unpricedCalls") == "0"
    assert "had no known price" not in html
    assert "Nothing spent in these days." in html and "No dollars spent in these days." in html
    assert "No session with a known cost was active in this window." in html


def test_the_spend_figures_take_four_queries(django_assert_num_queries, clock):
    """Three of the ledger (one per split, every day at once) and one of the sessions."""
    make_spending(NOW)
    with django_assert_num_queries(4):
        spend = spend_figures(NOW - WINDOWS["7d"].span, NOW)
    assert spend["total"] == Decimal("14.60") and len(spend["days"]) == 8 and len(spend["sessions"]) == 4


def test_past_seven_keys_the_rest_are_drawn_together_as_other():
    day = date(2025, 3, 12)
    totals = [Line(f"agent{i}", Decimal(10 - i), 0, {}) for i in range(9)]
    chart = spend_chart(Split("agent", "agent", [day], {line.key: {day: line.cost_usd} for line in totals}, totals))
    assert [b["class"] for b in chart["bars"]] == [*(f"s{i}" for i in range(7)), "other"]
    assert chart["bars"][-1]["usd"] == "$5.00"  # agent7's $3 and agent8's $2
    assert [row["class"] for row in chart["legend"]][-2:] == ["other", "other"]


def test_dollars_read_as_cents_or_small_amounts_never_as_free():
    assert [usd(v) for v in (Decimal(0), Decimal("0.35"), Decimal("0.5"), Decimal("0.0123"), Decimal("0.00001"),
                             Decimal("1234.5"))] == ["$0.00", "$0.35", "$0.50", "$0.0123", "<$0.0001", "$1,234.50"]
