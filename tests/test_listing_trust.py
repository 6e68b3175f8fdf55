"""What `genrun ls` and the store page trust: the files, never a cache a teammate can write, never a judgement outlived.

Each test here is a finding of an adversarial pass at genrun 04185e5 (its store index inside the store): edited rows
believed, links followed out of the store, a sign-off judgement kept after its key expired, unsigned records counted as
signatures, wrong-typed cells crashing the listing, forked workers outliving a killed `ls`. They are written against the
behaviour (whatever file a cache lives in), so that they fail on that genrun and hold on this one.
"""

import os
import signal
import sqlite3
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import orjson
import pytest
from _store_helpers import link_copies, make_run, make_signers, make_sweep, sign
from conftest import REPO, run_cli

from genrun.schemas import layout

ALICE = "alice@example.com"
LIES = {"state": "succeeded", "stop_reasons": "eos", "generated": 64, "signoffs": f"accept valid ({ALICE})", "signers": ALICE}


def _ls(store: Path, *args: str, env: dict | None = None) -> dict:
    done = run_cli("ls", "--store", store, "--json", *args, env=env)
    assert done.returncode == 0, done.stderr
    return orjson.loads(done.stdout)


def _ids(store: Path, *args: str, env: dict | None = None) -> list[str]:
    return [row["id"] for row in _ls(store, *args, env=env)["snapshots"]]


def _page(store: Path, tmp_path: Path, env: dict | None = None) -> str:
    """The store page's first page, as `genrun report --store --html` writes it."""
    site = tmp_path / "site" / "index.html"
    site.parent.mkdir(exist_ok=True)
    done = run_cli("report", "--store", store, "--html", site, env=env)
    assert done.returncode == 0, done.stderr
    return site.read_text()


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under `root` with its size and mtime: what a command wrote there shows."""
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            st = os.lstat(Path(folder) / name)
            found[str(Path(folder, name).relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return found


def _cache_files(*roots: Path) -> list[Path]:
    """Every SQLite file under these folders (wherever a genrun keeps its listing cache)."""
    return [p for root in roots for p in root.rglob("*") if p.is_file() and p.read_bytes()[:16] == b"SQLite format 3\x00"]


def _edit_rows(database: Path, cells: dict[str, object]) -> int:
    """Set these cells in every row of every table that has such columns; how many rows were edited."""
    edited = 0
    with sqlite3.connect(database) as db:
        for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
            columns = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
            wanted = {k: v for k, v in cells.items() if k in columns}
            if wanted:
                edited += db.execute(f"UPDATE {table} SET {', '.join(f'{k} = ?' for k in wanted)}", list(wanted.values())).rowcount
    return edited


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A failed unsigned run, a sweep of two items, a foreign run not in the sweep."""
    store = tmp_path / "store"
    make_run(store, "broken", status="failed", reasons=("exception",), generated=3)
    items = [make_run(store, f"item{i}") for i in range(2)]
    make_sweep(store, items, name="nightly")
    make_run(store, "foreign")
    return store


def test_ls_and_the_store_page_write_nothing_in_the_store(store: Path, tmp_path: Path) -> None:
    before = _tree(store)
    for args in ([], ["--json"], ["--state", "failed"], ["--limit", "1"]):
        assert run_cli("ls", "--store", store, *args).returncode == 0
    _page(store, tmp_path)
    assert run_cli("index", "--rebuild", "--store", store).returncode == 0
    assert _tree(store) == before


def test_a_cache_edited_by_whoever_can_write_the_store_is_never_believed(store: Path, tmp_path: Path) -> None:
    truth = _ls(store, "--no-index")
    assert _ls(store) == truth  # the first listing fills whatever cache there is
    sweep = next(row["id"] for row in truth["snapshots"] if row["members"] is not None)
    foreign = next(row["id"] for row in truth["snapshots"] if row["name"] == "foreign")
    for database in _cache_files(store):  # what a teammate with write access to the store can reach
        os.chmod(database, 0o664)
        _edit_rows(database, {**LIES, "members": "\n".join([*(r["id"] for r in truth["snapshots"] if r["sweep"]), foreign])})
    assert _ls(store) == truth
    broken = next(row["id"] for row in truth["snapshots"] if row["name"] == "broken")
    assert _ids(store, "--state", "failed") == [broken] and broken not in _ids(store, "--state", "succeeded")
    assert _ids(store, "--signed-by", ALICE) == [] and broken in _ids(store, "--unsigned")
    assert broken not in _ids(store, "--stop-reason", "eos")
    assert foreign not in _ids(store, "--sweep", sweep)
    assert "accept valid" not in _page(store, tmp_path)


def test_wrong_typed_cells_in_the_cache_are_read_again_from_the_files(store: Path, tmp_path: Path) -> None:
    roots = (store, Path(os.environ["GENRUN_CACHE_DIR"]), Path(os.environ["XDG_CACHE_HOME"]))
    others = set(_cache_files(*roots))  # other tests' stores'
    truth = _ls(store, "--no-index")
    human = run_cli("ls", "--store", store, env={"COLUMNS": "200"}).stdout
    caches = [p for p in _cache_files(*roots) if p not in others]
    assert caches, "the first ls fills a cache"
    for database in caches:
        os.chmod(database, 0o600)
        assert _edit_rows(database, {"generated": "lots", "stop_reasons": b"\x00\xff blob", "state": 7}) > 0
    assert _ls(store) == truth
    assert run_cli("ls", "--store", store, env={"COLUMNS": "200"}).stdout == human
    _page(store, tmp_path)
    for database in caches:  # healed: the rows were read again and cached as the files say
        with sqlite3.connect(database) as db:
            assert {type(g) for (g,) in db.execute("SELECT generated FROM rows WHERE members IS NULL")} == {int}


def test_links_in_the_store_are_never_followed(store: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.sqlite3"
    with sqlite3.connect(outside) as db:
        db.execute("CREATE TABLE mine (x)")
    before = outside.read_bytes()
    planted = store / ".genrun-index"
    planted.mkdir()
    (planted / "index.sqlite3").symlink_to(outside)
    _ls(store)
    assert outside.read_bytes() == before
    (planted / "index.sqlite3").unlink()
    (planted / "index.sqlite3").symlink_to(tmp_path / "created-outside.sqlite3")  # dangling
    _ls(store)
    assert not (tmp_path / "created-outside.sqlite3").exists()
    (planted / "index.sqlite3").unlink()
    planted.rmdir()
    target = tmp_path / "linked-folder"
    target.mkdir()
    planted.symlink_to(target)
    assert run_cli("index", "--rebuild", "--store", store).returncode == 0
    assert list(target.iterdir()) == []


def test_a_link_or_fifo_where_the_cache_lives_is_never_followed_or_waited_on(store: Path, tmp_path: Path) -> None:
    from genrun.runner.listing_cache import cache_file

    truth = _ls(store, "--no-index")
    path = cache_file(store)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    outside = tmp_path / "outside.sqlite3"
    outside.write_bytes(b"")
    path.symlink_to(outside)
    listed = run_cli("ls", "--store", store, "--json")
    assert orjson.loads(listed.stdout) == truth and "is not used" in listed.stderr
    assert outside.read_bytes() == b""
    path.unlink()
    os.mkfifo(path)
    listed = run_cli("ls", "--store", store, "--json")  # O_NONBLOCK: never waits for a writer
    assert orjson.loads(listed.stdout) == truth and "not a regular file" in listed.stderr
    rebuilt = run_cli("index", "--rebuild", "--store", store)  # replaces what is there (a link is removed, not followed)
    assert rebuilt.returncode == 0 and path.is_file() and not path.is_symlink(), rebuilt.stderr
    os.chmod(path, 0o666)  # writable by others: not ours alone
    listed = run_cli("ls", "--store", store, "--json")
    assert orjson.loads(listed.stdout) == truth and "only you may write" in listed.stderr


def _allowed_until(tmp_path: Path, before: datetime) -> tuple:
    signers = make_signers(tmp_path / "keys", [ALICE], options=f'valid-before="{before.strftime("%Y%m%d%H%M%S")}Z"')
    return signers, {"GENRUN_ALLOWED_SIGNERS": str(signers.allowed)}


def test_a_sign_off_judgement_ends_when_its_key_expires(tmp_path: Path) -> None:
    store = tmp_path / "store"
    run = make_run(store, "reviewed")
    expiry = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=4)
    signers, env = _allowed_until(tmp_path, expiry)
    sign(run, ALICE, signers)
    assert _ids(store, "--signed-by", ALICE, env=env) == [run.name]  # judged (and cached) while the key is valid
    assert "accept valid" in _ls(store, env=env)["snapshots"][0]["signoffs"]
    while datetime.now(timezone.utc) <= expiry + timedelta(seconds=1):  # nothing in the store or the trust file changes
        time.sleep(0.2)
    assert _ids(store, "--signed-by", ALICE, env=env) == []
    assert _ids(store, "--unsigned", env=env) == [run.name]
    row = _ls(store, env=env)["snapshots"][0]
    assert "accept valid" not in row["signoffs"] and row["signers"] == []
    human = run_cli("ls", "--store", store, env={**env, "COLUMNS": "200"})
    assert "accept valid" not in human.stdout and "accept invalid" in human.stdout
    assert "accept valid" not in _page(store, tmp_path, env)


def test_an_unsigned_record_never_counts_as_a_signature(store: Path) -> None:
    run = next(p for p in store.iterdir() if "-foreign-" in p.name)
    done = run_cli("signoff", run, "--decision", "accept", "--by", ALICE)  # no key: a record, not a signature
    assert done.returncode == 0, done.stderr
    for args in ([], ["--name", "foreign", "--limit", "1"]):
        assert _ids(store, "--signed-by", ALICE, *args) == []
        assert run.name in _ids(store, "--unsigned", *args)
    assert "accept unsigned" in next(r for r in _ls(store)["snapshots"] if r["id"] == run.name)["signoffs"]


def test_a_revoked_approve_never_hides_the_valid_accept(tmp_path: Path) -> None:
    """Issue 41, item 10: the sign-offs column leads with the records that hold, at any width."""
    store = tmp_path / "store"
    run = make_run(store, "reviewed")
    signers = make_signers(tmp_path / "keys", [ALICE])
    env = {"GENRUN_ALLOWED_SIGNERS": str(signers.allowed)}
    sign(run, ALICE, signers, decision="approve")
    approve = next(p.name for p in (run / layout.SIGNOFFS_DIR).iterdir() if p.name.endswith(".json"))
    assert run_cli("signoff", run, "--revoke", approve, "--by", ALICE).returncode == 0
    sign(run, ALICE, signers)
    for columns in ("200", "120"):
        human = run_cli("ls", "--store", store, env={**env, "COLUMNS": columns})
        line = next(line for line in human.stdout.splitlines() if run.name in line)
        assert f"accept valid ({ALICE})" in line, (columns, line)
    assert _ids(store, "--signed-by", ALICE, env=env) == [run.name]


def test_a_killed_ls_leaves_no_process_behind(tmp_path: Path) -> None:
    """SIGKILL of a first (cold) `ls` of a store big enough for genrun 04185e5 to fork workers: nothing it started stays."""
    store = tmp_path / "store"
    link_copies(make_run(tmp_path / "seed", "copied"), store, 1_200)
    ls = subprocess.Popen([sys.executable, "-m", "genrun.runner.cli", "ls", "--store", str(store), "--json"], cwd=REPO,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    assert ls.stderr is not None
    ls.stderr.readline()  # its note that it reads the snapshots from their files: it is at work
    deadline = time.monotonic() + 5
    while ls.poll() is None and not _children(ls.pid) and time.monotonic() < deadline:
        time.sleep(0.005)
    seen = _children(ls.pid)
    ls.kill()
    ls.wait()
    ls.stderr.close()
    deadline = time.monotonic() + 15
    while _in_session(ls.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = _in_session(ls.pid)
    for pid in left:  # (cleanup for the failing case, so that no test run leaves them either)
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes of the killed ls still run: {left} (its children when killed: {seen})"


def _stat_fields(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _children(pid: int) -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and (f := _stat_fields(int(p))) and f[1] == str(pid)]


def _in_session(sid: int) -> list[int]:
    """Live processes of session `sid` (zombies are gone as far as any resource goes)."""
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and (f := _stat_fields(int(p))) and f[3] == str(sid) and f[0] != "Z"]
