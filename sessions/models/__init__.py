"""The sessions app's models, one module per aggregate.

Each model owns its state machine: every transition is a method doing a
conditional update (`filter(<expected state>).update(<new state>)`) that
returns whether it won, so racing processes never both make the same move.
`sessions.turn.lifecycle` composes them into the turn lifecycle.
"""
from sessions.models.backup import BackupRun
from sessions.models.channel import ChannelBinding
from sessions.models.connection import ChannelConnection
from sessions.models.event import Event, EventType
from sessions.models.experiment import Experiment, ExperimentSample
from sessions.models.handoff import Handoff
from sessions.models.host import Host
from sessions.models.messaging import AgentMessage
from sessions.models.ids import hash_token, new_id, new_session_id, new_turn_id
from sessions.models.session import RunOptions, Session, Turn
from sessions.models.spend import PersonBudget, Spend
from sessions.models.storage import Artifact, ChannelDelivery, HostFile, KVEntry
from sessions.models.timer import Reminder, Schedule, new_reminder_id
from sessions.models.token import PersonalToken, TokenError
from sessions.models.toolcall import ToolCall

__all__ = [
    "AgentMessage", "BackupRun", "Handoff", "Artifact", "ChannelBinding", "ChannelConnection", "ChannelDelivery", "Event", "EventType", "Experiment", "ExperimentSample", "Host", "HostFile", "KVEntry", "PersonBudget", "PersonalToken", "Reminder", "RunOptions", "Schedule", "Session", "Spend",
    "TokenError", "ToolCall", "Turn", "hash_token", "new_id", "new_reminder_id", "new_session_id", "new_turn_id",
]
