"""A task (one turn) as A2A sees it, folded from the turn's events in the session's log.

One fold serves both readers: `tasks/get` and the first event of a stream are the task as folded up
to some index of the log, and each event after that index, folded, gives the A2A events a streaming
client is sent for it. A client that resubscribes gets the task folded up to where the log is, then
only what comes after: nothing lost, nothing twice. Each A2A event names the log event it comes from
(`metadata.agentsite.index`).

- `turn.started` is `working`; the reply streams into an artifact per message (`message.appended`
  appends, `message.completed` replaces it with the whole text, last chunk) and joins the history;
- tool calls and their results are `working` updates carrying the calls as data;
- a call waiting for a decision is `input-required` with the pending calls as data;
- `turn.completed` is `completed` with the last reply; `turn.failed` is `failed`, or `canceled` when
  the turn was stopped (code `interrupted`).
"""
from __future__ import annotations

from typing import Any, Union

from a2a.server.tasks.task_manager import append_artifact_to_task
from a2a.types import a2a_pb2 as a2a
from google.protobuf.json_format import ParseDict

from channels_app.asking import waiting_call

Event = Union[a2a.TaskStatusUpdateEvent, a2a.TaskArtifactUpdateEvent]

STATE_OF_STATUS = {
    "queued": a2a.TASK_STATE_SUBMITTED, "running": a2a.TASK_STATE_WORKING, "completed": a2a.TASK_STATE_COMPLETED,
    "failed": a2a.TASK_STATE_FAILED, "interrupted": a2a.TASK_STATE_CANCELED,
    "awaiting_approval": a2a.TASK_STATE_INPUT_REQUIRED,
}
TERMINAL = frozenset({a2a.TASK_STATE_COMPLETED, a2a.TASK_STATE_FAILED, a2a.TASK_STATE_CANCELED,
                      a2a.TASK_STATE_REJECTED})


def text_part(text: str) -> a2a.Part:
    return a2a.Part(text=text)


def data_part(data: Any) -> a2a.Part:
    part = a2a.Part()
    ParseDict(data, part.data)
    return part


class TaskLog:
    def __init__(self, task_id: str, context_id: str, message: str, metadata: dict[str, Any] | None = None) -> None:
        self.task = a2a.Task(id=task_id, context_id=context_id, status=a2a.TaskStatus(state=a2a.TASK_STATE_SUBMITTED))
        if metadata:
            self.task.metadata.update(metadata)
        if message:
            self.task.history.append(a2a.Message(message_id=f"{task_id}-message", context_id=context_id,
                                                 task_id=task_id, role=a2a.ROLE_USER, parts=[text_part(message)]))
        self.open: str | None = None  # the artifact the agent's current message streams into
        self.reply = ""  # the turn's last whole reply
        self.pending: list[dict[str, Any]] = []  # the calls asked about and not yet decided

    @property
    def state(self) -> int:
        return self.task.status.state

    def feed(self, envelope: dict[str, Any]) -> list[Event]:
        """Fold one of the turn's events; the A2A events a streaming client is sent for it."""
        kind, data, index = envelope["type"], envelope.get("data") or {}, envelope["index"]
        meta = {"agentsite": {"index": index, "type": kind}}
        if kind == "turn.started":
            return [self._status(a2a.TASK_STATE_WORKING, meta, envelope)]
        if kind == "message.appended" and data.get("delta"):
            append = self.open is not None
            self.open = self.open or f"message-{index}"
            return [self._artifact(self.open, data["delta"], append, False, meta)]
        if kind == "message.completed":
            artifact, self.open = self.open or f"message-{index}", None
            self.reply = data.get("text") or ""
            self.task.history.append(self._message(self.reply, f"{self.task.id}-{index}"))
            return [self._artifact(artifact, self.reply, False, True, meta)]
        if kind == "actions.requested":
            names = ", ".join(call.get("toolName", "?") for call in data.get("calls", []))
            return [self._status(a2a.TASK_STATE_WORKING, meta, envelope, f"calling {names}", {"calls": data.get("calls", [])})]
        if kind == "action.result":
            if self.pending:  # a call of the step ran while others wait: the task still waits on a person
                return [self.waiting(meta, envelope)]
            return [self._status(a2a.TASK_STATE_WORKING, meta, envelope, f"{data.get('toolName', 'a tool')} returned",
                                 {"result": data})]
        if kind == "action.approval_requested":
            self.pending.append(waiting_call(data.get("callId"), data.get("toolName"), data.get("input"),
                                             data.get("kind") == "question"))
            return [self.waiting(meta, envelope)]
        if kind == "action.approval_resolved":
            self.pending = [call for call in self.pending if call["callId"] != data.get("callId")]
            if self.pending:  # decided one of several: the others still wait
                return [self.waiting(meta, envelope)]
            return [self._status(a2a.TASK_STATE_WORKING, meta, envelope)]
        if kind == "turn.completed":
            return [self._status(a2a.TASK_STATE_COMPLETED, meta, envelope, self.reply)]
        if kind == "turn.failed":
            stopped = data.get("code") == "interrupted"
            return [self._status(a2a.TASK_STATE_CANCELED if stopped else a2a.TASK_STATE_FAILED, meta, envelope,
                                 data.get("error") or "the turn failed")]
        return []

    def waiting(self, meta: dict[str, Any] | None = None, envelope: dict[str, Any] | None = None) -> a2a.TaskStatusUpdateEvent:
        """`input-required`: the calls waiting on a person (decisions and questions), and how to answer."""
        said = []
        approvals = [call for call in self.pending if call["kind"] == "approval"]
        questions = [call for call in self.pending if call["kind"] == "question"]
        if approvals:
            names = ", ".join(f"{call['toolName']} ({call['callId']})" for call in approvals)
            said.append(f"The agent waits for a decision on {names}.")
        for call in questions:
            options = (call.get("input") or {}).get("options") or []
            offered = f" (options: {'; '.join(options)})" if options else ""
            said.append(f"The agent asks ({call['callId']}): {(call.get('input') or {}).get('question', '')}"
                        f"{offered}.")
        if not questions:
            said.append("Send a message on this task with the text approve or deny, or a data part "
                        "{\"decision\": \"approve\"|\"deny\", \"callId\"?, \"reason\"?}.")
        elif len(self.pending) == 1:
            said.append("Send a message on this task with the answer as its text, or a data part {\"answer\"}.")
        else:
            said.append("Send a message on this task with a data part for each: {\"callId\", \"answer\"} for a "
                        "question, {\"callId\", \"decision\": \"approve\"|\"deny\"} for a call.")
        text = " ".join(said)
        return self._status(a2a.TASK_STATE_INPUT_REQUIRED, meta or {}, envelope, text,
                            {"pendingApprovals": self.pending})

    def gone(self) -> a2a.TaskStatusUpdateEvent:
        return self._status(a2a.TASK_STATE_FAILED, {}, None, "the session was deleted before the task ended")

    def snapshot(self, history_length: int | None = None) -> a2a.Task:
        task = a2a.Task()
        task.CopyFrom(self.task)
        if history_length is not None:
            keep = list(task.history)[-history_length:] if history_length else []
            del task.history[:]
            task.history.extend(keep)
        return task

    def _message(self, text: str, message_id: str, data: Any = None) -> a2a.Message:
        parts = [text_part(text)] if text else []
        if data is not None:
            parts.append(data_part(data))
        return a2a.Message(message_id=message_id, context_id=self.task.context_id, task_id=self.task.id,
                           role=a2a.ROLE_AGENT, parts=parts)

    def _status(self, state: int, meta: dict[str, Any], envelope: dict[str, Any] | None, text: str = "",
                data: Any = None) -> a2a.TaskStatusUpdateEvent:
        status = a2a.TaskStatus(state=state)
        if text or data is not None:
            index = (envelope or {}).get("index", "now")
            status.message.CopyFrom(self._message(text, f"{self.task.id}-status-{index}", data))
        if envelope and envelope.get("at"):
            status.timestamp.FromJsonString(envelope["at"])
        self.task.status.CopyFrom(status)
        event = a2a.TaskStatusUpdateEvent(task_id=self.task.id, context_id=self.task.context_id, status=status)
        event.metadata.update(meta)
        return event

    def _artifact(self, artifact_id: str, text: str, append: bool, last: bool,
                  meta: dict[str, Any]) -> a2a.TaskArtifactUpdateEvent:
        event = a2a.TaskArtifactUpdateEvent(
            task_id=self.task.id, context_id=self.task.context_id, append=append, last_chunk=last,
            artifact=a2a.Artifact(artifact_id=artifact_id, name="reply", parts=[text_part(text)]))
        event.metadata.update(meta)
        append_artifact_to_task(self.task, event)
        return event
