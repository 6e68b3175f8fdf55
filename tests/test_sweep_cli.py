"""The sweep subcommands as a user types them, through the real CLI on one small local sweep (2 items, 1 worker; item 1
raises in its entry point, so the sweep has a failed item to show).

A planned sweep is named as every other command names a snapshot: a directory, an id or a unique id
prefix in the store; run-only commands given a sweep name the command that lists its items.
"""

import json
import shlex
import shutil
from pathlib import Path
from typing import NamedTuple

import pytest

from _sweep_helpers import only_sweep, read, write_sweep
from conftest import CliRun, run_cli

ROWS = [{"input.prompt": "count down from 3 :"}, {"input.prompt": "count down from 4 :", "entrypoint.callable": "sweep_entries:raise_now"}]
FAILED = 1


class Executed(NamedTuple):
    """A sweep planned into `root/store` and executed by its id, both from `root` as the current directory."""

    root: Path
    sweep: Path
    planned: CliRun
    executed: CliRun


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory) -> Executed:
    root = tmp_path_factory.mktemp("sweep-cli")
    sweep_file = write_sweep(root / "in", rows=ROWS, workers=1, max_new_tokens=8)
    planned = run_cli("sweep", "plan", sweep_file, "--store", "store", cwd=root)
    assert planned.returncode == 0, planned.stderr
    sweep = only_sweep(root / "store")
    executed = run_cli("sweep", "execute", sweep.name, "--store", "store", cwd=root)
    return Executed(root, sweep, planned, executed)


def store_names(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "store").iterdir())


# -- naming a sweep ---------------------------------------------------------------------------------------------------


def test_execute_takes_the_sweep_by_its_id_in_the_store(executed: Executed) -> None:
    assert executed.executed.returncode == 1, executed.executed.stderr  # an item failed
    result = read(executed.sweep / "sweep-result.json")
    assert result["status"] == "completed" and result["counts"] == {"failed": 1, "succeeded": 1}


@pytest.mark.parametrize("action", ["execute", "resume"])
def test_an_ambiguous_or_unknown_sweep_id_is_refused_naming_the_store(executed: Executed, action: str) -> None:
    before = store_names(executed.root)
    prefix = executed.sweep.name[:4]  # the timestamp every id of this store starts with: the sweep's and its items'
    ambiguous = run_cli("sweep", action, prefix, "--store", "store", cwd=executed.root)
    assert ambiguous.returncode == 1 and f"snapshot '{prefix}' is ambiguous in store store: 3 ids start with it" in ambiguous.stderr
    unknown = run_cli("sweep", action, "no-such-sweep", "--store", "store", cwd=executed.root)
    assert unknown.returncode == 1, unknown.stderr
    assert "'no-such-sweep' is neither a directory nor the id (or id prefix) of a snapshot in store store" in unknown.stderr
    assert store_names(executed.root) == before


@pytest.mark.parametrize("argv", [["diff", "{sweep}", "{sweep}"], ["rerun", "{sweep}"], ["export", "{sweep}", "--mlflow"]])
def test_run_only_commands_given_a_sweep_name_the_command_that_lists_its_items(executed: Executed, argv: list[str]) -> None:
    """`verify SWEEP` shows only the items needing attention; `ls --sweep` in the sweep's store lists every item id."""
    before = store_names(executed.root)
    refused = run_cli(*(a.format(sweep=f"store/{executed.sweep.name}") for a in argv), cwd=executed.root)
    listing = f"genrun ls --store store --sweep {executed.sweep.name}"
    assert refused.returncode == 1 and f"('{listing}' lists them)" in refused.stderr, refused.stderr
    assert "genrun verify" not in refused.stderr and store_names(executed.root) == before
    listed = run_cli(*shlex.split(listing)[1:], cwd=executed.root)
    item_ids = [item["snapshot_id"] for item in read(executed.sweep / "sweep-result.json")["items"]]
    assert listed.returncode == 0 and len(item_ids) == 2 and all(i in listed.stdout for i in item_ids), listed.stdout


# -- what the sweep commands print ------------------------------------------------------------------------------------


def test_paths_are_shown_relative_to_the_current_directory_as_run_shows_them(executed: Executed) -> None:
    shown = f"store/{executed.sweep.name}"
    assert f"planned 2 items in {shown}\n" in executed.planned.stderr
    assert f"sweep completed: 1 failed, 1 succeeded  ({shown})" in executed.executed.stderr
    assert str(executed.root) not in executed.planned.stderr + executed.executed.stderr


@pytest.mark.parametrize("command", ["verify", "report"])
def test_failed_and_lost_items_are_listed_as_words_not_python_lists(executed: Executed, command: str) -> None:
    """On one line even at 80 columns (rich broke it before "none")."""
    shown = run_cli(command, executed.sweep, env={"COLUMNS": "80"})
    assert f"lost attempts (kept as incomplete snapshots): 0; failed items: {FAILED}; lost items: none" in shown.stdout, shown.stdout
    assert "[]" not in shown.stdout


def test_the_sweep_plot_has_a_legend_of_the_item_statuses(executed: Executed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bars are coloured by status; without a legend the colours said nothing (issue 41, item 11)."""
    import matplotlib.pyplot as plt

    closed = []
    monkeypatch.setattr(plt, "close", closed.append)  # the figure, as written, instead of freed
    assert run_cli("report", executed.sweep, "--plot", tmp_path / "sweep.png").returncode == 0
    (figure,) = closed
    legend = figure.axes[0].get_legend()
    statuses = {item["status"] for item in json.loads(run_cli("verify", executed.sweep, "--json").stdout)["items"]}
    assert legend is not None and {t.get_text() for t in legend.get_texts()} == statuses


def test_report_plot_of_a_sweep_is_written_and_said_as_a_runs_is(executed: Executed, tmp_path: Path) -> None:
    """`report SWEEP --plot FILE`: a real PNG, `wrote FILE` on stderr as for one run, and its path in the JSON."""
    plot = tmp_path / "sweep.png"
    shown = run_cli("report", executed.sweep, "--plot", plot)
    assert shown.returncode == 0, shown.stderr
    assert plot.read_bytes().startswith(b"\x89PNG") and f"wrote {plot}" in shown.stderr and "plot written to" not in shown.stdout
    plot.unlink()
    as_json = run_cli("report", executed.sweep, "--plot", plot, "--json")
    assert as_json.returncode == 0 and json.loads(as_json.stdout)["plot"] == str(plot) and plot.is_file(), as_json.stderr


def test_items_needing_attention_keep_their_words_whole_at_any_width(executed: Executed) -> None:
    """Wide enough: a table whose cells are whole. Narrower (80 columns here): one item per line, the id on its own line,
    nothing folded (a squeezed table read 'succ/eede/d', 'FAI/L' and cut ids)."""
    failed = next(i for i in read(executed.sweep / "sweep-result.json")["items"] if i["status"] == "failed")
    wide = run_cli("verify", executed.sweep, env={"COLUMNS": "200"}).stdout.split("items needing attention", 1)[1]
    header = next(line for line in wide.splitlines() if "item" in line and "status" in line)
    assert all(f" {word} " in header for word in ("item", "status", "stop", "units", "WARN", "FAIL", "snapshot")), wide
    row = next(line for line in wide.splitlines() if failed["attempts"][-1] in line)
    assert f"│ {FAILED}    │ failed │" in row, wide
    narrow = run_cli("verify", executed.sweep, env={"COLUMNS": "80"}).stdout.split("items needing attention", 1)[1]
    lines = narrow.splitlines()
    at = next(n for n, line in enumerate(lines) if line.startswith(f"  item {FAILED}: failed, stop -, "))
    assert lines[at + 1] == f"    {failed['attempts'][-1]}", narrow
    assert "┃" not in narrow.split("items (")[0], narrow  # no table squeezed into 80 columns


def test_a_copied_store_executes_its_own_items_and_leaves_the_original_alone(tmp_path: Path) -> None:
    """`sweep-plan.json` records the store the sweep was planned into; a copy of that store (moved, or taken to another
    machine) runs the items it holds: the original's stay planned, untouched, and the copy verifies."""
    sweep_file = write_sweep(tmp_path / "in", rows=ROWS[:1], workers=1, max_new_tokens=8)
    original = tmp_path / "original"
    assert run_cli("sweep", "plan", sweep_file, "--store", original).returncode == 0
    copy = tmp_path / "copy"
    shutil.copytree(original, copy, symlinks=True)
    sweep = only_sweep(copy)
    assert read(sweep / "sweep-plan.json")["store"] == str(original)
    before = {p.relative_to(original): p.read_bytes() for p in original.rglob("*") if p.is_file()}

    executed = run_cli("sweep", "execute", sweep)
    assert executed.returncode == 0, executed.stderr
    item = read(sweep / "sweep-result.json")["items"][0]["snapshot_id"]
    assert (copy / item / "manifest-sha256.txt").is_file() and (copy / item / "result.json").is_file()
    assert {p.relative_to(original): p.read_bytes() for p in original.rglob("*") if p.is_file()} == before
    assert not (original / item / "manifest-sha256.txt").exists()
    assert run_cli("verify", sweep).returncode == 0


def test_sweep_lines_keep_a_long_path_whole_at_80_columns_and_quiet_prints_the_sweep_alone(tmp_path: Path) -> None:
    """The sweep's own lines name its directory: never broken mid-path on a narrow terminal (a copied path must work);
    `--quiet` leaves stdout to the sweep's directory alone, as `run -q` does for a snapshot."""
    sweep_file = write_sweep(tmp_path / "in", rows=ROWS[:1], workers=1, max_new_tokens=8)
    store = tmp_path / ("a-store-whose-path-is-longer-than-eighty-columns-" * 2)
    planned = run_cli("sweep", "plan", sweep_file, "--store", store, env={"COLUMNS": "80"})
    assert planned.returncode == 0, planned.stderr
    sweep = only_sweep(store)
    assert f"planned 1 item in {sweep}" in planned.stderr.splitlines(), planned.stderr
    quiet = run_cli("sweep", "plan", sweep_file, "--store", store, "--quiet", env={"COLUMNS": "80"})
    assert quiet.returncode == 0 and quiet.stderr == ""
    (second,) = [p for p in store.iterdir() if p.is_dir() and p != sweep and not p.name.startswith(".") and "-0000-" not in p.name]
    assert quiet.stdout == f"{second}\n"
