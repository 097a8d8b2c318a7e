"""Request and response bodies of the HTTP API (pydantic: the edge of the system).

Times are epoch seconds (floats), as in the store and the event log. Requests reject
unknown fields, so a misspelt option is a 422 instead of being silently ignored.

One module per part of the API: `common` (the bases, errors, health), `playbooks`,
`executions`, `operations` (workers, the dead-letter queue, admin) and `access` (sessions,
tokens, credentials).
"""
