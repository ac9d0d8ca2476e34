"""The OpenAPI document's patterns against the checks they spell: whatever a pattern takes, the check takes."""
from __future__ import annotations

import base64
import binascii
import re

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from agents.schedules import cron_problem
from channels_app.patterns import BASE64, CRON, SENT_PATH, duration_pattern, up_to
from sessions.timers.reminders import TimerError, parse_duration
from sessions.workspaces.store import valid_sent_path

SOME = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
# Drawing from the long duration, cron and base64 patterns is slow; 100 examples catch each broken variant
# of them that 300 catch (tried: a bound one over, a zero, a step of 0, hour 24, month 0, optional padding).
FEWER = settings(SOME, max_examples=100)


def takes_duration(text: str) -> bool:
    try:
        parse_duration(text)
    except TimerError:
        return False
    return True


@pytest.mark.parametrize("limit", [7, 59, 100, 3650, 87600, 5256000, 315360000])
def test_up_to_spells_exactly_one_to_the_limit(limit):
    pattern = re.compile(f"^{up_to(limit)}$")
    probes = [*range(0, 2000), limit - 1, limit, limit + 1, limit * 10, 10 ** len(str(limit)) - 1]

    assert [n for n in probes if bool(pattern.match(str(n))) != (1 <= n <= limit)] == []


@pytest.mark.parametrize("text", ["0s", "1s", "315360000s", "315360001s", "3650d", "3651d", " 05 m ", "87600h",
                                  "87601h", "5256000m", "5256001m", "00000001d", "1x", "\n", "5m\n", ""])
def test_the_duration_pattern_says_what_parse_duration_takes(text):
    assert bool(re.match(duration_pattern(), text)) == (takes_duration(text) or text == "")


@FEWER
@given(st.from_regex(duration_pattern()))
def test_every_duration_the_pattern_takes_is_taken(text):
    assert text == "" or takes_duration(text), text


@FEWER
@given(st.from_regex(CRON))
def test_every_cron_the_pattern_takes_fires(text):
    assert cron_problem(text) is None, text


@FEWER
@given(st.from_regex(BASE64))
def test_every_base64_the_pattern_takes_decodes(text):
    base64.b64decode(text, validate=True)


@SOME
@given(st.text(alphabet="AB+/=x\n", max_size=9))
def test_what_base64_refuses_the_pattern_refuses(text):
    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        assert not re.match(BASE64, text), text


@SOME
@given(st.one_of(st.from_regex(SENT_PATH), st.text(alphabet="ab./%2F\\\n", max_size=8)))
def test_every_path_the_pattern_takes_stays_inside(text):
    if re.match(SENT_PATH, text):
        valid_sent_path(text)
