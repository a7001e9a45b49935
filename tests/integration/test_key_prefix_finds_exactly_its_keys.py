"""A key prefix returns exactly the keys that start with it, newest first, across
pages, for any prefix."""

from __future__ import annotations

import random

import pytest

from queue_core.store.browse import after_prefix

CHARS = [
    "a",
    "b",
    "A",
    "%",
    "_",
    "\\",
    "/",
    "!",
    " ",
    "\t",
    "é",
    "É",
    "ß",
    "ẞ",
    "中",
    "😀",
    "\U0010ffff",
    "\U0010fffe",
    "\ud7ff",
    "\ue000",
    "\uffff",
    "\x7f",
    "\x01",
    "'",
    "~",
    "[",
    "^",
    "*",
]
BASE = [
    "a%",
    "a_",
    "a\\",
    "a/",
    "a\\%",
    "ab",
    "aB",
    "Ab",
    "a b",
    "a\tb",
    "é",
    "éa",
    "É",
    "ß",
    "ss",
    "ẞ",
    "中",
    "中文",
    "😀",
    "😀a",
    "\U0010ffff",
    "\U0010ffffa",
    "\U0010ffff\U0010ffff",
    "\ud7ff",
    "\ud7ffa",
    "\ue000",
    "\uffff",
    "\uffffa",
    "a\U0010ffff",
    "a\U0010ffffb",
    "b",
    "",
    "\x7f",
    "a\x7f",
    "a[b]",
    "a^",
    "a*",
]


def _keys():
    rnd = random.Random(16)
    keys = {k for k in BASE if k}
    while len(keys) < 400:
        keys.add("".join(rnd.choice(CHARS) for _ in range(rnd.randint(1, 5))))
    return sorted(keys)


def test_every_prefix_finds_exactly_its_keys_newest_first_across_pages(queue):
    keys = _keys()
    random.Random(7).shuffle(keys)
    for k in keys:
        queue.submit(k, "t")
    order = {k: i for i, k in enumerate(keys)}
    prefixes = sorted({k[:n] for k in keys for n in range(1, len(k) + 1)} | {"%", "_", "\\", "a%", "a_", "A", "É"})
    prefixes = random.Random(3).sample(prefixes, min(300, len(prefixes)))
    bad = []
    for p in prefixes:
        got, cursor = [], None
        while True:
            page = queue.browse(key_prefix=p, cursor=cursor, limit=3)
            got += [t.key for t in page.tasks]
            if (cursor := page.next_cursor) is None:
                break
        want = sorted((k for k in keys if k.startswith(p)), key=lambda k: -order[k])
        if got != want:
            bad.append((p, got, want))
    assert bad == []


@pytest.mark.parametrize("p", ["a", "\ud7ff", "\U0010ffff", "a\U0010ffff", "\uffff", "😀"])
def test_after_prefix_is_above_every_key_with_the_prefix(p):
    above = after_prefix(p)
    for k in _keys():
        if k.startswith(p):
            assert above is None or k.encode("utf-8", "surrogatepass") < above.encode("utf-8", "surrogatepass")
