"""The Alembic migrations and `schema.metadata` describe the same database:
`upgrade head` on an empty database yields exactly the metadata (autogenerate
finds nothing to do), and upgrading again changes nothing."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import Connection, make_url

from orchestrator.store import migrate, schema


@pytest.fixture(params=["sqlite", "postgres"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database with no tables at all (not the migrated template)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/empty.db"
        return
    admin: str = request.getfixturevalue("postgres_admin_url")
    name = f"weft_empty_{uuid.uuid4().hex[:12]}"
    engine = create_engine(migrate.sync_url(admin), isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(admin).set(database=name).render_as_string(hide_password=False)
    finally:
        with engine.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        engine.dispose()


def _head() -> str:
    with create_engine("sqlite://").connect() as conn:
        head = ScriptDirectory.from_config(migrate.alembic_config(conn)).get_current_head()
    assert head is not None
    return head


def _shape(conn: Connection) -> dict[str, Any]:
    """Everything reflection sees, to compare before and after a second upgrade."""
    insp = inspect(conn)
    out: dict[str, Any] = {}
    for table in sorted(insp.get_table_names()):
        out[table] = {
            "columns": [
                (col["name"], str(col["type"]), col["nullable"], str(col.get("default")))
                for col in insp.get_columns(table)
            ],
            "pk": insp.get_pk_constraint(table),
            "indexes": sorted(insp.get_indexes(table), key=lambda i: str(i["name"])),
            "unique": insp.get_unique_constraints(table),
        }
    # Partial-index predicates come back as TextClause objects: compare their SQL.
    return json.loads(json.dumps(out, default=str, sort_keys=True))


def _diff(conn: Connection) -> list[Any]:
    ctx = MigrationContext.configure(conn, opts={"compare_type": True})
    return list(compare_metadata(ctx, schema.metadata))


def test_upgrade_head_on_empty_database_matches_metadata(empty_url: str) -> None:
    engine = create_engine(migrate.sync_url(empty_url))
    try:
        with engine.connect() as conn:
            assert inspect(conn).get_table_names() == []
        migrate.upgrade(empty_url)
        with engine.connect() as conn:
            tables = set(inspect(conn).get_table_names())
            assert tables == set(schema.metadata.tables) | {"alembic_version"}
            assert MigrationContext.configure(conn).get_current_revision() == _head()
            assert _diff(conn) == []
    finally:
        engine.dispose()


def test_second_upgrade_is_a_no_op(empty_url: str) -> None:
    engine = create_engine(migrate.sync_url(empty_url))
    try:
        migrate.upgrade(empty_url)
        with engine.begin() as conn:
            conn.execute(schema.server_meta.insert().values(key="canary", value="still here"))
        with engine.connect() as conn:
            shape = _shape(conn)
        migrate.upgrade(empty_url)
        with engine.connect() as conn:
            assert _shape(conn) == shape
            assert MigrationContext.configure(conn).get_current_revision() == _head()
            assert conn.scalar(text("SELECT count(*) FROM alembic_version")) == 1
            assert _diff(conn) == []
            value = conn.scalar(
                schema.server_meta.select()
                .with_only_columns(schema.server_meta.c.value)
                .where(schema.server_meta.c.key == "canary")
            )
            assert value == "still here"
    finally:
        engine.dispose()


def test_a_database_weft_did_not_make_is_refused_unchanged(empty_url: str) -> None:
    # Before, the upgrade failed at Weft's `nodes` table, and on SQLite left the
    # tables made before it (and alembic_version) in the other program's database.
    engine = create_engine(migrate.sync_url(empty_url))
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE nodes (theirs INTEGER)"))
            conn.execute(text("CREATE TABLE their_own (x INTEGER)"))
        with pytest.raises(migrate.ForeignSchema, match=r"named as Weft's \(nodes\)"):
            migrate.upgrade(empty_url)
        with engine.connect() as conn:
            assert set(inspect(conn).get_table_names()) == {"nodes", "their_own"}
    finally:
        engine.dispose()


def test_a_database_of_a_newer_weft_is_refused_unchanged(empty_url: str) -> None:
    engine = create_engine(migrate.sync_url(empty_url))
    try:
        migrate.upgrade(empty_url)
        with engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
            shape = _shape(conn)
        with pytest.raises(migrate.ForeignSchema, match=r"\(9999\) is not one this Weft knows"):
            migrate.upgrade(empty_url)
        with engine.connect() as conn:
            assert _shape(conn) == shape
            assert conn.scalar(text("SELECT version_num FROM alembic_version")) == "9999"
    finally:
        engine.dispose()


def _function_arguments(conn: Connection, name: str) -> list[str]:
    rows = conn.execute(
        text("SELECT pg_get_function_identity_arguments(oid) FROM pg_proc WHERE proname = :n"),
        {"n": name},
    )
    return [row[0] for row in rows]


def test_0007_replaces_the_transition_functions_of_0006(
    postgres_admin_url: str, tmp_path: Path
) -> None:
    """A database migrated when 0006 was the head (functions with a parameter
    per column) upgrades to the JSON-rows functions, and back down again."""
    from alembic import command

    name = f"weft_mig_{uuid.uuid4().hex[:12]}"
    admin = create_engine(migrate.sync_url(postgres_admin_url), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(postgres_admin_url).set(database=name).render_as_string(hide_password=False)
    engine = create_engine(migrate.sync_url(url))
    try:
        with engine.begin() as conn:
            command.upgrade(migrate.alembic_config(conn), "0006")
        with engine.connect() as conn:
            (old,) = _function_arguments(conn, "weft_apply")
            assert "p_notify text[]" in old
        with engine.begin() as conn:
            command.upgrade(migrate.alembic_config(conn), "head")
        with engine.connect() as conn:
            assert _function_arguments(conn, "weft_apply") == [
                "p_run_id character varying, p_version bigint, p_status character varying, "
                "p_close_time timestamp without time zone, p_history_length bigint, "
                "p_state text, p_rows jsonb, p_ev_data bytea[]"
            ]
            assert len(_function_arguments(conn, "weft_write_rest")) == 1
        with engine.begin() as conn:
            command.downgrade(migrate.alembic_config(conn), "0006")
        with engine.connect() as conn:
            assert _function_arguments(conn, "weft_apply") == [old]
    finally:
        engine.dispose()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
