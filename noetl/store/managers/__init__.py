"""The store's domain logic, written once over a connector (`noetl.store.connector`).

Each manager holds one part of the store: the catalog and the workers, the dead-letter
queue, the reads of executions, retention (parts of the store itself, sharing its
connector), and the API tokens, the sessions, the credentials, the result store, the
checkpoint store and the schedules (the store's `tokens`, `sessions`, `credentials`,
`results`, `checkpoints` and `schedules`). `SqlStore`
is what the SQLite and PostgreSQL adapters have in common; each adds its connector, the
writes of a commit and the queue. The memory adapter keeps its own in-process structures
(a test double: see docs/architecture.md, Decisions).
"""

from __future__ import annotations

from noetl.store.connector import Connector
from noetl.store.managers.auth import Sessions, Tokens
from noetl.store.managers.catalog import Catalog
from noetl.store.managers.checkpoints import Checkpoints
from noetl.store.managers.credentials import Credentials
from noetl.store.managers.dead_letters import DeadLetters
from noetl.store.managers.executions import Executions
from noetl.store.managers.results import Results
from noetl.store.managers.retention import Retention
from noetl.store.managers.schedules import Schedules


class SqlStore(Catalog, DeadLetters, Executions, Retention):
    """The managers of a SQL store, over its connector `db`."""

    def __init__(self, db: Connector) -> None:
        super().__init__(db)
        self.tokens = Tokens(db)
        self.sessions = Sessions(db)
        self.credentials = Credentials(db)
        self.results = Results(db)
        self.checkpoints = Checkpoints(db)
        self.schedules = Schedules(db)
