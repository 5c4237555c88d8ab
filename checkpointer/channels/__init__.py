"""Channels: how each state key merges the writes of a superstep, and how it is persisted."""

from checkpointer.channels.any_value import AnyValue
from checkpointer.channels.base import BaseChannel
from checkpointer.channels.binop import BinaryOperatorAggregate
from checkpointer.channels.delta import DeltaChannel
from checkpointer.channels.ephemeral import EphemeralValue
from checkpointer.channels.last_value import LastValue, LastValueAfterFinish
from checkpointer.channels.markers import MISSING, DeltaSnapshot, Overwrite, get_overwrite
from checkpointer.channels.named_barrier import NamedBarrierValue, NamedBarrierValueAfterFinish
from checkpointer.channels.topic import Topic
from checkpointer.channels.untracked import UntrackedValue
from checkpointer.errors import EmptyChannelError, InvalidUpdateError

__all__ = [
    "MISSING",
    "AnyValue",
    "BaseChannel",
    "BinaryOperatorAggregate",
    "DeltaChannel",
    "DeltaSnapshot",
    "EmptyChannelError",
    "EphemeralValue",
    "InvalidUpdateError",
    "LastValue",
    "LastValueAfterFinish",
    "NamedBarrierValue",
    "NamedBarrierValueAfterFinish",
    "Overwrite",
    "Topic",
    "UntrackedValue",
    "get_overwrite",
]
