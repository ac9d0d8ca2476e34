#!/usr/bin/env python
"""What deploy/nginx.conf adds to W1 latency: a session and its turn, through nginx over https and direct.

Starts `manage.py serve` (embedded: SQLite, examples/support's scripted model)
with a bearer token and AGENTSITE_TRUSTED_PROXIES=127.0.0.1, and Debian's nginx
in front of it with deploy/nginx.conf (TLS on a self-signed certificate, as the
test runs it). Then, alternating the two paths so load drift hits both alike,
N times each: POST a session and read its NDJSON stream until
`session.waiting` (W1 of bench/turns.py), each path on one keep-alive client.

    .venv/bin/python bench/proxy_latency.py            # 200 sessions each way
    .venv/bin/python bench/proxy_latency.py --count 50
"""
from __future__ import annotations

import argparse
import json
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.agentsite.nginx_support import run_nginx  # noqa: E402
from turnslib.stats import latency_line  # noqa: E402
from tests.support import free_port, run_server  # noqa: E402


def one_turn(client: httpx.Client) -> float:
    started = time.perf_counter()
    created = client.post("/support/v1/session", json={"message": "hello"})
    created.raise_for_status()
    with client.stream("GET", f"/support/v1/session/{created.json()['sessionId']}/stream") as response:
        for line in response.iter_lines():
            if line and json.loads(line)["type"] == "session.waiting":
                return (time.perf_counter() - started) * 1000
    raise RuntimeError("the stream ended before session.waiting")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    opts = parser.parse_args()
    token = secrets.token_urlsafe(24)
    auth = {"Authorization": f"Bearer {token}"}
    with tempfile.TemporaryDirectory(prefix="agentsite-proxy-bench-") as tmp:
        https_port, http_port, server_port = free_port(), free_port(), free_port()
        with run_server(Path(tmp) / "state", "--bearer-token", token, "--no-schedules", port=server_port,
                        env={"AGENTSITE_TRUSTED_PROXIES": "127.0.0.1", "AGENTSITE_RATE_SESSIONS": "off",
                             "AGENTSITE_RATE_MESSAGES": "off"}) as server, \
                run_nginx(Path(tmp) / "nginx", https_port=https_port, http_port=http_port,
                          upstream_port=server_port) as ca:
            clients = {
                "direct": httpx.Client(base_url=server.base_url, headers=auth, timeout=30),
                "nginx": httpx.Client(base_url=f"https://localhost:{https_port}", headers=auth, verify=str(ca),
                                      timeout=30),
            }
            times: dict[str, list[float]] = {name: [] for name in clients}
            for i in range(opts.warmup + opts.count):
                for name, client in clients.items():
                    elapsed = one_turn(client)
                    if i >= opts.warmup:
                        times[name].append(elapsed)
            for client in clients.values():
                client.close()
    for name, values in times.items():
        print(latency_line(name, values))
    added = statistics.median(times["nginx"]) - statistics.median(times["direct"])
    print(f"nginx adds {added:+.1f} ms at p50")


if __name__ == "__main__":
    main()
