"""Configuration: every key, its default and its check (shared by all three packages).

Keys keep PerfectQueue's names. The same keys are accepted by ``queue_core.open(**config)``,
by the TOML config file (one table per environment) and, for a few, by CLI options.
Precedence: explicit argument / CLI option > environment variable > config file > default.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .errors import ConfigError, ValidationError
from .rules import url_secrets
from .rules.validate import check_served_queues

#: key -> (default, kind, help). kind: "float+" (>0), "float0" (>=0), "int+" (>=1),
#: "int0" (>=0), "str", "opt-int+", "opt-float+", "choice:a|b", "opt-str"
DEFAULTS: dict[str, tuple[Any, str, str]] = {
    "url": (None, "opt-str", "SQLAlchemy URL; default: SQLite file pq.db in the current directory"),
    "table": ("pq_tasks", "str", "queue table name"),
    "alive_time": (300.0, "float+", "lease length of poll and heartbeat (s)"),
    "retention_time": (300.0, "float0", "how long finished tasks (and so their keys) are kept (s)"),
    "failure_retention": (
        None,
        "opt-float+",
        "how long tasks that finished as failure are kept (s); unset = retention_time",
    ),
    "event_gap_timeout": (
        60.0,
        "float+",
        "how long a reader of the event stream waits for an event whose id it passed over (s): "
        "longer than any transaction that changes tasks lasts",
    ),
    "stats_interval": (
        10.0,
        "float0",
        "how often a worker rolls the events up into the statistics (s); 0 = never (reads of the statistics do)",
    ),
    "stats_retention": (30 * 86400.0, "float+", "how long hourly statistics are kept (s); minutes are kept 2 days"),
    "registry_interval": (10.0, "float+", "how often a worker renews its row in the worker registry (s)"),
    "registry_timeout": (
        60.0,
        "float+",
        "a worker not seen for this long is no longer listed, and its registry row is swept (s)",
    ),
    "retry_wait": (300.0, "float0", "first retry delay after a handler error; doubles each attempt (s)"),
    "max_retry_wait": (3600.0, "float0", "cap of the exponential retry delay (s)"),
    "max_attempts": (None, "opt-int+", "acquisitions before a failing task finishes as failure; unset = no limit"),
    "max_data_size": (1048576, "int+", "largest task data, as JSON bytes"),
    "poll_interval": (1.0, "float+", "idle wait between polls of a worker (s)"),
    "processors": (1, "int+", "processors (child processes or threads) per worker"),
    "processor_type": ("process", "choice:process|thread", "process or thread"),
    "task_heartbeat_interval": (2.0, "float+", "lease heartbeat period of running tasks (s)"),
    "task_prefetch": (0, "int0", "extra tasks a processor leases per poll (heartbeated while they wait)"),
    "batch_size": (
        64,
        "int+",
        "most tasks a processor leases per poll when tasks are short (it leases what it expects to finish in 0.1 s)",
    ),
    "cleanup_interval": (60.0, "float0", "period of the purge of finished rows inside workers (s); 0 = every poll"),
    "child_heartbeat_interval": (2.0, "float+", "child to supervisor liveness beat (s)"),
    "child_heartbeat_limit": (60.0, "float+", "a child silent this long is killed and replaced (s)"),
    "child_kill_interval": (2.0, "float+", "resend period of stop signals to children (s)"),
    "child_graceful_kill_limit": (
        None,
        "opt-float+",
        "escalate a graceful stop to SIGKILL after this (s); unset = never",
    ),
    "child_fork_frequency_limit": (1.0, "float0", "least time between two forks of one processor slot (s)"),
    "max_request_per_child": (None, "opt-int+", "recycle a child process after this many tasks"),
    "max_retry_count": (10, "int0", "retries of a transient database error before it is raised"),
    "connect_timeout": (10.0, "float+", "database connect timeout (s)"),
    "pool_size": (5, "int+", "connections kept per process"),
    "sqlite_synchronous": ("FULL", "choice:OFF|NORMAL|FULL|EXTRA", "SQLite PRAGMA synchronous (FULL = durable)"),
    "log": (None, "opt-str", "log file path (default stderr); reopened on SIGUSR2"),
    "log_level": ("INFO", "choice:DEBUG|INFO|WARNING|ERROR", "log level of workers"),
    "queues": (
        "default",
        "queues",
        "the queues a worker serves: 'a,b,c' takes a queue's tasks before the next queue's; "
        "'a=5,b=3,c=1' reads them in a random order weighted so",
    ),
    "notify": (True, "bool", "PostgreSQL: wake idle workers with LISTEN/NOTIFY"),
    "wake_interval": (
        0.05,
        "float0",
        "SQLite, MySQL (PostgreSQL without notify): an idle worker reads the table's highest id this often "
        "and polls at once when it grew (s); 0 = only poll_interval",
    ),
}


KINDS = ("bool", "str", "opt-str", "float+", "float0", "opt-float+", "int+", "int0", "opt-int+")

#: the largest time a config key may give, in seconds (about 31 years): every service waits on
#: these, and a wait of Python's (threading, select) refuses more than ~9.2e9 s (OverflowError)
MAX_SECONDS = 1e9


def _check(key: str, value: Any) -> Any:
    return check_value(key, value, DEFAULTS[key])


def check_value(key: str, value: Any, spec: tuple) -> Any:
    """Validate ``value`` for ``key`` against ``spec = (default, kind, help)``.

    Kinds other than those in KINDS and ``choice:a|b`` pass through unchanged (extra keys of
    perfectsched and pqflow may carry their own types); ``queues``, a string or a list, is
    checked by ``validate.check_served_queues`` and kept as given.
    """
    kind = spec[1]
    help_ = spec[2] if len(spec) > 2 else ""
    if kind == "queues":
        try:
            check_served_queues(value, f"config {key}")
        except ValidationError as exc:
            raise ConfigError(str(exc)) from None
        return value
    if not isinstance(kind, str) or not (kind in KINDS or kind.startswith("choice:")):
        return value
    if value is None and (kind.startswith("opt-")):
        return None
    if kind.startswith("choice:"):
        return _choice(key, value, kind.split(":", 1)[1].split("|"))
    try:
        return _CONVERTERS[kind](value)
    except (TypeError, ValueError, OverflowError):
        shown = url_secrets.hide_secrets(repr(value))  # a url's password is never shown (in a list too)
        raise ConfigError(f"invalid value for config {key}: {shown} ({help_})") from None


def _choice(key: str, value: Any, choices: list[str]) -> str:
    """The one of ``choices`` ``value`` names (case aside)."""
    text = str(value)
    for c in choices:
        if text.lower() == c.lower():
            return c
    raise ConfigError(f"config {key} must be one of {', '.join(choices)}, not {value!r}")


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        word = value.strip().lower()
        if word in ("1", "true", "yes", "on"):
            return True
        if word in ("0", "false", "no", "off"):
            return False
    raise ValueError


def _to_str(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError
    return value


def _to_seconds(zero_allowed: bool):
    def convert(value: Any) -> float:
        if isinstance(value, bool):
            raise ValueError
        v = float(value)
        if not math.isfinite(v) or v < 0 or (not zero_allowed and v == 0) or v > MAX_SECONDS:
            raise ValueError
        return v

    return convert


def _to_count(least: int):
    def convert(value: Any) -> int:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError
        v = int(value)
        if v < least:
            raise ValueError
        return v

    return convert


#: the conversion of a value of each kind of KINDS (a ValueError or TypeError: not of that kind)
_CONVERTERS = {
    "bool": _to_bool,
    "str": _to_str,
    "opt-str": _to_str,
    "float+": _to_seconds(False),
    "opt-float+": _to_seconds(False),
    "float0": _to_seconds(True),
    "int+": _to_count(1),
    "opt-int+": _to_count(1),
    "int0": _to_count(0),
}


def build(overrides: Mapping[str, Any] | None = None, *, extra_keys: Mapping[str, tuple] | None = None) -> dict:
    """Defaults updated by ``overrides``; unknown keys and bad values raise ConfigError."""
    table = dict(DEFAULTS)
    if extra_keys:
        table.update(extra_keys)
    out = {k: v[0] for k, v in table.items()}
    for key, value in (overrides or {}).items():
        if key not in table:
            raise ConfigError(f"unknown config key {key!r}")
        if key in DEFAULTS:
            out[key] = _check(key, value)
        else:
            out[key] = value
    return out


def load_file(path: str, environment: str) -> dict:
    """The ``[environment]`` table of a TOML config file."""
    import tomllib  # here: a worker without a config file does not pay for its import

    try:
        with open(path, "rb") as fh:
            doc = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:  # tomllib decodes the bytes itself
        raise ConfigError(f"config file {path} is not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    section = doc.get(environment)
    if not isinstance(section, dict):
        envs = ", ".join(k for k, v in doc.items() if isinstance(v, dict)) or "none"
        raise ConfigError(f"config file {path} has no [{environment}] table (environments: {envs})")
    return dict(section)
