"""Every error the library raises on purpose, in one place, so users can catch by kind."""

from __future__ import annotations


class CheckpointerError(Exception):
    """Base of every error raised on purpose by this library."""


class ConfigError(CheckpointerError, ValueError):
    """A config dict is missing a key or holds a value of the wrong type."""


class EmptyChannelError(CheckpointerError):
    """A channel was read before it ever received a value."""


class InvalidUpdateError(CheckpointerError):
    """A channel received updates its merge rule cannot accept (names the channel)."""


class SerializationError(CheckpointerError, TypeError):
    """A value could not be serialized; the message names its type."""


class DeserializationError(CheckpointerError, ValueError):
    """Stored bytes could not be turned back into a value (corrupt, truncated, unknown tag)."""


class UnregisteredTypeError(DeserializationError):
    """Stored data names a class that is not registered or allowlisted for loading."""


class HistoryUnavailableError(CheckpointerError):
    """Delta channels need their ancestor history, but no saver or config was given."""


class SchemaVersionError(CheckpointerError):
    """The database schema is older or newer than this code; the message says what to run."""


class CheckpointNotFoundError(CheckpointerError, LookupError):
    """A config names a checkpoint that does not exist."""
