"""`AGENTSITE_ENV=production`: what it refuses to start without, and what it turns on."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agentsite.production import FALLBACK_SECRET_KEY, ProductionSettingsMissing, production_settings
from tests.command_line import run_command_line
from tests.support import ROOT, child_env, free_port, premigrate, run_server

FERNET_KEY = "7oHTbu0fbxZyP3GDBy6-yn-n_p_1XsYM0J7X5TClHzs="  # a fixed, valid Fernet key

STRONG_KEY = "Zq3-vX9_tL2mR7wK4nB8cH1pF6sJ0dG5yA-eU_iO3rT8lM2kN7qW4xV9zC1bE6hP"  # 64 characters, a fixed test id
PRODUCTION = {"AGENTSITE_ENV": "production", "AGENTSITE_SECRET_KEY": STRONG_KEY, "AGENTSITE_SECRETS_KEYS": FERNET_KEY,
              "AGENTSITE_PUBLIC_URL": "https://agents.example.com"}
# AGENTSITE_TRUSTED_PROXIES values that are not proxies, and how the refusal names them.
NOT_PROXIES = [
    ("not-an-ip", "'not-an-ip', which is not an IP address or network"),
    ("127.0.0.1,0.0.0.0/0", "'0.0.0.0/0', which covers 2^32 public addresses"),
    ("::/0", "'::/0', which covers 2^128 public addresses"),
    ("64.0.0.0/2", "'64.0.0.0/2', which covers 2^30 public addresses"),
    ("8.0.0.0/8", "'8.0.0.0/8', which covers 2^24 public addresses"),
    ("2002::/16", "'2002::/16', which covers 2^112 public addresses"),
    ("2600::/24", "'2600::/24', which covers 2^104 public addresses"),
]


def manage(tmp_path: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env=child_env(AGENTSITE_STATE_ROOT=str(tmp_path / "state"), **env))


def without(name: str) -> dict[str, str]:
    return {k: v for k, v in PRODUCTION.items() if k != name}


def test_check_deploy_finds_nothing_to_warn_about_in_production(tmp_path):
    # The API schema check reads the deployed agents' tools: a deployment migrates first.
    (tmp_path / "state").mkdir()
    premigrate(tmp_path / "state")

    done = manage(tmp_path, "check", "--deploy", "--fail-level", "WARNING", env=PRODUCTION)

    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues" in done.stdout
    assert "WARNING" not in done.stdout + done.stderr


def test_check_deploy_works_on_a_fresh_database_not_yet_migrated(tmp_path):
    done = manage(tmp_path, "check", "--deploy", "--fail-level", "WARNING", env=PRODUCTION)

    assert done.returncode == 0, done.stdout + done.stderr
    assert "no such table" not in done.stdout + done.stderr
    assert "System check identified no issues" in done.stdout


@pytest.mark.parametrize("command", [["check"], ["serve", "--no-examples"]])
@pytest.mark.parametrize("missing", ["AGENTSITE_SECRET_KEY", "AGENTSITE_PUBLIC_URL", "AGENTSITE_SECRETS_KEYS"])
def test_production_refuses_to_start_without_each_required_setting(tmp_path, command, missing):
    done = manage(tmp_path, *command, env=without(missing))

    assert done.returncode != 0
    assert f"{missing} is not set" in done.stderr
    assert "export " + missing in done.stderr
    assert "Traceback" not in done.stderr


def test_production_refuses_the_built_in_fallback_key(tmp_path):
    done = manage(tmp_path, "check", env={**PRODUCTION, "AGENTSITE_SECRET_KEY": FALLBACK_SECRET_KEY})

    assert done.returncode != 0
    assert "AGENTSITE_SECRET_KEY is the built-in development key" in done.stderr
    assert "Traceback" not in done.stderr


def test_production_refuses_a_secrets_key_that_is_not_a_fernet_key(tmp_path):
    done = manage(tmp_path, "check", env={**PRODUCTION, "AGENTSITE_SECRETS_KEYS": f"{FERNET_KEY},not-a-key"})

    assert done.returncode != 0
    assert "AGENTSITE_SECRETS_KEYS: key 2 is not a Fernet key" in done.stderr
    assert "not-a-key" not in done.stderr  # a key is never echoed
    assert "Traceback" not in done.stderr


def test_the_asgi_app_refuses_to_load_without_the_required_settings(tmp_path):
    done = subprocess.run([sys.executable, "-c", "import agentsite.asgi"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env=child_env(AGENTSITE_STATE_ROOT=str(tmp_path / "state"),
                                                    **without("AGENTSITE_PUBLIC_URL")))

    assert done.returncode != 0
    assert "AGENTSITE_PUBLIC_URL is not set" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("command", [["check", "--deploy"], ["serve", "--no-examples"]])
def test_production_refuses_a_short_secret_key_naming_the_variable_and_how_to_make_one(tmp_path, command):
    done = manage(tmp_path, *command, env={**PRODUCTION, "AGENTSITE_SECRET_KEY": "abc"})

    assert done.returncode != 0
    assert "AGENTSITE_SECRET_KEY is 3 characters long, fewer than 50" in done.stderr
    assert "secrets.token_urlsafe(50)" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("key, said", [
    ("ab" * 40, "has 2 different characters, fewer than 5"),
    ("django-insecure-" + STRONG_KEY, "starts with 'django-insecure-'"),
    (STRONG_KEY[:49], "is 49 characters long, fewer than 50"),
], ids=["low-variety", "django-insecure", "49-characters"])
def test_production_refuses_a_secret_key_django_calls_weak(key, said):
    with pytest.raises(ProductionSettingsMissing, match=f"AGENTSITE_SECRET_KEY {said}"):
        production_settings({**PRODUCTION, "AGENTSITE_SECRET_KEY": key})


def test_production_refuses_a_metrics_token_short_enough_to_guess():
    with pytest.raises(ProductionSettingsMissing, match="AGENTSITE_METRICS_TOKEN is 25 characters long, fewer than 32"):
        production_settings({**PRODUCTION, "AGENTSITE_METRICS_TOKEN": "scraper-secret-0123456789"})
    assert production_settings({**PRODUCTION, "AGENTSITE_METRICS_TOKEN": "m" + STRONG_KEY[:31]})["DEBUG"] is False


def test_production_refuses_allow_all_auth_from_the_environment_and_from_serve(tmp_path):
    by_env = manage(tmp_path, "check", env={**PRODUCTION, "AGENTSITE_AUTH": "allow_all"})
    by_flag = manage(tmp_path, "serve", "--production", "--allow-anonymous", "--no-examples",
                     env={k: v for k, v in PRODUCTION.items() if k != "AGENTSITE_ENV"})

    for done in (by_env, by_flag):
        assert done.returncode != 0
        assert "admits every caller, from anywhere, as the anonymous principal" in done.stderr
        assert "Traceback" not in done.stderr
    assert "AGENTSITE_AUTH=allow_all" in by_env.stderr
    assert "--allow-anonymous" in by_flag.stderr


@pytest.mark.parametrize("proxies, said", NOT_PROXIES)
def test_production_refuses_trusted_proxies_that_are_not_proxies_as_it_loads(tmp_path, proxies, said):
    done = manage(tmp_path, "check", "--deploy", env={**PRODUCTION, "AGENTSITE_TRUSTED_PROXIES": proxies})

    assert done.returncode != 0
    assert f"AGENTSITE_TRUSTED_PROXIES lists {said}" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("proxies, said", NOT_PROXIES)
def test_check_deploy_refuses_trusted_proxies_that_are_not_proxies_in_development(settings, db, proxies, said):
    # A system check of the started site: the command line in this process (production refuses them
    # as its settings load, above, before Django starts). The checks read the database (agentsite.E002).
    settings.AGENTSITE_TRUSTED_PROXIES = proxies.split(",")
    code, _, stderr = run_command_line("check", "--deploy")

    assert code != 0
    assert f"AGENTSITE_TRUSTED_PROXIES lists {said}" in stderr
    assert "Traceback" not in stderr


@pytest.mark.parametrize("proxies", ["127.0.0.1", "10.0.0.0/8,172.16.0.0/12", "fc00::/7", "203.0.113.0/24",
                                     "130.176.0.0/16", "2600:9000::/32", "2001:db8::/32"])
def test_trusted_proxies_of_private_or_proxy_sized_networks_are_taken(proxies):
    assert production_settings({**PRODUCTION, "AGENTSITE_TRUSTED_PROXIES": proxies})["DEBUG"] is False


@pytest.mark.parametrize("value", ["prod", "Production!"])
def test_a_misspelt_environment_is_refused_rather_than_taken_for_development(tmp_path, value):
    done = manage(tmp_path, "check", env={**PRODUCTION, "AGENTSITE_ENV": value})

    assert done.returncode != 0
    assert "AGENTSITE_ENV" in done.stderr and "production" in done.stderr


def test_production_refuses_a_wildcard_among_the_allowed_hosts():
    with pytest.raises(ProductionSettingsMissing, match="AGENTSITE_ALLOWED_HOSTS lists '\\*'"):
        production_settings({**PRODUCTION, "AGENTSITE_ALLOWED_HOSTS": "other.example,*"})


def test_production_allows_the_public_hosts_only_and_turns_debug_off():
    got = production_settings({**PRODUCTION, "AGENTSITE_DEBUG": "1", "AGENTSITE_ALLOWED_HOSTS": "internal.example"})

    assert got["DEBUG"] is False
    assert got["ALLOWED_HOSTS"] == ["agents.example.com", "internal.example"]
    assert got["SECRET_KEY"] == STRONG_KEY
    assert production_settings({**PRODUCTION, "AGENTSITE_PUBLIC_URL": "http://[::1]:8000"})["ALLOWED_HOSTS"] == ["[::1]"]


def test_an_https_public_url_turns_on_secure_cookies_hsts_and_the_redirect():
    got = production_settings(PRODUCTION)

    assert got["SESSION_COOKIE_SECURE"] and got["CSRF_COOKIE_SECURE"] and got["SECURE_SSL_REDIRECT"]
    assert got["SECURE_HSTS_SECONDS"] > 0
    assert got["SECURE_HSTS_INCLUDE_SUBDOMAINS"] is False
    assert "SECURE_PROXY_SSL_HEADER" not in got
    chosen = production_settings({**PRODUCTION, "AGENTSITE_HSTS_SECONDS": "600", "AGENTSITE_HSTS_INCLUDE_SUBDOMAINS": "1",
                                  "AGENTSITE_TRUSTED_PROXIES": "127.0.0.1"})
    assert (chosen["SECURE_HSTS_SECONDS"], chosen["SECURE_HSTS_INCLUDE_SUBDOMAINS"]) == (600, True)
    assert "security.W005" not in chosen["SILENCED_SYSTEM_CHECKS"]
    # Django would believe X-Forwarded-Proto from any peer: channels_app.proxies reads it from trusted ones.
    assert "SECURE_PROXY_SSL_HEADER" not in chosen


def test_a_plain_http_public_url_keeps_cookies_usable_over_http():
    got = production_settings({**PRODUCTION, "AGENTSITE_PUBLIC_URL": "http://agents.internal:8000"})

    assert not any(k in got for k in ("SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE", "SECURE_SSL_REDIRECT",
                                      "SECURE_HSTS_SECONDS"))


def test_a_production_server_answers_400_to_a_foreign_host(tmp_path):
    port = free_port()
    # Plain http, so no redirect to https gets in the way of the Host check.
    env = {**PRODUCTION, "AGENTSITE_PUBLIC_URL": f"http://127.0.0.1:{port}"}

    with run_server(tmp_path / "state", "--no-examples", "--no-workers", env=env, port=port) as server:
        with server.client() as client:
            assert client.get("/healthz").status_code == 200
            assert client.get("/healthz", headers={"Host": "evil.example"}).status_code == 400
            assert client.get("/v1/agents", headers={"Host": f"evil.example:{port}"}).status_code == 400
            assert client.get("/v1/agents", headers={"Host": "localhost"}).status_code == 400
