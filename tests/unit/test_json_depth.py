"""How deep JSON text nests, told without parsing it (``validate.json_nested_deeper``): the CLI
refuses DATA deeper than task data may be before a parser recurses into it (a RecursionError there
let objects finalized meanwhile print to stderr beside the one error line)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from queue_core.cli.main import cli
from queue_core.rules.validate import MAX_DATA_DEPTH, json_nested_deeper


def _nested(depth: int) -> str:
    data: dict = {}
    for _ in range(depth - 1):
        data = {"a": data}
    return json.dumps(data)


@pytest.mark.parametrize(
    ("text", "limit", "deeper"),
    [
        ('{"a": "[[[[{{{{"}', 1, False),  # brackets in strings are text
        ('{"a": "\\"[[[["}', 1, False),  # an escaped quote does not end the string
        ('{"a": "\\\\", "b": [[1]]}', 2, True),  # an escaped backslash does
        ('{"a": {}}', 1, True),
        ('{"a": {}}', 2, False),
        ("[" * 1000 + "]" * 1000, MAX_DATA_DEPTH, True),
        ("", 0, False),
    ],
)
def test_depth_is_told_from_the_brackets_outside_strings(text, limit, deeper):
    assert json_nested_deeper(text, limit) is deeper


def test_the_limit_is_that_of_task_data():
    assert not json_nested_deeper(_nested(MAX_DATA_DEPTH))
    assert json_nested_deeper(_nested(MAX_DATA_DEPTH + 1))


def test_the_cli_refuses_data_nested_past_the_recursion_limit_in_one_line(tmp_path):
    url = f"sqlite:///{tmp_path}/pq.db"
    assert CliRunner().invoke(cli, ["init", "-D", url]).exit_code == 0
    deep = "[" * 100_000 + "]" * 100_000
    result = CliRunner().invoke(cli, ["submit", "k", "t", '{"a": ' + deep + "}", "-D", url])
    assert result.exit_code != 0
    assert result.stderr == f"perfectqueue: error: DATA is nested deeper than {MAX_DATA_DEPTH} levels\n"
    ok = CliRunner().invoke(cli, ["submit", "k", "t", _nested(MAX_DATA_DEPTH), "-D", url])
    assert ok.exit_code == 0, ok.stderr
