"""An ephemeral server for an eval run: `manage.py serve` on a free port and a temporary state root,
with the project deployed and nothing else, stopped (and its state removed) when the run ends."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

from agents.serving import free_port, stop_server, wait_until_healthy

READY_TIMEOUT = 120.0


@contextlib.contextmanager
def ephemeral_server(manage_py: Path, project: Path, workers: int) -> Iterator[str]:
    """Yield the base URL of a server that deploys `project` alone with `workers` turn workers.

    The per-principal limits are off: every case runs as the loopback principal, which a person's
    limits would otherwise hold to a few sessions a minute.
    """
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="agentsite-eval-") as state_root:
        env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
        env.update(PYTHONUNBUFFERED="1", AGENTSITE_RATE_SESSIONS="off", AGENTSITE_RATE_MESSAGES="off",
                   AGENTSITE_MAX_RUNNING_TURNS="off")
        for key in ("DATABASE_URL", "REDIS_URL"):  # the temporary state root's own database and broker
            env.pop(key, None)
        log_path = Path(state_root) / "serve.log"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [sys.executable, str(manage_py), "serve", "--port", str(port), "--state-root", state_root,
                 "--no-examples", "--agents", str(Path(project).resolve()), "--workers", str(workers)],
                cwd=manage_py.parent, env=env, stdout=log, stderr=subprocess.STDOUT)
        base_url = f"http://127.0.0.1:{port}"
        try:
            wait_until_healthy(base_url, process, timeout=READY_TIMEOUT,
                               output=lambda: log_path.read_text(errors="replace")[-3000:])
            yield base_url
        finally:
            stop_server(process, grace=30)
