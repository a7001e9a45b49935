"""Unit tests of pqflow.render: text, DOT, Mermaid, SVG/PNG drawings of a snapshot."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pqflow import dag
from pqflow.dag import Workflow
from pqflow.errors import FlowError, RenderError
from pqflow.render import FORMATS, STATUS_COLOURS, render

HAVE_DOT = shutil.which("dot") is not None
HAVE_MPL = importlib.util.find_spec("matplotlib") is not None

STATUSES = {"extract": "succeeded", "transform": "failed", "load": "skipped", "cleanup": "running"}
EDGES = [("extract", "transform"), ("transform", "load"), ("load", "cleanup"), ("extract", "report")]


@pytest.fixture
def snapshot(monkeypatch: pytest.MonkeyPatch) -> dict:
    monkeypatch.setattr(dag, "_registry", {})
    wf = Workflow("etl")

    @wf.step()
    def extract(ctx):
        pass

    @wf.step(after=extract)
    def transform(ctx):
        pass

    @wf.step(after=transform)
    def load(ctx):
        pass

    @wf.step(after=load, trigger="all_done")
    def cleanup(ctx):
        pass

    @wf.step(after=extract)
    def report(ctx):
        pass

    return wf.snapshot()


def test_text_without_statuses(snapshot: dict) -> None:
    text = render(snapshot)
    assert isinstance(text, str)
    lines = text.splitlines()
    assert lines[0] == "workflow etl (5 steps)"
    assert lines[1:] == [
        "extract",
        "  transform  <- extract",
        "    load  <- transform",
        "      cleanup  <- load  (trigger all_done)",
        "  report  <- extract",
    ]
    assert "[" not in text


def test_text_with_statuses(snapshot: dict) -> None:
    text = render(snapshot, STATUSES, "text")
    lines = text.splitlines()[1:]
    assert len(lines) == 5
    assert lines[0].startswith("[succeeded]") and lines[0].endswith(" extract")
    assert re.search(r"^\[failed\]\s+transform  <- extract$", lines[1], re.M)
    assert re.search(r"^\[skipped\]\s+load  <- transform$", lines[2])
    assert "[running]" in lines[3] and "cleanup  <- load" in lines[3]
    assert lines[4].startswith("[pending]")  # missing from statuses: drawn as pending
    assert "\x1b" not in text
    # the status column is padded to the widest status, so the tree lines up
    assert [line[12:] for line in lines] == [
        "extract",
        "  transform  <- extract",
        "    load  <- transform",
        "      cleanup  <- load  (trigger all_done)",
        "  report  <- extract",
    ]


def test_dot_structure_and_colours(snapshot: dict) -> None:
    dot = render(snapshot, STATUSES, "dot")
    assert isinstance(dot, str)
    assert dot.startswith('digraph "etl" {') and dot.rstrip().endswith("}")
    for step in STATUSES:
        assert re.search(rf'^  "{step}" \[label=', dot, re.M), step
    for parent, child in EDGES:
        assert re.search(rf'^  "{parent}" -> "{child}"', dot, re.M), (parent, child)
    transform = re.search(r'^  "transform" \[(.*)\];$', dot, re.M).group(1)
    assert f'fillcolor="{STATUS_COLOURS["failed"]}"' in transform
    assert 'label="transform\\nfailed"' in transform
    load = re.search(r'^  "load" \[(.*)\];$', dot, re.M).group(1)
    assert "dashed" in load
    cleanup = re.search(r'^  "cleanup" \[(.*)\];$', dot, re.M).group(1)
    assert "shape=hexagon" in cleanup and "all_done" in cleanup
    assert re.search(r'^  "load" -> "cleanup" \[label="all_done"', dot, re.M)
    assert dot.count("->") == len(EDGES)


def test_colours_are_distinct_per_status() -> None:
    assert len(set(STATUS_COLOURS.values())) == len(STATUS_COLOURS)
    assert set(STATUS_COLOURS) == {"pending", "waiting", "running", "succeeded", "failed", "skipped", "cancelled"}


def test_dot_quotes_labels() -> None:
    snap = {"format": 1, "workflow": 'we"ird', "steps": {"a": {"after": [], "trigger": "all_success"}}, "order": ["a"]}
    dot = render(snap, {"a": 'odd "status"'}, "dot")
    assert 'digraph "we\\"ird" {' in dot
    assert 'label="a\\nodd \\"status\\""' in dot


@pytest.mark.skipif(not HAVE_DOT, reason="Graphviz 'dot' not installed")
def test_dot_output_is_accepted_by_graphviz(snapshot: dict) -> None:
    proc = subprocess.run(
        ["dot", "-Tcanon"],
        input=render(snapshot, STATUSES, "dot").encode(),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert b"transform" in proc.stdout


def test_mermaid(snapshot: dict) -> None:
    text = render(snapshot, STATUSES, "mermaid")
    lines = text.splitlines()
    assert lines[0] == "flowchart TD"
    ids = {}
    for line in lines:
        m = re.match(r'^  (n\d+)(?:\["|\{\{")([A-Za-z_]+)', line)
        if m:
            ids[m.group(2)] = m.group(1)
    assert set(ids) == set(STATUSES) | {"report"}
    for parent, child in EDGES:
        assert f"  {ids[parent]} --> {ids[child]}" in lines
    assert text.count("-->") == len(EDGES)
    assert f"classDef st_failed fill:{STATUS_COLOURS['failed']}" in text
    assert f"  class {ids['transform']} st_failed" in lines
    assert "stroke-dasharray" in text  # skipped is dashed
    assert f'{ids["cleanup"]}{{{{"cleanup<br/>running<br/>[all_done]"}}}}' in text
    assert f'{ids["transform"]}["transform<br/>failed"]' in text


def test_mermaid_without_statuses_has_no_classes(snapshot: dict) -> None:
    text = render(snapshot, None, "mermaid")
    assert "classDef" not in text and "flowchart TD" in text
    assert '["extract"]' in text


def test_mermaid_escapes_labels() -> None:
    snap = {"format": 1, "workflow": "w", "steps": {"a": {"after": [], "trigger": "all_success"}}, "order": ["a"]}
    text = render(snap, {"a": '<b>"x"</b>'}, "mermaid")
    assert "<b>" not in text and '"x"' not in text
    assert "#lt;b#gt;#quot;x#quot;" in text


def test_statuses_for_unknown_steps_rejected(snapshot: dict) -> None:
    with pytest.raises(ValueError, match="unknown steps: 'nope'"):
        render(snapshot, {"nope": "running"}, "text")


def test_unknown_format(snapshot: dict) -> None:
    with pytest.raises(ValueError) as exc:
        render(snapshot, None, "jpeg")
    for fmt in FORMATS:
        assert fmt in str(exc.value)


@pytest.mark.skipif(not (HAVE_DOT or HAVE_MPL), reason="neither Graphviz 'dot' nor matplotlib is installed")
def test_svg(snapshot: dict) -> None:
    svg = render(snapshot, STATUSES, "svg")
    assert isinstance(svg, str)
    assert "<svg" in svg and svg.rstrip().endswith("</svg>")
    if HAVE_DOT:
        for step in STATUSES:
            assert step in svg
        assert STATUS_COLOURS["failed"] in svg


@pytest.mark.skipif(not (HAVE_DOT or HAVE_MPL), reason="neither Graphviz 'dot' nor matplotlib is installed")
def test_png(snapshot: dict) -> None:
    png = render(snapshot, STATUSES, "png")
    assert isinstance(png, bytes)
    assert png.startswith(b"\x89PNG\r\n\x1a\n")


@pytest.mark.skipif(not HAVE_MPL, reason="matplotlib not installed (the optional 'graph' extra)")
def test_svg_and_png_with_matplotlib_when_dot_missing(snapshot: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda *args, **kwargs: None)
    svg = render(snapshot, STATUSES, "svg")
    assert isinstance(svg, str) and "<svg" in svg
    assert render(snapshot, STATUSES, "png").startswith(b"\x89PNG")


@pytest.mark.parametrize("fmt", ["svg", "png"])
def test_clear_error_without_dot_or_matplotlib(snapshot: dict, monkeypatch: pytest.MonkeyPatch, fmt: str) -> None:
    monkeypatch.setattr(shutil, "which", lambda *args, **kwargs: None)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` raise ImportError
    with pytest.raises(RenderError) as exc:
        render(snapshot, STATUSES, fmt)
    assert str(exc.value) == (
        f"rendering {fmt} needs Graphviz's 'dot' (apt install graphviz) or matplotlib: "
        f"install pq[graph] (pip install -e '{Path(__file__).resolve().parents[2]}[graph]')"
    )
    assert isinstance(exc.value, FlowError) and isinstance(exc.value, RuntimeError)


def test_failing_dot_is_reported(snapshot: dict, monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    fake = tmp_path / "dot"
    fake.write_text("#!/bin/sh\necho 'syntax error in line 1' >&2\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setattr(shutil, "which", lambda *args, **kwargs: str(fake))
    with pytest.raises(RenderError, match=r"Graphviz 'dot' failed \(exit 3\): syntax error in line 1"):
        render(snapshot, None, "svg")
