"""Waiting for a server process to answer, and stopping it: for whatever starts one of its own
(an eval run's ephemeral server, the tests' and the benchmarks' live servers). No Django here:
evals run without it."""
from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import time
from typing import Callable, Mapping

import httpx


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class NotServing(RuntimeError):
    """The server exited or did not answer in time; the message ends with the tail of its output."""


def wait_until_healthy(base_url: str, process: subprocess.Popen, *, timeout: float,
                       output: Callable[[], str] = str, headers: Mapping[str, str] | None = None,
                       name: str = "the server") -> None:
    """Return once `GET {base_url}/healthz` answers 200 (asked with `headers`).

    Raises NotServing, with `output()` (what the process wrote), as soon as the process exits,
    or after `timeout` seconds without a 200.
    """
    deadline = time.monotonic() + timeout
    # One client for every poll: each new one builds a TLS context, tens of milliseconds of CPU.
    with httpx.Client(headers=dict(headers or {}), timeout=1) as client:
        while True:
            if process.poll() is not None:
                raise NotServing(f"{name} exited with {process.returncode}:\n{output()}")
            with contextlib.suppress(httpx.HTTPError):
                if client.get(f"{base_url}/healthz").status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise NotServing(f"{name} did not answer /healthz in {timeout:.0f} s:\n{output()}")
            time.sleep(0.1)


def stop_server(process: subprocess.Popen, grace: float) -> None:
    """SIGINT (a server's graceful stop), then SIGKILL if it is still running after `grace` seconds."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
