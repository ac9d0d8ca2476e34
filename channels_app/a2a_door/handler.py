"""The A2A methods on sessions and turns: the `RequestHandler` the SDK's JSON-RPC dispatcher calls.

`message/send` waits for the task to end or to wait on a person (unless `returnImmediately`);
`message/stream` sends the task as sent, `tasks/resubscribe` the task as folded so far, then each
of its events as the log gets them; `tasks/cancel` stops the turn and answers once it has ended (or after a few
seconds, with the task as it then is). Push notifications and the extended card are not offered
(the card says so).
"""
from __future__ import annotations

import asyncio
import json
import logging
from contextlib import aclosing
from typing import Any, AsyncIterator

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.types import a2a_pb2 as a2a
from a2a.utils import errors
from channels.db import database_sync_to_async

from channels_app import asking
from channels_app.a2a_door import tasks
from channels_app.a2a_door.tasklog import TERMINAL, TaskLog
from channels_app.door_admission import REFUSALS, Caller, redis_down, refusal
from channels_app.errors import APIError
from sessions.plumbing.redisdown import redis_unreachable

log = logging.getLogger(__name__)

CALLER = "agentsite.caller"
CANCEL_WAIT = 10.0  # seconds tasks/cancel waits for the turn to wind down
BY_CODE = {"task_not_found": errors.TaskNotFoundError, "task_not_cancelable": errors.TaskNotCancelableError,
           "unsupported_content": errors.ContentTypeNotSupportedError}


def caller_of(context: ServerCallContext) -> Caller:
    caller = context.state.get(CALLER)
    if not isinstance(caller, Caller) or caller.slug is None:  # only the door's own ASGI app reaches here
        raise errors.InternalError("an A2A request reached the handler without passing the door")
    return caller


def a2a_error(refused: APIError) -> errors.A2AError:
    """An HTTP route's refusal in A2A's words; its code and HTTP status ride along as the error's data."""
    code, status = refused.error_code, refused.status_code
    data = {"code": str(code), "httpStatus": str(status)}
    if refused.details is not None:
        data["details"] = json.dumps(refused.details)
    kind = BY_CODE.get(code)
    if kind is None:
        kind = (errors.InvalidParamsError if status in (400, 403, 404, 409, 413, 422)
                else errors.InvalidRequestError if status < 500 else errors.InternalError)
    return kind(refused.message, data)


async def _db(function, *args):
    """Run `function` on a thread; a refusal as an A2A error."""
    try:
        return await database_sync_to_async(function)(*args)
    except REFUSALS as exc:
        raise a2a_error(refusal(exc)) from None
    except redis_unreachable() as exc:  # the rate counters' cache restarting: the client tries again shortly
        raise a2a_error(redis_down(exc)) from None


def _history(params: Any) -> int | None:
    holder = params.configuration if isinstance(params, a2a.SendMessageRequest) else params
    return holder.history_length if holder.HasField("history_length") else None


async def _events(asked: asking.Asked, task: TaskLog, start: int, stopping: bool = False) -> AsyncIterator[Any]:
    """The task's A2A events from log index `start`, until it ends or waits on a person.

    Whether it waits is the turn's row's to say, not the fold's: a turn parked with its events read
    has nothing more to follow until someone decides. One `stopping` winds down from its park, and
    is followed to its end.
    """
    if task.state in TERMINAL:
        return
    status, pending = ("stopping", []) if stopping else await _db(asking.state, asked.turn_id)
    if status is not None and not pending:
        waiting: list[dict[str, Any]] = []
        async with aclosing(asking.settled(asked, start, waiting)) as batches:
            async for batch in batches:
                for line in batch:
                    envelope = json.loads(line.json)
                    if envelope.get("turnId") == asked.turn_id:
                        for event in task.feed(envelope):
                            yield event
        if task.state in TERMINAL:
            return
        status, pending = ("awaiting_approval", waiting) if waiting else (None, [])
    if status is None:
        yield task.gone()  # the session was deleted under the task
    elif task.state != a2a.TASK_STATE_INPUT_REQUIRED or task.pending != pending:
        task.pending = list(pending)
        yield task.waiting()


async def _streamed(asked: asking.Asked, task: TaskLog, start: int) -> AsyncIterator[Any]:
    """A stream's events: the task as folded so far, then what follows it."""
    yield task.snapshot()
    async with aclosing(_events(asked, task, start)) as events:
        async for event in events:
            yield event


async def _found(context, find, task_id: str) -> tuple[asking.Asked, TaskLog, int]:
    """Task `task_id` as `find` (tasks.task or tasks.stop) gives it to the caller, folded so far."""
    caller = caller_of(context)
    asked = await _db(find, caller, caller.slug, task_id)
    task, start = await _db(tasks.opened, caller, asked)
    return asked, task, start


class SessionTasks(RequestHandler):
    async def _admitted(self, params: a2a.SendMessageRequest, context) -> tuple[asking.Asked, TaskLog, int]:
        caller = caller_of(context)
        message = params.message
        if message.task_id:
            asked = await _db(tasks.answer, caller, caller.slug, message)
            task, start = await _db(tasks.opened, caller, asked)
        else:
            asked = await _db(tasks.send, caller, caller.slug, message)
            task, start = await _db(tasks.opened, caller, asked, asked.start)
        return asked, task, start

    async def on_message_send(self, params, context) -> a2a.Task:
        asked, task, start = await self._admitted(params, context)
        if not params.configuration.return_immediately:
            async with aclosing(_events(asked, task, start)) as events:
                async for _ in events:
                    pass
        return task.snapshot(_history(params))

    async def on_message_send_stream(self, params, context) -> AsyncIterator[Any]:
        async with aclosing(_streamed(*await self._admitted(params, context))) as events:
            async for event in events:
                yield event

    async def on_get_task(self, params, context) -> a2a.Task:
        _, task, _ = await _found(context, tasks.task, params.id)
        return task.snapshot(_history(params))

    async def on_subscribe_to_task(self, params, context) -> AsyncIterator[Any]:
        async with aclosing(_streamed(*await _found(context, tasks.task, params.id))) as events:
            async for event in events:
                yield event

    async def on_cancel_task(self, params, context) -> a2a.Task:
        asked, task, start = await _found(context, tasks.stop, params.id)
        try:
            async with asyncio.timeout(CANCEL_WAIT), aclosing(_events(asked, task, start, stopping=True)) as events:
                async for _ in events:
                    pass
        except TimeoutError:
            pass  # the task as it is now: a client asks again with tasks/get
        return task.snapshot()

    async def on_list_tasks(self, params, context) -> a2a.ListTasksResponse:
        caller = caller_of(context)
        return await _db(tasks.listed, caller, caller.slug, params)

    async def on_create_task_push_notification_config(self, params, context):
        raise errors.PushNotificationNotSupportedError()

    async def on_get_task_push_notification_config(self, params, context):
        raise errors.PushNotificationNotSupportedError()

    async def on_list_task_push_notification_configs(self, params, context):
        raise errors.PushNotificationNotSupportedError()

    async def on_delete_task_push_notification_config(self, params, context):
        raise errors.PushNotificationNotSupportedError()

    async def on_get_extended_agent_card(self, params, context):
        raise errors.ExtendedAgentCardNotConfiguredError()
