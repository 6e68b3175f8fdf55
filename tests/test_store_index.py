"""The store index is only a cache: `ls` answers the same with it, without it, after it is deleted, damaged, locked,
from a newer genrun, or while runs seal beside it; a sealed snapshot changed after indexing is marked, never shown stale."""

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from _store_helpers import index_file, indexed_ids, make_run, make_sweep, reseal_as_failed
from conftest import run_cli

from genrun.runner.listing import list_store
from genrun.runner.store_index import INDEX_FORMAT

REPO = Path(__file__).resolve().parents[1]


def _ls(store: Path, *args: str) -> dict:
    listed = run_cli("ls", "--store", store, "--json", *args)
    assert listed.returncode == 0, listed.stderr
    return orjson.loads(listed.stdout)


def _store(tmp_path: Path) -> Path:
    store = tmp_path / "store"
    make_run(store, "a", reasons=("eos", "max_length"), generated=12)
    make_run(store, "b", status="failed", reasons=("exception",))
    make_run(store, "c", seal=False)  # incomplete: never cached
    return store


# -- basics ---------------------------------------------------------------------------------------------------------


def test_first_ls_builds_the_index_and_the_second_answers_from_it(tmp_path: Path) -> None:
    store = _store(tmp_path)
    first = list_store(store)
    assert first.from_index == 0 and first.notes == []
    sealed = {r.id for r in first.rows if r.sealed}
    assert indexed_ids(store) == sealed and len(sealed) == 2  # the unsealed one is read from its files every time
    second = list_store(store)
    assert second.from_index == 2 and second.rows == first.rows
    assert second.rows == list_store(store, use_index=False).rows  # the cache answers exactly what the files say
    failed = next(r for r in second.rows if r.state == "failed")
    assert (failed.stop_reasons, failed.backend, failed.unit, failed.name) == ("exception", "transformers", "token", "b")
    assert failed.seal_digest is not None and failed.created is not None and failed.created.endswith("Z")


def test_deleting_the_index_loses_nothing(tmp_path: Path) -> None:
    store = _store(tmp_path)
    before = _ls(store)
    shutil.rmtree(index_file(store).parent)
    assert _ls(store) == before
    assert index_file(store).is_file()  # refilled by that ls
    assert run_cli("index", "--store", store, "--rebuild").returncode == 0
    assert _ls(store) == before == _ls(store, "--no-index")


def test_runs_never_write_the_index_and_a_snapshot_sealed_later_is_listed_sealed(tmp_path: Path) -> None:
    store = tmp_path / "store"
    unsealed = make_run(store, "late", seal=False)
    assert _ls(store)["snapshots"][0]["state"] == "incomplete"
    from genrun.runner.store import seal_snapshot

    seal_snapshot(unsealed)
    row = _ls(store)["snapshots"][0]
    assert (row["state"], row["sealed"]) == ("succeeded", True)
    shutil.rmtree(index_file(store).parent)
    make_run(store, "another")  # a run: plan, execute, seal
    assert not index_file(store).parent.exists()


def test_sweep_membership_comes_from_the_index_too(tmp_path: Path) -> None:
    store = tmp_path / "store"
    items = [make_run(store, f"item{i}") for i in range(3)]
    sweep = make_sweep(store, items)
    cold, warm = list_store(store), list_store(store)
    assert warm.from_index == 4
    for listing in (cold, warm):
        assert [r.id for r in listing.rows] == [sweep.name, *(i.name for i in items)]
        assert [r.sweep for r in listing.rows] == [None, sweep.name, sweep.name, sweep.name]


def test_signoffs_added_after_indexing_are_shown(tmp_path: Path) -> None:
    store = _store(tmp_path)
    target = next(r for r in list_store(store).rows if r.state == "succeeded")
    signed = run_cli("signoff", store / target.id, "--decision", "accept", "--by", "alice@example.com")
    assert signed.returncode == 0, signed.stderr
    row = next(r for r in list_store(store).rows if r.id == target.id)
    assert row.signers == ("alice@example.com",) and "accept" in row.signoffs
    assert run_cli("index", "--store", store, "--rebuild").returncode == 0
    warm = list_store(store)
    assert warm.from_index == 2 and next(r for r in warm.rows if r.id == target.id) == row


def test_a_sign_off_judged_after_indexing_is_kept_in_the_index_and_judged_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Judging a signed record runs ssh-keygen: a new judgement is kept in the index, so the next listing does not judge
    again, and a filter that judges the rows it shows a second time judges each once."""
    import genrun.analysis.signoffs as signoffs
    from genrun.runner.row_filter import RowFilter

    store = _store(tmp_path)
    target = next(r for r in list_store(store).rows if r.state == "succeeded")
    judged: list[str] = []
    real = signoffs.judge_signoffs
    monkeypatch.setattr(signoffs, "judge_signoffs", lambda snapshot, trusted: judged.append(Path(snapshot).name) or real(snapshot, trusted))

    def kept() -> tuple[str, str]:
        with sqlite3.connect(index_file(store)) as db:
            return db.execute("SELECT signers, signoffs FROM rows WHERE id = ?", (target.id,)).fetchone()

    for by in ("alice@example.com", "bob@example.com"):
        signed = run_cli("signoff", store / target.id, "--decision", "accept", "--by", by)
        assert signed.returncode == 0, signed.stderr
        judged.clear()
        shown = list_store(store, keep=RowFilter(signed_by=by)).rows  # every row judged, then the shown one checked
        assert [r.id for r in shown] == [target.id] and judged == [target.id]
        assert kept() == ("\n".join(shown[0].signers), shown[0].signoffs) and shown[0].signers[-1] == by
        judged.clear()
        again = list_store(store)
        assert judged == [] and next(r for r in again.rows if r.id == target.id) == shown[0]
    assert list_store(store).rows == list_store(store, use_index=False).rows


# -- damage ---------------------------------------------------------------------------------------------------------


def test_a_seal_replaced_after_indexing_is_marked_and_read_from_the_files(tmp_path: Path) -> None:
    store = _store(tmp_path)
    list_store(store)
    victim = next(p for p in store.iterdir() if "-a-" in p.name)
    reseal_as_failed(victim)
    for _ in range(2):  # marked every time until someone rebuilds: ls never quietly adopts a changed seal
        row = next(r for r in list_store(store).rows if r.id == victim.name)
        assert (row.state, row.generated) == ("failed", 99)  # never the stale "succeeded, 12"
        assert row.changed is not None and "seal changed since it was indexed" in row.changed and "genrun verify" in row.changed
    human = run_cli("ls", "--store", store)
    assert "(seal changed)" in human.stdout and f"{victim.name}: the seal changed" in human.stderr
    assert run_cli("index", "--store", store, "--rebuild").returncode == 0
    assert next(r for r in list_store(store).rows if r.id == victim.name).changed is None


def test_a_removed_snapshot_leaves_the_listing_and_the_index(tmp_path: Path) -> None:
    store = _store(tmp_path)
    list_store(store)
    gone = next(r.id for r in list_store(store).rows if r.state == "failed")
    shutil.rmtree(store / gone)
    assert gone not in {r["id"] for r in _ls(store)["snapshots"]}
    assert gone not in indexed_ids(store)


def test_a_corrupt_index_is_rebuilt_with_a_note(tmp_path: Path) -> None:
    store = _store(tmp_path)
    expected = _ls(store)
    index_file(store).write_bytes(b"this is not an sqlite file" * 100)
    listed = run_cli("ls", "--store", store, "--json")
    assert listed.returncode == 0 and orjson.loads(listed.stdout) == expected
    assert "cannot be used" in listed.stderr and "rebuilt from the files (2 sealed snapshots)" in listed.stderr
    assert list_store(store).from_index == 2
    index_file(store).write_bytes(b"this is not an sqlite file" * 100)  # and under a window
    window = run_cli("ls", "--store", store, "--json", "--limit", "1")
    assert window.returncode == 0 and orjson.loads(window.stdout) == {**expected, "snapshots": expected["snapshots"][-1:]}
    assert "rebuilt from the files (2 sealed snapshots)" in window.stderr
    assert list_store(store, window=slice(-1, None)).unchecked == 2  # the rebuilt index places both sealed rows (the last is unsealed)


def test_an_index_from_a_newer_genrun_is_ignored_with_a_note_and_replaced_only_by_rebuild(tmp_path: Path) -> None:
    store = _store(tmp_path)
    expected = _ls(store)
    with sqlite3.connect(index_file(store)) as db:
        db.execute(f"PRAGMA user_version = {INDEX_FORMAT + 1}")
        db.execute("UPDATE meta SET value = '99.0' WHERE key = 'written_by'")
    listed = run_cli("ls", "--store", store, "--json")
    assert listed.returncode == 0 and orjson.loads(listed.stdout) == expected
    assert f"format {INDEX_FORMAT + 1}, written by genrun 99.0" in listed.stderr and "genrun index --rebuild" in listed.stderr
    with sqlite3.connect(index_file(store)) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == INDEX_FORMAT + 1  # left for the newer genrun
    assert run_cli("index", "--store", store, "--rebuild").returncode == 0
    assert list_store(store).from_index == 2


def test_a_locked_index_is_answered_from_the_files_with_a_note(tmp_path: Path) -> None:
    store = _store(tmp_path)
    expected = _ls(store)
    holder = sqlite3.connect(index_file(store), isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")  # another process writing (or a filesystem whose locks fail)
        listed = run_cli("ls", "--store", store, "--json")
        window = run_cli("ls", "--store", store, "--json", "--limit", "2")  # a window has no index to place rows by either
    finally:
        holder.close()
    assert listed.returncode == 0 and orjson.loads(listed.stdout) == expected
    assert "answering from the files" in listed.stderr and "locked" in listed.stderr
    assert window.returncode == 0 and orjson.loads(window.stdout) == {**expected, "snapshots": expected["snapshots"][-2:]}
    assert "answering from the files" in window.stderr


def test_verify_never_reads_the_index(tmp_path: Path) -> None:
    store = _store(tmp_path)
    list_store(store)
    sealed = next(r.id for r in list_store(store).rows if r.state == "succeeded")
    index_file(store).write_bytes(b"garbage")
    verified = run_cli("verify", store / sealed, "--json")
    assert "index" not in verified.stderr
    assert index_file(store).read_bytes() == b"garbage"


# -- a window: the rows a limit keeps, with no filter (`ls --limit N`, a terminal's default) ---------------------------


def _store_with_a_sweep(tmp_path: Path) -> Path:
    store = tmp_path / "store"
    for i in range(3):
        make_run(store, f"run{i}", reasons=("eos",) if i % 2 else ("max_length",))
    make_sweep(store, [make_run(store, f"item{i}") for i in range(3)])
    make_run(store, "zlate", seal=False)  # unsealed: read from its files, never from the index
    return store


def test_a_window_reads_only_its_rows_and_places_them_as_the_whole_listing_does(tmp_path: Path) -> None:
    store = _store_with_a_sweep(tmp_path)
    whole = list_store(store)  # builds the index
    assert [r.sweep is not None for r in whole.rows].count(True) == 3 and whole.total == len(whole.rows) == 8
    for size in (1, 3, 5, 7, 8, 20):
        window = list_store(store, window=slice(-size, None))
        assert window.rows == whole.rows[-size:] and window.total == whole.total  # sweeps' items still right under the sweep
        # the sealed rows outside the window were placed by the index alone; the unsealed one was read
        assert window.unchecked == sum(r.sealed for r in whole.rows[:-size]) and window.notes == []


def test_a_store_whose_names_are_exactly_the_index_ids_is_placed_by_the_index_alone(tmp_path: Path) -> None:
    """Every snapshot sealed and indexed (a warm store): the names are compared with the index's ids as two sorted lists
    and no name is looked up; the rows placed so are the whole listing's, and the files' (a sweep's items under it). Then
    a plan being frozen, a stray file, a link to a snapshot and a new unsealed run each make the store no longer exactly
    the index, and the listing is still the files'."""
    from genrun.runner import listing
    from genrun.runner.store_index import IndexDatabase

    store = tmp_path / "store"
    for i in range(3):
        make_run(store, f"run{i}")
    make_sweep(store, [make_run(store, f"item{i}") for i in range(3)])
    whole = list_store(store)  # builds the index
    with IndexDatabase(store) as index:
        held = index.memberships()
        scanned = listing._scan(store, held)
    assert scanned.exact and scanned.unindexed == [] and scanned.names == held.ids == sorted(held.ids)
    assert held._by_id is None  # compared as lists: no dict of the ids was made
    files = list_store(store, use_index=False).rows
    assert whole.rows == files and [r.sweep is not None for r in files].count(True) == 3
    for size in (1, 3, 4, 7, 20):
        assert list_store(store, window=slice(-size, None)).rows == files[-size:]

    (store / ".tmp-plan-abc123").mkdir()  # a plan being frozen (abandoned: no planner holds it)
    (store / "20991231T000000Z-not-a-snapshot-000000").write_text("a stray file")
    (store / "zz-link").symlink_to(store / whole.rows[0].id)
    make_run(store, "late", seal=False)
    with IndexDatabase(store) as index:
        assert not listing._scan(store, index.memberships()).exact
    files = list_store(store, use_index=False).rows
    assert [r.id for r in files][-2:] == ["zz-link", ".tmp-plan-abc123"]  # a link is listed as before; a stray file is not
    assert len(files) == 10 and "20991231T000000Z-not-a-snapshot-000000" not in [r.id for r in files]
    assert list_store(store).rows == files
    for size in (1, 2, 5, 20):
        assert list_store(store, window=slice(-size, None)).rows == files[-size:]


def test_a_whole_listing_compares_every_key_first_and_takes_unchanged_rows_from_the_index(tmp_path: Path,
                                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """From `_KEYS_BESIDE_FROM` index rows (lowered here; in this threaded test process the keys are all compared here),
    a whole listing compares every row's keys, then takes the unchanged rows from the index in its order; a changed
    seal sends that row to its files, marked. The same whether the store directory can be held open or not (the paths
    are then resolved from its path)."""
    from genrun.runner import listing

    monkeypatch.setattr(listing, "_KEYS_BESIDE_FROM", 2)
    store = tmp_path / "store"
    for i in range(4):
        make_run(store, f"run{i}")
    make_sweep(store, [make_run(store, f"item{i}") for i in range(2)])
    files = list_store(store, use_index=False).rows
    assert list_store(store).rows == files  # builds the index
    warm = list_store(store)
    assert warm.rows == files and warm.from_index == len(files)
    reseal_as_failed(store / files[1].id)
    changed = list_store(store)
    assert [r.id for r in changed.rows] == [r.id for r in files] and changed.from_index == len(files) - 1
    assert (changed.rows[1].state, changed.rows[1].changed is not None) == ("failed", True)

    real_open = os.open

    def unopenable(path: object, flags: int, *args: object, **kwargs: object) -> int:
        if flags & os.O_DIRECTORY and os.fspath(path).rstrip("/") == str(store):  # type: ignore[arg-type]
            raise PermissionError(13, "Permission denied", os.fspath(path))  # type: ignore[arg-type]
        return real_open(path, flags, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", unopenable)
    with listing._opened_directory(f"{store}/") as (fd, root):
        assert (fd, root) == (None, f"{store}/")
    again = list_store(store)
    assert again.rows == changed.rows and again.from_index == len(files) - 1


def test_a_seal_changed_inside_the_window_is_marked_and_outside_it_is_not_read(tmp_path: Path) -> None:
    store = _store_with_a_sweep(tmp_path)
    whole = list_store(store)
    first, last_sealed = whole.rows[0], [r for r in whole.rows if r.sealed][-1]
    reseal_as_failed(store / first.id)  # outside a window of the newest rows
    window = list_store(store, window=slice(-3, None))
    assert window.rows == whole.rows[-3:] and window.unchecked == sum(r.sealed for r in whole.rows[:-3])
    reseal_as_failed(store / last_sealed.id)  # inside it: every row is read, as without a window
    window = list_store(store, window=slice(-3, None))
    assert window.unchecked == 0 and window.total == whole.total
    changed = next(r for r in window.rows if r.id == last_sealed.id)
    assert (changed.state, changed.generated) == ("failed", 99) and "seal changed since it was indexed" in (changed.changed or "")
    assert [r.id for r in window.rows] == [r.id for r in whole.rows[-3:]]


def test_a_window_shows_sign_offs_added_after_indexing_and_leaves_out_removed_rows(tmp_path: Path) -> None:
    store = _store_with_a_sweep(tmp_path)
    whole = list_store(store)
    signed, removed = whole.rows[-2], whole.rows[-3]
    assert run_cli("signoff", store / signed.id, "--decision", "accept", "--by", "alice@example.com").returncode == 0
    shutil.rmtree(store / removed.id)
    window = list_store(store, window=slice(-2, None))
    assert next(r for r in window.rows if r.id == signed.id).signers == ("alice@example.com",)
    assert window.total == whole.total - 1 and removed.id not in indexed_ids(store)
    assert window.rows == list_store(store, use_index=False).rows[-2:]


def test_ls_with_a_limit_and_no_filter_answers_as_the_whole_listing_does(tmp_path: Path) -> None:
    store = _store_with_a_sweep(tmp_path)
    every = run_cli("ls", "--store", store, "--limit", "0")
    assert every.returncode == 0, every.stderr
    lines = every.stdout.splitlines()
    for args, kept in ((["--limit", "4"], lines[-4:]), (["--limit", "4", "--reverse"], lines[:-5:-1])):
        limited = run_cli("ls", "--store", store, *args)
        assert limited.returncode == 0 and "note:" not in limited.stderr, limited.stderr
        assert limited.stdout.splitlines()[0] == f"4 of 8 snapshot(s) in {store}"
        assert [line.split("└")[-1].split()[0] for line in limited.stdout.splitlines()[2:]] == \
               [line.split("└")[-1].split()[0] for line in kept]
    assert _ls(store, "--limit", "2")["snapshots"] == _ls(store)["snapshots"][-2:] and _ls(store, "--limit", "2")["total"] == 8


# -- concurrency ----------------------------------------------------------------------------------------------------

_SEALER = """
import sys
sys.path.insert(0, {tests!r})
from _store_helpers import make_run
for i in range({n}):
    make_run(__import__("pathlib").Path({store!r}), f"live{{i}}")
"""


def test_ls_while_runs_seal_and_two_ls_at_once_agree_with_the_files(tmp_path: Path) -> None:
    store = tmp_path / "store"
    for i in range(40):
        make_run(store, f"old{i}", reasons=("eos",) if i % 2 else ("max_length",))
    env = dict(os.environ)
    sealer = subprocess.Popen([sys.executable, "-c", _SEALER.format(tests=str(REPO / "tests"), n=60, store=str(store))], env=env)
    listers = []
    try:
        while sealer.poll() is None or not listers:  # runs seal while index-building lists run, two at a time: every row, and a window
            pair = [subprocess.Popen([sys.executable, "-m", "genrun.runner.cli", "ls", "--store", str(store), "--json", *limit],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) for limit in ([], ["--limit", "5"])]
            listers += [(p, *p.communicate(timeout=120)) for p in pair]
    finally:
        sealer.wait(timeout=120)
    assert sealer.returncode == 0
    for proc, out, err in listers:
        assert proc.returncode == 0, err
        for row in orjson.loads(out)["snapshots"]:  # whatever moment each answered for, no row is ever wrong
            if row["sealed"]:
                assert row["state"] == "succeeded" and row["seal_digest"], row
    assert _ls(store) == _ls(store, "--no-index")
    assert len(_ls(store)["snapshots"]) == 100


def test_index_rebuild_of_a_missing_store_is_refused_naming_the_fix(tmp_path: Path) -> None:
    refused = run_cli("index", "--rebuild", "--store", tmp_path / "nowhere")
    assert refused.returncode == 1 and f"store {tmp_path / 'nowhere'} does not exist yet (--store)" in " ".join(refused.stderr.split())
    assert not (tmp_path / "nowhere").exists()


def test_the_store_page_escapes_every_value_of_its_rows() -> None:
    from genrun.analysis import render_index_html
    from genrun.analysis.html_report import IndexLine, StoreIndex

    hostile = '<script>alert(1)</script>"\'&'
    line = IndexLine(id=hostile, state=hostile, sealed=True, stop_reasons=(hostile,), warnings=None, failed=None, signoffs=hostile,
                     href=f'x"><img src=y onerror=alert(2)>{hostile}', sweep=hostile, sweep_items=hostile)
    page = render_index_html(StoreIndex(store="s", snapshots=(line, line)))
    assert "<script>" not in page and "<img" not in page
    # per row: the link's target and text, the state as class and as text, the items, the stop reasons, the sign-offs
    assert page.count("&lt;script&gt;alert(1)&lt;/script&gt;&quot;&#x27;&amp;") == 2 * 7
