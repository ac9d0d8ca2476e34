"""Waiting for a server process to answer, and stopping it: for whatever starts one of its own
(an eval run's ephemeral server, the tests' and the benchmarks' live servers). No Django here:
evals run without it."""
from __future__ import annotations

import contextlib
import random
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Callable, Mapping

import httpx


LOWEST_PORT = 10000  # below: the well-known ports of the services a machine runs (5432, 6379, 8000...)


def _ephemeral_low() -> int:
    """Where the kernel's range of ports for outgoing connections starts (Linux; elsewhere: its usual start)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on now, for a server about to be started.

    Taken below the kernel's range for outgoing connections: a port from that range (what binding
    port 0 gives) can be taken by any connection another process opens before the server binds it.
    """
    high = _ephemeral_low()
    candidates = random.sample(range(LOWEST_PORT, high), min(50, high - LOWEST_PORT)) if high > LOWEST_PORT else []
    for port in [*candidates, 0]:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise OSError("no free TCP port on 127.0.0.1")


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
    # One client for every try: a new one per try (httpx.get) builds an SSL context each time,
    # ~40 ms of CPU, ten times a second for as long as the server takes to start.
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
