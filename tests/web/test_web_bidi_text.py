"""Bidirectional control characters in user text (keys, tags, users, data, errors) are shown on
every page as their escape in a span of their own, never applied; attributes keep the exact text
(a form posts the key back as it is)."""

from __future__ import annotations

import re

import pytest
from web_support import client, login

#: the embeddings, overrides, isolates and marks that reorder text
BIDI_CONTROLS = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
KEY = "invoice\u202egnp.exe"
ATTRIBUTE = re.compile(r'\s[\w-]+="[^"]*"')


def test_shown_escapes_each_bidi_control_visibly():
    from pqweb.formatting import plain, shown

    for ch in BIDI_CONTROLS:
        out = str(shown(f"a{ch}<b>"))
        assert ch not in out and f'<span class="bidi">\\u{ord(ch):04x}</span>' in out and "&lt;b&gt;" in out
    assert str(shown("plain <i>")) == "plain &lt;i&gt;" and shown(3) == 3
    assert str(plain(KEY)) == "invoice\\u202egnp.exe"


@pytest.mark.parametrize("path", ["/", "/tasks", "/task?key=KEY", "/failures", "/task?key=done"])
def test_bidi_controls_in_user_text_are_never_applied(queue, path):
    queue.submit(
        KEY,
        "mail\u2067x",
        {"file": "report\u202dfdp.exe", "n": 1},
        queue="q1",
        user="u\u2066s",
        tags=["t\u202ag"],
    )
    queue.poll(queues="q1").fail("ValueError: bad \u202eeman\u061c")
    queue.submit("done", "t", {"x": "\u202b"}, queue="q2")
    c = client(queue)
    login(c)
    html = c.get(path.replace("KEY", KEY)).text
    text = ATTRIBUTE.sub("", html)  # what the page shows, attributes left out
    assert not any(ch in text for ch in BIDI_CONTROLS), path
    if path != "/":  # the overview names queues only: never with a bidi control
        assert '<span class="bidi">\\u' in html, path
    if path.startswith("/task?key=inv"):
        assert 'invoice<span class="bidi">\\u202e</span>gnp.exe' in html
        assert f'name="key" value="{KEY}"' in html  # the form sends the exact key


def test_an_action_on_a_key_with_a_bidi_control_reaches_that_task(queue):
    queue.submit(KEY, "t")
    queue.poll().fail("ValueError: x")
    c = client(queue)
    csrf = login(c)
    page = c.get("/task", params={"key": KEY}).text
    key = re.search(r'<form method="post" action="/task/retry".*?name="key" value="([^"]*)"', page, re.S)[1]
    assert c.post("/task/retry", data={"key": key, "csrf": csrf}).status_code == 303
    assert queue[KEY].metadata().status == "waiting"
