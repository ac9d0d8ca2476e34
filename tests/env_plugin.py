"""Loaded with `-p tests.env_plugin` before Django is set up: point the
settings at a throwaway state root and a file test database, so tests never
touch a developer's `.agentsite/` and other processes can open the test DB."""
import os
import tempfile

_root = tempfile.mkdtemp(prefix="agentsite-tests-")
os.environ.setdefault("AGENTSITE_STATE_ROOT", _root)
os.environ.setdefault("AGENTSITE_TEST_DB", os.path.join(_root, "test-db.sqlite3"))
# Never reach a real model provider from the suite.
for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
    os.environ.pop(key, None)
