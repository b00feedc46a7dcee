"""Alembic environment for contextfold's store.

The store runs migrations itself (`contextfold.store.sql.migrate`), handing Alembic an open
connection inside a transaction it already began; there is no alembic.ini and no URL here.
"""

from __future__ import annotations

from alembic import context

connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - only reached when someone runs the alembic CLI
    raise RuntimeError(
        "contextfold migrations run programmatically: use contextfold.store.open_store(url)"
    )

context.configure(connection=connection, target_metadata=None)
with context.begin_transaction():
    context.run_migrations()
