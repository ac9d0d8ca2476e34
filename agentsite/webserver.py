"""uvicorn on a listening socket serve bound (`serve_on`, in each web process serve forks).

`manage.py serve` binds the port itself and hands the socket to each web
process (`--web-processes N`), so N processes accept on one port.
uvicorn's own `--fd` takes the descriptor for a Unix socket: on a TCP socket
uvloop then serves it as a pipe, without TCP_NODELAY, and a stream's small
writes wait on the peer's delayed acknowledgement. Here the socket is
adopted with the family the kernel reports and given to `Server.run`, as
uvicorn's own multi-process mode does.

The options are those serve always ran uvicorn with: uvloop, httptools and
websockets; no access log (under AGENTSITE_LOG_FORMAT=json channels_app.access_log writes one
line per request); lifespan off (the app has no lifespan handler,
channels' on_start runs from agentsite.asgi); proxy headers off (uvicorn
would take X-Forwarded-For from any 127.0.0.1 peer; the app reads them from
AGENTSITE_TRUSTED_PROXIES only, channels_app.proxies).
"""
from __future__ import annotations

import signal
import socket

import uvicorn
from django.conf import settings

APPLICATION = "agentsite.asgi:application"


def _leave(signum: int, frame: object) -> None:
    raise SystemExit(0)


def serve_on(fd: int) -> None:
    # uvicorn stops gracefully on SIGTERM or SIGINT, then raises the signal again under the handler it
    # found: with the default one the process would die there, before its exit handlers (custom channels'
    # on_stop, telemetry's flush) run. This one leaves as a normal exit.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _leave)
    listener = socket.socket(fileno=fd)  # family, type and protocol as the kernel has them
    # Under json, uvicorn's loggers keep Django's LOGGING (its own config would print them plain).
    own_config = {"log_config": None} if settings.LOG_FORMAT == "json" else {}
    config = uvicorn.Config(APPLICATION, loop="uvloop", http="httptools", ws="websockets", access_log=False,
                            proxy_headers=False, lifespan="off", **own_config)
    uvicorn.Server(config).run(sockets=[listener])

