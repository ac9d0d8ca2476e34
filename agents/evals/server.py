"""An ephemeral server for an eval run: `manage.py serve` on a free port and a temporary state root,
with the project deployed and nothing else, stopped (and its state removed) when the run ends."""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import httpx

READY_TIMEOUT = 120.0


class ServerError(Exception):
    pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def ephemeral_server(manage_py: Path, project: Path, workers: int) -> Iterator[str]:
    """Yield the base URL of a server that deploys `project` alone with `workers` turn workers.

    The per-principal limits are off: every case runs as the loopback principal, which a person's
    limits would otherwise hold to a few sessions a minute.
    """
    port = _free_port()
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
            deadline = time.monotonic() + READY_TIMEOUT
            while True:
                if process.poll() is not None:
                    raise ServerError(f"the server exited with {process.returncode}:\n"
                                      + log_path.read_text(errors="replace")[-3000:])
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{base_url}/healthz", timeout=1).status_code == 200:
                        break
                if time.monotonic() > deadline:
                    raise ServerError("the server did not become ready:\n" + log_path.read_text(errors="replace")[-3000:])
                time.sleep(0.1)
            yield base_url
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
