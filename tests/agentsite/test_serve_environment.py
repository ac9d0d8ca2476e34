"""agentsite.serve_environment: the settings serve's flags ask for are in the environment before Django loads."""
from pathlib import Path

from agentsite.serve_environment import from_argv
from sessions.models import hash_token


def test_the_flags_that_change_a_setting_become_the_variables_the_settings_read(tmp_path):
    argv = ["manage.py", "serve", "--port", "9000", "--state-root", str(tmp_path / "s"), "--bearer-token", "t-1",
            "--bearer-token", "t-2", "--dev", "--no-schedules", "--workers", "4", "--agents", "mine"]
    assert from_argv(argv, {}) == {
        "AGENTSITE_STATE_ROOT": str((tmp_path / "s").resolve()), "AGENTSITE_AUTH": "bearer",
        # Only digests, the form the bearer policy compares (sessions.models.hash_token).
        "AGENTSITE_BEARER_TOKEN_HASHES": f"{hash_token('t-1')},{hash_token('t-2')}",
        "AGENTSITE_DEV": "1", "AGENTSITE_RELOAD": "1", "AGENTSITE_SCHEDULES": "0", "AGENTSITE_WORKERS": "4"}
    # Reloading comes with --dev, or alone with --reload; --no-reload turns it off under --dev.
    assert from_argv(["manage.py", "serve", "--reload"], {}) == {"AGENTSITE_RELOAD": "1"}
    assert from_argv(["manage.py", "serve", "--dev", "--no-reload"], {}) == {"AGENTSITE_DEV": "1",
                                                                            "AGENTSITE_RELOAD": "0"}
    assert from_argv(["manage.py", "serve", "--allow-anonymous"], {}) == {"AGENTSITE_AUTH": "allow_all"}
    assert from_argv(["manage.py", "serve", "--state-root", "rel"], {}) == {
        "AGENTSITE_STATE_ROOT": str(Path("rel").resolve())}


def test_other_commands_and_flags_serve_refuses_set_nothing_so_serve_says_why():
    assert from_argv(["manage.py", "check", "--dev"], {}) == {}
    assert from_argv(["manage.py", "serve", "--workers", "many"], {}) == {}  # serve's parser names the mistake
    # Refused together by serve, with the flags named: the settings must not refuse first, naming a variable.
    assert from_argv(["manage.py", "serve", "--allow-anonymous", "--bearer-token", "t"], {}) == {}
    assert from_argv(["manage.py", "serve", "--allow-anonymous", "--production"], {}) == {"AGENTSITE_ENV": "production"}
    assert from_argv(["manage.py", "serve", "--allow-anonymous"], {"AGENTSITE_ENV": "production"}) == {}
