"""The A2A methods on sessions and turns: the `RequestHandler` the SDK's JSON-RPC dispatcher calls.

`message/send` waits for the task to end or to wait on a person (unless `returnImmediately`);
`message/stream` and `tasks/resubscribe` send the task as folded so far, then each of its events as
the log gets them; `tasks/cancel` stops the turn and answers once it has ended (or after a few
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
from channels_app.door_admission import Caller
from channels_app.errors import APIError
from sessions.plumbing.redisdown import redis_unreachable
from sessions.plumbing.taskqueue import QueueUnavailable
from sessions.turn.admission import AdmissionError

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


def a2a_error(exc: Exception) -> errors.A2AError:
    """An HTTP route's refusal in A2A's words; its code and HTTP status ride along as the error's data."""
    code = getattr(exc, "error_code", None) or getattr(exc, "code", "error")
    status = getattr(exc, "status_code", None) or getattr(exc, "status", 500)
    message = getattr(exc, "message", None) or str(exc)
    data = {"code": str(code), "httpStatus": str(status)}
    if getattr(exc, "details", None) is not None:
        data["details"] = json.dumps(exc.details)
    kind = BY_CODE.get(code)
    if kind is None:
        kind = (errors.InvalidParamsError if status in (400, 403, 404, 409, 413, 422)
                else errors.InvalidRequestError if status < 500 else errors.InternalError)
    return kind(message, data)


async def _db(function, *args):
    """Run `function` on a thread; a refusal as an A2A error."""
    try:
        return await database_sync_to_async(function)(*args)
    except (APIError, AdmissionError, QueueUnavailable) as exc:
        raise a2a_error(exc) from None
    except redis_unreachable() as exc:  # the rate counters' cache restarting: the client tries again shortly
        log.warning("Redis is unreachable: %s", exc)
        raise a2a_error(APIError(503, "service_unavailable", "Redis is unreachable; try again shortly")) from None


def _history(params: Any) -> int | None:
    holder = params.configuration if isinstance(params, a2a.SendMessageRequest) else params
    return holder.history_length if holder.HasField("history_length") else None


async def _events(asked: asking.Asked, task: TaskLog, start: int) -> AsyncIterator[Any]:
    """The task's A2A events from log index `start`, until it ends or waits on a person."""
    if task.state in TERMINAL:
        return
    if task.state == a2a.TASK_STATE_INPUT_REQUIRED and (await _db(asking.state, asked.turn_id))[1]:
        return  # waiting on a person: nothing follows until they decide
    async with aclosing(asking.settled(asked, start)) as batches:
        async for batch in batches:
            for line in batch:
                envelope = json.loads(line.json)
                if envelope.get("turnId") == asked.turn_id:
                    for event in task.feed(envelope):
                        yield event
    if task.state not in TERMINAL and task.state != a2a.TASK_STATE_INPUT_REQUIRED:
        yield task.gone()  # the session was deleted under the task


class SessionTasks(RequestHandler):
    async def _admitted(self, params: a2a.SendMessageRequest, context) -> tuple[asking.Asked, TaskLog, int]:
        caller = caller_of(context)
        message = params.message
        asked = await _db(tasks.answer if message.task_id else tasks.send, caller, caller.slug, message)
        task, start = await _db(tasks.opened, caller, asked)
        return asked, task, start

    async def on_message_send(self, params, context) -> a2a.Task:
        asked, task, start = await self._admitted(params, context)
        if not params.configuration.return_immediately:
            async with aclosing(_events(asked, task, start)) as events:
                async for _ in events:
                    pass
        return task.snapshot(_history(params))

    async def on_message_send_stream(self, params, context) -> AsyncIterator[Any]:
        asked, task, start = await self._admitted(params, context)
        yield task.snapshot()
        async with aclosing(_events(asked, task, start)) as events:
            async for event in events:
                yield event

    async def on_get_task(self, params, context) -> a2a.Task:
        caller = caller_of(context)
        asked = await _db(tasks.task, caller, caller.slug, params.id)
        task, _ = await _db(tasks.opened, caller, asked)
        return task.snapshot(_history(params))

    async def on_subscribe_to_task(self, params, context) -> AsyncIterator[Any]:
        caller = caller_of(context)
        asked = await _db(tasks.task, caller, caller.slug, params.id)
        task, start = await _db(tasks.opened, caller, asked)
        yield task.snapshot()
        async with aclosing(_events(asked, task, start)) as events:
            async for event in events:
                yield event

    async def on_cancel_task(self, params, context) -> a2a.Task:
        caller = caller_of(context)
        asked = await _db(tasks.stop, caller, caller.slug, params.id)
        task, start = await _db(tasks.opened, caller, asked)
        try:
            async with asyncio.timeout(CANCEL_WAIT), aclosing(_events(asked, task, start)) as events:
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
