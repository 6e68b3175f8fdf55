"""Where a command's store is (`--store`, `$GENRUN_STORE`, `./snapshots`): a store that is a file is refused by every
command alike (usage error, exit 2, nothing written); a store that does not exist is said so by the reading commands."""

from pathlib import Path

import pytest

from conftest import REPO, run_cli


@pytest.fixture()
def a_file(tmp_path: Path) -> Path:
    path = tmp_path / "afile"
    path.write_text("not a store\n")
    return path


@pytest.mark.parametrize("command", [
    ["ls"], ["gc"], ["gc", "--yes"], ["index", "--rebuild"], ["report", "--html", "index.html"],
    ["run", str(REPO / "examples" / "tiny.toml")], ["plan", str(REPO / "examples" / "tiny.toml")],
    ["sweep", "plan", str(REPO / "examples" / "sweep" / "countdowns.toml")], ["verify", "20261129T101500Z"],
], ids=lambda command: command[0] + ("-" + command[1] if command[0] in ("gc", "sweep") and len(command) > 1 else ""))
def test_a_store_that_is_a_file_is_refused_by_every_command(a_file: Path, tmp_path: Path, command: list[str]) -> None:
    refused = run_cli(*command, "--store", a_file, cwd=tmp_path)
    message = " ".join(refused.stderr.split())
    assert refused.returncode == 2, refused.stderr
    assert f"store {a_file} (--store) is a file, not a directory; pass --store DIR or set GENRUN_STORE" in message
    assert a_file.read_text() == "not a store\n" and sorted(p.name for p in tmp_path.iterdir()) == ["afile"]  # nothing written


def test_genrun_store_that_is_a_file_is_named_as_the_setting_it_came_from(a_file: Path, tmp_path: Path) -> None:
    refused = run_cli("ls", cwd=tmp_path, env={"GENRUN_STORE": str(a_file)})
    assert refused.returncode == 2 and f"store {a_file} ($GENRUN_STORE) is a file" in " ".join(refused.stderr.split())


def test_ls_and_gc_of_a_missing_store_say_it_does_not_exist_yet(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    for command in (["ls"], ["ls", "--json"], ["gc"]):
        told = run_cli(*command, "--store", missing)
        assert told.returncode == 0, told.stderr  # nothing to list or collect is a true answer: scripts before the first run keep working
        assert f"note: store {missing} does not exist yet (--store)" in " ".join(told.stderr.split())
    default = run_cli("ls", cwd=tmp_path, env={"GENRUN_STORE": None})
    assert "store snapshots does not exist yet (the default: neither --store nor $GENRUN_STORE is set)" in " ".join(default.stderr.split())
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # reading never creates the store


def test_the_store_page_of_a_missing_store_is_refused_saying_where_genrun_looked(tmp_path: Path) -> None:
    refused = run_cli("report", "--store", tmp_path / "nowhere", "--html", tmp_path / "index.html")
    assert refused.returncode == 1 and f"store {tmp_path / 'nowhere'} does not exist yet (--store)" in " ".join(refused.stderr.split()), refused.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []
