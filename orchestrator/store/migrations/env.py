"""Alembic environment: migrations run on a plain synchronous connection that
`orchestrator.store.migrate` hands over in `config.attributes["connection"]`."""

from __future__ import annotations

from alembic import context

from orchestrator.store.schema import metadata

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
