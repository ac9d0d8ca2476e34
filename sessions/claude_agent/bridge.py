"""The official runtime's child, driven from a turn's thread.

The SDK is asyncio; a turn runs on a worker thread that owns its database
connection. So the SDK runs on an event loop of its own thread, and all it
needs from the turn (a permission decision, a tool run) and all it says
(its messages) crosses one queue to the turn's thread, which alone touches
the database. A question the turn never answers is cancelled when the
child closes, so the loop never waits on a turn that has gone.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import logging
import queue
import threading
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

CONNECT_SECONDS = 60.0
CLOSE_SECONDS = 10.0


@dataclass
class Said:
    """A message of the SDK's stream."""

    message: Any


@dataclass
class Asked:
    """The runtime needs the turn: `kind` "permission" (may `tool` run with `input`?) or "call" (run it)."""

    kind: str
    tool: str
    input: Any
    tool_use_id: str = ""
    in_subagent: bool = False  # asked by a subagent of the runtime's (which cannot wait for approval)
    answer: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)


@dataclass
class Ended:
    """The response is over; `error`: why it broke off."""

    error: BaseException | None = None


class Child:
    """One ClaudeSDKClient (one runtime child process) on its own loop thread."""

    def __init__(self) -> None:
        self.inbox: queue.Queue[Said | Asked | Ended] = queue.Queue()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name="claude-agent", daemon=True)
        self.thread.start()
        self.client: Any = None
        self._asked: set[concurrent.futures.Future] = set()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()
        # Stopped by close(): what is left is cancelled, and the pipes the SDK closed finish closing, before
        # the loop closes (a transport collected after its loop closed cannot close itself).
        self.loop.run_until_complete(_drain())
        self.loop.close()

    def _wait(self, coroutine, timeout: float) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def open(self, options: Any) -> None:
        from claude_agent_sdk import ClaudeSDKClient

        async def connect() -> None:
            self.client = ClaudeSDKClient(options)
            await self.client.connect()

        self._wait(connect(), CONNECT_SECONDS)

    def ask(self, prompt: str | None) -> None:
        """Send the prompt (None: none, the runtime goes on by itself); the response's messages then arrive
        in the inbox, then Ended."""
        async def respond() -> None:
            try:
                if prompt is not None:
                    await self.client.query(prompt)
                async for message in self.client.receive_response():
                    self.inbox.put(Said(message))
            except Exception as exc:  # the turn's thread reports it: it cannot surface here
                self.inbox.put(Ended(exc))
            else:
                self.inbox.put(Ended())

        asyncio.run_coroutine_threadsafe(respond(), self.loop)

    async def need(self, kind: str, tool: str, input: Any, tool_use_id: str = "", in_subagent: bool = False) -> Any:
        """On the loop: ask the turn's thread, and wait for its answer without blocking the loop."""
        asked = Asked(kind, tool, input, tool_use_id, in_subagent)
        self._asked.add(asked.answer)
        self.inbox.put(asked)
        try:
            return await asyncio.wrap_future(asked.answer)
        finally:
            self._asked.discard(asked.answer)

    def alive(self) -> bool:
        """Whether the child can take another prompt (its loop runs and its process has not ended)."""
        process = getattr(getattr(self.client, "_transport", None), "_process", None)  # the SDK's, if it says
        return self.thread.is_alive() and self.client is not None and getattr(process, "returncode", None) is None

    def interrupt(self) -> None:
        """Ask the runtime to stop its response (it ends it with a result message)."""
        if self.client is not None:
            asyncio.run_coroutine_threadsafe(self.client.interrupt(), self.loop)

    def close(self) -> None:
        """End the child process and the loop; questions still open are cancelled."""
        for answer in list(self._asked):
            answer.cancel()
        try:
            if self.client is not None:
                self._wait(self.client.disconnect(), CLOSE_SECONDS)
        except Exception:  # the process is ended by the SDK's own cleanup either way
            log.warning("the Claude Agent SDK child did not close cleanly", exc_info=True)
        finally:
            self.client = None
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(CLOSE_SECONDS)


async def _drain() -> None:
    tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    # The SDK's process transport, unreferenced now, is collected while its loop still runs: collected after
    # the loop closed, it could not close its pipes. Then their last callbacks, each a pass of the loop.
    gc.collect()
    for _ in range(3):
        await asyncio.sleep(0)
    await asyncio.get_running_loop().shutdown_asyncgens()
