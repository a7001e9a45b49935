"""Connections, transactions and transient-error retries (store layer).

:class:`Database` owns one SQLAlchemy engine. Every store operation is a function of a
connection run by :meth:`Database.run` inside one transaction; a transient failure
(deadlock, lock wait timeout, SQLite busy, dropped connection, server restarting) rolls the
transaction back and runs the whole function again, a bounded number of times, then raises
:class:`~queue_core.errors.DatabaseError`. Passwords never appear in its messages.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager, suppress
from typing import TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import make_url

from ..clock import ClockReading
from ..errors import (
    AccessDeniedError,
    ConfigError,
    DatabaseError,
    DatabaseUnreachableError,
    OutcomeUnknownError,
    SchemaError,
    TaskError,
)
from ..rules import policy, url_secrets
from .dialects import Dialect
from .receipts import Receipt

log = logging.getLogger("queue_core.store")

T = TypeVar("T")

DEFAULT_URL = "sqlite:///pq.db"

#: set in a pooled connection's info once its transaction ended (committed or rolled back)
_ENDED = "pq_transaction_ended"


def _reset_on_return(dbapi_conn, record, state) -> None:
    """The pool's reset of a connection handed back: a rollback, unless the transaction it ran
    ended already (the pool's own rollback costs MySQL a round trip per transaction)."""
    if state.terminate_only or (record is not None and record.info.pop(_ENDED, False)):
        return
    dbapi_conn.rollback()


def mask_url(url: str | sa.URL | None) -> str:
    """The URL with its password replaced by ``***`` (safe to print)."""
    if url is None:
        return DEFAULT_URL
    parsed = url_secrets.parsed(url)
    return "<unparseable database URL>" if parsed is None else url_secrets.masked(parsed)


def dialect_for(backend: str, masked_url: str) -> Dialect:
    """The dialect of SQLAlchemy backend name ``backend`` (ConfigError for any other database).
    Imported here: a process imports the SQLAlchemy dialect of its own database only."""
    if backend == "sqlite":
        from .sqlite import SQLiteDialect

        return SQLiteDialect()
    if backend in ("mysql", "mariadb"):
        from .mysql import MySQLDialect

        return MySQLDialect()
    if backend in ("postgresql", "postgres"):
        from .postgresql import PostgreSQLDialect

        return PostgreSQLDialect()
    raise ConfigError(f"unsupported database {masked_url!r}: use sqlite://, mysql+pymysql:// or postgresql+psycopg://")


def load_driver(url: str | sa.URL | None) -> None:
    """Import what a connection to ``url`` will need (the driver, SQLAlchemy's dialect and ours)
    and build what each connection would build again (MySQL: PyMySQL's TLS context), without
    connecting: a process that forks its workers does it once, and each child inherits it instead
    of doing it again (it inherits no client state: nothing has connected). Quiet about a URL it
    cannot use: opening the database reports that."""
    with suppress(Exception):
        parsed = make_url(url or DEFAULT_URL)
        parsed.get_dialect().import_dbapi()
        dialect_for(parsed.get_backend_name(), "").load(parsed)


def isolated(conn, fn: Callable[[], object]) -> Exception | None:
    """Run ``fn()`` in a savepoint: an error that is not the database's rolls back its writes
    alone and is returned; a database error propagates (the transaction is retried whole)."""
    try:
        with conn.begin_nested():
            fn()
    except sa.exc.SQLAlchemyError:
        raise
    except Exception as exc:  # noqa: BLE001 - returned to the caller, who reports it
        return exc
    return None


class Database:
    """One engine, its dialect strategy and the retry policy."""

    def __init__(
        self,
        url: str | None = None,
        *,
        max_retry_count: int = 10,
        retry_max_wait: float = 2.0,
        sqlite_synchronous: str = "NORMAL",
        pool_size: int = 5,
        connect_timeout: float = 10.0,
        echo: bool = False,
    ):
        raw = url or DEFAULT_URL
        try:
            self.url = make_url(raw)
        except Exception:
            raise ConfigError(f"invalid database URL {mask_url(raw)!r}") from None
        self.masked_url = url_secrets.masked(self.url)
        self._secrets = url_secrets.spellings(self.url)
        self.max_retry_count = int(max_retry_count)
        self.retry_max_wait = float(retry_max_wait)
        backend = self.url.get_backend_name()
        self.dialect = dialect_for(backend, self.masked_url)
        #: the execution options of a run's connection, by (write, autocommit): asked once
        self._run_options = {(w, a): self.dialect.run_options(w, a) for w in (False, True) for a in (False, True)}
        self._memory_lock: threading.RLock | None = None
        self._pid = os.getpid()
        self._local = threading.local()
        #: checks of the tables to run before the first statement (see :meth:`check_before_use`)
        self._first_use: list[Callable[[sa.Connection], bool]] = []
        self._statements: sa.Engine | None = None  # see _statement_engine
        self._statement_lock = threading.Lock()
        self.engine = self._create_engine(
            sqlite_synchronous=sqlite_synchronous,
            pool_size=pool_size,
            connect_timeout=connect_timeout,
            echo=echo,
        )

    # -- engine -------------------------------------------------------------------------
    def _create_engine(self, *, sqlite_synchronous, pool_size, connect_timeout, echo):
        options = self.dialect.engine_options(self.url, pool_size, connect_timeout)
        kwargs: dict = {"echo": echo, "future": True, "pool_reset_on_return": None, **options}  # see _reset_on_return
        if self.dialect.in_one_connection(self.url):
            self._memory_lock = threading.RLock()
        self._statement_kwargs = {**kwargs, "isolation_level": "AUTOCOMMIT", "pool_size": 1}
        engine = self._engine(kwargs)
        self.dialect.setup_engine(engine, {"sqlite_synchronous": sqlite_synchronous})
        event.listen(engine, "reset", _reset_on_return)
        return engine

    def _engine(self, kwargs: dict) -> sa.Engine:
        try:
            engine = sa.create_engine(self.url, **kwargs)
        except ModuleNotFoundError as exc:
            raise ConfigError(
                f"database driver for {self.masked_url} is not installed ({exc.name}); " + self.dialect.install_hint
            ) from None
        except Exception as exc:
            raise ConfigError(f"cannot use database URL {self.masked_url}: {self.scrub(exc)}") from None
        self.dialect.prepare_engine(engine)
        return engine

    def _statement_engine(self) -> sa.Engine:
        """The engine of :meth:`run` with ``autocommit``: on MySQL a small pool of its own whose
        connections stay in autocommit (switching one of the main pool's costs three round
        trips); elsewhere the main engine (SQLite skips its BEGIN; psycopg switches in-process)."""
        if not self.dialect.autocommit_pool:
            return self.engine
        with self._statement_lock:
            if self._statements is None:
                self._statements = self._engine({**self._statement_kwargs, "skip_autocommit_rollback": True})
            return self._statements

    def last_run_retried(self) -> bool:
        """Whether the last :meth:`run` in this thread had to run its function again
        (so a write it reports as a no-op may have been its own earlier attempt)."""
        return bool(getattr(self._local, "retried", False))

    def _failure(self, what: str, exc: Exception, maybe_applied: bool, connected: bool = True) -> DatabaseError:
        """The error a run that gave up raises: "cannot connect to URL: why" when no connection
        could be opened (whatever the run was for); OutcomeUnknownError when a write may have been
        applied (its statement or COMMIT was under way when the connection failed)."""
        if not connected:
            return self.unreachable(exc)
        text = f"{what} failed on {self.masked_url}: {self.scrub(exc)}"
        if maybe_applied:
            return OutcomeUnknownError(text + " (the write may have been applied: do it again to find out)")
        return DatabaseError(text)

    def unreachable(self, exc: BaseException) -> DatabaseUnreachableError:
        """The error of a connection that could not be opened: "cannot connect to URL: why"."""
        return DatabaseUnreachableError(f"cannot connect to {self.masked_url}: {self.scrub(exc)}")

    def commit_was_uncertain(self) -> bool:
        """Whether an earlier attempt of the :meth:`run` under way (or just ended) in this thread
        failed where its writes may have been applied, the acknowledgement lost: after its function
        returned, at COMMIT; in ``autocommit``, once its statement was under way (its end is its
        commit). A failure before that (the connection could not be opened) applied nothing. A
        write that cannot tell its own applied run from another's (nothing of the row names it)
        must not be applied again then."""
        return bool(getattr(self._local, "uncertain", False))

    @property
    def shares_one_connection(self) -> bool:
        """Whether every user takes turns on one connection (an in-memory SQLite database)."""
        return self._memory_lock is not None

    def dedicated_connection(self) -> sa.Connection:
        """A connection of the pool for a caller that holds it for long (closed by the caller);
        never for a database that :attr:`shares_one_connection`. DatabaseUnreachableError when
        none can be opened."""
        if os.getpid() != self._pid:
            self.after_fork()
        try:
            return self.engine.connect()
        except sa.exc.SQLAlchemyError as exc:
            raise self.unreachable(exc) from None

    def after_fork(self) -> None:
        """Drop pooled connections inherited from a parent process."""
        for engine in self._engines():
            engine.dispose(close=False)
        self._pid = os.getpid()

    def close(self) -> None:
        for engine in self._engines():
            engine.dispose()

    def _engines(self) -> list[sa.Engine]:
        return [self.engine] if self._statements is None else [self.engine, self._statements]

    # -- errors ------------------------------------------------------------------------
    def scrub(self, exc: BaseException | str) -> str:
        """One line describing ``exc`` without SQL, parameters or the password."""
        if isinstance(exc, sa.exc.DBAPIError) and exc.orig is not None:
            text = str(exc.orig)
        else:
            text = str(exc)
        text = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
        for secret in self._secrets:
            text = text.replace(secret, "***")
        text = url_secrets.hide_secrets(text)
        return text[:500]

    def _is_transient(self, exc: BaseException) -> bool:
        if isinstance(exc, sa.exc.DBAPIError) and exc.connection_invalidated:
            return True
        if isinstance(exc, (sa.exc.OperationalError, sa.exc.InterfaceError)):
            return self.dialect.is_transient(exc)
        if isinstance(exc, sa.exc.DBAPIError):
            return self.dialect.is_transient(exc)
        return False

    def _schema_problem(self, what: str, exc: BaseException) -> SchemaError | None:
        """The SchemaError of a statement that named a table or a column the database lacks."""
        if not isinstance(exc, sa.exc.DBAPIError):
            return None
        if self.dialect.is_missing_table(exc):
            return SchemaError(f"{what}: table not found in {self.masked_url} ({self.scrub(exc)}); run 'init' first")
        if self.dialect.is_missing_column(exc):
            return SchemaError(
                f"{what}: a column this release needs is missing in {self.masked_url} ({self.scrub(exc)}): "
                "the table was made by an earlier release; run 'init' to upgrade it"
            )
        return None

    # -- transactions ------------------------------------------------------------------
    @contextmanager
    def _connection(self, write: bool, autocommit: bool = False):
        if os.getpid() != self._pid:
            self.after_fork()
        lock = self._memory_lock
        if lock is not None:
            lock.acquire()
        try:
            try:
                raw = (self._statement_engine() if autocommit else self.engine).connect()
            except TypeError as exc:  # a URL query option the driver does not take (?sslmode= for PyMySQL)
                raise ConfigError(f"cannot connect with {self.masked_url}: {self.scrub(exc)}") from None
            with raw as conn:
                options = self._run_options[bool(write), bool(autocommit)]
                if options:
                    conn = conn.execution_options(**options)
                if autocommit and self.dialect.autocommit_pool:
                    yield conn  # no COMMIT to send: the statement committed itself
                    return
                with conn.begin():
                    yield conn
                conn.info[_ENDED] = True
        finally:
            if lock is not None:
                lock.release()

    @property
    def has_server_clock(self) -> bool:
        """Whether the database has a clock of its own (a server) for :meth:`server_time`."""
        return self.dialect.server_time() is not None

    def server_time(self, monotonic: Callable[[], float]) -> ClockReading:
        """Read the database server's clock (retrying transient failures as :meth:`run` does),
        timed by ``monotonic`` around the query alone. ConfigError for SQLite, which has none."""
        expr = self.dialect.server_time()
        if expr is None:
            raise ConfigError(f"{self.masked_url} has no server clock")

        def read(conn: sa.Connection) -> ClockReading:
            before = monotonic()
            server = float(conn.execute(sa.select(expr)).scalar_one())
            after = monotonic()
            return ClockReading(server, (before + after) / 2, after - before)

        # Read inside another run's transaction too (a claim asks the clock once its locks are
        # held): that run's own state (retried, uncertain) is left as it was.
        outer = (getattr(self._local, "retried", False), getattr(self._local, "uncertain", False))
        try:
            return self.run(read, write=False, what="read the server clock")
        finally:
            self._local.retried, self._local.uncertain = outer

    def check_before_use(self, check: Callable[[sa.Connection], bool]) -> None:
        """Run ``check(conn)`` in a read transaction of its own before the next :meth:`run`, and
        again before each one until it returns True (a store: its tables exist and are its own).
        What it raises is raised by that :meth:`run`, which then runs nothing."""
        self._first_use.append(check)

    def _run_checks(self, what: str) -> None:
        self._local.checking = True
        try:
            for check in list(self._first_use):
                if self.run(check, write=False, what=what):
                    with suppress(ValueError):  # another thread's check passed first
                        self._first_use.remove(check)
        finally:
            self._local.checking = False

    def run(
        self,
        fn: Callable[[sa.Connection], T],
        *,
        write: bool = True,
        what: str = "query",
        autocommit: bool = False,
        receipt: Receipt | None = None,
    ) -> T:
        """Run ``fn(conn)`` in one transaction, retrying transient failures.

        ``autocommit``: ``fn`` runs a single statement, atomic on its own, which commits as it
        ends: one round trip, no BEGIN or COMMIT (the common case of a submit). ``receipt``: each run
        claims it first, and after a COMMIT whose outcome was unknown, a run that finds it taken
        returns the committed run's result instead of running ``fn`` again (``store/receipts.py``:
        for changes that cannot tell their own earlier run from the rows)."""
        if self._first_use and not getattr(self._local, "checking", False):
            self._run_checks(what)
        if receipt is not None:
            if autocommit:
                raise ValueError("a receipt needs a transaction (autocommit=False)")
            fn = receipt.guard(fn)
        attempt = 0
        backoff = policy.transaction_backoff(self.retry_max_wait)
        self._local.uncertain = False
        while True:
            maybe_applied: bool | None = None  # None: no connection opened yet
            try:
                self._local.retried = attempt > 0
                with self._connection(write, autocommit) as conn:
                    maybe_applied = autocommit  # a statement in autocommit commits as it ends
                    result = fn(conn)
                    maybe_applied = True  # a transaction: from its COMMIT on
                return result
            except TaskError:
                raise
            except sa.exc.SQLAlchemyError as exc:
                self._local.uncertain = self._local.uncertain or bool(maybe_applied)
                if (schema_problem := self._schema_problem(what, exc)) is not None:
                    raise schema_problem from None
                if isinstance(exc, sa.exc.DBAPIError) and self.dialect.is_denied(exc):
                    raise AccessDeniedError(
                        f"{what} refused by {self.masked_url}: {self.scrub(exc)} (a privilege this account "
                        "lacks, or a read-only replica, transaction or file)"
                    ) from None
                attempt += 1
                if not self._is_transient(exc) or attempt > self.max_retry_count:
                    uncertain = self._local.uncertain and self._is_transient(exc)
                    raise self._failure(what, exc, uncertain, connected=maybe_applied is not None) from None
                log.warning(
                    "%s: transient database error (attempt %d/%d): %s",
                    what,
                    attempt,
                    self.max_retry_count,
                    self.scrub(exc),
                )
                time.sleep(policy.backoff(backoff, attempt, random))
