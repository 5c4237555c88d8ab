"""The parent rule of `put`, in SQL: what keeps parent pointers from ever closing a loop.

A put may name a parent that is not stored (LangGraph's own tests and tools write children
of checkpoints they never save). Loops stay impossible with two refusals instead:

- a checkpoint that is its own parent (`base.parent_id_for_put`, before any SQL);
- a *new* checkpoint that a stored checkpoint already names as its parent
  (`ParentLoopError`). Proof: in a loop, take the member stored last; its child in the
  loop was stored before it and named it, so that put was refused.

A re-put keeps the parent it is stored with (`ParentMismatchError` otherwise), so re-puts
never move a checkpoint either. The put statement tests the rule itself
(`new_checkpoint_allowed`, one probe of the parent index of revision 0007) and writes
nothing when it fails; only then `refused_put_plan` reads why, off the hot path.
"""

from __future__ import annotations

from checkpointer.errors import CheckpointerError
from checkpointer.savers.base import put_parent_loop, put_parent_mismatch
from checkpointer.savers.sql.dialect import Dialect
from checkpointer.savers.sql.plan import Plan, Stmt


def new_checkpoint_allowed(table: str, thread: str, ns: str, checkpoint_id: str) -> str:
    """SQL that is true unless the put would store a new checkpoint that a stored one
    names as its parent (`thread`, `ns`, `checkpoint_id`: SQL expressions of the put's
    key). The checkpoint itself being stored makes it a re-put, always allowed here."""
    return (
        f"(NOT EXISTS (SELECT 1 FROM {table} ch WHERE ch.thread_id = {thread} "
        f"AND ch.checkpoint_ns = {ns} AND ch.parent_checkpoint_id = {checkpoint_id}) "
        f"OR EXISTS (SELECT 1 FROM {table} me WHERE me.thread_id = {thread} "
        f"AND me.checkpoint_ns = {ns} AND me.checkpoint_id = {checkpoint_id}))"
    )


def refused_put_plan(
    d: Dialect, thread_id: str, ns: str, checkpoint_id: str, parent_id: str | None
) -> Plan[None]:
    """Raise why the put statement wrote no checkpoint row: the checkpoint is stored with
    another parent, or it is new and a stored checkpoint names it as its parent."""
    rows = yield Stmt(
        f"SELECT parent_checkpoint_id FROM {d.checkpoints} WHERE thread_id = "
        f"{d.p('thread_id')} AND checkpoint_ns = {d.p('checkpoint_ns')} AND checkpoint_id = "
        f"{d.p('checkpoint_id')}",
        {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id},
        fetch=True,
    )
    if rows and rows[0][0] != parent_id:
        raise put_parent_mismatch(thread_id, ns, checkpoint_id, rows[0][0], parent_id)
    if not rows:
        children = yield Stmt(
            f"SELECT 1 FROM {d.checkpoints} WHERE thread_id = {d.p('thread_id')} "
            f"AND checkpoint_ns = {d.p('checkpoint_ns')} "
            f"AND parent_checkpoint_id = {d.p('checkpoint_id')} LIMIT 1",
            {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id},
            fetch=True,
        )
        if children:
            raise put_parent_loop(thread_id, ns, checkpoint_id)
    raise CheckpointerError(  # cannot happen: the statement wrote unless one of the above
        f"put(): checkpoint {checkpoint_id!r} was not written"
    )
