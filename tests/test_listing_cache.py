"""The listing cache is only a cache: `ls` answers the same with it, without it, after it is deleted, damaged, locked,
from another format, or while runs seal beside it; a sealed snapshot changed after caching is marked, never shown stale."""

import os
import shutil
import sqlite3
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import orjson
import pytest
from _store_helpers import index_file, indexed_ids, make_run, make_signers, make_sweep, reseal_as_failed, sign
from conftest import run_cli

from genrun.runner import listing
from genrun.runner.listing import list_store
from genrun.runner.listing_cache import FORMAT

REPO = Path(__file__).resolve().parents[1]


def _ls(store: Path, *args: str) -> dict:
    listed = run_cli("ls", "--store", store, "--json", *args)
    assert listed.returncode == 0, listed.stderr
    return orjson.loads(listed.stdout)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The snapshots `ls` read from their files, call by call (the others came from the cache)."""
    seen: list[str] = []
    real = listing.read_snapshot
    monkeypatch.setattr(listing, "read_snapshot", lambda store, name, trust: seen.append(name) or real(store, name, trust))
    return seen


def _store(tmp_path: Path) -> Path:
    store = tmp_path / "store"
    make_run(store, "a", reasons=("eos", "max_length"), generated=12)
    make_run(store, "b", status="failed", reasons=("exception",))
    make_run(store, "c", seal=False)  # incomplete: never cached
    return store


# -- basics ---------------------------------------------------------------------------------------------------------


def test_first_ls_fills_the_cache_and_the_second_answers_from_it(tmp_path: Path, reads: list[str]) -> None:
    store = _store(tmp_path)
    first = list_store(store)
    assert len(reads) == 3 and first.notes == []
    sealed = {r.id for r in first.rows if r.sealed}
    assert indexed_ids(store) == sealed and len(sealed) == 2  # the unsealed one is read from its files every time
    assert not index_file(store).is_relative_to(store) and index_file(store).stat().st_mode & 0o777 == 0o600
    reads.clear()
    second = list_store(store)
    assert reads == [next(r.id for r in first.rows if not r.sealed)] and second.rows == first.rows
    assert second.rows == list_store(store, use_cache=False).rows  # the cache answers exactly what the files say
    failed = next(r for r in second.rows if r.state == "failed")
    assert (failed.stop_reasons, failed.backend, failed.unit, failed.name) == ("exception", "transformers", "token", "b")
    assert failed.seal_digest is not None and failed.created is not None and failed.created.endswith("Z")


def test_deleting_the_cache_loses_nothing(tmp_path: Path) -> None:
    store = _store(tmp_path)
    before = _ls(store)
    shutil.rmtree(index_file(store).parent)
    assert _ls(store) == before
    assert index_file(store).is_file()  # refilled by that ls
    assert run_cli("index", "--store", store, "--rebuild").returncode == 0
    assert _ls(store) == before == _ls(store, "--no-index")


def test_runs_never_write_the_cache_and_a_snapshot_sealed_later_is_listed_sealed(tmp_path: Path) -> None:
    store = tmp_path / "store"
    unsealed = make_run(store, "late", seal=False)
    assert _ls(store)["snapshots"][0]["state"] == "incomplete"
    from genrun.runner.store import seal_snapshot

    seal_snapshot(unsealed)
    row = _ls(store)["snapshots"][0]
    assert (row["state"], row["sealed"]) == ("succeeded", True)
    index_file(store).unlink()
    make_run(store, "another")  # a run: plan, execute, seal
    assert not index_file(store).exists()


def test_sweep_membership_comes_from_the_cache_too(tmp_path: Path, reads: list[str]) -> None:
    store = tmp_path / "store"
    items = [make_run(store, f"item{i}") for i in range(3)]
    sweep = make_sweep(store, items)
    cold = list_store(store)
    reads.clear()
    warm = list_store(store)
    assert reads == []
    for listing in (cold, warm):
        assert [r.id for r in listing.rows] == [sweep.name, *(i.name for i in items)]
        assert [r.sweep for r in listing.rows] == [None, sweep.name, sweep.name, sweep.name]


def test_signoffs_added_after_caching_are_shown(tmp_path: Path, reads: list[str]) -> None:
    store = _store(tmp_path)
    signers = make_signers(tmp_path / "keys", ["alice@example.com"])
    target = next(r for r in list_store(store).rows if r.state == "succeeded")
    sign(store / target.id, "alice@example.com", signers)
    row = next(r for r in list_store(store, signers.allowed).rows if r.id == target.id)
    assert row.signers == ("alice@example.com",) and "accept valid" in row.signoffs
    assert run_cli("index", "--store", store, "--rebuild", "--allowed-signers", signers.allowed).returncode == 0
    reads.clear()
    warm = list_store(store, signers.allowed)
    assert len(reads) == 1 and next(r for r in warm.rows if r.id == target.id) == row  # the unsealed one alone read


def test_a_sign_off_judged_after_caching_is_kept_in_the_cache_and_judged_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Judging a signed record runs ssh-keygen: a new judgement is kept in the cache, so the next listing does not judge
    again, and a filter that judges the rows it shows a second time judges each once."""
    import genrun.analysis.signoffs as signoffs
    from genrun.runner.row_filter import RowFilter

    store = _store(tmp_path)
    signers = make_signers(tmp_path / "keys", ["alice@example.com", "bob@example.com"])
    monkeypatch.setenv("GENRUN_ALLOWED_SIGNERS", str(signers.allowed))
    target = next(r for r in list_store(store).rows if r.state == "succeeded")
    judged: list[str] = []
    real = signoffs.judge_signoffs
    monkeypatch.setattr(signoffs, "judge_signoffs", lambda snapshot, trusted: judged.append(Path(snapshot).name) or real(snapshot, trusted))

    def kept() -> tuple[str, str]:
        with sqlite3.connect(index_file(store)) as db:
            return db.execute("SELECT signers, signoffs FROM rows WHERE id = ?", (target.id,)).fetchone()

    for by in ("alice@example.com", "bob@example.com"):
        sign(store / target.id, by, signers)
        judged.clear()
        shown = list_store(store, keep=RowFilter(signed_by=by)).rows  # every row judged, then the shown one checked
        assert [r.id for r in shown] == [target.id] and judged == [target.id]
        assert kept() == ("\n".join(shown[0].signers), shown[0].signoffs) and shown[0].signers[-1] == by
        judged.clear()
        again = list_store(store)
        assert judged == [] and next(r for r in again.rows if r.id == target.id) == shown[0]
    assert list_store(store).rows == list_store(store, use_cache=False).rows


# -- damage ---------------------------------------------------------------------------------------------------------


def test_a_seal_replaced_after_caching_is_marked_and_read_from_the_files(tmp_path: Path) -> None:
    store = _store(tmp_path)
    list_store(store)
    victim = next(p for p in store.iterdir() if "-a-" in p.name)
    reseal_as_failed(victim)
    for _ in range(2):  # marked every time until someone rebuilds: ls never quietly adopts a changed seal
        row = next(r for r in list_store(store).rows if r.id == victim.name)
        assert (row.state, row.generated) == ("failed", 99)  # never the stale "succeeded, 12"
        assert row.changed is not None and "seal changed since it was cached" in row.changed and "genrun verify" in row.changed
    human = run_cli("ls", "--store", store)
    assert "(seal changed)" in human.stdout and f"{victim.name}: the seal changed" in human.stderr
    checked = run_cli("ls", "--store", store, "--check")
    assert checked.returncode == 1 and f"1 seal(s) changed since cached: {victim.name}" in checked.stderr
    assert run_cli("index", "--store", store, "--rebuild").returncode == 0
    checked = run_cli("ls", "--store", store, "--check")
    assert checked.returncode == 0 and "no seal changed since cached" in checked.stderr
    assert next(r for r in list_store(store).rows if r.id == victim.name).changed is None


def test_a_removed_snapshot_leaves_the_listing_and_the_cache(tmp_path: Path) -> None:
    store = _store(tmp_path)
    list_store(store)
    gone = next(r.id for r in list_store(store).rows if r.state == "failed")
    shutil.rmtree(store / gone)
    assert gone not in {r["id"] for r in _ls(store)["snapshots"]}
    assert gone not in indexed_ids(store)


def test_a_corrupt_cache_is_made_anew_with_a_note(tmp_path: Path, reads: list[str]) -> None:
    store = _store(tmp_path)
    expected = _ls(store)
    index_file(store).write_bytes(b"this is not an sqlite file" * 100)
    listed = run_cli("ls", "--store", store, "--json")
    assert listed.returncode == 0 and orjson.loads(listed.stdout) == expected
    assert "cannot be used" in listed.stderr and "it was made anew from the files" in listed.stderr
    reads.clear()
    assert list_store(store).notes == [] and len(reads) == 1  # the unsealed one alone
    index_file(store).write_bytes(b"this is not an sqlite file" * 100)  # and under a window
    window = run_cli("ls", "--store", store, "--json", "--limit", "1")
    assert window.returncode == 0 and orjson.loads(window.stdout) == {**expected, "snapshots": expected["snapshots"][-1:]}
    assert "it was made anew from the files" in window.stderr
    assert list_store(store, window=slice(-1, None)).unchecked == 2  # the new cache places both sealed rows (the last is unsealed)


def test_a_cache_from_a_newer_genrun_is_ignored_with_a_note_and_replaced_only_by_rebuild(tmp_path: Path, reads: list[str]) -> None:
    store = _store(tmp_path)
    expected = _ls(store)
    with sqlite3.connect(index_file(store)) as db:
        db.execute(f"PRAGMA user_version = {FORMAT + 1}")
    listed = run_cli("ls", "--store", store, "--json")
    assert listed.returncode == 0 and orjson.loads(listed.stdout) == expected
    assert f"format {FORMAT + 1}, newer than this genrun's" in listed.stderr and "genrun index --rebuild" in listed.stderr
    with sqlite3.connect(index_file(store)) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == FORMAT + 1  # left for the newer genrun
    assert run_cli("index", "--store", store, "--rebuild").returncode == 0
    reads.clear()
    list_store(store)
    assert len(reads) == 1


def test_a_locked_cache_is_answered_from_the_files_with_a_note(tmp_path: Path) -> None:
    store = _store(tmp_path)
    expected = _ls(store)
    holder = sqlite3.connect(index_file(store), isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")  # another process writing (or a filesystem whose locks fail)
        listed = run_cli("ls", "--store", store, "--json")
        window = run_cli("ls", "--store", store, "--json", "--limit", "2")  # a window has no cache to place rows by either
    finally:
        holder.close()
    assert listed.returncode == 0 and orjson.loads(listed.stdout) == expected
    assert "answering from the files" in listed.stderr and "locked" in listed.stderr
    assert window.returncode == 0 and orjson.loads(window.stdout) == {**expected, "snapshots": expected["snapshots"][-2:]}
    assert "answering from the files" in window.stderr


def test_a_warm_listing_that_learns_nothing_takes_no_write_lock(tmp_path: Path) -> None:
    """Another `ls` writing (holding the write lock) does not hold up a listing that has nothing to write, nor make it
    say the cache was not updated."""
    store = _store(tmp_path)
    expected = _ls(store)
    writer = sqlite3.connect(index_file(store), isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")
        listed = run_cli("ls", "--store", store, "--json")
    finally:
        writer.close()
    assert listed.returncode == 0 and orjson.loads(listed.stdout) == expected
    assert listed.stderr == "", listed.stderr


def test_verify_never_reads_the_cache(tmp_path: Path) -> None:
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
    make_run(store, "zlate", seal=False)  # unsealed: read from its files, never from the cache
    return store


def test_a_window_reads_only_its_rows_and_places_them_as_the_whole_listing_does(tmp_path: Path) -> None:
    store = _store_with_a_sweep(tmp_path)
    whole = list_store(store)  # fills the cache
    assert [r.sweep is not None for r in whole.rows].count(True) == 3 and whole.total == len(whole.rows) == 8
    for size in (1, 3, 5, 7, 8, 20):
        window = list_store(store, window=slice(-size, None))
        assert window.rows == whole.rows[-size:] and window.total == whole.total  # sweeps' items still right under the sweep
        # the sealed rows outside the window were placed by the cache alone; the unsealed one was read
        assert window.unchecked == sum(r.sealed for r in whole.rows[:-size]) and window.notes == []


def test_plans_stray_files_and_links_in_the_store_are_listed_as_the_files_say(tmp_path: Path) -> None:
    """A plan being frozen, a stray file, a link to a snapshot and a new unsealed run beside cached rows: the listing
    (whole or a window) is the files' (a link is listed as before, never cached; a stray file is not a row)."""
    store = tmp_path / "store"
    for i in range(3):
        make_run(store, f"run{i}")
    make_sweep(store, [make_run(store, f"item{i}") for i in range(3)])
    whole = list_store(store)  # fills the cache
    files = list_store(store, use_cache=False).rows
    assert whole.rows == files and [r.sweep is not None for r in files].count(True) == 3
    for size in (1, 3, 4, 7, 20):
        assert list_store(store, window=slice(-size, None)).rows == files[-size:]
    (store / ".tmp-plan-abc123").mkdir()  # a plan being frozen (abandoned: no planner holds it)
    (store / "20991231T000000Z-not-a-snapshot-000000").write_text("a stray file")
    (store / "zz-link").symlink_to(store / whole.rows[0].id)
    make_run(store, "late", seal=False)
    files = list_store(store, use_cache=False).rows
    assert [r.id for r in files][-2:] == ["zz-link", ".tmp-plan-abc123"]
    assert len(files) == 10 and "20991231T000000Z-not-a-snapshot-000000" not in [r.id for r in files]
    assert list_store(store).rows == files and "zz-link" not in indexed_ids(store)
    for size in (1, 2, 5, 20):
        assert list_store(store, window=slice(-size, None)).rows == files[-size:]


def test_a_listing_is_in_id_order_whatever_order_the_cache_holds_its_ids_in(tmp_path: Path) -> None:
    """The directory's names are placed by merging them with the cache's ids (no sort of the whole directory): ids the
    cache holds out of order, ids of removed snapshots, and a plan's name in an edited cache change nothing, whole or
    in a window."""
    store = _store_with_a_sweep(tmp_path)
    (store / ".tmp-plan-abc123").mkdir()  # an abandoned plan
    list_store(store)  # fills the cache
    files = list_store(store, use_cache=False).rows
    sealed = [r.id for r in files if r.sealed]
    with sqlite3.connect(index_file(store)) as db:  # the oldest row rewritten last: the cache's own order is not id order
        row = db.execute("SELECT * FROM rows WHERE id = ?", (sealed[0],)).fetchone()
        db.execute("DELETE FROM rows WHERE id = ?", (sealed[0],))
        db.execute(f"INSERT INTO rows VALUES ({', '.join('?' * len(row))})", row)
        db.execute("UPDATE rows SET id = '.tmp-plan-abc123' WHERE id = ?", (sealed[1],))  # an edited cache naming the plan
        db.execute("UPDATE rows SET id = '20200101T000000Z-removed-abcdef' WHERE id = ?", (sealed[2],))  # a snapshot since removed
    assert [r.id for r in files][-1] == ".tmp-plan-abc123"
    for window in (None, slice(-1, None), slice(-3, None), slice(-20, None)):
        assert list_store(store, window=window).rows == (files if window is None else files[window]), window
    assert ".tmp-plan-abc123" not in indexed_ids(store) and "20200101T000000Z-removed-abcdef" not in indexed_ids(store)


def test_a_whole_listing_checks_every_row_and_reads_only_the_changed_ones(tmp_path: Path, reads: list[str]) -> None:
    store = tmp_path / "store"
    for i in range(4):
        make_run(store, f"run{i}")
    make_sweep(store, [make_run(store, f"item{i}") for i in range(2)])
    files = list_store(store, use_cache=False).rows
    assert list_store(store).rows == files  # fills the cache
    reads.clear()
    warm = list_store(store)
    assert warm.rows == files and reads == [] and warm.unchecked == 0
    reseal_as_failed(store / files[1].id)
    changed = list_store(store)
    assert [r.id for r in changed.rows] == [r.id for r in files] and files[1].id in reads
    assert (changed.rows[1].state, changed.rows[1].changed is not None) == ("failed", True)


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
    assert (changed.state, changed.generated) == ("failed", 99) and "seal changed since it was cached" in (changed.changed or "")
    assert [r.id for r in window.rows] == [r.id for r in whole.rows[-3:]]


def test_a_window_shows_sign_offs_added_after_caching_and_leaves_out_removed_rows(tmp_path: Path) -> None:
    store = _store_with_a_sweep(tmp_path)
    signers = make_signers(tmp_path / "keys", ["alice@example.com"])
    whole = list_store(store, signers.allowed)
    signed, removed = whole.rows[-2], whole.rows[-3]
    sign(store / signed.id, "alice@example.com", signers)
    shutil.rmtree(store / removed.id)
    window = list_store(store, signers.allowed, window=slice(-2, None))
    assert next(r for r in window.rows if r.id == signed.id).signers == ("alice@example.com",)
    assert window.total == whole.total - 1 and removed.id not in indexed_ids(store)
    assert window.rows == list_store(store, signers.allowed, use_cache=False).rows[-2:]


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


def test_a_window_whose_sweep_row_no_longer_validates_reads_it_again_and_still_groups_its_items(tmp_path: Path) -> None:
    """A window is placed by ids and the sweeps' validated rows: a sweep row that does not validate is read from its files
    (its members place its items), never placed as a run."""
    store = _store_with_a_sweep(tmp_path)
    whole = list_store(store)
    sweep = next(r.id for r in whole.rows if r.members is not None)
    with sqlite3.connect(index_file(store)) as db:
        assert db.execute("UPDATE rows SET members = ? WHERE id = ?", (b"\x00 a blob", sweep)).rowcount == 1
    for size in (1, 4, 8):
        assert list_store(store, window=slice(-size, None)).rows == whole.rows[-size:]


def test_a_window_keeps_its_scan_of_the_store_until_an_entry_or_a_cached_row_changes(tmp_path: Path, reads: list[str],
                                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A window's listing keeps what it made of the store's entries and the cache's ids (`Scan`): the next window over
    the same entries reuses it; a new entry, a snapshot cached since, or any edit of the cache's rows is scanned again."""
    store = _store_with_a_sweep(tmp_path)
    scans: list[int] = []
    real = listing._scan
    monkeypatch.setattr(listing, "_scan", lambda found, known: scans.append(len(found)) or real(found, known))
    files = list_store(store, use_cache=False).rows
    assert list_store(store, window=slice(-2, None)).rows == files[-2:] and len(scans) == 2  # fills the cache, keeps its scan
    scans.clear()
    reads.clear()
    assert list_store(store, window=slice(-3, None)).rows == files[-3:]
    assert scans == [] and reads == [files[-1].id]  # the kept scan; the unsealed run alone read (it is not cached)
    from genrun.runner.store import seal_snapshot

    seal_snapshot(store / files[-1].id)  # the unsealed run sealed: cached by the next listing, which keeps a new scan
    assert list_store(store, window=slice(-1, None)).rows[0].sealed and scans == []
    reads.clear()
    assert list_store(store, window=slice(-1, None)).rows[0].sealed and reads == [] and scans == []
    make_run(store, "newer", seal=False)  # a new entry: scanned again
    now = list_store(store, use_cache=False).rows
    scans.clear()
    assert list_store(store, window=slice(-20, None)).rows == now and any("-newer-" in r.id for r in now)
    assert len(scans) == 1
    oldest = files[0].id  # an edited cache (the oldest row now names a removed snapshot): its scan is dropped with it
    with sqlite3.connect(index_file(store)) as db:
        db.execute("UPDATE rows SET id = '20200101T000000Z-removed-abcdef' WHERE id = ?", (oldest,))
    scans.clear()
    window = list_store(store, window=slice(-2, None))
    assert len(scans) == 1 and window.total == len(files) + 1 and "20200101T000000Z-removed-abcdef" not in indexed_ids(store)
    assert list_store(store, window=slice(-20, None)).rows == now


def test_a_scan_that_cannot_be_kept_changes_no_answer_and_is_said(tmp_path: Path) -> None:
    """Another `ls` holding the write lock: a window over changed entries answers exactly, says the cache was not
    updated, and keeps no scan of them (the next listing keeps it)."""
    store = _store_with_a_sweep(tmp_path)
    list_store(store, window=slice(-2, None))  # fills the cache, keeps its scan
    make_run(store, "newer", seal=False)
    files = list_store(store, use_cache=False).rows

    def kept() -> bool:
        with sqlite3.connect(index_file(store)) as db:
            return db.execute("SELECT count(*) FROM scans WHERE key = ?", (listing.scan_key(os.listdir(store)),)).fetchone() == (1,)

    writer = sqlite3.connect(index_file(store), isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")
        window = list_store(store, window=slice(-3, None))
    finally:
        writer.close()
    assert window.rows == files[-3:] and window.total == len(files)
    assert len(window.notes) == 1 and "was not updated" in window.notes[0] and not kept()
    assert list_store(store, window=slice(-3, None)) == window._replace(notes=[]) and kept()


_WARM_IMPORTS = """
import sys
from pathlib import Path
from genrun.runner.listing import list_store
listing = list_store(Path(sys.argv[1]))
assert len(listing.rows) == int(sys.argv[2]), listing
print(sorted(m for m in ("pydantic", "genrun.snapshot_dir", "genrun.analysis.signoffs", "genrun.schemas.sweep") if m in sys.modules))
"""


def test_a_warm_listing_without_sign_off_records_imports_no_model_and_asks_no_git(tmp_path: Path) -> None:
    """What a warm whole listing of sealed snapshots with no sign-off record needs is the cache and two lstats a row:
    the allowed-signers file (git's setting) is resolved, and the files' models imported, only when a record is judged or
    a snapshot is read. A `git` that records its calls shows whether it ran."""
    store = tmp_path / "store"
    for i in range(3):
        make_run(store, f"run{i}")
    calls = tmp_path / "git-calls"
    fake_git = tmp_path / "bin" / "git"
    fake_git.parent.mkdir()
    fake_git.write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\nexit 1\n")
    fake_git.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake_git.parent}:{os.environ['PATH']}"}
    env.pop("GENRUN_ALLOWED_SIGNERS", None)

    def imported(n: int) -> str:
        done = subprocess.run([sys.executable, "-c", _WARM_IMPORTS, str(store), str(n)], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert "genrun.snapshot_dir" in imported(3)  # cold: every snapshot read from its files
    assert imported(3) == "[]" and not calls.exists()
    signers = make_signers(tmp_path / "keys", ["alice@example.com"])
    sign(store / sorted(p.name for p in store.iterdir())[0], "alice@example.com", signers)
    assert "genrun.analysis.signoffs" in imported(3) and "gpg.ssh.allowedSignersFile" in calls.read_text()  # a record: judged


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


# -- what a cached row and a cached judgement hold ------------------------------------------------------------------


def test_a_cache_entry_holds_every_field_of_a_sealed_row() -> None:
    from genrun.runner.listing import _cached, _from_cache

    for members in (None, (), ("a", "b")):
        row = listing.SnapshotRow(id="20260101T000000Z-x-abcdef", state="succeeded", sealed=True, generated=3, stop_reasons="eos",
                                  signoffs="accept valid (a@x)", name="x", created="2026-01-01T00:00:00Z", backend="transformers",
                                  unit="token", seal_digest="0" * 64, signers=("a@x", "b@x"), members=members)
        assert _from_cache(_cached((1, 2, 3, 4), "key", None, row)) == row


def test_a_judgement_lasts_until_the_next_time_limit_of_a_key(tmp_path: Path) -> None:
    from genrun.runner.signoff_judgement import Trust

    allowed = tmp_path / "allowed_signers"
    allowed.write_text('a@x valid-after="20260101",valid-before="20260301120000Z" ssh-ed25519 AAAA\n'
                       'b@x namespaces="accept@genrun" valid-before="202602011200" ssh-ed25519 BBBB\n')
    trust = Trust.of(allowed)
    jan_1 = datetime(2026, 1, 1, tzinfo=timezone.utc).timestamp()
    assert trust.until(jan_1 - 3600 * 24) == min(trust.limits)  # before the first limit: that one
    assert trust.until(datetime(2026, 3, 1, 12, tzinfo=timezone.utc).timestamp() - 1) == datetime(2026, 3, 1, 12, tzinfo=timezone.utc).timestamp()
    assert trust.until(datetime(2027, 1, 1, tzinfo=timezone.utc).timestamp()) is None  # every limit passed: nothing changes
    allowed.write_text('a@x valid-before="next tuesday" ssh-ed25519 AAAA\n')  # not read: judged every time
    assert Trust.of(allowed).until(jan_1) == jan_1
    allowed.write_text("@cert-authority ca@x cert-authority ssh-ed25519 CCCC\n")  # certificates carry their own validity
    assert Trust.of(allowed).until(jan_1) == jan_1
    assert Trust.of(None).until(jan_1) is None and Trust.of(None).identity == "-"
