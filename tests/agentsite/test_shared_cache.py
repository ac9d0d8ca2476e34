"""With REDIS_URL, every web process shares one cache (Slack's replayed signatures are
refused whichever process sees them); the embedded default keeps it in its one web process."""
from __future__ import annotations

import subprocess
import sys

from tests.support import ROOT, child_env, redis_database

PROBE = (
    "import django; django.setup()\n"
    "from django.core.cache import caches\n"
    "from agents.integrations.slack import replay_cache_is_shared\n"
    "print(replay_cache_is_shared(), caches['default'].add('probe-key', 1, 30))\n"
)


def probe(env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env={**child_env(**env), "DJANGO_SETTINGS_MODULE": "agentsite.settings"}, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_two_processes_on_redis_share_one_cache():
    with redis_database() as url:
        assert probe({"REDIS_URL": url}) == "True True"
        assert probe({"REDIS_URL": url}) == "True False", "the second process sees the first one's key"


def test_the_embedded_default_keeps_its_cache_in_the_process():
    assert probe({"REDIS_URL": ""}) == "False True"
