"""`GuardedAsyncTransport`: an httpx async transport whose every request is an `OutboundClient` call.

Asynchronous clients of other libraries (the A2A SDK's) take an `httpx.AsyncClient`; built on this
transport, each of their requests, redirect hops included, goes through the guard and the address it
checked, on a thread (the outbound client is synchronous). Bodies are read whole (bounded by the
client's `max_response_bytes`): no streamed responses.
"""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from agents.integrations.outbound.client import OutboundClient

if TYPE_CHECKING:
    import httpx

# Set again by the client for the body it sends, or meaningless once the body is read whole.
DROPPED_REQUEST = ("host", "content-length", "transfer-encoding")
DROPPED_RESPONSE = ("content-encoding", "content-length", "transfer-encoding")


def guarded_async_transport(outbound: OutboundClient) -> "httpx.AsyncBaseTransport":
    import httpx  # lazily: httpx is imported where a request is made

    class GuardedAsyncTransport(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            body = await request.aread()
            headers = {name: value for name, value in request.headers.items() if name.lower() not in DROPPED_REQUEST}
            answer = await asyncio.to_thread(outbound.request, request.method, request.url, headers=headers,
                                             content=body)
            kept = [(name, value) for name, value in answer.headers.multi_items()
                    if name.lower() not in DROPPED_RESPONSE]
            return httpx.Response(answer.status_code, headers=kept, content=answer.content, request=request)

        async def aclose(self) -> None:
            await asyncio.to_thread(outbound.close)

    return GuardedAsyncTransport()
