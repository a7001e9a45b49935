"""The secrets of a database URL (userinfo and query) and the URL shown without them; strict JSON."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queue_core.cli.kit.passwords import scrub
from queue_core.rules import strict_json, url_secrets


def test_userinfo_and_query_secrets_are_found_and_masked():
    url = "postgresql+psycopg://pq:pw1@h:5432/db?sslmode=require&password=pw2&SSLPassword=pw%2F3"
    assert sorted(url_secrets.secrets_of(url)) == ["pw/3", "pw1", "pw2"]
    shown = url_secrets.masked(url_secrets.parsed(url))
    assert "pw" not in shown.replace("password", "").replace("Password", "")
    assert shown.startswith("postgresql+psycopg://pq:***@h:5432/db?") and "sslmode=require" in shown
    assert set(url_secrets.spellings(url)) >= {"pw/3", "pw%2F3"}


def test_no_secret_and_unparseable_urls():
    assert url_secrets.secrets_of("sqlite:///pq.db?timeout=5") == []
    assert url_secrets.secrets_of("") == [] and url_secrets.secrets_of("::not a url") == []
    assert url_secrets.parsed("::not a url") is None


def test_text_with_a_query_password_is_scrubbed_whatever_the_url_was():
    text = "cannot connect with mysql+pymysql://u@h/db?charset=utf8mb4&passwd=hunter2 (refused)"
    assert scrub(text) == "cannot connect with mysql+pymysql://u@h/db?charset=utf8mb4&passwd=*** (refused)"


def test_a_password_behind_a_second_question_mark_is_a_secret_and_scrubbed_when_quoted():
    """``sqlite:///x?y?password=SECRET``: the parser's query key is ``y?password``; a driver's
    warning shows the query %-quoted (``y%3Fpassword=SECRET``)."""
    url = "sqlite:///x?y?password=t0pq"
    assert url_secrets.secrets_of(url) == ["t0pq"]
    assert "t0pq" not in url_secrets.masked(url_secrets.parsed(url))
    warning = "Query string argument(s) 'y?password' ... 'y%3Fpassword=t0pq' and 'a%26PASSWD=t0pz'"
    assert url_secrets.hide_query_secrets(warning).count("***") == 2 and "t0p" not in url_secrets.hide_query_secrets(
        warning
    )


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+psycopg://pq@h/db?conninfo=password%3DS3CRET",  # psycopg's whole connection string
        "postgresql+psycopg://pq@h/db?conninfo=postgresql://pq:S3CRET@h/db",
        "mysql+pymysql://u@h/db?ssl_key_password=S3CRET",  # PyMySQL's client key password
        "postgresql://u@h/db?x=1?password=S3CRET",  # rendered %-quoted: x=1%3Fpassword%3D...
        "postgresql://u@h/db?x=1%3Fpassword%3DS3CRET",
        "postgresql://u:S3@CRET@h/db",  # an unquoted @ in the password
        "postgresql://u:S3/CRET@h/db",
        "mysql+pymysql://u@h/db?password=S3#CRET",
    ],
)
def test_secrets_drivers_read_are_absent_from_the_masked_url_and_scrubbed_text(url):
    assert "CRET" not in url_secrets.masked(url_secrets.parsed(url))
    assert "CRET" not in url_secrets.hide_secrets(f"cannot connect to {url}: refused")
    assert "CRET" not in scrub(f"cannot connect to {url}: refused", [url])


def test_a_bad_url_in_a_config_is_refused_without_its_password():
    from queue_core import config
    from queue_core.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        config.build({"url": ["postgresql://pq:S3CRET@db/app"]})
    assert "S3CRET" not in str(info.value) and "pq:***@db/app" in str(info.value)


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20))
def test_any_query_password_is_absent_from_the_masked_url(secret):
    from urllib.parse import quote

    url = f"mysql+pymysql://u@h/db?password={quote(secret, safe='')}&x=1"
    shown = url_secrets.masked(url_secrets.parsed(url))
    assert dict(url_secrets.parsed(shown).query) == {"password": "***", "x": "1"}


@pytest.mark.parametrize("text", ["NaN", "[Infinity]", '{"a": -Infinity}', "1e999", "-1e400", "{", ""])
def test_strict_json_refuses_what_is_not_json(text):
    with pytest.raises(ValueError):
        strict_json.loads(text)


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
        lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
        max_leaves=20,
    )
)
def test_strict_json_reads_back_whatever_pq_writes(value):
    assert strict_json.loads(json.dumps(value, allow_nan=False)) == value
