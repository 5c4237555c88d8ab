"""`reencrypt` / `areencrypt`: every stored value sealed again under the active key.

The entry points, and the pass over the in-memory saver's stores; the SQL savers' tables
are paged through by the programs of `reencryption_sql`. Values are re-sealed, never
deserialized, so old keys can be retired and unbound values bound to their location.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from checkpointer.errors import ConfigError
from checkpointer.serde.encrypted_serializer import EncryptedSerializer
from checkpointer.serde.located import ValueLocation
from checkpointer.serde.reencryption_report import ReencryptReport, tally
from checkpointer.serde.reencryption_sql import records_program, sql_program


def _find_encrypted(serde: Any) -> EncryptedSerializer:
    seen = 0
    while serde is not None and seen < 16:
        if isinstance(serde, EncryptedSerializer):
            return serde
        serde = getattr(serde, "__dict__", {}).get("inner")
        seen += 1
    raise ConfigError(
        "reencrypt needs an EncryptedSerializer (the saver's serde, or passed as serializer=)"
    )


def reencrypt(
    saver: Any,
    serializer: EncryptedSerializer | None = None,
    *,
    thread_ids: Sequence[str] | None = None,
    bind: bool | None = None,
    batch_size: int = 500,
    dry_run: bool = False,
) -> ReencryptReport:
    """Rewrite every stored value that is not encrypted under the active key (plaintext,
    older keys, or unbound when `bind`) so that old keys can be retired.

    Values are re-sealed, never deserialized, so no class allowlist is involved. Each page
    of rows is rewritten in one transaction with a compare-and-swap on the old bytes: a row a
    concurrent writer changed meanwhile is left alone (and counted). `bind=None` binds
    values to their location only if the saver passes locations when it reads
    (`saver.passes_value_locations`); otherwise the saver could not read them back.

    Works on the in-memory saver and the sync SQL savers; use `areencrypt` for async ones.
    """
    enc, bind_, threads = _prepare(saver, serializer, thread_ids, bind, batch_size)
    report = ReencryptReport(dry_run=dry_run)
    if is_memory_saver(saver):
        _reencrypt_memory(saver, enc, bind_, threads, report, dry_run)
        return report
    drive = getattr(saver, "_drive", None)
    if drive is None or not hasattr(saver, "_dialect"):
        raise ConfigError(
            f"reencrypt does not know how to reach the rows of {type(saver).__name__}"
            + ("; use areencrypt for async savers" if hasattr(saver, "_adrive") else "")
        )
    drive(records_program(saver._dialect, enc, bind_, threads, batch_size, report, dry_run))
    for table in ("blobs", "writes"):
        drive(sql_program(saver._dialect, table, enc, bind_, threads, batch_size, report, dry_run))
    return report


async def areencrypt(
    saver: Any,
    serializer: EncryptedSerializer | None = None,
    *,
    thread_ids: Sequence[str] | None = None,
    bind: bool | None = None,
    batch_size: int = 500,
    dry_run: bool = False,
) -> ReencryptReport:
    """`reencrypt` for the async SQL savers (and any saver `reencrypt` handles)."""
    adrive = getattr(saver, "_adrive", None)
    if adrive is None:
        return reencrypt(
            saver,
            serializer,
            thread_ids=thread_ids,
            bind=bind,
            batch_size=batch_size,
            dry_run=dry_run,
        )
    enc, bind_, threads = _prepare(saver, serializer, thread_ids, bind, batch_size)
    report = ReencryptReport(dry_run=dry_run)
    await adrive(records_program(saver._dialect, enc, bind_, threads, batch_size, report, dry_run))
    for table in ("blobs", "writes"):
        await adrive(
            sql_program(saver._dialect, table, enc, bind_, threads, batch_size, report, dry_run)
        )
    return report


def _prepare(
    saver: Any,
    serializer: EncryptedSerializer | None,
    thread_ids: Sequence[str] | None,
    bind: bool | None,
    batch_size: int,
) -> tuple[EncryptedSerializer, bool, list[str] | None]:
    enc = serializer if serializer is not None else _find_encrypted(getattr(saver, "serde", None))
    if not isinstance(enc, EncryptedSerializer):
        enc = _find_encrypted(enc)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError(f"batch_size must be a positive int, got {batch_size!r}")
    bind_ = bool(getattr(saver, "passes_value_locations", False)) if bind is None else bind
    if isinstance(thread_ids, str):
        thread_ids = [thread_ids]
    threads = None if thread_ids is None else [str(t) for t in dict.fromkeys(thread_ids)]
    return enc, bind_, threads


def is_memory_saver(saver: Any) -> bool:
    from checkpointer.savers.memory import InMemorySaver

    return isinstance(saver, InMemorySaver)


def _reencrypt_memory(
    saver: Any,
    enc: EncryptedSerializer,
    bind: bool,
    threads: list[str] | None,
    report: ReencryptReport,
    dry_run: bool,
) -> None:
    """The in-memory saver's stores, under its lock (it serializes checkpoint records
    through the serializer too)."""
    wanted = None if threads is None else set(threads)

    def visit(data: tuple[str, bytes], location: ValueLocation) -> tuple[str, bytes]:
        tally(report, enc, data)
        if enc.is_current(data, bind=bind):
            return data
        if dry_run:
            report.rewritten += 1
            return data
        report.rewritten += 1
        return enc.reseal(data, location, bind=bind)

    with saver._lock:
        for key, data in list(saver._blobs.items()):
            thread_id, ns, channel, version = key
            if wanted is None or thread_id in wanted:
                saver._blobs[key] = visit(data, ValueLocation.blob(thread_id, ns, channel, version))
        for thread_id, namespaces in saver._threads.items():
            if wanted is not None and thread_id not in wanted:
                continue
            for ns, namespace in namespaces.items():
                for checkpoint_id, stored in namespace.items():
                    stored.record = visit(
                        stored.record, ValueLocation.checkpoint(thread_id, ns, checkpoint_id)
                    )
                    _visit_writes(stored.writes, thread_id, ns, checkpoint_id, visit)
        for (thread_id, ns, checkpoint_id), writes in saver._orphan_writes.items():
            if wanted is None or thread_id in wanted:
                _visit_writes(writes, thread_id, ns, checkpoint_id, visit)


def _visit_writes(writes: Any, thread_id: str, ns: str, checkpoint_id: str, visit: Any) -> None:
    for write in writes.values():
        write.value = visit(
            write.value,
            ValueLocation.write(
                thread_id, ns, checkpoint_id, write.task_id, write.idx, write.channel
            ),
        )
