"""A missing extra's message says what to run, and never names PyPI's ``pq`` (another project):
pq installs from its clone."""

from __future__ import annotations

from pathlib import Path

from queue_core import extras

CLONE = Path(__file__).resolve().parents[2]


def test_a_clone_installed_in_place_is_named_with_the_extra():
    assert extras.install_hint("starlette.routing") == f"pip install -e '{CLONE}[web]'"


def test_an_install_outside_a_clone_points_at_the_clone_not_at_pypi(tmp_path, monkeypatch):
    monkeypatch.setattr(extras, "SOURCE", tmp_path)  # no pyproject.toml: pq was installed, not run in place
    assert extras.install_hint("prometheus_client") == "pip install '<your pq clone>[metrics]'"


def test_the_error_names_the_extra_and_the_hint():
    err = extras.MissingExtraError("psycopg.pq", "postgres URLs")
    assert (err.module, err.extra) == ("psycopg", "postgres")
    assert str(err) == f"postgres URLs needs psycopg: install pq[postgres] (pip install -e '{CLONE}[postgres]')"
