"""Messages between agents (sessions.messaging): one row per message sent or reply delivered."""
from __future__ import annotations

from django.db import models
from django.utils import timezone

from sessions.models.ids import new_id
from sessions.models.session import Session


def new_message_id() -> str:
    return new_id("msg")


class AgentMessage(models.Model):
    """A message from one session to another.

    `message`: `send_message` delivered it into the recipient's conversation as a
    turn, or (`peer`) sent it to an agent on another A2A server, which has no
    session here. `reply`: the recipient's answer to a message, waiting in the
    sender's notifications until `read_notifications` takes it (`read_at`).
    """

    class Kind(models.TextChoices):
        MESSAGE = "message"
        REPLY = "reply"

    id = models.CharField(primary_key=True, max_length=40, default=new_message_id, editable=False)
    kind = models.CharField(max_length=8, choices=Kind.choices, default=Kind.MESSAGE)
    sender = models.ForeignKey(Session, null=True, on_delete=models.SET_NULL, related_name="+")
    sender_agent = models.CharField(max_length=64)
    recipient = models.ForeignKey(Session, null=True, blank=True, on_delete=models.CASCADE,
                                  related_name="agent_messages")
    # A message to an agent on another A2A server: its URL, and the A2A context its answer came in
    # (the thread's next message continues it).
    peer = models.CharField(max_length=500, blank=True)
    peer_context = models.CharField(max_length=100, blank=True)
    thread = models.CharField(max_length=200, blank=True)
    text = models.TextField()
    # Messages between agents since a person or a trigger last spoke: the loop guard.
    hops = models.PositiveSmallIntegerField(default=1)
    # The turn a person or a trigger started that this message descends from (kind message): the turn
    # budget counts the messages of one root, whichever sessions and threads they fanned into.
    root = models.CharField(max_length=40, blank=True)
    # The recipient's turn a message became (kind message).
    turn = models.ForeignKey("Turn", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    read_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [
            models.Index(fields=["recipient", "kind", "read_at"], name="agentmsg_unread"),
            models.Index(fields=["sender", "created_at"], name="agentmsg_rate"),
            models.Index(fields=["root", "kind"], name="agentmsg_budget"),
        ]

    def __str__(self) -> str:
        return self.id

    @classmethod
    def take_unread(cls, recipient_id: str) -> list["AgentMessage"]:
        """The recipient's unread replies, each returned to exactly one reader (a conditional update per row)."""
        taken = []
        for row in cls.objects.filter(recipient_id=recipient_id, kind=cls.Kind.REPLY, read_at=None):
            now = timezone.now()
            if cls.objects.filter(pk=row.pk, read_at=None).update(read_at=now):
                row.read_at = now
                taken.append(row)
        return taken
