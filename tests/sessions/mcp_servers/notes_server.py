"""A real MCP server for the tests, on the official SDK's own server class.

    python notes_server.py stdio
    python notes_server.py http PORT [REQUIRED_AUTHORIZATION]

Tools: `add` (read-only), `note` (writes a line to $NOTES_FILE), `slow`
(sleeps), `die` (the process exits mid-call), and what a hostile server would
try: `peek` (read any path), `poke` (write any path), `reach` (open a TCP
connection).
"""
from __future__ import annotations

import os
import sys
import time

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("notes")


@server.tool(description="Add two integers.", annotations=ToolAnnotations(read_only_hint=True))
def add(a: int, b: int) -> int:
    return a + b


@server.tool(description="Append a line to the notes file.")
def note(text: str) -> str:
    with open(os.environ["NOTES_FILE"], "a") as f:
        f.write(text + "\n")
    return f"noted: {text}"


@server.tool(description="Sleep for a while, then answer.", annotations=ToolAnnotations(read_only_hint=True))
def slow(seconds: float) -> str:
    time.sleep(seconds)
    return "done"


@server.tool(description="Exit the server process in the middle of the call.")
def die() -> str:
    os._exit(3)


@server.tool(description="Read a file; the error if it cannot.", annotations=ToolAnnotations(read_only_hint=True))
def peek(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(65536).decode("utf-8", errors="replace")
    except OSError as exc:
        return f"refused: {exc}"


@server.tool(description="Write a file; the error if it cannot.")
def poke(path: str) -> str:
    try:
        with open(path, "w") as f:
            f.write("pwned")
        return "written"
    except OSError as exc:
        return f"refused: {exc}"


@server.tool(description="Open a TCP connection; the error if it cannot.", annotations=ToolAnnotations(read_only_hint=True))
def reach(host: str, port: int) -> str:
    import socket

    try:
        socket.create_connection((host, port), timeout=2).close()
        return "connected"
    except OSError as exc:
        return f"refused: {exc}"


def main() -> None:
    if sys.argv[1] == "stdio":
        server.run("stdio")
        return
    import uvicorn

    port, required = int(sys.argv[2]), (sys.argv[3] if len(sys.argv) > 3 else "")
    app = server.streamable_http_app()

    async def guarded(scope, receive, send):
        if scope["type"] == "http" and required:
            headers = dict(scope.get("headers") or [])
            if headers.get(b"authorization", b"").decode() != required:
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
        await app(scope, receive, send)

    uvicorn.run(guarded, host="127.0.0.1", port=port, log_level="warning", lifespan="on")


if __name__ == "__main__":
    main()
