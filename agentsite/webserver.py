"""uvicorn on a listening socket serve bound (`serve_on`, in each web process serve forks).

`manage.py serve` binds the port itself and hands the socket to each web
process (`--web-processes N`), so N processes accept on one port.
uvicorn's own `--fd` takes the descriptor for a Unix socket: on a TCP socket
uvloop then serves it as a pipe, without TCP_NODELAY, and a stream's small
writes wait on the peer's delayed acknowledgement. Here the socket is
adopted with the family the kernel reports and given to `Server.run`, as
uvicorn's own multi-process mode does.

The options are those serve always ran uvicorn with: uvloop, httptools and
websockets; no access log; lifespan off (the app has no lifespan handler,
channels' on_start runs from agentsite.asgi); proxy headers off (uvicorn
would take X-Forwarded-For from any 127.0.0.1 peer; the app reads them from
AGENTSITE_TRUSTED_PROXIES only, channels_app.proxies).
"""
from __future__ import annotations

import socket

import uvicorn

APPLICATION = "agentsite.asgi:application"


def serve_on(fd: int) -> None:
    listener = socket.socket(fileno=fd)  # family, type and protocol as the kernel has them
    config = uvicorn.Config(APPLICATION, loop="uvloop", http="httptools", ws="websockets", access_log=False,
                            proxy_headers=False, lifespan="off")
    uvicorn.Server(config).run(sockets=[listener])

