"""Every exit code a pq process ends with, in one place.

The command-line tools (:mod:`queue_core.cli.kit.exits` says which error exits with which code):

  0    success
  1    error (invalid argument, invalid JSON, task data too large, task already finished, ...)
  2    usage error (unknown option, missing argument; reported by click itself)
  3    already exists (AlreadyExistsError: a duplicate submit can be treated as done)
  4    not found (NotFoundError)
  5    database error or database unreachable (DatabaseError and its kinds: SchemaError,
       ForeignTableError, CorruptRowError, AccessDeniedError)
  6    configuration error (ConfigError: config file, database URL, table name, TARGET)
  130  interrupted (Ctrl-C)

The services (``perfectqueue run``, ``perfectsched run``, ``pqflow`` workers) exit 0 once stopped,
gracefully or at once as asked (TERM, INT, QUIT), and 5 when their database refuses them at start (a
table that is not theirs, an account or replica that may not write; a schedule table not made by
``init``). A worker polls through an outage and a task table not created yet (but ``--burst``, which
ends once nothing is due, exits 5 without its table). A worker child, which only its supervisor
sees, exits 75 to be replaced (it reached ``max_request_per_child``) and 137 when it stopped at once
(QUIT, HUP, or its supervisor gone).
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_EXISTS = 3
EXIT_NOT_FOUND = 4
EXIT_DATABASE = 5
EXIT_CONFIG = 6
EXIT_RECYCLE = 75
EXIT_INTERRUPTED = 130
EXIT_IMMEDIATE = 137
