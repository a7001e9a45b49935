"""A worker's log lines never show a database password, whatever logged it."""

from __future__ import annotations

import logging

from queue_core.worker import logs


def test_a_logged_url_shows_no_password_in_the_log_file(tmp_path):
    path = tmp_path / "worker.log"
    root = logging.getLogger()
    level = root.level
    try:
        logs.setup_logging(str(path))
        logging.getLogger("queue_core.test").error(
            "reload failed: invalid value for config url: %s", ["postgresql://pq:S3CRET@db/app?sslpassword=K3Y"]
        )
    finally:
        for h in [h for h in root.handlers if getattr(h, "_pq", False)]:
            root.removeHandler(h)
            h.close()
        logs._file_handlers.clear()
        root.setLevel(level)
    text = path.read_text()
    assert "pq:***@db/app?sslpassword=***" in text and "S3CRET" not in text and "K3Y" not in text
