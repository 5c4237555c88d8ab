"""The `checkpointer` command: time-travel tools for threads, backups, migrations, demo.

    checkpointer threads --url chat.db
    checkpointer history THREAD --url chat.db
    checkpointer show THREAD [CHECKPOINT] --graph myapp.graph:builder --url chat.db

The console script is `checkpointer = "checkpointer.cli:main"`.
"""

from checkpointer.cli.app import main

__all__ = ["main"]
