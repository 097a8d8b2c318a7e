"""The store's domain logic, written once over a connector (`noetl.store.connector`).

Each manager holds one part of the store (the playbook catalog and the workers, ...); the
SQLite and PostgreSQL adapters compose them over their connector. The memory adapter keeps
its own in-process structures (a test double: see docs/architecture.md, Decisions).
"""
