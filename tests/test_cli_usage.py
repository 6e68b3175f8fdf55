"""The command line's own usage: an unknown option is reported by its subcommand (its usage, the closest option), and
every subcommand's --help names what its options take."""

import argparse

import pytest

from conftest import run_cli
from genrun.runner.cli import build_parser


@pytest.mark.parametrize(("argv", "said"), [
    (["verify", "x", "--stirct"], "genrun verify: error: unrecognized arguments: --stirct (did you mean --strict?)"),
    (["ls", "--limt", "3"], "genrun ls: error: unrecognized arguments: --limt (did you mean --limit?) 3"),
    (["ls", "--zzqqxxy"], "genrun ls: error: unrecognized arguments: --zzqqxxy"),  # nothing close: nothing guessed
    (["--stirct", "ls"], "genrun: error: unrecognized arguments: --stirct"),  # before the command: the top level's
])
def test_an_unknown_option_is_reported_by_its_subcommand(argv: list[str], said: str) -> None:
    refused = run_cli(*argv)
    assert refused.returncode == 2 and refused.stdout == "", refused.stderr
    assert refused.stderr.splitlines()[-1] == said  # the whole line: nothing guessed where nothing is close
    command = argv[0] if not argv[0].startswith("-") else None
    usage = refused.stderr.split("\n")[0]
    assert usage.startswith(f"usage: genrun {command} " if command else "usage: genrun [-h]"), usage


def test_every_store_and_allowed_signers_option_says_what_it_takes_and_its_default() -> None:
    subcommands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    options = {(name, option): action for name, parser in subcommands.items() for action in parser._actions for option in action.option_strings}
    stores = {name: action for (name, option), action in options.items() if option == "--store"}
    signers = {name: action for (name, option), action in options.items() if option == "--allowed-signers"}
    assert {"ls", "gc", "run", "verify", "report"} <= set(stores) and {"ls", "run", "verify", "report", "signoff"} <= set(signers)
    assert {name: a.metavar for name, a in stores.items() if a.metavar != "DIR"} == {}
    assert {name: a.metavar for name, a in signers.items() if a.metavar != "FILE"} == {}
    assert [name for name, a in signers.items() if "$GENRUN_ALLOWED_SIGNERS, else git's" not in (a.help or "")] == []
