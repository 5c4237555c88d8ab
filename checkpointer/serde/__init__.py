"""Serialization of checkpoint values: a `Serializer` turns any value into `(tag, bytes)`.

The default is `MsgpackSerializer`: lossless for the Python types graph state is made of,
and strict about which classes stored data may name (see `msgpack_serde`).
"""

from __future__ import annotations

from checkpointer.serde.base import Serializer
from checkpointer.serde.msgpack_serde import (
    Codec,
    MsgpackSerializer,
    default_serializer,
    register_codec,
)

__all__ = [
    "Codec",
    "MsgpackSerializer",
    "Serializer",
    "default_serializer",
    "register_codec",
]
