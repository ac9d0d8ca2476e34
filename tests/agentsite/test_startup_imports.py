"""What a Django process imports as it starts: every `manage.py` command, web process and turn
worker pays for it, the suite's servers many times over. The MCP SDK (its types take most of a
second to import) waits until a process opens an MCP connection or runs an OAuth flow; the A2A SDK
(with protobuf and Google's API core) until the A2A door serves a request; the Redis
client until the broker, a cache or the channel layer on Redis is used; the Slack SDK until a Slack
channel replies; the Markdown parser until /docs/ is first rendered; httpx (with rich and click, which
its command line imports) until an outbound request is sent; httpx2 until an OAuth flow runs; PyJWT
until a GitHub App signs a token; cryptography until a secret is encrypted or decrypted; a
provider's SDK (openai, anthropic) until a provider of its kind is first built (agents.providers);
the price table (genai_prices) until a public provider's call is priced (agents.pricing).

A turn worker starts without the URL conf (serve ran the checks, so its qcluster skips them): it
never loads the HTTP layer, DRF's serializers and drf-spectacular's schema generator, nor what DRF
brings along when it finds them installed (psycopg, requests, Pygments). A web process has the HTTP
layer, but DRF's probe for requests and PostgreSQL's fields finds them missing (agentsite.lean_imports).

The start runs without the garbage collector (manage.py, agentsite.asgi); the command that follows
runs with it on."""
from __future__ import annotations

import subprocess
import sys

import httpx
import psutil

from tests.support import ROOT, child_env, run_server

LAZY = ("mcp", "mcp_types", "a2a", "redis", "slack_sdk", "markdown_it", "httpx", "httpx2", "jwt", "rich", "click",
        "cryptography", "openai", "anthropic", "genai_prices")

# Run by `manage.py shell -c`: Django set up as every command sets it up.
SCRIPT = f"""
import gc
import sys
from django.core.management import call_command
from django.urls import get_resolver
get_resolver().url_patterns  # the URL conf, with every view module
call_command("check", verbosity=0)
from agentsite.asgi import application
print("collecting:", gc.isenabled())
print(sorted({{name.split(".")[0] for name in sys.modules}} & set({LAZY!r})))
"""


def test_starting_django_the_url_conf_and_the_checks_import_none_of_the_lazy_clients(tmp_path):
    done = subprocess.run([sys.executable, "manage.py", "shell", "-c", SCRIPT], cwd=ROOT, capture_output=True,
                          text=True, timeout=120,
                          env=child_env(AGENTSITE_STATE_ROOT=str(tmp_path), DJANGO_SETTINGS_MODULE="agentsite.settings"))

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-2:] == ["collecting: True", "[]"]


HTTP_LAYER = ("rest_framework.serializers", "drf_spectacular.generators", "channels_app.lockout", "requests", "pygments")

# What a turn worker loads before it forks: Django set up, and the qcluster.
WORKER_SCRIPT = f"""
import sys
import django_q.cluster
loaded = set(sys.modules)
print(sorted(name for name in {HTTP_LAYER!r} if name in loaded))
"""


def test_a_turn_worker_starts_without_the_http_layer(tmp_path):
    done = subprocess.run([sys.executable, "manage.py", "shell", "-c", WORKER_SCRIPT], cwd=ROOT, capture_output=True,
                          text=True, timeout=120,
                          env=child_env(AGENTSITE_STATE_ROOT=str(tmp_path), DJANGO_SETTINGS_MODULE="agentsite.settings"))

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


# A web process as the web servers start one: the ASGI application imported first, on the embedded default.
WEB_SCRIPT = """
import sys
import agentsite.asgi
loaded = set(sys.modules)
print(sorted(name for name in ("psycopg", "requests", "django.contrib.postgres") if name in loaded))
from rest_framework import compat
print(compat.requests, compat.postgres_fields)
import requests  # left out of DRF's probe only: whatever needs it later imports it as usual
print(requests.__name__)
"""


def test_a_web_process_leaves_out_what_rest_framework_only_probes_for(tmp_path):
    env = child_env(AGENTSITE_STATE_ROOT=str(tmp_path), DJANGO_SETTINGS_MODULE="agentsite.settings")
    done = subprocess.run([sys.executable, "-c", WEB_SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env=env)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-3:] == ["[]", "None None", "requests"]


def test_serves_processes_on_the_embedded_default_load_no_postgresql_driver(tmp_path):
    """serve runs the checks (which load the URL conf, and DRF) before it forks the web process and the
    workers: it imports DRF as lean as a web process does, so none of its processes maps psycopg."""
    with run_server(tmp_path / "state", "--no-examples") as server:
        processes = psutil.Process(server.process.pid).children(recursive=True)
        assert processes, "serve's web process and workers"
        mapping = [p.pid for p in processes if any("psycopg" in m.path for m in p.memory_maps())]
        assert mapping == []
        assert httpx.get(f"{server.base_url}/api/schema/", timeout=30).status_code == 200, "DRF serves as before"
