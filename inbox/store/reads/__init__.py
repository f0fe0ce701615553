"""The read model: queries that only read, one for each question the API, the console,
the CLI and metrics ask.

- A module per subject (``events``, ``deliveries``, ``sources``, ``endpoints``,
  ``endpoint_health``, ``bulk``, ``search``, ...), not per consumer: the API, the console,
  the CLI and metrics read the same functions.
- Every query is a function taking a ``Connection`` first, and the tenant scope
  (``scope.Scope``: a ``TenantId``, or None for every tenant) where rows belong to tenants;
  a row outside the scope is treated as one that does not exist (``scope.scoped``, the one
  place its condition is written).
- Its SQL is a named ``text()`` statement (or fragment) beside it: one style for reads,
  written as PostgreSQL runs it, with a comment on each non-obvious choice of plan; no
  Core query builders (``tests/unit/test_read_style.py``).
- It returns frozen dataclasses with slots (``events.EventSummary``, ``detail.EventDetail``,
  ...), never dict rows; a JSON payload (a decision, headers, a step's result) is a field.
  ``public()`` on a row is what the API shows of it (row ids stay inside).
  ``tests/unit/test_read_rows.py`` holds every query to this.

The rooms import downward only: ``inbox.store.write`` may use this package's queries and
fragments, this package reads ``inbox.store.schema``, never the commands.
"""
