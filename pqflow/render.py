"""Drawing a workflow snapshot, optionally coloured by step status.

:func:`render` returns ``str`` for ``text``, ``dot``, ``mermaid`` and ``svg`` (SVG is
text) and ``bytes`` for ``png``. SVG/PNG use Graphviz's ``dot`` when it is on PATH,
else matplotlib when importable, else raise :class:`pqflow.errors.RenderError`.
Steps missing from ``statuses`` are drawn as ``pending``.
"""

from __future__ import annotations

import io
import shutil
import subprocess
from collections.abc import Mapping
from typing import Any

import networkx as nx

from pqflow.dag import DEFAULT_TRIGGER, snapshot_graph
from pqflow.errors import RenderError
from queue_core import extras

__all__ = ["FORMATS", "STATUS_COLOURS", "render"]

FORMATS = ("text", "dot", "mermaid", "svg", "png")
#: Fill colour per step status (dot, mermaid, matplotlib).
STATUS_COLOURS: dict[str, str] = {
    "pending": "#ffffff",
    "waiting": "#e0e0e0",
    "running": "#8ab4f8",
    "succeeded": "#81c995",
    "failed": "#f28b82",
    "skipped": "#b0b0b0",
    "cancelled": "#fbb463",
}
_UNKNOWN_COLOUR = "#ffffff"
_DOT_TIMEOUT = 60.0
_NO_RENDERER = (
    "rendering {fmt} needs Graphviz's 'dot' (apt install graphviz) or matplotlib: install pq[graph] ("
    + extras.install_hint("matplotlib")
    + ")"
)


def render(
    snapshot: dict[str, Any],
    statuses: Mapping[str, str] | None = None,
    format: str = "text",
    notes: Mapping[str, str] | None = None,
) -> str | bytes:
    """Draw ``snapshot`` in ``format`` (one of :data:`FORMATS`); ``notes``: a line more for some
    steps (a map's item counts)."""
    if format not in FORMATS:
        raise ValueError(f"unknown render format {format!r}; valid formats: {', '.join(FORMATS)}")
    steps = snapshot["steps"]
    unknown = [s for s in (statuses or {}) if s not in steps]
    if unknown:
        raise ValueError(f"statuses name unknown steps: {', '.join(map(repr, unknown))}")
    lines = {name: _note(snapshot, notes or {}, name) for name in steps}
    if format == "text":
        return _text(snapshot, statuses, lines)
    if format == "dot":
        return _dot(snapshot, statuses, lines)
    if format == "mermaid":
        return _mermaid(snapshot, statuses, lines)
    return _image(snapshot, statuses, format, lines)


def _note(snapshot: dict[str, Any], notes: Mapping[str, str], name: str) -> str:
    """ "map over X" for a map step, and the note given for it (its counts)."""
    mapped = snapshot["steps"][name].get("map")
    parts = [f"map over {mapped}"] if mapped else []
    if notes.get(name):
        parts.append(notes[name])
    return ": ".join(parts)


def _status(statuses: Mapping[str, str] | None, step: str) -> str:
    return "pending" if statuses is None else statuses.get(step, "pending")


def _text(snapshot: dict[str, Any], statuses: Mapping[str, str] | None, notes: Mapping[str, str]) -> str:
    steps = snapshot["steps"]
    order: list[str] = snapshot["order"]
    depth: dict[str, int] = {}
    for name in order:
        depth[name] = max((depth[p] + 1 for p in steps[name]["after"]), default=0)
    width = max((len(_status(statuses, s)) for s in order), default=0) + 2
    n = len(order)
    lines = [f"workflow {snapshot['workflow']} ({n} step{'' if n == 1 else 's'})"]
    for name in order:
        spec = steps[name]
        line = ""
        if statuses is not None:
            line = f"[{_status(statuses, name)}]".ljust(width) + " "
        line += "  " * depth[name] + name
        if spec["after"]:
            line += "  <- " + ", ".join(spec["after"])
        if spec["trigger"] != DEFAULT_TRIGGER:
            line += f"  (trigger {spec['trigger']})"
        if notes.get(name):
            line += f"  [{notes[name]}]"
        lines.append(line)
    return "\n".join(lines) + "\n"


def _dot_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _dot(snapshot: dict[str, Any], statuses: Mapping[str, str] | None, notes: Mapping[str, str]) -> str:
    steps = snapshot["steps"]
    out = [
        f"digraph {_dot_quote(snapshot['workflow'])} {{",
        f"  label={_dot_quote(snapshot['workflow'])};",
        "  labelloc=t;",
        '  fontname="Helvetica";',
        "  rankdir=TB;",
        '  node [shape=box, style="rounded,filled", fillcolor="#ffffff", fontname="Helvetica"];',
        '  edge [fontname="Helvetica", fontsize=10];',
    ]
    for name in snapshot["order"]:
        spec = steps[name]
        label = name
        attrs = []
        if statuses is not None:
            status = _status(statuses, name)
            label += f"\n{status}"
            attrs.append(f"fillcolor={_dot_quote(STATUS_COLOURS.get(status, _UNKNOWN_COLOUR))}")
            if status == "skipped":
                attrs.append('style="rounded,filled,dashed"')
        if notes.get(name):
            label += f"\n{notes[name]}"
            attrs.append("peripheries=2")
        if spec["trigger"] != DEFAULT_TRIGGER:
            label += f"\n[{spec['trigger']}]"
            attrs.append("shape=hexagon")
        attrs.insert(0, f"label={_dot_quote(label)}")
        out.append(f"  {_dot_quote(name)} [{', '.join(attrs)}];")
    for name in snapshot["order"]:
        spec = steps[name]
        extra = f" [label={_dot_quote(spec['trigger'])}, style=dashed]" if spec["trigger"] != DEFAULT_TRIGGER else ""
        for parent in spec["after"]:
            out.append(f"  {_dot_quote(parent)} -> {_dot_quote(name)}{extra};")
    out.append("}")
    return "\n".join(out) + "\n"


def _mermaid_text(text: str) -> str:
    for char, code in (("&", "#amp;"), ('"', "#quot;"), ("<", "#lt;"), (">", "#gt;")):
        text = text.replace(char, code)
    return text


def _mermaid(snapshot: dict[str, Any], statuses: Mapping[str, str] | None, notes: Mapping[str, str]) -> str:
    steps = snapshot["steps"]
    ids = {name: f"n{i}" for i, name in enumerate(snapshot["order"])}
    out = ["flowchart TD"]
    for name in snapshot["order"]:
        label = _mermaid_text(name)
        if statuses is not None:
            label += "<br/>" + _mermaid_text(_status(statuses, name))
        if notes.get(name):
            label += "<br/>" + _mermaid_text(notes[name])
        trigger = steps[name]["trigger"]
        if trigger != DEFAULT_TRIGGER:
            out.append(f'  {ids[name]}{{{{"{label}<br/>[{trigger}]"}}}}')
        else:
            out.append(f'  {ids[name]}["{label}"]')
    for name in snapshot["order"]:
        for parent in steps[name]["after"]:
            out.append(f"  {ids[parent]} --> {ids[name]}")
    if statuses is not None:
        used: dict[str, list[str]] = {}
        for name in snapshot["order"]:
            used.setdefault(_status(statuses, name), []).append(ids[name])
        for i, (status, members) in enumerate(used.items()):
            cls = f"st_{status}" if status in STATUS_COLOURS else f"st_other{i}"
            dash = ",stroke-dasharray:5 5" if status == "skipped" else ""
            colour = STATUS_COLOURS.get(status, _UNKNOWN_COLOUR)
            out.append(f"  classDef {cls} fill:{colour},stroke:#333{dash}")
            out.append(f"  class {','.join(members)} {cls}")
    return "\n".join(out) + "\n"


def _image(
    snapshot: dict[str, Any], statuses: Mapping[str, str] | None, fmt: str, notes: Mapping[str, str]
) -> str | bytes:
    dot = shutil.which("dot")
    if dot is not None:
        data = _run_dot(dot, _dot(snapshot, statuses, notes), fmt)
    else:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise RenderError(_NO_RENDERER.format(fmt=fmt)) from None
        data = _matplotlib(snapshot, statuses, fmt, notes)
    return data.decode("utf-8") if fmt == "svg" else data


def _run_dot(dot: str, source: str, fmt: str) -> bytes:
    try:
        proc = subprocess.run(
            [dot, f"-T{fmt}"], input=source.encode("utf-8"), capture_output=True, timeout=_DOT_TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired:
        raise RenderError(f"Graphviz 'dot' did not finish within {_DOT_TIMEOUT:g} s") from None
    except OSError as exc:
        raise RenderError(f"cannot run Graphviz 'dot': {exc}") from exc
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip()
        raise RenderError(f"Graphviz 'dot' failed (exit {proc.returncode}): {err}")
    return proc.stdout


def _matplotlib(
    snapshot: dict[str, Any], statuses: Mapping[str, str] | None, fmt: str, notes: Mapping[str, str]
) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    g = snapshot_graph(snapshot)
    for layer, names in enumerate(nx.topological_generations(g)):
        for name in names:
            g.nodes[name]["layer"] = layer
    pos = nx.multipartite_layout(g, subset_key="layer", align="horizontal")
    pos = {n: (x, -y) for n, (x, y) in pos.items()}  # roots at the top
    layers = max((d["layer"] for _, d in g.nodes(data=True)), default=0) + 1
    widest = max((len(ns) for ns in nx.topological_generations(g)), default=1)
    fig = Figure(figsize=(max(4.0, 1.8 * widest), max(3.0, 1.2 * layers)))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set_axis_off()
    ax.set_title(snapshot["workflow"])
    nodes = list(g.nodes)
    colours = [STATUS_COLOURS.get(_status(statuses, n), _UNKNOWN_COLOUR) for n in nodes]
    nx.draw_networkx_edges(g, pos, ax=ax, arrows=True, node_size=1500)
    nx.draw_networkx_nodes(g, pos, ax=ax, nodelist=nodes, node_color=colours, edgecolors="#333333", node_size=1500)
    labels = {n: "\n".join(x for x in (n, statuses and _status(statuses, n), notes.get(n)) if x) for n in nodes}
    nx.draw_networkx_labels(g, pos, labels=labels, ax=ax, font_size=8)
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, bbox_inches="tight")
    return buf.getvalue()
