"""Loaded with `-p tests.env_plugin` before Django is set up: point the
settings at a throwaway state root and a file test database, so tests never
touch a developer's `.agentsite/` and other processes can open the test DB."""
import compileall
import os
import tempfile
from pathlib import Path

import pytest
from django.contrib.auth.hashers import PBKDF2PasswordHasher

_worker = os.environ.get("PYTEST_XDIST_WORKER")
if _worker:
    # A pytest-xdist worker inherits the environment of the run's controller,
    # where this module has already run: each worker takes a state root and a
    # test database of its own under the controller's root, so no two workers
    # share a SQLite file, a workspace folder or a server's files.
    # (pytest-django also adds "_gwN" to the test database's name.)
    _root = os.path.join(os.environ["AGENTSITE_STATE_ROOT"], _worker)
    os.makedirs(_root, exist_ok=True)
    os.environ["AGENTSITE_STATE_ROOT"] = _root
    os.environ["AGENTSITE_TEST_DB"] = os.path.join(_root, "test-db.sqlite3")
else:
    # Every server, worker and command the suite starts imports the project's ~250 modules. Where
    # PYTHONDONTWRITEBYTECODE is set (common in containers) none of them would find their bytecode
    # cached, and each process would compile them all again (about 0.8 s of CPU a process, hundreds
    # of processes a run): compiled once here, before the workers start, they read it.
    _project = Path(__file__).resolve().parent.parent
    for _package in ("agents", "agentsite", "channels_app", "sessions", "tests", "examples", "bench"):
        compileall.compile_dir(_project / _package, quiet=1)
    _root = tempfile.mkdtemp(prefix="agentsite-tests-")
    os.environ.setdefault("AGENTSITE_STATE_ROOT", _root)
    os.environ.setdefault("AGENTSITE_TEST_DB", os.path.join(_root, "test-db.sqlite3"))

# The per-principal limits are off for the suite, whose tests start sessions far faster
# than a person does; the tests of the limits set their own (tests/channels_app/test_rate_limits.py).
for key in ("AGENTSITE_RATE_SESSIONS", "AGENTSITE_RATE_MESSAGES", "AGENTSITE_MAX_RUNNING_TURNS"):
    os.environ.setdefault(key, "off")
# Workspaces are plain folders for the suite: a filesystem image of its own per workspace (as root) stays
# mounted after a test that leaves its state root behind; the sandbox tests turn them on and unmount them.
os.environ.setdefault("AGENTSITE_WORKSPACE_DISKS", "off")
# The lockout on failed logins and tokens stays on at its defaults: no test fails that often,
# and tests/conftest.py empties its counters after each test.

# Never reach a real model provider from the suite.
for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
    os.environ.pop(key, None)


class FastPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    """The suite's hasher: the same algorithm and stored form with one iteration, so a
    user made in a test costs no ~0.3 s of CPU; a server in another process still
    verifies these hashes (the count is stored in each)."""

    iterations = 1


def pytest_sessionstart(session):
    """Once pytest-django has configured Django: the suite's hasher comes first."""
    from django.conf import settings
    from django.contrib.auth.hashers import get_hashers, get_hashers_by_algorithm

    if settings.configured:
        settings.PASSWORD_HASHERS = ["tests.env_plugin.FastPBKDF2PasswordHasher", *settings.PASSWORD_HASHERS]
        get_hashers.cache_clear()
        get_hashers_by_algorithm.cache_clear()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """A worker's temporary folders sit where a serial run's would, plus "gwN/".

    pytest-xdist gives each worker `<the run's basetemp>/popen-gwN`. A server's
    doorbells are Unix sockets under its state root while their paths fit
    agents.socketdir.MAX_PATH (else they move to a temp folder): the shorter
    name keeps them under the state roots of `tmp_path` servers, as in a serial run.
    """
    basetemp = getattr(config.option, "basetemp", None)
    if _worker and basetemp and os.path.basename(basetemp) == f"popen-{_worker}":
        config.option.basetemp = os.path.join(os.path.dirname(basetemp), _worker)

