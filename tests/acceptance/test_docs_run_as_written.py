"""Every shell block and Python snippet of README.md and docs/*.md runs as written.

The blocks of one document run in order in a fresh directory of their own, the project's venv
first on PATH (``python``, ``perfectqueue``... are this checkout's). A shell block runs in bash and
stops at the first command that fails; a Python block runs as a script. What a block cannot do in a
test is said in the markdown, in an HTML comment just before it:

- ``<!-- doc-test: skip (why) -->``: not run (an install, a server until Ctrl-C, a 70-minute benchmark);
- ``<!-- doc-test: file NAME -->``: the Python block is written to NAME (a module the next blocks use);
- ``<!-- doc-test: burst -->``: ``perfectqueue/pqflow/perfectsched run`` get ``--burst`` (they end once
  nothing is due instead of at Ctrl-C);
- ``<!-- doc-test: background "TEXT"... -->``: a command holding TEXT runs until stopped: it is started,
  must still be running after 2 s, and is stopped.

A command commented ``# exit code N`` must exit N.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = ["README.md", "ARCHITECTURE.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\s*$")
DIRECTIVE = re.compile(r"^<!--\s*doc-test:\s*(\w+)\s*(.*?)\s*-->\s*$")
EXIT_CODE = re.compile(r"#\s*exit code (\d+)")
RUN_COMMAND = re.compile(r"^(perfectqueue|pqflow|perfectsched) run\b")
LANGUAGES = {"sh": "sh", "bash": "sh", "shell": "sh", "python": "python"}


@dataclass
class Block:
    language: str
    line: int
    text: str
    directive: str = ""
    argument: str = ""
    background: list[str] = field(default_factory=list)


def blocks_of(path: Path) -> list[Block]:
    """The shell and Python blocks of a markdown file, each with the directive just before it."""
    found: list[Block] = []
    lines = path.read_text().splitlines()
    i, directive = 0, None
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence is None:
            d = DIRECTIVE.match(lines[i])
            directive = d if d is not None else (directive if not lines[i].strip() else None)
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        language = LANGUAGES.get(fence.group(1))
        if language is not None:
            name, arg = (directive.group(1), directive.group(2)) if directive else ("", "")
            block = Block(language, i + 1, "\n".join(lines[i + 1 : end]) + "\n", name, arg)
            block.background = re.findall(r'"([^"]+)"', arg) if name == "background" else []
            found.append(block)
        i, directive = end + 1, None
    return found


def _command_of(line: str) -> str:
    """A shell line without its trailing comment."""
    return shlex.join(shlex.split(line, comments=True))


def shell_script(block: Block) -> str:
    out = ["set -eo pipefail"]
    for n, line in enumerate(block.text.splitlines()):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        command = line
        if block.directive == "burst" and RUN_COMMAND.match(line):
            command = _command_of(line) + " --burst"
        if any(text in line for text in block.background):
            log = f".doc-test-{block.line}-{n}.log"
            out.append(f"{line.split(' #')[0]} > {log} 2>&1 & bg=$!; sleep 2")
            out.append(f'kill -0 $bg || {{ cat {log} >&2; echo "ended at once: {n}" >&2; exit 97; }}')
            out.append("kill $bg; wait $bg || true")
            continue
        expected = EXIT_CODE.search(line)
        if expected is not None:
            code, command = expected.group(1), _command_of(line)
            out.append(f"if {command}; then echo 'exit 0, expected {code}: line {n + 1}' >&2; exit 98; else rc=$?; fi")
            out.append(f'[ $rc -eq {code} ] || {{ echo "exit $rc, expected {code}: line {n + 1}" >&2; exit 98; }}')
            continue
        out.append(command)
    return "\n".join(out) + "\n"


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PQ_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def run_block(block: Block, where: Path, document: str) -> None:
    if block.directive == "file":
        assert block.language == "python", (document, block.line)
        (where / block.argument).write_text(block.text)
        return
    if block.language == "python":
        script = where / f".doc-test-{block.line}.py"
        script.write_text(block.text)
        argv = ["python", str(script)]
    else:
        argv = ["bash", "-c", shell_script(block)]
    proc = subprocess.run(argv, cwd=where, env=_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, (
        f"{document}:{block.line}: exit {proc.returncode}\n{block.text}\n--- stdout\n{proc.stdout[-3000:]}"
        f"\n--- stderr\n{proc.stderr[-3000:]}"
    )


@pytest.mark.timeout(900)  # the README's tour: some thirty commands, four workers, on a loaded machine
@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_block_of_a_document_runs_as_written(document, tmp_path):
    blocks = [b for b in blocks_of(ROOT / document) if b.directive != "skip"]
    for block in blocks:
        run_block(block, tmp_path, document)


def test_every_skipped_block_says_why():
    for document in DOCUMENTS:
        for block in blocks_of(ROOT / document):
            if block.directive == "skip":
                assert re.fullmatch(r"\(.+\)", block.argument), (document, block.line, block.argument)
            assert block.directive in ("", "skip", "file", "burst", "background"), (document, block.line)


def test_the_readme_runs_its_tour():
    """The README's tour is run, not skipped: its worker, workflow and cron blocks."""
    run = [b for b in blocks_of(ROOT / "README.md") if b.directive != "skip"]
    assert sum(b.directive == "burst" for b in run) >= 4 and {"app.py", "flows.py"} <= {
        b.argument for b in run if b.directive == "file"
    }
