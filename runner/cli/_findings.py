"""The findings table of `verify` and `report` (a snapshot's checks, a sweep's), with the commands findings name printed
under it, whole.

rich folds a table cell's text to its column: a command quoted in a finding (`'genrun execute 20261203T…-tiny-3fa2c1'`,
a sweep's full path) came out cut mid-id at 80 columns and could not be copied. The table keeps the command's words
and each command is printed whole under it, once, on a line of its own that rich never wraps (the terminal may; a copy
is still one line).
"""

import re
from collections.abc import Iterable
from typing import Any

from rich.table import Table
from rich.text import Text

from ._output import stdout_console

STATUS_STYLE = {"PASS": "green", "WARN": "yellow", "FAIL": "bold red", "SKIP": "dim"}
_QUOTED_COMMAND = re.compile(r"'(genrun(?: [a-z][a-z-]*)+)( [^a-z'\n][^'\n]*)'")
"""A quoted command with arguments: its words (`genrun sweep execute`), then the rest (an id, a path, options, a
placeholder such as `SNAPSHOT`; none of which starts with a lower-case letter)."""


def commands_out_of(message: str) -> tuple[str, list[str]]:
    """The message with each quoted command's arguments moved out (`'genrun execute …' (whole under the table)`), and
    the commands whole."""
    return (_QUOTED_COMMAND.sub(r"'\1 …' (whole under the table)", message),
            [words + rest for words, rest in _QUOTED_COMMAND.findall(message)])


def print_findings(title: str, findings: Iterable[Any]) -> None:
    """One row per finding (`name`, `status`, `message`), then the commands the messages named."""
    table = Table(title=Text(title), title_justify="left")
    table.add_column("check", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("finding", overflow="fold")
    commands: list[str] = []
    for finding in findings:
        message, named = commands_out_of(finding.message)
        commands += named
        # Text, not str: messages quote request tables ("[generation] ...") that rich would take for markup
        table.add_row(finding.name, Text(finding.status, style=STATUS_STYLE[finding.status]), Text(message))
    stdout_console.print(table)
    for command in dict.fromkeys(commands):  # once each, in the order the findings named them
        stdout_console.print(f"  {command}", markup=False, highlight=False, soft_wrap=True)
