"""`genrun ls`: filters, sort and limit over a store; columns readable at 80 and 120 columns and piped, COLUMNS respected."""

import io
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from _store_helpers import Signers, make_run, make_signers, make_sweep, sign
from conftest import run_cli

from genrun.runner.cli import main
from genrun.schemas import layout

LONG_SIGNER = "a.reviewer.with.a.very.long.address@an-evaluation-team.example.com"


@pytest.fixture(scope="module")
def signers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Signers]:
    """Keys of bob and of a long-named signer, trusted by every `ls` of this module (`GENRUN_ALLOWED_SIGNERS`)."""
    made = make_signers(tmp_path_factory.mktemp("keys"), ["bob@example.com", LONG_SIGNER])
    with pytest.MonkeyPatch.context() as patched:
        patched.setenv("GENRUN_ALLOWED_SIGNERS", str(made.allowed))
        yield made


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, signers: Signers) -> Path:
    root = tmp_path_factory.mktemp("ls") / "store"
    make_run(root, "eval-a", reasons=("eos", "max_length"), generated=120)
    make_run(root, "eval-b", status="failed", reasons=("exception",), generated=3, backend="diffusers")
    items = [make_run(root, "item", reasons=(r,)) for r in ("eos", "max_length", "eos")]
    make_sweep(root, items, name="nightly")
    signed = make_run(root, "chat", reasons=("stop_string",), generated=40)
    for by in ("bob@example.com", LONG_SIGNER):
        sign(signed, by, signers)
    make_run(root, "draft", seal=False)
    return root


def _ids(store: Path, *args: str) -> list[str]:
    listed = run_cli("ls", "--store", store, "--json", *args)
    assert listed.returncode == 0, listed.stderr
    return [row["id"] for row in orjson.loads(listed.stdout)["snapshots"]]


def _named(store: Path, name: str) -> list[str]:
    return sorted(p.name for p in store.iterdir() if f"-{name}-" in p.name)


def _stopped_by(store: Path, reason: str) -> list[str]:
    """Read from the files themselves, not through ls."""
    return sorted(p.name for p in store.iterdir() if (p / layout.STOP).is_file() and reason in (p / layout.STOP).read_text())


# -- filters --------------------------------------------------------------------------------------------------------


def test_filters_by_state_stop_reason_backend_and_name(store: Path) -> None:
    assert _ids(store, "--state", "failed") == _named(store, "eval-b")
    assert _ids(store, "--state", "incomplete") == _named(store, "draft")
    assert _ids(store, "--state", "sweep") == _named(store, "nightly")
    sealed = sorted(p.name for p in store.iterdir() if (p / layout.MANIFEST).is_file())  # from the files, not through ls
    assert sorted(_ids(store, "--state", "sealed")) == sealed and len(sealed) == 7  # every status, the sweep too; not the draft
    assert sorted(_ids(store, "--stop-reason", "max_length")) == _stopped_by(store, "max_length") and len(_stopped_by(store, "max_length")) == 2
    assert _ids(store, "--backend", "diffusers") == _named(store, "eval-b")
    assert sorted(_ids(store, "--name", "eval-*")) == sorted(_named(store, "eval-a") + _named(store, "eval-b"))
    assert _ids(store, "--name", "eval-a", "--state", "failed") == []  # filters combine


def test_filters_by_sign_off_and_sweep(store: Path) -> None:
    signed = _named(store, "chat")
    assert _ids(store, "--signed-by", "bob@example.com") == signed
    assert signed[0] not in _ids(store, "--unsigned") and len(_ids(store, "--unsigned")) == 7
    items = _named(store, "item")
    assert sorted(_ids(store, "--sweep", _named(store, "nightly")[0])) == items  # in sweep order
    assert sorted(_ids(store, "--sweep", _named(store, "nightly")[0], "--stop-reason", "max_length")) == sorted(set(items) & set(_stopped_by(store, "max_length")))


def test_time_filters_sort_and_limit(store: Path) -> None:
    every = _ids(store)
    assert _ids(store, "--since", "1d") == every  # all made just now
    assert _ids(store, "--until", "2000-01-01") == []
    assert _ids(store, "--since", "2000-01-01T00:00", "--limit", "2") == every[-2:]  # the newest, as a terminal's default
    assert _ids(store, "--sort", "generated", "--reverse", "--limit", "1") == _named(store, "eval-a")
    assert _ids(store, "--reverse", "--limit", "1") == every[-1:]
    assert _ids(store, "--limit", "0") == every  # 0: no limit


def test_an_unknown_state_is_a_usage_error_naming_the_states(store: Path) -> None:
    refused = run_cli("ls", "--store", store, "--state", "bogus")
    message = " ".join(refused.stderr.split())
    assert refused.returncode == 2 and refused.stdout == "", refused.stderr
    assert "genrun ls: error: argument --state: invalid choice: 'bogus'" in message
    assert all(f"'{state}'" in message for state in ("succeeded", "failed", "incomplete", "sweep")), message


def test_a_stop_reason_no_snapshot_has_names_the_reasons_there_are(store: Path) -> None:
    typo = run_cli("ls", "--store", store, "--stop-reason", "eso")
    assert typo.returncode == 0 and typo.stdout.startswith("0 of 8 snapshot(s)"), typo.stderr
    assert "note: no snapshot stopped by 'eso'; reasons here: eos, exception, max_length, stop_string" in typo.stderr
    among_failed = run_cli("ls", "--store", store, "--state", "failed", "--stop-reason", "eos")  # the reasons of the rows the other filters keep
    assert "note: no snapshot stopped by 'eos'; reasons here: exception" in among_failed.stderr
    found = run_cli("ls", "--store", store, "--stop-reason", "stop_string")
    assert found.returncode == 0 and "note:" not in found.stderr


def test_an_explicit_limit_keeps_the_rows_the_default_keeps(store: Path) -> None:
    every = _ids(store)
    assert _ids(store, "--limit", "3") == every[-3:]  # the newest, still in time order
    assert _ids(store, "--reverse", "--limit", "3") == every[::-1][:3]
    by_name = _ids(store, "--sort", "name")
    assert _ids(store, "--sort", "name", "--limit", "3") == by_name[:3]  # the first of a --sort

class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_the_newest_rows_and_a_line_saying_how_to_see_all(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from genrun.runner.cli import ls

    monkeypatch.setattr(ls, "TERMINAL_ROWS", 3)
    monkeypatch.setenv("COLUMNS", "200")
    every = _ids(store)

    def on_terminal(*args: str) -> list[str]:
        screen = _Terminal()
        with monkeypatch.context() as patched:
            patched.setattr(sys, "stdout", screen)
            assert main(["ls", "--store", str(store), *args]) == 0
        return screen.getvalue().splitlines()

    lines = on_terminal()
    assert lines[0] == f"3 of {len(every)} snapshot(s) in {store}"
    assert [line.split()[-1] if line.startswith("  └") else line.split()[0] for line in lines[2:5]] == every[-3:]  # the newest
    assert lines[5] == f"… {len(every) - 3} earlier row(s) not shown: --limit 0 lists every one (so does piping)"
    newest_first = on_terminal("--reverse")
    assert [line.split()[0] for line in newest_first[2:5]] == every[::-1][:3]  # the newest again, newest first
    assert newest_first[5] == f"… {len(every) - 3} later row(s) not shown: --limit 0 lists every one (so does piping)"
    assert len(on_terminal("--limit", "0")) == len(every) + 2  # the title, the header, every row, no "not shown" line
    assert len(on_terminal("--limit", "4")) == 4 + 2


@pytest.mark.parametrize(("args", "message"), [
    (["--since", "last tuesday"], "--since 'last tuesday' is not a time; give a date (2026-11-29)"),
    (["--limit", "-1"], "--limit -1: must be 0 (every row) or more"),
    (["--sweep", "nope"], "--sweep 'nope' is not the id (or id prefix) of a sweep"),
])
def test_bad_filter_values_are_refused_naming_the_fix(store: Path, args: list[str], message: str) -> None:
    refused = run_cli("ls", "--store", store, *args)
    assert refused.returncode == 2 and message in " ".join(refused.stderr.split()), refused.stderr  # a usage error, as argparse's


# -- columns --------------------------------------------------------------------------------------------------------


def _lines(store: Path, columns: str | None) -> tuple[list[str], str]:
    env = {"COLUMNS": columns}
    listed = run_cli("ls", "--store", store, env=env)
    assert listed.returncode == 0, listed.stderr
    return listed.stdout.splitlines(), listed.stderr


def test_piped_a_long_sign_off_never_widens_every_line(store: Path) -> None:
    lines, _ = _lines(store, None)
    header, rows = lines[1], lines[2:]
    assert header.split() == ["id", "state", "sealed", "generated", "stop", "reasons", "sign-offs"]
    assert len(rows) == 8 and all(p.name in "\n".join(rows) for p in store.iterdir() if not p.name.startswith("."))
    widths = {len(line) for line in rows if "accept" not in line}
    signed = next(line for line in rows if "accept" in line)
    assert LONG_SIGNER not in signed and signed.endswith("…")  # cut; --json has it whole
    assert len(signed) <= max(widths) + 40


@pytest.mark.parametrize("columns", ["80", "120"])
def test_columns_respected_even_when_piped(store: Path, columns: str) -> None:
    lines, err = _lines(store, columns)
    ids = [p.name for p in store.iterdir() if not p.name.startswith(".")]
    assert all(i in "\n".join(lines) for i in ids)  # ids are never cut
    assert all(len(line) <= int(columns) for line in lines[1:]), [len(line) for line in lines]
    header = lines[1].split()
    if columns == "120":  # at 120 the sign-offs stay (cut), at 80 they are left out and ls says so
        assert header[-1] == "sign-offs" and "left out" not in err
    else:
        assert "sign-offs" not in header and "left out to fit 80 columns" in err


def test_a_real_terminal_of_80_columns(store: Path) -> None:
    narrow = subprocess.run(
        ["script", "-qec", f"{sys.executable} -m genrun.runner.cli ls --store {store}", "/dev/null"],
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "80", "LINES": "40", "TERM": "xterm", "GENRUN_CACHE_DIR": os.environ["GENRUN_CACHE_DIR"]},
        capture_output=True, text=True, timeout=120,
    )
    screen = re.sub(r"\x1b\[[0-9;]*m", "", narrow.stdout).replace("\r", "")
    assert narrow.returncode == 0, screen
    table = [line for line in screen.splitlines() if line.startswith(("id ", "2", "  └"))]
    assert len(table) == 9 and all(len(line) <= 80 for line in table), table
