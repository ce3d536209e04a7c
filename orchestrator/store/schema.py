"""The database schema, defined once for SQLite and PostgreSQL (SQLAlchemy Core).

Every table is keyed so that it could be distributed by (namespace, workflow id)
or by run id; nothing joins across runs on a hot path.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    text,
)

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "pk": "pk_%(table_name)s",
    }
)

ID = String(255)
RUN_ID = String(64)
# SQLite autoincrements only INTEGER PRIMARY KEY columns.
SERIAL = BigInteger().with_variant(Integer(), "sqlite")

runs = Table(
    "runs",
    metadata,
    Column("run_id", RUN_ID, primary_key=True),
    Column("namespace", ID, nullable=False),
    Column("workflow_id", String(1000), nullable=False),
    Column("workflow_type", ID, nullable=False),
    Column("task_list", ID, nullable=False),
    Column("status", String(32), nullable=False),
    Column("start_time", DateTime(), nullable=False),
    Column("close_time", DateTime()),
    Column("history_length", BigInteger, nullable=False),
    Column("continued_from_run_id", RUN_ID, nullable=False),
    # The run that started this one as its child ("" for none): the purge job
    # keeps a closed run while a run it started is open.
    Column("parent_run_id", RUN_ID, nullable=False, server_default=""),
    # Replays link both ways; the replayed run's history stays as it was.
    Column("replay_of_run_id", RUN_ID, nullable=False, server_default=""),
    Column("replayed_by_run_id", RUN_ID, nullable=False, server_default=""),
    # The engine's RunState as JSON: always the fold of this run's history.
    Column("state", Text, nullable=False),
    # Bumped by every write of the row: a node that holds the state in memory
    # writes only if the version is still the one it read (compare-and-set).
    Column("version", BigInteger, nullable=False, server_default="0"),
    # At most one open run per workflow id; the database enforces it across nodes.
    Index(
        "ux_runs_open_workflow",
        "namespace",
        "workflow_id",
        unique=True,
        sqlite_where=text("status = 'open'"),
        postgresql_where=text("status = 'open'"),
    ),
    Index("ix_runs_workflow", "namespace", "workflow_id", "start_time"),
    Index("ix_runs_listing", "namespace", "status", "start_time"),
    # Every run newest first, and a task list's runs (ListWorkflows, CountWorkflows).
    Index("ix_runs_started", "namespace", "start_time", "run_id"),
    Index("ix_runs_task_list", "namespace", "task_list", "start_time"),
)

history_events = Table(
    "history_events",
    metadata,
    Column("run_id", RUN_ID, primary_key=True),
    Column("event_id", BigInteger, primary_key=True),
    Column("event_type", String(64), nullable=False),
    Column("timestamp", DateTime(), nullable=False),
    # The serialized weft.v1.HistoryEvent.
    Column("data", LargeBinary, nullable=False),
)

tasks = Table(
    "tasks",
    metadata,
    Column("id", SERIAL, primary_key=True, autoincrement=True),
    Column("namespace", ID, nullable=False),
    Column("kind", String(16), nullable=False),
    Column("task_list", ID, nullable=False),
    Column("run_id", RUN_ID, nullable=False),
    Column("scheduled_id", BigInteger, nullable=False),
    Column("created_at", DateTime(), nullable=False),
    Index("ux_tasks_run", "run_id", "kind", "scheduled_id", unique=True),
    Index("ix_tasks_poll", "namespace", "kind", "task_list", "id"),
)

deadlines = Table(
    "deadlines",
    metadata,
    Column("run_id", RUN_ID, primary_key=True),
    Column("kind", String(16), primary_key=True),
    Column("ref_id", BigInteger, primary_key=True),
    Column("due", DateTime(), nullable=False),
    Index("ix_deadlines_due", "due"),
)

# One row per held lock: its holder. The primary key makes "one holder per
# namespace and name" the database's rule, not only the engine's.
locks = Table(
    "locks",
    metadata,
    Column("namespace", ID, primary_key=True),
    Column("lock_name", String(255), primary_key=True),
    Column("run_id", RUN_ID, nullable=False),
    Column("workflow_id", String(1000), nullable=False),
    Column("requested_id", BigInteger, nullable=False),
    Column("since", DateTime(), nullable=False),
)

# The queue of each lock, in request order (`id`): the first is granted next.
lock_waiters = Table(
    "lock_waiters",
    metadata,
    Column("id", SERIAL, primary_key=True, autoincrement=True),
    Column("namespace", ID, nullable=False),
    Column("lock_name", String(255), nullable=False),
    Column("run_id", RUN_ID, nullable=False),
    Column("workflow_id", String(1000), nullable=False),
    Column("requested_id", BigInteger, nullable=False),
    Column("since", DateTime(), nullable=False),
    Index("ix_lock_waiters_queue", "namespace", "lock_name", "id"),
    Index("ux_lock_waiters_run", "run_id", "lock_name", unique=True),
)

# Registered namespaces; one used but never registered has the defaults.
namespaces = Table(
    "namespaces",
    metadata,
    Column("name", ID, primary_key=True),
    # The default retention policy: what `system` means to the namespace's runs.
    Column("retention", String(255), nullable=False),
    Column("description", Text, nullable=False),
    Column("registered_at", DateTime(), nullable=False),
)

request_ids = Table(
    "request_ids",
    metadata,
    Column("namespace", ID, primary_key=True),
    Column("workflow_id", String(1000), primary_key=True),
    Column("kind", String(16), primary_key=True),
    Column("request_id", ID, primary_key=True),
    Column("run_id", RUN_ID, nullable=False),
    Column("created_at", DateTime(), nullable=False),
)

workflow_types = Table(
    "workflow_types",
    metadata,
    Column("namespace", ID, primary_key=True),
    Column("name", ID, primary_key=True),
    Column("version", ID, primary_key=True),
    Column("default_task_list", ID, nullable=False),
    Column("default_execution_timeout", Float),
    Column("default_decider_timeout", Float),
    Column("description", Text, nullable=False),
    Column("registered_at", DateTime(), nullable=False),
    # A step workflow's YAML ("" for types decided by code); starts copy it
    # into WorkflowStarted. The server default fills rows registered before it.
    Column("definition", Text, nullable=False, server_default=""),
)

activity_types = Table(
    "activity_types",
    metadata,
    Column("namespace", ID, primary_key=True),
    Column("name", ID, primary_key=True),
    Column("version", ID, primary_key=True),
    Column("default_task_list", ID, nullable=False),
    Column("default_schedule_to_start", Float),
    Column("default_start_to_close", Float),
    Column("default_schedule_to_close", Float),
    Column("default_heartbeat", Float),
    Column("description", Text, nullable=False),
    Column("registered_at", DateTime(), nullable=False),
)

pollers = Table(
    "pollers",
    metadata,
    Column("namespace", ID, primary_key=True),
    Column("kind", String(16), primary_key=True),
    Column("task_list", ID, primary_key=True),
    Column("identity", ID, primary_key=True),
    Column("last_seen", DateTime(), nullable=False),
)

server_meta = Table(
    "server_meta",
    metadata,
    Column("key", ID, primary_key=True),
    Column("value", Text, nullable=False),
)

# Who may call (README "Security"): API keys and certificate principals, each
# one grant. A key's secret is never stored: only HMAC-SHA256 of it under the
# database's own auth key (server_meta "auth_secret"), so a copy of this table
# alone does not let anyone in.
credentials = Table(
    "credentials",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("kind", String(16), nullable=False),  # "key" or "certificate"
    Column("subject", ID, nullable=False),  # a certificate's CN or SAN; "" for keys
    Column("secret_hash", String(64), nullable=False),  # "" for certificates
    Column("name", ID, nullable=False),
    Column("namespace", ID, nullable=False),  # "*": every namespace (admin only)
    Column("role", String(32), nullable=False),
    # JSON lists; empty: no narrowing.
    Column("task_lists", Text, nullable=False),
    Column("workflow_types", Text, nullable=False),
    Column("signal_names", Text, nullable=False),
    Column("created_at", DateTime(), nullable=False),
    Column("created_by", ID, nullable=False),
    Column("expires_at", DateTime()),
    Column("revoked_at", DateTime()),
    Index(None, "subject"),
)

# A worker's session (README "Workers and nodes"): it registers, heartbeats
# (moving `expires_at`), and unregisters or is found lost by the reaper.
worker_sessions = Table(
    "worker_sessions",
    metadata,
    Column("session_id", String(64), primary_key=True),
    Column("namespace", ID, nullable=False),
    Column("identity", ID, nullable=False),
    Column("host", ID, nullable=False),
    Column("pid", BigInteger, nullable=False),
    Column("task_lists", Text, nullable=False),  # JSON [[kind, name], ...]
    Column("build_id", ID, nullable=False),
    Column("principal", ID, nullable=False),
    Column("timeout", Float, nullable=False),
    Column("status", String(16), nullable=False),  # live, stopped, lost
    Column("registered_at", DateTime(), nullable=False),
    Column("last_seen", DateTime(), nullable=False),
    Column("expires_at", DateTime(), nullable=False),
    Column("ended_at", DateTime()),
    Index(None, "status", "expires_at"),
    Index(None, "namespace", "registered_at"),
)

# The runs in which a session started a task: where the reaper looks when the
# session is lost. Written a second or so after the start (in batches, off the
# hot path); a stale row only costs the reaper one look at a run.
worker_runs = Table(
    "worker_runs",
    metadata,
    Column("session_id", String(64), primary_key=True),
    Column("run_id", RUN_ID, primary_key=True),
)

# Server nodes sharing the database, by their stable name (host:port).
nodes = Table(
    "nodes",
    metadata,
    Column("node_id", ID, primary_key=True),
    Column("host", ID, nullable=False),
    Column("pid", BigInteger, nullable=False),
    Column("listen", ID, nullable=False),
    Column("version", String(64), nullable=False),
    Column("status", String(16), nullable=False),  # starting, ready, draining, gone
    Column("started_at", DateTime(), nullable=False),
    Column("last_seen", DateTime(), nullable=False),
    Column("unexpected_shutdowns", BigInteger, nullable=False),
    Column("last_unexpected_shutdown", DateTime()),
)

# Named leases; "upkeep" makes one node the leader for the work that must not
# run twice at once.
leases = Table(
    "leases",
    metadata,
    Column("name", ID, primary_key=True),
    Column("holder", ID, nullable=False),
    Column("expires_at", DateTime(), nullable=False),
)

# Schedules (README "Schedules"): what each starts and when, and where it is.
# The runner (orchestrator.schedules.runner) writes a row only by compare-and-
# set on `version`, so an operator's update and the runner's never overwrite
# each other; starts themselves are made unique by their workflow and request
# ids, not by this row.
schedules = Table(
    "schedules",
    metadata,
    Column("namespace", ID, primary_key=True),
    Column("name", ID, primary_key=True),
    Column("workflow_type", ID, nullable=False),
    Column("task_list", ID, nullable=False),  # "" for the type's registered default
    Column("input", LargeBinary),  # a serialized weft.v1.Payload
    Column("cron", String(255), nullable=False),  # "" when `every` is set
    Column("every", Float),  # seconds
    Column("timezone", String(64), nullable=False),
    Column("overlap", String(32), nullable=False),
    Column("catch_up_window", Float, nullable=False),  # seconds
    Column("jitter", Float, nullable=False),  # seconds
    Column("start_at", DateTime()),
    Column("end_at", DateTime()),
    Column("paused", Boolean(), nullable=False),
    Column("note", Text, nullable=False),
    Column("created_at", DateTime(), nullable=False),
    Column("updated_at", DateTime(), nullable=False),
    # The last fire time handled (started, skipped or missed): the runner
    # goes on from here, after a restart too.
    Column("last_slot", DateTime()),
    Column("buffered_slot", DateTime()),  # buffer-one / cancel-previous: the next to start
    # JSON: slots asked for by trigger and backfill, not yet handled.
    Column("pending", Text, nullable=False),
    Column("started", BigInteger, nullable=False),
    Column("skipped", BigInteger, nullable=False),  # by the overlap policy
    Column("missed", BigInteger, nullable=False),  # outside the catch-up window
    # JSON: the latest runs started, newest first (slot, workflow id, run id).
    Column("recent", Text, nullable=False),
    Column("version", BigInteger, nullable=False),
    # When its next slot is due (a pass reads it then; a row keeping a buffered
    # slot is read every pass whatever this says); NULL after an operator's
    # change: at the next pass.
    Column("due_at", DateTime()),
    Index("ix_schedules_due", "due_at"),
    Index(
        "ix_schedules_buffered",
        "buffered_slot",
        postgresql_where=text("buffered_slot IS NOT NULL"),
        sqlite_where=text("buffered_slot IS NOT NULL"),
    ),
)
