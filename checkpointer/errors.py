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


class ValueTooLarge(SerializationError):
    """A serialized value is bigger than the configured limit (see `serde.guard.SizeGuard`).

    Raised before anything is written, so an oversized value never half-lands in storage.
    """

    def __init__(self, size: int, limit: int, what: str = "value") -> None:
        self.size = size
        self.limit = limit
        self.what = what
        super().__init__(
            f"{what} serializes to {size} bytes, over the limit of {limit} bytes; store large "
            "payloads elsewhere (object storage, files) and keep a reference in the state"
        )


class CorruptValueError(DeserializationError):
    """A stored value could not be read back; says where it lives, so the damage can be
    found and repaired while the rest of the thread stays readable."""

    def __init__(
        self,
        reason: str,
        *,
        thread_id: str | None = None,
        checkpoint_ns: str | None = None,
        checkpoint_id: str | None = None,
        channel: str | None = None,
        task_id: str | None = None,
        version: str | None = None,
    ) -> None:
        self.reason = reason
        self.thread_id = thread_id
        self.checkpoint_ns = checkpoint_ns
        self.checkpoint_id = checkpoint_id
        self.channel = channel
        self.task_id = task_id
        self.version = version
        parts = [
            f"{name}={value!r}"
            for name, value in (
                ("thread_id", thread_id),
                ("checkpoint_ns", checkpoint_ns),
                ("checkpoint_id", checkpoint_id),
                ("channel", channel),
                ("task_id", task_id),
                ("version", version),
            )
            if value is not None
        ]
        super().__init__(f"corrupt stored value ({', '.join(parts)}): {reason}")


class TypeNotAllowedError(UnregisteredTypeError, CorruptValueError):
    """The loading policy refused a class that stored data names: nothing is damaged, the
    class is just not one this serializer may rebuild (see the README, "Serializer").

    The message names the class and the exact setting that allows it. `type_name` is the
    stored `module.qualname` (or the codec name), `remedy` that sentence. Raised by the
    serializer without a location; savers raise it again with the value's location
    (`at(...)`). It subclasses `UnregisteredTypeError` and, for callers that catch what the
    savers raised before this error existed, `CorruptValueError`: `reason` is the message
    without the location, but the message itself never says "corrupt".
    """

    def __init__(self, type_name: str, why: str, remedy: str, **where: str | None) -> None:
        self.type_name = type_name
        self.why = why
        self.remedy = remedy
        reason = f"refusing to load {type_name}: {why}. {remedy}"
        CorruptValueError.__init__(self, reason, **where)
        self.reason = reason
        located = [
            f"{name}={value!r}"
            for name, value in (
                ("thread_id", self.thread_id),
                ("checkpoint_ns", self.checkpoint_ns),
                ("checkpoint_id", self.checkpoint_id),
                ("channel", self.channel),
                ("task_id", self.task_id),
                ("version", self.version),
            )
            if value is not None
        ]
        where_text = f" (stored at {', '.join(located)})" if located else ""
        self.args = (f"refusing to load {type_name}{where_text}: {why}. {remedy}",)

    def __str__(self) -> str:
        return str(self.args[0])

    def at(self, **where: str | None) -> TypeNotAllowedError:
        """The same refusal, naming where the value is stored (already located ones keep
        their location)."""
        if any(
            getattr(self, name) is not None
            for name in ("thread_id", "checkpoint_id", "channel", "task_id")
        ):
            return self
        located = TypeNotAllowedError(self.type_name, self.why, self.remedy, **where)
        located.__cause__ = self.__cause__
        return located


class DecryptionError(DeserializationError):
    """An encrypted value could not be decrypted: unknown key id, wrong key, tampered
    bytes, or a value moved to another location than the one it was encrypted for."""


class CorruptCiphertextError(CorruptValueError, DecryptionError):
    """An encrypted value did not decrypt where it is stored: tampered bytes, a value
    moved from another row (locations are authenticated), or a key changed under its id.
    Both a `CorruptValueError` (it names the location) and a `DecryptionError`."""


class PlaintextRefusedError(DecryptionError):
    """An encrypting serializer met an unencrypted (or location-unbound) value and was not
    told to accept those (`allow_plaintext=True`, meant for migrations)."""


class ThreadBusy(CheckpointerError):
    """Another worker holds the single-writer lock of this thread: it is running it now.

    Only raised when a run asks for exclusivity (`compile(single_writer=True)` or
    `config["configurable"]["exclusive"] = True`); retry later.
    """

    def __init__(self, thread_id: str, where: str) -> None:
        self.thread_id = thread_id
        self.where = where
        super().__init__(
            f"thread {thread_id!r} is being run by another worker (single-writer lock held "
            f"in {where}); retry when that run has finished"
        )


class ThreadLockLost(ThreadBusy):
    """The single-writer lock of a running thread was lost (its connection died); the run
    stops rather than risk two workers writing the thread at once."""

    def __init__(self, thread_id: str, where: str, detail: str = "") -> None:
        self.thread_id = thread_id
        self.where = where
        CheckpointerError.__init__(
            self,
            f"lost the single-writer lock of thread {thread_id!r} ({where})"
            + (f": {detail}" if detail else "")
            + "; the run stopped; resume it with invoke(None, config)",
        )


class StorageBusyError(CheckpointerError):
    """The database stayed locked by another writer for longer than the configured busy
    timeout; nothing of this operation was written. Retry, or raise the timeout."""


class StorageUnavailableError(CheckpointerError):
    """The database connection failed and the operation was not recovered: the retries ran
    out, the operation is not safe to repeat, or there is no pool to reconnect from (the
    message says which, and names the database). Nothing acknowledged before it is lost;
    the driver's error is the `__cause__`."""


class CorruptHistoryError(CorruptValueError):
    """Parent pointers loop: walking a checkpoint's ancestors came back to a checkpoint
    it had already passed (a row edited by hand, or written by an old version that let
    `put` link to a parent it did not have). Names the checkpoint where the loop closes;
    nothing is read past it, so a walk over a damaged thread ends instead of spinning."""


class ParentNotFoundError(CheckpointNotFoundError, ConfigError):
    """A parent (a config's `checkpoint_id`) that is not stored in that thread and
    namespace. `put` no longer raises it (since schema revision 0007 it accepts a parent
    it does not have, as LangGraph's savers do, and prevents loops with
    `ParentLoopError`); kept so that code catching it still imports."""


class ParentLoopError(ConfigError):
    """`put` of a new checkpoint that a stored checkpoint already names as its parent.
    Nothing was written: in any loop of parent pointers, the member stored last has a
    child stored before it, so refusing exactly these puts (and a checkpoint that is its
    own parent) leaves no loop possible while a parent need not be stored first."""


class ParentMismatchError(ConfigError):
    """`put` of a checkpoint id that is already stored, with another parent than the one
    stored. Nothing was written: re-saving a checkpoint updates it in place but never
    moves it in the tree (that would change the history its children replay).
    `stored_parent_id` is the parent it is stored with."""

    stored_parent_id: str | None = None


class ThreadExistsError(CheckpointerError):
    """`copy_thread` onto a thread that already holds checkpoints; pass `replace=True`
    to delete it first (in the same transaction on SQL savers)."""

    def __init__(self, thread_id: str) -> None:
        self.thread_id = thread_id
        super().__init__(
            f"thread {thread_id!r} already exists; copy_thread(..., replace=True) deletes it "
            "first, or copy to a new thread id"
        )


class StorageFullError(CheckpointerError):
    """The database has no room left (disk full, SQLite's `max_page_count`, PostgreSQL's
    disk): the transaction was rolled back, so nothing of it was written and everything
    acknowledged before it is intact. Free space (or raise the limit) and retry."""


class IdTooLongError(ConfigError):
    """An id is longer than `checkpointer.types.MAX_ID_BYTES` bytes of UTF-8: the most
    every backend can index with the composite keys ids take part in."""


class StoredException(Exception):
    """Stands in for a stored exception whose class this process cannot rebuild: its module
    is not imported, the class cannot be made without running its own code (pydantic's
    `ValidationError`), or a strict serializer does not allow it.

    A task's error is a record of what went wrong; a thread must stay readable when that
    record cannot be turned back into the original class. `module`, `qualname`, `args`
    and `state` (the original's attributes) are kept, `repr()` reads like the original's,
    and storing a stand-in again writes the original's record, not this class.
    """

    def __init__(
        self,
        module: str,
        qualname: str,
        args: tuple[object, ...] = (),
        state: dict[str, object] | None = None,
        text: str | None = None,
    ) -> None:
        super().__init__(*args)
        self.module = module
        self.qualname = qualname
        self.state = dict(state or {})
        self.text = text

    @property
    def name(self) -> str:
        """The original class's own name (`ValidationError`)."""
        return self.qualname.rsplit(".", 1)[-1]

    def __repr__(self) -> str:
        if self.text is not None:
            return self.text
        return f"{self.name}({', '.join(map(repr, self.args))})"

    def __str__(self) -> str:
        if self.text is not None and not self.args:
            return self.text
        return super().__str__()

    def __reduce__(self) -> tuple[object, ...]:
        return (
            StoredException,
            (self.module, self.qualname, self.args, self.state, self.text),
        )
