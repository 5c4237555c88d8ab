"""What a re-encryption found and did: `ReencryptReport`, and the count of one value.

Apart from the passes that fill it (`reencryption` for the in-memory saver,
`reencryption_sql` for the SQL savers) so that each of them can import it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from checkpointer.serde.encrypted_serializer import EncryptedSerializer


@dataclass
class ReencryptReport:
    """What `reencrypt` found and did."""

    scanned: int = 0
    rewritten: int = 0
    plaintext: int = 0
    """Values that were stored unencrypted (now encrypted, unless dry run)."""
    by_key: dict[str, int] = field(default_factory=dict)
    """Encrypted values found per key id, before rewriting."""
    records_sealed: int = 0
    """Checkpoint records given a seal under the active key (SQL savers, when binding)."""
    skipped_changed: int = 0
    """Rows changed by a concurrent writer between read and rewrite (left as they were)."""
    dry_run: bool = False


def tally(report: ReencryptReport, enc: EncryptedSerializer, data: tuple[str, bytes]) -> None:
    report.scanned += 1
    key_id = enc.key_id_of(data)
    if key_id is None:
        report.plaintext += 1
    else:
        report.by_key[key_id] = report.by_key.get(key_id, 0) + 1
