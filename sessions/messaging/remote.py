"""Messages to agents on other A2A servers: the peers `Agent(peers=[...])` names by URL.

`send_message` to such a peer sends the message with the official `a2a-sdk` client, made from the
peer's card (`<url>/.well-known/agent-card.json`), with the token the declaration names from the
agent's secrets. Every request, to the card and to the endpoint it names, goes through the outbound
guard (the SSRF guard and `AGENTSITE_OUTBOUND_ALLOW`, the release's allowed domains). The call waits
for the peer's task to end or to wait on a person, and its reply is the tool's result; the thread's
next message continues the same A2A context.

The loop guards hold as for local peers: the message counts against the root's turn budget and the
session's message rate (an AgentMessage row with `peer`), and it carries its hops and root to the peer
(`metadata.agentsite`), so an agentsite peer counts the hop limit on from there.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from agents.integrations.outbound import OutboundClient, OutboundError
from agents.integrations.outbound.asynchronous import guarded_async_transport
from agents.mcp import expand
from sessions.messaging.limits import MessageRefused, check_budget, check_hops, check_sent, next_hops, root_of
from sessions.models import AgentMessage, Session, Turn
from sessions.plumbing.loopthread import LoopThread, submit
from sessions.turn.locks import message_locks

PEER_TIMEOUT = 300.0  # seconds a message to a remote peer may take, its reply included
_loop = LoopThread("a2a-peers")  # its own: a slow peer never delays wake-ups or MCP calls


@dataclass(frozen=True)
class Answered:
    state: str  # the peer's task state: completed, failed, canceled, input-required, …
    reply: str
    context_id: str
    task_id: str


def send_remote(sender: Session, sender_agent: str, turn_id: str, peer: dict[str, str], text: str, thread: str,
                domains: tuple[str, ...] = ()) -> dict[str, Any]:
    """Send `text` from the sending session's turn to the remote `peer` ({"url", "token"?}); its answer."""
    if not turn_id:
        raise MessageRefused("send_message needs a session's turn to send from")
    trigger, sending = Turn.objects.filter(pk=turn_id).values_list("trigger", "origin").first() or (None, None)
    hops = next_hops(sending)
    check_hops(hops)
    root = root_of(turn_id, trigger, sending)
    url = peer["url"]
    try:
        token = expand(peer["token"]) if peer.get("token") else ""
    except KeyError as exc:
        raise MessageRefused(f"not sent: the token for {url}: {exc.args[0]}") from None
    with transaction.atomic():
        message_locks(root, sender.id, None)
        check_budget(root, sender_agent, url)
        check_sent(sender.id)
        earlier = (AgentMessage.objects.filter(sender=sender, peer=url, thread=thread).exclude(peer_context="")
                   .order_by("-created_at", "-id").values_list("peer_context", flat=True).first())
        row = AgentMessage.objects.create(kind=AgentMessage.Kind.MESSAGE, sender=sender, sender_agent=sender_agent,
                                          peer=url, thread=thread, text=text, hops=hops, root=root)
    metadata = {"agent": sender_agent, "hops": hops, "root": root}
    outbound = OutboundClient(timeout=PEER_TIMEOUT, domains=domains)
    try:
        answered = submit(_loop.get(), _exchange(outbound, url, token, text, earlier or "", metadata)) \
            .result(PEER_TIMEOUT + 5)
    except OutboundError as exc:
        raise MessageRefused(f"not reachable: {url}: {exc}") from None
    except TimeoutError:
        raise MessageRefused(f"no answer: {url} did not answer within {PEER_TIMEOUT:g} s") from None
    except Exception as exc:  # the peer's refusal or a broken answer: the model reads why
        raise MessageRefused(f"not delivered: {url} answered {type(exc).__name__}: {exc}") from None
    AgentMessage.objects.filter(pk=row.pk).update(peer_context=answered.context_id)
    return {"delivered": True, "peer": url, "state": answered.state, "reply": answered.reply,
            "contextId": answered.context_id, "taskId": answered.task_id, "thread": thread or None}


async def _exchange(outbound: OutboundClient, url: str, token: str, text: str, context_id: str,
                    metadata: dict[str, Any]) -> Answered:
    import httpx
    from a2a.client import A2ACardResolver, ClientConfig, create_client
    from a2a.types import a2a_pb2 as a2a

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(transport=guarded_async_transport(outbound), headers=headers,
                                 timeout=PEER_TIMEOUT) as http:
        card = await A2ACardResolver(http, url).get_agent_card()
        client = await create_client(card, ClientConfig(httpx_client=http, streaming=False))
        message = a2a.Message(message_id=uuid.uuid4().hex, role=a2a.ROLE_USER, parts=[a2a.Part(text=text)],
                              context_id=context_id)
        message.metadata.update({"agentsite": metadata})
        last = None
        async for response in client.send_message(a2a.SendMessageRequest(message=message)):
            last = response
    if last is not None and last.HasField("message"):  # an agent that answers without a task
        answer = last.message
        return Answered("completed", _text(answer.parts), answer.context_id, "")
    if last is None or not last.HasField("task"):
        raise ValueError("the peer answered with neither a task nor a message")
    task = last.task
    reply = "".join(_text(artifact.parts) for artifact in task.artifacts) or _text(task.status.message.parts)
    state = a2a.TaskState.Name(task.status.state).removeprefix("TASK_STATE_").lower().replace("_", "-")
    return Answered(state, reply, task.context_id, task.id)


def _text(parts) -> str:
    return "".join(part.text for part in parts if part.WhichOneof("content") == "text")
