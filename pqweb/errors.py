"""The errors of the dashboard: each becomes a page with its HTTP status (``pqweb/app.py``)."""

from __future__ import annotations


class WebError(Exception):
    """A request the dashboard refuses; ``status`` is the HTTP status of its page."""

    status = 400

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class ReadOnlyError(WebError):
    """An action while actions are off (the default): start with --allow-actions."""

    status = 403


class LoginRequiredError(WebError):
    """An action without a logged-in session."""

    status = 401


class CSRFError(WebError):
    """A POST without the session's CSRF token, or with another."""

    status = 403


class TooManyAttemptsError(WebError):
    """A login from a client that sent too many wrong tokens lately; ``retry_after`` seconds."""

    status = 429

    def __init__(self, message: str, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after


class NotOfferedError(WebError):
    """An action the row's state does not allow (``pqweb/actions.py``)."""

    status = 409


class ConfirmationNeeded(Exception):
    """A destructive action posted without ``confirmed=yes``: its page asks first."""

    def __init__(self, question: str, fields: dict[str, str], back: str):
        super().__init__(question)
        self.question, self.fields, self.back = question, fields, back
