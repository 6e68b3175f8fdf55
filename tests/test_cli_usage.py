"""The command line's own usage: an unknown option is reported by its subcommand (its usage, the closest option), and
every subcommand's --help names what its options take."""

import pytest

from conftest import run_cli


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
