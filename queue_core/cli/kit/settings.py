"""The configuration of a command, merged lazily, highest precedence first:
CLI option > environment variable > config file section > defaults
(:data:`queue_core.config.DEFAULTS`).

Every config key ``k`` can also be set with the environment variable ``PQ_<K>``
(``PQ_ALIVE_TIME=60``), except ``url`` which is ``PQ_DATABASE_URL``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from ... import config as config_mod
from ...api import queue as queue_mod
from ...errors import ConfigError
from .options import CLIState, state_of
from .passwords import remember_url

#: CLI commands are short-lived: fail in seconds when the database is unreachable.
CLI_MAX_RETRY_COUNT = 2

_ENV_NAMES = {"url": "PQ_DATABASE_URL"}


def env_name(key: str) -> str:
    """The environment variable of config key ``key``."""
    return _ENV_NAMES.get(key, "PQ_" + key.upper())


class Settings(dict):
    """The merged configuration; ``explicit`` holds the keys set by option, env or file."""

    explicit: frozenset = frozenset()
    sources: dict

    def __init__(self, *args: Any, explicit: Iterable[str] = (), sources: Mapping | None = None, **kw: Any):
        super().__init__(*args, **kw)
        self.explicit = frozenset(explicit)
        self.sources = dict(sources or {})


def settings(
    ctx_or_obj: Any = None, extra_keys: Mapping[str, tuple] | None = None, *, overrides: Mapping[str, Any] | None = None
) -> Settings:
    """The configuration of this command: defaults < config file < env vars < CLI options.

    ``extra_keys``: more key specs ``{key: (default, kind, help)}`` (perfectsched, pqflow);
    ``overrides``: values of command-specific CLI options (``None`` values are ignored).
    The config file is re-read on every call (so this serves as a reload function too).
    """
    state = state_of(ctx_or_obj)
    extra = dict(extra_keys or {})
    known = {**config_mod.DEFAULTS, **extra}
    layers = (
        ("file", _file_values(state, known)),
        ("env", _env_values(known)),
        ("cli", _cli_values(state, overrides, known)),
    )
    merged: dict = {}
    sources: dict = {}
    for name, layer in layers:
        for k, v in layer.items():
            merged[k] = v
            sources[k] = name
    out = _checked(merged, sources, extra)
    remember_url(out.get("url"))
    return out


def _file_values(state: CLIState, known: Mapping[str, tuple]) -> dict:
    if not state.config_file:
        if state.environment_explicit and state.environment != "development":
            raise ConfigError(f"-e/--environment {state.environment} needs a config file (-c FILE or PQ_CONFIG)")
        return {}
    values = config_mod.load_file(state.config_file, state.environment)
    remember_url(values.get("url"))
    unknown = [k for k in values if k not in known]
    if unknown:
        raise ConfigError(
            f"unknown config key {unknown[0]!r} in [{state.environment}] of {state.config_file}"
            + (f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else "")
        )
    return values


def _env_values(known: Mapping[str, tuple]) -> dict:
    values: dict = {}
    for key in known:
        if key in ("url", "table"):
            continue  # read by click (-D / --table envvar) so that the option beats them
        raw = os.environ.get(env_name(key))
        if raw is not None and raw.strip() != "":
            values[key] = raw.strip()
    return values


def _cli_values(state: CLIState, overrides: Mapping[str, Any] | None, known: Mapping[str, tuple]) -> dict:
    values: dict = {}
    if state.database:
        values["url"] = state.database
    if state.table:
        values["table"] = state.table
    for key, value in (overrides or {}).items():
        if key not in known:
            raise ConfigError(f"unknown config key {key!r}")
        if value is not None:
            values[key] = value
    return values


def _checked(merged: dict, sources: dict, extra: Mapping[str, tuple]) -> Settings:
    core = config_mod.build({k: v for k, v in merged.items() if k in config_mod.DEFAULTS})
    out = Settings(core, explicit=merged.keys(), sources=sources)
    for key, spec in extra.items():
        if key in config_mod.DEFAULTS:
            continue
        out[key] = config_mod.check_value(key, merged[key], spec) if key in merged else spec[0]
    return out


def open_queue(cfg: Mapping[str, Any]):
    """Open the queue of ``cfg`` (extra keys ignored) for a short-lived command
    (:func:`short_lived_retries`)."""
    kwargs = {k: v for k, v in cfg.items() if k in config_mod.DEFAULTS}
    return queue_mod.open(**{**kwargs, **short_lived_retries(cfg)})


def short_lived_retries(cfg: Mapping[str, Any]) -> dict:
    """``{"max_retry_count": n}`` for a short-lived command, n lowered to
    :data:`CLI_MAX_RETRY_COUNT` so an unreachable database fails in seconds instead of retrying
    for long; ``{}`` when ``cfg`` set it explicitly (a plain mapping: to a value not the default)."""
    default = config_mod.DEFAULTS["max_retry_count"][0]
    current = cfg.get("max_retry_count", default)
    explicit = getattr(cfg, "explicit", None)
    if explicit is None:  # a plain mapping
        explicit = () if current == default else ("max_retry_count",)
    if "max_retry_count" in explicit:
        return {}
    return {"max_retry_count": min(CLI_MAX_RETRY_COUNT, current)}
