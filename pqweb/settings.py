"""What the dashboard is started with (``pqweb/cli.py`` fills it from options, the config file
and the environment)."""

from __future__ import annotations

from dataclasses import dataclass

from perfectsched.scheduler import EXTRA_KEYS as SCHEDULE_KEYS
from queue_core.errors import ConfigError

#: the config keys of the dashboard, ``{key: (default, kind, help)}`` as queue_core's settings take
#: them (the environment sets each as ``PQ_<KEY>``; the token also as ``PQWEB_TOKEN``); perfectsched's
#: too (``schedule_table``, ``timezone``...): the dashboard shows the schedules of the same file
EXTRA_KEYS: dict[str, tuple] = {
    **SCHEDULE_KEYS,
    "web_allow_actions": (False, "bool", "let logged-in users retry, cancel, move tasks and pause queues"),
    "web_token": (None, "opt-str", "the token a user logs in with (never on the command line)"),
    "web_refresh": (2.0, "float+", "seconds between the live updates of a page"),
    "web_secure_cookie": (False, "bool", "mark the session cookie Secure (served over HTTPS, e.g. behind a proxy)"),
}
TOKEN_ENV = "PQWEB_TOKEN"
#: the shortest token accepted
MIN_TOKEN_LENGTH = 16


@dataclass(frozen=True)
class WebSettings:
    """The dashboard's own settings: actions off unless asked for, and then only with a token."""

    allow_actions: bool = False
    token: str | None = None
    #: seconds between live updates (htmx polling)
    refresh: float = 2.0
    page_size: int = 50
    #: mark the session cookie Secure (behind an HTTPS proxy)
    secure_cookie: bool = False

    def __post_init__(self) -> None:
        if self.allow_actions and not self.token:
            raise ConfigError(f"actions need a token: set {TOKEN_ENV} or web_token in the config file")
        if self.token is not None and len(self.token) < MIN_TOKEN_LENGTH:
            raise ConfigError(f"the token must be at least {MIN_TOKEN_LENGTH} characters")
        if not 0.2 <= self.refresh <= 3600:
            raise ConfigError("web_refresh must be between 0.2 and 3600 seconds")
