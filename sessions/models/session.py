"""Session and Turn: a conversation and one run of its model loop.

The transitions of both are methods doing conditional updates; only
`sessions.turn.lifecycle` calls the ones that move `Session.active_turn`.
"""
from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any

from django.db import models
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone

from agents.discovery import load_deployment
from sessions.models.channel import ChannelBinding
from sessions.models.event import Event
from sessions.models.ids import hash_token, new_session_id, new_turn_id
from sessions.sql.rows import update_where


@dataclass(frozen=True)
class RunOptions:
    """`Session.options` parsed once: what every tool call of the session runs under."""

    dry_run: bool = False
    as_of: datetime | None = None
    runtime: str = ""
    # "eval" for a session an eval run made (`"purpose": "eval"` at create): it takes no part in A/B experiments.
    purpose: str = ""

    @classmethod
    def parse(cls, raw: dict[str, Any] | None) -> RunOptions:
        raw = raw or {}
        as_of = raw.get("asOf")
        return cls(dry_run=bool(raw.get("dryRun")), as_of=datetime.fromisoformat(as_of) if as_of else None,
                   runtime=str(raw.get("runtime") or ""), purpose=str(raw.get("purpose") or ""))


class SessionManager(models.Manager):
    def get_queryset(self) -> "SessionQuerySet":
        # The conversation grows with every turn and only the engine needs it:
        # requests would otherwise read (and parse) all of it on every lookup.
        return SessionQuerySet(self.model, using=self._db).defer("conversation")


class SessionQuerySet(models.QuerySet):
    def for_principal(self, principal) -> "SessionQuerySet":
        return self.filter(principal_id=principal.principal_id, authenticator=principal.authenticator)

    def holding_turns(self, principal_id: str, authenticator: str) -> int:
        """How many of a principal's sessions hold a running slot (the running-turn cap counts them):
        an active turn queued for a worker or running. A parked turn waits for people, not for a
        worker: it keeps its session's lock but no slot."""
        return self.filter(principal_id=principal_id, authenticator=authenticator, active_turn__isnull=False).exclude(
            active_turn__status=Turn.Status.AWAITING_APPROVAL).count()

    def owner_and_mode(self, session_id: str, agent_slug: str) -> tuple[str, str, str] | None:
        """(principal_id, authenticator, mode) of session `session_id` of agent `agent_slug`; None if there is none."""
        return self.filter(pk=session_id, agent__slug=agent_slug).values_list(
            "principal_id", "authenticator", "mode").first()

    def idle_before(self, cutoff: datetime) -> "SessionQuerySet":
        """Sessions whose last activity (`last_active`) is before `cutoff`, each with `in_flight`: a turn
        queued or running, and `pending`: a turn (or direct tool call) parked on a decision someone owes it.

        The last activity is the later of the last event's time and `updated_at`
        (which a settling turn moves): events also record what happens outside
        turns (approvals decided, direct tool calls, operators' actions).
        """
        last_event = models.Subquery(Event.objects.filter(session=models.OuterRef("pk")).order_by("-index")
                                     .values("at")[:1], output_field=models.DateTimeField())
        in_flight = Turn.objects.filter(session=models.OuterRef("pk"), status__in=Turn.IN_FLIGHT)
        parked = Turn.objects.filter(session=models.OuterRef("pk"), status=Turn.Status.AWAITING_APPROVAL)
        pending = models.Q(status=Session.Status.AWAITING_APPROVAL) | models.Q(models.Exists(parked))
        # A session's activity never precedes its creation, so the indexed created_at narrows the scan first.
        return self.filter(created_at__lt=cutoff, updated_at__lt=cutoff).annotate(
            last_active=Greatest("updated_at", Coalesce(last_event, "updated_at")),
            in_flight=models.Exists(in_flight),
            pending=models.ExpressionWrapper(pending, output_field=models.BooleanField()),
        ).filter(last_active__lt=cutoff)


class Session(ChannelBinding):
    class Mode(models.TextChoices):
        CHAT = "chat"
        TASK = "task"

    class Status(models.TextChoices):
        IDLE = "idle"
        RUNNING = "running"
        # Its turn (or direct tool call) is parked until someone decides its approvals.
        AWAITING_APPROVAL = "awaiting_approval"
        WAITING = "waiting"
        COMPLETED = "completed"
        FAILED = "failed"

    id = models.CharField(primary_key=True, max_length=40, default=new_session_id, editable=False)
    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="sessions")
    deployment = models.ForeignKey("agents.Deployment", on_delete=models.PROTECT, related_name="sessions")
    mode = models.CharField(max_length=8, choices=Mode.choices, default=Mode.CHAT)
    status = models.CharField(max_length=24, choices=Status.choices, default=Status.IDLE)
    title = models.CharField(max_length=200, blank=True)
    principal_id = models.CharField(max_length=200)
    principal_type = models.CharField(max_length=32, default="user")
    authenticator = models.CharField(max_length=64)
    continuation_token_hash = models.CharField(max_length=64, blank=True, db_index=True)
    # channel, channel_key_hash, channel_state, channel_cursor, channel_lease_until: ChannelBinding.
    # Allocates event indexes: incremented in the same transaction as the insert.
    next_event_index = models.PositiveIntegerField(default=0)
    options = models.JSONField(default=dict, blank=True)
    # The provider-neutral conversation, so any worker can run the next turn.
    conversation = models.JSONField(default=list, blank=True)
    usage = models.JSONField(default=dict, blank=True)
    # The provider:model it is bound to, chosen when it was created; moved only by a handoff.
    # Blank on sessions made before selections were stored: their release's model.
    model = models.CharField(max_length=200, blank=True)
    # {experiment name: variant id}: the A/B variants it was enrolled in when created (sessions.experiments).
    ab_variants = models.JSONField(default=dict, blank=True)
    # The one turn allowed to run (the session's execution lock); moved only by sessions.turn.lifecycle.
    active_turn = models.ForeignKey("Turn", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = SessionManager.from_queryset(SessionQuerySet)()

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["agent", "principal_id", "-created_at"], name="session_owner_recent"),
            # The recovery sweep looks for deliveries whose worker died (few rows ever hold a lease).
            models.Index(fields=["channel_lease_until"], name="session_channel_lease",
                         condition=models.Q(channel_lease_until__isnull=False)),
        ]
        constraints = [
            models.UniqueConstraint(fields=["agent", "channel", "channel_key_hash"], name="session_channel_key",
                                    condition=~models.Q(channel_key_hash="")),
        ]

    @property
    def bound_model(self) -> str:
        """The model its turns run on (an old session without a stored selection: its release's default)."""
        return self.model or self.deployment.manifest.get("model", "")

    def __str__(self) -> str:
        return self.id

    @cached_property
    def run_options(self) -> RunOptions:
        return RunOptions.parse(self.options)

    def issue_token(self) -> str:
        """Rotate the continuation token; only its hash is stored."""
        token = f"ct_{self.id}.{secrets.token_urlsafe(24)}"
        self.continuation_token_hash = hash_token(token)
        return token

    def token_matches(self, token: str) -> bool:
        return secrets.compare_digest(hash_token(token), self.continuation_token_hash)

    @staticmethod
    def id_from_token(token: str) -> str | None:
        if not token.startswith("ct_ses_") or "." not in token:
            return None
        return token[3:].split(".", 1)[0]

    def rotate_token(self) -> str:
        """A new continuation token for a follow-up, its hash stored (called under the row lock)."""
        token = self.issue_token()
        Session.objects.filter(pk=self.pk).update(continuation_token_hash=self.continuation_token_hash)
        return token

    def append_while_idle(self, message: dict[str, Any]) -> bool:
        """Add `message` to the conversation if no turn is active (a running turn writes the
        conversation when it settles, over this); call it holding the row lock."""
        current = Session.objects.filter(pk=self.pk).values_list("conversation", flat=True).first()
        return bool(Session.objects.filter(pk=self.pk, active_turn__isnull=True).update(
            conversation=list(current or []) + [message]))

    def is_owned_by(self, principal) -> bool:
        return self.principal_id == principal.principal_id and self.authenticator == principal.authenticator

    def hooks(self) -> list:
        """The agent's hooks for events written outside a turn's run (decisions, recovery, direct calls)."""
        return Session.hooks_of(self.deployment)

    @staticmethod
    def hooks_of(deployment) -> list:
        """Release `deployment`'s hooks; none if it no longer loads: observing never stops an event's write."""
        try:
            return load_deployment(deployment).hooks
        except Exception:
            logging.getLogger(__name__).exception("cannot load the hooks of %s", deployment.pk)
            return []

    # -- the execution lock (called by sessions.turn.lifecycle only) ----------------
    @staticmethod
    def take_lock(session_id: str, turn_id: str, status: str | None = None) -> bool:
        """No active turn → `turn_id`; True only for the one caller whose update won."""
        update: dict[str, Any] = {"active_turn": turn_id}
        if status is not None:
            update["status"] = status
        return bool(Session.objects.filter(pk=session_id, active_turn__isnull=True).update(**update))

    @staticmethod
    def set_status_while_active(session_id: str | None, turn_id: str, status: str, *,
                                expect: str | None = None) -> bool:
        """Change the status of the session whose active turn is still `turn_id` (and whose status is `expect`).

        `session_id` may be None: the active turn names its session (the FK is indexed).
        """
        rows = Session.objects.filter(active_turn=turn_id)
        if session_id is not None:
            rows = rows.filter(pk=session_id)
        if expect is not None:
            rows = rows.filter(status=expect)
        return bool(rows.update(status=status))

    @staticmethod
    def release_lock(session_id: str, turn_id: str, **update: Any) -> bool:
        """Active turn `turn_id` → none, with whatever else settles with it (status, conversation, usage)."""
        return bool(update_where(Session, {"id": session_id, "active_turn": turn_id}, {"active_turn": None, **update}))


class TurnQuerySet(models.QuerySet):
    def latest_of(self, session_id: str) -> "Turn | None":
        """A session's newest turn (its id, status, timings and trace id only: a parked turn's state can be large)."""
        return self.filter(session_id=session_id).order_by("-created_at", "-id").only(
            "id", "session_id", "status", "timings", "trace_id", "created_at").first()

    def next_waiting(self, principal_id: str, authenticator: str) -> tuple[str, str, bool] | None:
        """The principal's oldest turn waiting for a running slot, as (turn id, session id, parked).

        Either a queued turn whose session holds no active turn, or a parked turn
        whose calls are all decided (`parked`: its session is back to `running`,
        the turn still `awaiting_approval`). Oldest by when the turn was sent.
        """
        mine = self.filter(session__principal_id=principal_id, session__authenticator=authenticator)
        queued = mine.filter(status=Turn.Status.QUEUED, session__active_turn__isnull=True)
        decided = mine.filter(status=Turn.Status.AWAITING_APPROVAL, session__status=Session.Status.RUNNING)
        found = [(*row, parked) for rows, parked in ((queued, False), (decided, True))
                 for row in rows.order_by("created_at", "id").values_list("created_at", "id", "session_id")[:1]]
        if not found:
            return None
        _, turn_id, session_id, parked = min(found)
        return turn_id, session_id, parked

    def waiting_owners(self) -> set[tuple[str, str]]:
        """(principal id, authenticator) of every principal with a turn waiting for a running slot."""
        queued = self.filter(status=Turn.Status.QUEUED, session__active_turn__isnull=True)
        decided = self.filter(status=Turn.Status.AWAITING_APPROVAL, session__status=Session.Status.RUNNING)
        return {owner for rows in (queued, decided)
                for owner in rows.values_list("session__principal_id", "session__authenticator").distinct()}

    def session_head(self, session_id: str) -> tuple[str, bool] | None:
        """(id, interrupt requested) of the session's oldest queued turn: the next to start."""
        return self.filter(session_id=session_id, status=Turn.Status.QUEUED).order_by(
            "created_at", "id").values_list("id", "interrupt_requested").first()


class Turn(models.Model):
    class Trigger(models.TextChoices):
        USER = "user"
        REMINDER = "reminder"
        SCHEDULE = "schedule"
        CHANNEL = "channel"
        TOOL = "tool"  # a deterministic tool call holding the session's lock
        AGENT = "agent"  # a message from another agent (sessions.messaging)
        HANDOFF = "handoff"  # a handoff to another model, holding the session's lock (sessions.handoff)

    class Admission(models.TextChoices):
        PREEMPT = "preempt"  # interrupt the running turn, then run
        COALESCE = "coalesce"  # queue behind it

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        COMPLETED = "completed"
        FAILED = "failed"
        INTERRUPTED = "interrupted"
        AWAITING_APPROVAL = "awaiting_approval"

    FINISHED = (Status.COMPLETED, Status.FAILED, Status.INTERRUPTED)
    # A worker runs it or is about to (a parked turn waits for people, not for a worker).
    IN_FLIGHT = (Status.QUEUED, Status.RUNNING)

    id = models.CharField(primary_key=True, max_length=40, default=new_turn_id, editable=False)
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="turns")
    trigger = models.CharField(max_length=16, choices=Trigger.choices, default=Trigger.USER)
    message = models.TextField(blank=True)
    # What triggered it beyond the kind: a reminder or schedule id.
    source_ref = models.CharField(max_length=100, blank=True)
    admission = models.CharField(max_length=16, choices=Admission.choices, default=Admission.PREEMPT)
    status = models.CharField(max_length=24, choices=Status.choices, default=Status.QUEUED)
    claimed_by = models.CharField(max_length=100, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    interrupt_requested = models.BooleanField(default=False)
    error = models.TextField(blank=True)
    # Token counts; null when the provider reported none (unknown, not zero).
    usage = models.JSONField(default=dict, blank=True, null=True)
    # Where a parked turn resumes: the messages so far and the step it reached.
    state = models.JSONField(default=dict, blank=True)
    # Who sent an agent's message: {"agent", "sessionId", "turnId", "hops"}; empty for other triggers.
    origin = models.JSONField(default=dict, blank=True)
    # Files sent with the message ({path, content, encoding}), written into the workspace when the turn starts.
    workspace_files = models.JSONField(default=list, blank=True)
    # Where the ended turn's time went (sessions.turn.timings), written with its end; null until then.
    timings = models.JSONField(null=True, blank=True)
    # The trace the turn belongs to (hex, blank when tracing is off) and the W3C traceparent
    # of the request that admitted it: the worker's turn span continues that trace.
    trace_id = models.CharField(max_length=32, blank=True)
    trace_parent = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    objects = TurnQuerySet.as_manager()

    class Meta:
        ordering = ["created_at"]
        indexes = [
            models.Index(fields=["session", "status", "created_at"], name="turn_session_queue"),
            models.Index(fields=["status", "lease_until"], name="turn_recovery"),
            models.Index(fields=["ended_at"], name="turn_ended"),  # the admin dashboard's windows
        ]

    def __str__(self) -> str:
        return self.id

    @staticmethod
    def claim(turn_id: str, worker: str, lease_seconds: float) -> bool:
        """queued → running; True only for the one caller whose update won.

        The winner reads the row afterwards: what it reads then (an interrupt
        flagged while the turn was queued included) is current.
        """
        now = timezone.now()
        # Written out (sessions.sql): one statement per turn on every worker. A resumed turn keeps its first start.
        return update_where(Turn, {"id": turn_id, "status": Turn.Status.QUEUED},
                            {"status": Turn.Status.RUNNING, "claimed_by": worker,
                             "lease_until": now + timezone.timedelta(seconds=lease_seconds)},
                            first={"started_at": now}) == 1

    @staticmethod
    def unclaim(turn_id: str, worker: str, retry_at: datetime) -> bool:
        """running (claimed by `worker`, not yet started on) → queued, for another process to claim;
        due another task at `retry_at` if it is still queued then (as `mark_reenqueued`)."""
        return bool(Turn.objects.filter(pk=turn_id, status=Turn.Status.RUNNING, claimed_by=worker).update(
            status=Turn.Status.QUEUED, claimed_by="", lease_until=retry_at))

    def renew_lease(self, lease_seconds: float) -> bool:
        return bool(
            Turn.objects.filter(pk=self.pk, status=self.Status.RUNNING, claimed_by=self.claimed_by).update(
                lease_until=timezone.now() + timezone.timedelta(seconds=lease_seconds)
            )
        )

    def adopt_trace(self, trace_id: str, trace_parent: str) -> bool:
        """A turn that no traced request admitted takes the trace its first run started; once."""
        won = Turn.objects.filter(pk=self.pk, trace_parent="").update(trace_id=trace_id, trace_parent=trace_parent)
        if won:
            self.trace_id, self.trace_parent = trace_id, trace_parent
        return bool(won)

    def park(self, state: dict[str, Any]) -> bool:
        """running → awaiting_approval, storing where the run resumes; no lease (no worker holds it)."""
        won = Turn.objects.filter(pk=self.pk, status=self.Status.RUNNING, claimed_by=self.claimed_by).update(
            status=self.Status.AWAITING_APPROVAL, state=state, lease_until=None,
        )
        if won:
            self.status, self.state, self.lease_until = self.Status.AWAITING_APPROVAL, state, None
        return bool(won)

    @staticmethod
    def requeue(turn_id: str) -> bool:
        """awaiting_approval → queued: its approvals are decided (or it is interrupted)."""
        return bool(Turn.objects.filter(pk=turn_id, status=Turn.Status.AWAITING_APPROVAL).update(
            status=Turn.Status.QUEUED))

    @staticmethod
    def mark_reenqueued(turn_id: str, now: datetime, stale: datetime, retry_at: datetime) -> bool:
        """A queued turn not handed out since `stale` (or since its last retry) is due another task.

        `lease_until` of a queued turn marks when it was last re-enqueued.
        """
        return bool(Turn.objects.filter(Turn.due_reenqueue(now, stale, ""), pk=turn_id, status=Turn.Status.QUEUED)
                    .update(lease_until=retry_at))

    @staticmethod
    def tasks_lost(now: datetime) -> int:
        """Every queued turn's task is gone (a restored database: the tasks were in the queue of the server the
        backup was taken from): each is due another at the next recovery sweep, not AGENTSITE_REQUEUE_SECONDS
        after it was made; how many."""
        return Turn.objects.filter(status=Turn.Status.QUEUED).update(lease_until=now)

    @staticmethod
    def due_reenqueue(now: datetime, stale: datetime, path: str) -> models.Q:
        """The condition `mark_reenqueued` wins on, for a turn reached through `path` ("" for the turn itself)."""
        return (models.Q(**{f"{path}lease_until__isnull": True, f"{path}created_at__lt": stale})
                | models.Q(**{f"{path}lease_until__lt": now}))

    def end(self, status: str, *, error: str = "", usage: dict[str, int] | None = None,
            timings: dict[str, Any] | None = None) -> bool:
        """running (claimed by this holder) → completed | failed | interrupted.

        False when the turn was no longer ours: recovery ended it as lost, so
        this run must not write its outcome over that one.
        """
        assert status in self.FINISHED, status
        won = update_where(Turn, {"id": self.pk, "status": self.Status.RUNNING, "claimed_by": self.claimed_by},
                           {"status": status, "error": error, "usage": usage, "ended_at": timezone.now(),
                            "lease_until": None, "state": {}, "timings": timings})
        if won:
            self.status, self.error, self.usage, self.timings = status, error, usage, timings
        return bool(won)

    def request_interrupt(self) -> bool:
        return bool(
            Turn.objects.filter(pk=self.pk)
            .exclude(status__in=self.FINISHED)
            .update(interrupt_requested=True)
        )

    @staticmethod
    def interrupt_queued(session_id: str, sparing: tuple[str, ...] = ()) -> int:
        """Flag every queued turn of a session (but those of the `sparing` triggers): each ends with
        "turn interrupted" as soon as it starts."""
        queued = Turn.objects.filter(session_id=session_id, status=Turn.Status.QUEUED)
        if sparing:
            queued = queued.exclude(trigger__in=sparing)
        return queued.update(interrupt_requested=True)

    @staticmethod
    def in_flight(session_id: str) -> bool:
        return Turn.objects.filter(session_id=session_id, status__in=Turn.IN_FLIGHT).exists()

    def interrupted(self) -> bool:
        return Turn.asked_to_stop(self.pk)

    @staticmethod
    def asked_to_stop(turn_id: str) -> bool:
        # A turn deleted with its session counts as interrupted: deleting stops the
        # turn first, but the flag goes with the row before a worker can read it.
        return not Turn.objects.filter(pk=turn_id, interrupt_requested=False).exists()
