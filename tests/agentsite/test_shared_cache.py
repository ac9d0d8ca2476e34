"""With REDIS_URL, every web process shares one cache (Slack's replayed signatures are
refused whichever process sees them, and failed bearer tokens count toward one lockout);
the embedded default keeps it in its one web process."""
from __future__ import annotations

import subprocess
import sys

from sessions.models import hash_token
from tests.support import ROOT, child_env, redis_database

PROBE = (
    "import django; django.setup()\n"
    "from django.core.cache import caches\n"
    "from agents.integrations.slack import replay_cache_is_shared\n"
    "print(replay_cache_is_shared(), caches['default'].add('probe-key', 1, 30))\n"
)


# Sends N wrong bearer tokens from one address to the API, in a process of its own; prints the statuses.
WRONG_BEARERS = (
    "import sys, django; django.setup()\n"
    "from django.test import Client\n"
    "client = Client(HTTP_HOST='127.0.0.1:8000', REMOTE_ADDR='203.0.113.66', HTTP_AUTHORIZATION='Bearer not-it')\n"
    "print(*[client.get('/v1/agents').status_code for _ in range(int(sys.argv[1]))])\n"
)


def probe(env: dict[str, str], script: str = PROBE, *args: str) -> str:
    done = subprocess.run([sys.executable, "-c", script, *args], cwd=ROOT, env={**child_env(**env), "DJANGO_SETTINGS_MODULE": "agentsite.settings"}, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_two_processes_on_redis_share_one_cache():
    with redis_database() as url:
        assert probe({"REDIS_URL": url}) == "True True"
        assert probe({"REDIS_URL": url}) == "True False", "the second process sees the first one's key"


def test_the_embedded_default_keeps_its_cache_in_the_process():
    assert probe({"REDIS_URL": ""}) == "False True"


def test_two_processes_on_redis_count_failed_bearers_toward_one_lockout():
    with redis_database() as url:
        env = {"REDIS_URL": url, "AGENTSITE_AUTH": "bearer", "AGENTSITE_BEARER_TOKEN_HASHES": hash_token("the-one"),
               "AGENTSITE_AUTH_FAILURES_PER_ACCOUNT": "2/hour", "AGENTSITE_AUTH_FAILURES_PER_ADDRESS": "50/hour"}
        assert probe(env, WRONG_BEARERS, "2") == "401 401"
        assert probe(env, WRONG_BEARERS, "1") == "429", "the second process sees the first one's failures"
