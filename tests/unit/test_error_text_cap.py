"""``validate.cap_text``: the one cap of every stored error text (pure)."""

from __future__ import annotations

import re

import pytest

from queue_core.rules.validate import MAX_ERROR_BYTES, _error_text, cap_text

CUT = re.compile(r"… \[cut: (\d+) bytes more\]$")


@pytest.mark.parametrize("unit", ["x", "é", "€", "😀"])
@pytest.mark.parametrize("limit", [100, 101, 102, 103, MAX_ERROR_BYTES])
def test_a_text_past_the_limit_is_cut_between_characters_with_the_bytes_it_lost(unit, limit):
    text = unit * (limit + 50)
    capped = cap_text(text, limit)
    raw = capped.encode("utf-8")
    found = CUT.search(capped)
    # as much as fits: less than a character short (and the digits the count of bytes cut saved)
    assert found and len(raw) <= limit and limit - len(raw) < len(unit.encode()) + 8
    kept = capped[: found.start()]
    assert set(kept) == {unit} and len(kept.encode()) + int(found[1]) == len(text.encode())


@pytest.mark.parametrize("text", ["", "short", "é" * 50, "x" * 100])
def test_a_text_within_the_limit_is_kept_as_it_is(text):
    assert cap_text(text, 100) == text


def test_lone_surrogates_are_escaped_and_counted_as_escaped():
    capped = cap_text("a\udc80b")
    assert capped == "a\\udc80b" and capped.encode("utf-8")


def test_an_exception_text_is_capped_too():
    text = _error_text(RuntimeError("€" * 40_000))
    assert text.startswith("RuntimeError: €") and CUT.search(text) and len(text.encode()) <= MAX_ERROR_BYTES
