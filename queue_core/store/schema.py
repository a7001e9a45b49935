"""Table definitions shared by every dialect (store layer).

One queue table (``pq_tasks`` by default), its ``<table>_meta`` companion (schema version and
the row that serialises capped fair-share claims), and the schedule table of perfectsched.

Column notes
------------
``state``    0 = live (waiting or leased), 1 = finished, 2 = pending (exists but is not claimable:
             it waits for an event, not a time; workflow steps whose parents are not done).
             Explicit, never packed into times.
``leased``   1 while a worker holds (or held until expiry) the lease; running = leased and
             ``timeout > now``.
``timeout``  the one time the claim path looks at: when the task becomes due (waiting), when
             the lease expires (leased), or when the finished row may be purged (finished).
             Every column's meaning per state: docs/state-machines.md; the transitions that
             change them: transitions.py.
``lease_token`` random per acquisition; every holder operation compares it (fencing).
``result``   JSON of what a finished task returned (workflow steps and map items); else NULL.
``workflow`` JSON bookkeeping of the workflow runtime for the rows of a run (the run row and
             its step rows); NULL for plain tasks. The queue stores it and never reads into
             it, except that a row carrying it belongs to a run: it is never purged on its own
             (its run sets its retention when the run ends) and its waiting form is cancelled
             by its run's decider, not finished behind the run's back.
``touched_at`` MySQL/MariaDB only (schema version 9; not in the ``Table``: ``mysql.CLAIM_MARK``):
             set by a claim to a fixed mark and by the server to the time of any later change of
             the row, so a batch's settle can tell its rows are as their claims left them.
``definition`` the immutable definition a row was created from: a workflow run row's DAG
             snapshot (JSON), written once at its start and never updated; NULL elsewhere.
"""

from __future__ import annotations

import re

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.schema import CreateIndex
from sqlalchemy.types import TypeDecorator

from ..errors import ConfigError
from ..rules.task_states import FINISHED
from ..rules.validate import MAX_ERROR_BYTES, MAX_TAG_LENGTH, cap_text

SCHEMA_VERSION = 10
#: the queue of a task submitted without one, and the queue a worker given none serves
DEFAULT_QUEUE = "default"
#: the longest queue name (``validate.check_queue``: letters, digits and ``_.:-``)
MAX_QUEUE_LENGTH = 64
#: values of the outcome column of a finished row (skipped: a workflow step that never could run)
OUTCOMES = ("success", "failure", "cancelled", "skipped")
#: the purge time of a finished row that must not be purged yet (a row of an unfinished
#: workflow run); the one constant for "never", also the due time of rows never due by time
FOREVER = 1e15
SCHEDULE_SCHEMA_VERSION = 4
#: values of a schedule's catchup and dst columns, and its largest delay (perfectsched's own
#: constants: tests/unit/test_rowcheck.py keeps them equal)
SCHEDULE_CATCHUP = ("all", "latest", "skip")
SCHEDULE_DST = ("vixie", "exact")
SCHEDULE_MAX_DELAY = 366 * 86400

_TABLE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,39}$")

MAX_KEY_LENGTH = 255
#: the counters of a statistics bucket (statistics.COUNTS: tests/unit/test_statistics.py keeps them equal)
STATS_COUNTS = ("started", "succeeded", "failed", "cancelled", "retried")
#: MySQL: the character set of every table pq makes, whatever the database's default (latin1 or
#: utf8mb3 there would store what they cannot hold as '?': INSERT IGNORE only warns)
MYSQL_CHARSET = "utf8mb4"
#: the longest error text an event keeps (the task row keeps the whole of its last one)
DETAIL_LENGTH = 1000


class ExactString(TypeDecorator):
    """A string compared byte for byte on every database.

    MySQL's collations fold case and pad trailing spaces, so ``'a'``, ``'A'`` and ``'a '``
    would collide as keys; there the column is VARBINARY holding UTF-8. ``byte_order``: also
    ordered byte for byte (code point by code point) everywhere, so that the strings with a prefix
    are one range of its index: on PostgreSQL the column is in the ``C`` collation (SQLite's
    BINARY and MySQL's VARBINARY are already).
    """

    impl = sa.String
    cache_ok = True

    def __init__(self, length: int = MAX_KEY_LENGTH, byte_order: bool = False):
        super().__init__(length)
        self.chars = length
        self.byte_order = byte_order

    def load_dialect_impl(self, dialect):
        length = self.chars
        if dialect.name in ("mysql", "mariadb"):
            return dialect.type_descriptor(sa.VARBINARY(length * 4))
        if self.byte_order and dialect.name == "postgresql":
            return dialect.type_descriptor(sa.String(length, collation="C"))
        return dialect.type_descriptor(sa.String(length))

    def bind_processor(self, dialect):
        if dialect.name not in ("mysql", "mariadb"):
            return None  # no call per value where the column is a plain string
        return lambda value: value.encode("utf-8", "surrogateescape") if value is not None else None

    def result_processor(self, dialect, coltype):
        if dialect.name not in ("mysql", "mariadb"):
            return None

        def process(value):
            # Bytes that are not UTF-8 (a hand edit) come back as lone surrogates, which
            # rowcheck reports, and go back as the same bytes: never an error while fetching.
            if isinstance(value, (bytes, bytearray, memoryview)):
                return bytes(value).decode("utf-8", "surrogateescape")
            return value

        return process


class LongText(TypeDecorator):
    """Text of any length: LONGTEXT on MySQL (whose TEXT holds 64 KB), TEXT elsewhere. The MySQL
    type is looked up only on MySQL: the other databases never import its dialect."""

    impl = sa.Text()
    cache_ok = True

    def load_dialect_impl(self, dialect):
        if dialect.name in ("mysql", "mariadb"):
            from sqlalchemy.dialects.mysql import LONGTEXT

            return dialect.type_descriptor(LONGTEXT())
        return dialect.type_descriptor(sa.Text())


def _long_text():
    return LongText()


class ErrorText(TypeDecorator):
    """A column of error text (TEXT: 65,535 bytes on MySQL/MariaDB): every text bound to it is
    capped to :data:`~queue_core.rules.validate.MAX_ERROR_BYTES` by :func:`~queue_core.rules.validate.cap_text`,
    with a marker where it was cut, on every database alike, whichever path writes it."""

    impl = sa.Text()
    cache_ok = True

    def process_bind_param(self, value, dialect):
        return cap_text(value, MAX_ERROR_BYTES) if isinstance(value, str) else value


def _id_type():
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def validate_table_name(name: str) -> str:
    if not isinstance(name, str) or not _TABLE_RE.match(name):
        raise ConfigError(
            f"invalid table name {name!r}: use 1-40 letters, digits or underscores, not starting with a digit"
        )
    return name


def task_table(metadata: sa.MetaData, name: str) -> sa.Table:
    validate_table_name(name)
    t = sa.Table(
        name,
        metadata,
        sa.Column("id", _id_type(), primary_key=True, autoincrement=True),
        sa.Column("key", ExactString(byte_order=True), nullable=False),  # a key prefix: a range of its index
        sa.Column("type", ExactString(), nullable=False),
        sa.Column("data", _long_text(), nullable=False),
        sa.Column("resource", ExactString(), nullable=True),
        sa.Column("max_running", sa.Integer(), nullable=True),
        sa.Column("priority", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("state", sa.SmallInteger(), nullable=False, server_default="0"),
        sa.Column("leased", sa.SmallInteger(), nullable=False, server_default="0"),
        sa.Column("timeout", sa.Double(), nullable=False),
        sa.Column("run_at", sa.Double(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("started_at", sa.Double(), nullable=True),
        sa.Column("finished_at", sa.Double(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("max_attempts", sa.Integer(), nullable=True),
        sa.Column("lease_token", sa.BigInteger(), nullable=True),
        sa.Column("owner", sa.String(255), nullable=True),
        sa.Column("outcome", sa.String(16), nullable=True),
        sa.Column("cancel_requested", sa.SmallInteger(), nullable=False, server_default="0"),
        sa.Column("error", ErrorText(), nullable=True),
        sa.Column("grp", ExactString(), nullable=True),
        sa.Column("result", _long_text(), nullable=True),
        sa.Column("workflow", _long_text(), nullable=True),
        sa.Column("definition", _long_text(), nullable=True),
        sa.Column("queue", ExactString(MAX_QUEUE_LENGTH), nullable=False, server_default=DEFAULT_QUEUE),
        # 1: an operator tracks the task (listed by list --tracked; its changes are followed)
        sa.Column("tracked", sa.SmallInteger(), nullable=False, server_default="0"),
        # the submitter's trace context (W3C headers as JSON: OpenTelemetry), NULL without one
        sa.Column("trace", sa.String(1024), nullable=True),
        sa.UniqueConstraint("key", name=f"uq_{name}_key"),
        mysql_charset=MYSQL_CHARSET,
        # SQLite: never a purged row's id for a new row (the wake-up probe watches the highest id)
        sqlite_autoincrement=True,
    )
    _task_indexes(t, name)
    return t


def _task_indexes(t: sa.Table, name: str) -> None:
    """The indexes of the task table ``t`` (named ``name``)."""
    # Every claim reads one queue at a time: each claim index leads with (state, queue).
    # Claim: live rows, best priority first, then longest due, then submission order.
    sa.Index(f"ix_{name}_queue", t.c.state, t.c.queue, t.c.priority.desc(), t.c.timeout, t.c.id)
    # Claims of a worker serving some task types only: the claim and user indexes per type, so
    # that such a claim reads exact ranges of its types and never a row of another type.
    sa.Index(f"ix_{name}_qtype", t.c.state, t.c.queue, t.c.type, t.c.priority.desc(), t.c.timeout, t.c.id)
    sa.Index(f"ix_{name}_qtype_user", t.c.state, t.c.queue, t.c.type, t.c.resource, t.c.timeout)
    # Fair share: live rows of each user in a queue (heads per user).
    sa.Index(f"ix_{name}_quser", t.c.state, t.c.queue, t.c.resource, t.c.timeout)
    # Leases held: running counts per queue (exact range) and per user across queues (few rows).
    sa.Index(f"ix_{name}_running", t.c.state, t.c.leased, t.c.queue, t.c.resource, t.c.timeout)
    # Purge of finished rows whose retention ended; kept apart from the claim range.
    sa.Index(f"ix_{name}_purge", t.c.state, t.c.timeout)
    sa.Index(f"ix_{name}_grp", t.c.grp)
    # The tracked tasks, by id (partial where the database has them: nothing to write for others).
    tracked = t.c.tracked == 1
    partial_index(f"ix_{name}_tracked", t.c.tracked, t.c.id, where={"postgresql": tracked, "sqlite": tracked})
    # The failed tasks (failure groups, bulk retry, the dashboard's failed filter): a partial index
    # where the database has them; MySQL has none, and an index leading with the outcome would be
    # rewritten by every finish there.
    failed = {"postgresql": failed_rows(t), "sqlite": failed_rows(t, "sqlite")}
    partial_index(f"ix_{name}_failed", t.c.id, where=failed).ddl_if(
        dialect=PARTIAL_INDEX_DIALECTS  # type: ignore[arg-type]  # (a tuple of names is documented)
    )


def partial_index(name: str, *columns: sa.Column, where: dict[str, sa.ColumnElement[bool]]) -> sa.Index:
    """An index of the rows ``where`` holds on each database that has partial indexes (by name),
    of every row elsewhere. The condition is given to the database's DDL only when the index is
    made (:func:`_made_partial`): the ``<name>_where`` argument of ``Index`` would import the
    SQLAlchemy dialect of every database it names into every process, a worker on MySQL included."""
    return sa.Index(name, *columns, info={"partial_where": where})


@compiles(CreateIndex, "postgresql")
@compiles(CreateIndex, "sqlite")
def _made_partial(create: CreateIndex, compiler, **kw) -> str:
    index = create.element
    where = index.info.get("partial_where", {}).get(compiler.dialect.name)
    if where is not None:
        index.dialect_options[compiler.dialect.name]["where"] = where
    return compiler.visit_create_index(create, **kw)


#: the databases with partial indexes (an index of some rows only, by its WHERE)
PARTIAL_INDEX_DIALECTS = ("sqlite", "postgresql")


def failed_rows(t: sa.Table, dialect: str = "") -> sa.ColumnElement[bool]:
    """The tasks that ended as failure, in the words of the partial index ``ix_<table>_failed``
    on a database of ``dialect``: its constants written in the statement (a bound value would
    keep a planner from using it); on SQLite the state as an expression (``state + 0``), which
    no other index serves, else its planner prefers an index leading with the state (every
    finished row) to a scan of the partial one."""
    state = t.c.state + sa.literal_column("0") if dialect == "sqlite" else t.c.state
    return sa.and_(state == sa.literal_column(str(FINISHED)), t.c.outcome == sa.literal_column("'failure'"))


#: columns each schema version added, for upgrading a table created by an older release
ADDED_COLUMNS: dict[int, tuple[str, ...]] = {
    2: ("result", "workflow", "definition"),
    3: ("queue",),
    4: ("tracked",),
    6: ("trace",),
}
#: columns a schema version put in a byte-order collation (PostgreSQL: ``COLLATE "C"``; the
#: other databases' columns already were): ``ExactString(byte_order=True)``
RECOLLATED_COLUMNS: dict[int, tuple[str, ...]] = {7: ("key",)}
#: indexes of earlier schema versions that a later one replaced (dropped by the upgrade)
DROPPED_INDEXES: dict[int, tuple[str, ...]] = {3: ("claim", "type", "type_user", "user")}
#: the same for the event table (``<table>_events``)
EVENT_ADDED_COLUMNS: dict[int, tuple[str, ...]] = {10: ("traceback",)}
#: the same for the schedule table
SCHEDULE_ADDED_COLUMNS: dict[int, tuple[str, ...]] = {2: ("error",), 3: ("queue",), 4: ("tags",)}


def meta_table(metadata: sa.MetaData, task_table_name: str) -> sa.Table:
    return sa.Table(
        f"{task_table_name}_meta",
        metadata,
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("value", sa.String(255), nullable=False),
        mysql_charset=MYSQL_CHARSET,
    )


def queue_table(metadata: sa.MetaData, task_table_name: str) -> sa.Table:
    """The settings of named queues (``<table>_queues``): a row per queue an operator paused or
    limited; a queue without a row is running and unlimited."""
    return sa.Table(
        f"{task_table_name}_queues",
        metadata,
        sa.Column("name", ExactString(MAX_QUEUE_LENGTH), primary_key=True),
        sa.Column("paused", sa.SmallInteger(), nullable=False, server_default="0"),
        # at most this many of its tasks hold a lease at once, across all workers (NULL: no limit)
        sa.Column("concurrency", sa.Integer(), nullable=True),
        # at most rate_limit starts in any rate_window seconds (NULL: no limit), per value of
        # rate_key ('user', 'type') or for the whole queue (NULL)
        sa.Column("rate_limit", sa.Integer(), nullable=True),
        sa.Column("rate_window", sa.Double(), nullable=True),
        sa.Column("rate_key", sa.String(16), nullable=True),
        sa.Column("updated_at", sa.Double(), nullable=False),
        mysql_charset=MYSQL_CHARSET,
    )


def start_table(metadata: sa.MetaData, task_table_name: str) -> sa.Table:
    """The recent starts of rate-limited queues (``<table>_starts``): one row per task started
    in such a queue, kept for its window, so that a claim counts the starts of the last window.
    Its key is its only index, in the order a claim counts (no sequence: a worker needs no grant
    beyond the table's)."""
    return sa.Table(
        f"{task_table_name}_starts",
        metadata,
        sa.Column("queue", ExactString(MAX_QUEUE_LENGTH), primary_key=True),
        # the value of the queue's rate_key the task had ('' for the whole queue, or no value)
        sa.Column("rate_key", ExactString(), primary_key=True),
        sa.Column("started_at", sa.Double(), primary_key=True),
        sa.Column("task_id", _id_type(), primary_key=True, autoincrement=False),
        mysql_charset=MYSQL_CHARSET,
    )


def tag_table(metadata: sa.MetaData, task_table_name: str) -> sa.Table:
    """The tags of tasks (``<table>_tags``): a row per tag of a task, keyed (tag, task id) so
    that the tasks of a tag are an exact range of its key; deleted with the task."""
    name = f"{task_table_name}_tags"
    t = sa.Table(
        name,
        metadata,
        sa.Column("tag", ExactString(MAX_TAG_LENGTH), primary_key=True),
        sa.Column("task_id", _id_type(), primary_key=True, autoincrement=False),
        mysql_charset=MYSQL_CHARSET,
    )
    sa.Index(f"ix_{name}_task", t.c.task_id)  # a task's tags, and their delete with it
    return t


def failed_id_table(metadata: sa.MetaData, task_table_name: str) -> sa.Table:
    """The ids of the tasks that ended as failure (``<table>_failed_ids``), on the databases without
    partial indexes only (MySQL/MariaDB; elsewhere ``ix_<table>_failed`` does its work): written by
    the changes that end a task as failure, deleted with the task; a task that left the failed
    state since (a retry) keeps its row until then, so a read checks the task row too
    (:func:`failed_rows`)."""
    return sa.Table(
        f"{task_table_name}_failed_ids",
        metadata,
        # a name of its own, not task_id: another program's table of ids named like this one
        # is then told apart (ownership.difference: a column of ours missing)
        sa.Column("failed_task_id", _id_type(), primary_key=True, autoincrement=False),
        mysql_charset=MYSQL_CHARSET,
        info={"dialects": ("mysql",)},
    )


#: the kinds of a task's events (``<table>_events``), the transition that writes each: a task's
#: history and the event stream. ``submitted`` is read from the task row itself (its id,
#: ``created_at``, ``run_at``), so that a submission writes one row; ``expired``: a claim took
#: over a lease that had expired (written with that claim's ``claimed``)
EVENT_KINDS = (
    "submitted",
    "claimed",
    "expired",
    "gave_up",
    "set_aside",
    "finished",
    "retried",
    "released",
    "attempt_returned",
    "force_finished",
    "cancelled",
    "cancel_requested",
    "moved",
    "adopted",
    "promoted",
    "closed",
    "reopened",
    "requeued",
)


def event_table(metadata: sa.MetaData, task_table_name: str) -> sa.Table:
    """The events of tasks (``<table>_events``): a row per state change of a task after its
    submission, appended in the transaction of the change; deleted with the task (and trimmed to
    its first and last entries: ``store/events.py``). Read by task (its history) and by id (the
    event stream, statistics)."""
    name = f"{task_table_name}_events"
    t = sa.Table(
        name,
        metadata,
        sa.Column("id", _id_type(), primary_key=True, autoincrement=True),
        sa.Column("task_id", _id_type(), nullable=False),
        sa.Column("key", ExactString(), nullable=False),
        sa.Column("queue", ExactString(MAX_QUEUE_LENGTH), nullable=False),
        sa.Column("type", ExactString(), nullable=False),
        sa.Column("kind", sa.String(24), nullable=False),
        sa.Column("at", sa.Double(), nullable=False),
        # the task's attempts after the change (the claim's attempt while it runs)
        sa.Column("attempt", sa.Integer(), nullable=False),
        # the lease holder (host:pid) of a claim, of a lease that expired, or that ended the task
        sa.Column("owner", sa.String(255), nullable=True),
        sa.Column("outcome", sa.String(16), nullable=True),
        # what else the change says: an error's first line, the queue a task moved from
        sa.Column("detail", ErrorText(), nullable=True),
        # seconds from due to start (claimed), and from start to end (finished, retried, gave up)
        sa.Column("waited", sa.Double(), nullable=True),
        sa.Column("ran", sa.Double(), nullable=True),
        # when the task is due again (retried, released, promoted, reopened)
        sa.Column("due_at", sa.Double(), nullable=True),
        # 1: the task was tracked when it changed (its change was announced: PostgreSQL NOTIFY)
        sa.Column("tracked", sa.SmallInteger(), nullable=False, server_default="0"),
        # the traceback of the error that ended the attempt (retried, finished as failure), else
        # NULL (schema version 10: EVENT_ADDED_COLUMNS)
        sa.Column("traceback", ErrorText(), nullable=True),
        mysql_charset=MYSQL_CHARSET,
        sqlite_autoincrement=True,
    )
    sa.Index(f"ix_{name}_task", t.c.task_id, t.c.id)  # a task's history, and its delete with it
    return t


def worker_table(metadata: sa.MetaData, task_table_name: str) -> sa.Table:
    """The registry of live workers (``<table>_workers``): a row per claiming process, written
    when it starts, its ``last_seen`` renewed while it runs, deleted when it stops (or, silent
    past the limit, by the next one's sweep)."""
    return sa.Table(
        f"{task_table_name}_workers",
        metadata,
        # the owner it writes on the rows it leases (host:pid)
        sa.Column("owner", sa.String(255), primary_key=True),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        # the queues it serves, best first (JSON list), and the task types (JSON list or NULL: any)
        sa.Column("queues", sa.Text(), nullable=False),
        sa.Column("types", sa.Text(), nullable=True),
        sa.Column("version", sa.String(32), nullable=False),
        sa.Column("started_at", sa.Double(), nullable=False),
        sa.Column("last_seen", sa.Double(), nullable=False),
        mysql_charset=MYSQL_CHARSET,
    )


def stats_table(metadata: sa.MetaData, task_table_name: str) -> sa.Table:
    """Statistics of tasks (``<table>_stats``): a row per bucket of time (``span`` seconds from
    ``start``: a minute, an hour; span 0 is all time), queue and type, rolled up from the events
    (``store/stats.py``) and kept apart from the tasks' own retention."""
    counts = [sa.Column(n, sa.BigInteger(), nullable=False, server_default="0") for n in STATS_COUNTS]
    return sa.Table(
        f"{task_table_name}_stats",
        metadata,
        sa.Column("span", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("start", sa.Double(), primary_key=True),
        sa.Column("queue", ExactString(MAX_QUEUE_LENGTH), primary_key=True),
        sa.Column("type", ExactString(), primary_key=True),
        *counts,
        # the distributions of seconds waited (due -> start) and run (start -> end): a JSON list
        # of counts per bucket of statistics.BOUNDS, and their sum
        sa.Column("wait_counts", sa.Text(), nullable=False),
        sa.Column("wait_sum", sa.Double(), nullable=False),
        sa.Column("run_counts", sa.Text(), nullable=False),
        sa.Column("run_sum", sa.Double(), nullable=False),
        mysql_charset=MYSQL_CHARSET,
    )


def stats_gap_table(metadata: sa.MetaData, task_table_name: str) -> sa.Table:
    """The event ids the statistics roll-up passed over (``<table>_stats_gaps``), as ranges
    ``first_id..last_id``: not committed when it read past them, counted when they appear,
    forgotten after ``event_gap_timeout``."""
    return sa.Table(
        f"{task_table_name}_stats_gaps",
        metadata,
        sa.Column("first_id", _id_type(), primary_key=True, autoincrement=False),
        sa.Column("last_id", _id_type(), nullable=False),
        sa.Column("missed_at", sa.Double(), nullable=False),
        mysql_charset=MYSQL_CHARSET,
    )


def receipt_table(metadata: sa.MetaData, task_table_name: str) -> sa.Table:
    """Receipts of operator changes (``<table>_receipts``, ``store/receipts.py``): a random token
    claimed first thing in each run of the change's transaction, found taken by a run again after
    a COMMIT that applied; purged an hour on."""
    t = sa.Table(
        f"{task_table_name}_receipts",
        metadata,
        sa.Column("token", sa.String(32), primary_key=True),
        sa.Column("at", sa.Double(), nullable=False),
        mysql_charset=MYSQL_CHARSET,
    )
    sa.Index(f"ix_{t.name}_at", t.c.at)
    return t


def schedule_table(metadata: sa.MetaData, name: str) -> sa.Table:
    validate_table_name(name)
    t = sa.Table(
        name,
        metadata,
        sa.Column("key", ExactString(), primary_key=True),
        sa.Column("type", ExactString(), nullable=False),
        sa.Column("cron", sa.String(255), nullable=False),
        sa.Column("delay", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("timezone", sa.String(64), nullable=False),
        sa.Column("data", _long_text(), nullable=False),
        sa.Column("next_time", sa.BigInteger(), nullable=False),
        sa.Column("next_run_time", sa.Double(), nullable=False),
        sa.Column("timeout", sa.Double(), nullable=False),
        sa.Column("catchup", sa.String(8), nullable=False),
        sa.Column("dst", sa.String(8), nullable=False),
        sa.Column("leased", sa.SmallInteger(), nullable=False, server_default="0"),
        sa.Column("lease_token", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        # why the schedule cannot be computed: set aside (never due) until modified or resumed
        sa.Column("error", ErrorText(), nullable=True),
        # the queue its occurrences' tasks are submitted to
        sa.Column("queue", ExactString(MAX_QUEUE_LENGTH), nullable=False, server_default=DEFAULT_QUEUE),
        # the tags its occurrences' tasks carry: a JSON list of tags (NULL: none)
        sa.Column("tags", sa.Text(), nullable=True),
        mysql_charset=MYSQL_CHARSET,
    )
    sa.Index(f"ix_{name}_due", t.c.timeout)
    return t
