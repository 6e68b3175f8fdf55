"""A big store's work in a process per core. The first `ls` reads its snapshots so (`_CurrentRows.read_ahead`), the
store page reads, checks and renders each page of rows so (`listing.consume_listing`), and a sign-off filter looks at
every row's signoffs/ in a forked process while the rows are placed (`listing._SignoffsNow`): what they list, render and
index is exactly what one process doing it in turn makes, a worker that dies costs only time, and a threaded caller
gets no pool.

Each listing here runs in a fresh `python` process (forking is only safe from a process with one thread; a pytest-xdist
worker has more), with `listing._READ_AHEAD_FROM` (and the store page's `PAGE_SIZE`, `listing._SIGNOFFS_BESIDE_FROM`)
lowered so that a small store takes the big store's path: the pool itself, its workers and what they send back are real.
"""

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from _store_helpers import index_file, make_run, make_sweep, reseal_as_failed
from conftest import run_cli

from genrun.runner.listing import list_store, rebuild_index
from genrun.schemas import layout

REPO = Path(__file__).resolve().parents[1]
CORES = len(os.sched_getaffinity(0))
needs_two_cores = pytest.mark.skipif(CORES < 2, reason="a pool needs two cores; with one, every snapshot is read in turn")

_CHILD = """
import os, sys, time
from genrun.runner import listing
from genrun.runner.cli import main, _store_page

listing._READ_AHEAD_FROM = {read_ahead_from}
listing._SIGNOFFS_BESIDE_FROM = {signoffs_beside_from}
listing._KEYS_BESIDE_FROM = {keys_beside_from}
_store_page.PAGE_SIZE = {page_size}
read = listing._read_from_files
if {trace}:  # say on stderr what each pool was given and whether it answered, and whether a forked look answered
    from genrun.runner import _fork_pool
    real_map = _fork_pool.fork_map
    def traced(function, chunks, workers):
        answers = real_map(function, chunks, workers)
        print(f"pool of {{workers}}: {{len(chunks)}} chunks, {{'answered' if answers is not None else 'failed'}}", file=sys.stderr)
        return answers
    _fork_pool.fork_map = traced
    real_answer = _fork_pool.Forked.answer
    def traced_answer(self):
        answer = real_answer(self)
        print(f"forked look {{'answered' if answer is not None else 'failed'}}", file=sys.stderr)
        return answer
    _fork_pool.Forked.answer = traced_answer
caller = os.getpid()
import atexit, shutil, tempfile
marks = tempfile.mkdtemp()
atexit.register(shutil.rmtree, marks, True)
started = os.path.join(marks, "started")
def beside(real_look):  # the forked look (never the caller's own) dies, fails, or takes a while
    def look(*args):
        if os.getpid() == caller and not {threaded}:
            # the caller takes its share once the forked look has begun its own: else, on a busy machine, it may take
            # every row before the look is scheduled (`FromBothEnds`), which would then have nothing to die or fail on
            while not os.path.exists(started):
                time.sleep(0.001)
        if os.getpid() != caller:
            open(started, "w").close()
            if {beside} == "die":
                os._exit(3)
            if {beside} == "fail":
                raise OSError(5, "Input/output error")
            print("forked look started", file=sys.stderr, flush=True)
            time.sleep(10**6)  # only a kill ends it
        return real_look(*args)
    return look
if {beside}:
    listing._changed_signoffs = beside(listing._changed_signoffs)
    listing._changed_keys = beside(listing._changed_keys)

def die(*args):  # a worker killed (the OOM killer, a signal) part-way
    os._exit(3)

def fail(*args):  # a worker's reading fails outright (the readers turn a snapshot's own errors into rows)
    raise OSError(5, "Input/output error")

def slow(*args):  # a chunk that takes a while: a signal lands while the workers read
    time.sleep(0.5)
    return read(*args)

if {die}:
    listing._read_from_files = listing._consume_chunk = die if {die} == "die" else fail
if {slow}:
    listing._read_from_files = slow
if {threaded}:
    import threading
    threading.Thread(target=threading.Event().wait, daemon=True).start()  # a caller with another thread
code = main({argv!r})
print("the pool module was imported" if "genrun.runner._fork_pool" in sys.modules else "no pool module", file=sys.stderr)
sys.exit(code)
"""


def _script(*argv: str | Path, read_ahead_from: int = 1, page_size: int = 1000, signoffs_beside_from: int = 5000, keys_beside_from: int = 5000,
            trace: bool = False, die: str = "", slow: bool = False, beside: str = "", threaded: bool = False) -> list[str]:
    return [sys.executable, "-c", _CHILD.format(read_ahead_from=read_ahead_from, page_size=page_size, signoffs_beside_from=signoffs_beside_from,
                                                keys_beside_from=keys_beside_from, trace=trace, die=repr(die), slow=slow, beside=repr(beside),
                                                threaded=threaded, argv=[str(a) for a in argv])]


def _genrun(*argv: str | Path, **child: bool | int | str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(_script(*argv, **child), cwd=REPO, capture_output=True, text=True, timeout=300)  # type: ignore[arg-type]
    assert done.returncode == 0, done.stderr
    return done


def _processes_naming(text: str) -> list[int]:
    """The live processes whose command line holds `text` (a worker left behind would still hold its parent's)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and text in (entry / "cmdline").read_bytes().decode(errors="replace"):
                found.append(int(entry.name))
        except OSError:  # gone meanwhile
            continue
    return found


def _store(tmp_path: Path) -> Path:
    """Every kind of row: sealed runs of each outcome, a sweep with its items, a signed run, an unsealed run, a run whose
    result is a link, a sweep whose plan cannot be described (an unreadable row), and a directory that is no snapshot."""
    store = tmp_path / "store"
    runs = [make_run(store, f"run{i}", reasons=("eos", "max_length")[: 1 + i % 2], generated=i) for i in range(9)]
    make_run(store, "failed", status="failed", reasons=("exception",))
    make_sweep(store, runs[:3])
    signed = run_cli("signoff", runs[4], "--decision", "accept", "--by", "alice@example.com")
    assert signed.returncode == 0, signed.stderr
    make_run(store, "unsealed", seal=False)
    linked = make_run(store, "linked")
    (linked / layout.RESULT).chmod(0o644)
    (linked / layout.RESULT).unlink()
    (linked / layout.RESULT).symlink_to("/etc/passwd")
    hostile = make_sweep(store, [], name="hostile")
    (hostile / layout.SWEEP_PLAN).chmod(0o644)
    (hostile / layout.SWEEP_PLAN).write_bytes(b'{"items": 5}')
    (store / "not-a-snapshot").mkdir()
    return store


def _rows_in_index(store: Path) -> list[tuple]:
    with sqlite3.connect(index_file(store)) as db:
        return sorted(db.execute("SELECT * FROM rows"))


def _listed(done: subprocess.CompletedProcess[str]) -> list[dict]:
    return orjson.loads(done.stdout)["snapshots"]


def _as_json(store: Path) -> list[dict]:
    """What one process reading every snapshot in turn lists (this process: no pool, see the module's docstring)."""
    return [orjson.loads(orjson.dumps(row._asdict())) for row in list_store(store, use_index=False).rows]


@needs_two_cores
def test_a_pool_lists_and_indexes_exactly_what_one_process_does(tmp_path: Path) -> None:
    store = _store(tmp_path)
    expected = _as_json(store)
    assert {row["state"] for row in expected} >= {"succeeded", "failed", "incomplete", "sweep planned"}
    assert any(row["signers"] for row in expected) and any(row["problem"] for row in expected)

    cold = _genrun("ls", "--store", store, "--json")
    directories = len(expected) + 1  # and not-a-snapshot, which is read to find that out
    assert f"reading {directories} snapshots that the store index does not hold yet, in {min(CORES, 8)} processes" in cold.stderr
    assert _listed(cold) == expected
    by_pool = _rows_in_index(store)
    rebuild_index(store)  # one process, in turn
    assert _rows_in_index(store) == by_pool and len(by_pool) == sum(row["sealed"] for row in expected)

    _genrun("index", "--rebuild", "--store", store)
    assert _rows_in_index(store) == by_pool
    warm = _genrun("ls", "--store", store, "--json")
    assert _listed(warm) == expected
    assert "reading 3 snapshots" in warm.stderr  # only those the index does not hold: unsealed, unreadable, not a snapshot


@needs_two_cores
@pytest.mark.parametrize("failure", ["die", "fail"])
def test_a_worker_that_dies_or_fails_costs_only_time(tmp_path: Path, failure: str) -> None:
    store = _store(tmp_path)
    expected = _as_json(store)
    for argv in (["ls", "--store", store, "--json"], ["index", "--rebuild", "--store", store]):
        index_file(store).unlink(missing_ok=True)
        done = _genrun(*argv, die=failure)
        assert f"in {min(CORES, 8)} processes" in done.stderr  # the pool was started, and its workers died
    assert _listed(_genrun("ls", "--store", store, "--json", die=failure)) == expected
    rebuilt = _rows_in_index(store)
    rebuild_index(store)
    assert rebuilt == _rows_in_index(store)


def test_no_pool_below_the_threshold_or_with_a_second_thread(tmp_path: Path) -> None:
    store = tmp_path / "store"
    for i in range(3):
        make_run(store, f"run{i}")
    expected = _as_json(store)
    small = _genrun("ls", "--store", store, "--json", read_ahead_from=4)
    threaded = _genrun("ls", "--store", store, "--json", "--no-index", threaded=True)
    for done in (small, threaded):
        assert "reading" not in done.stderr and _listed(done) == expected
    assert "no pool module" in small.stderr  # importing it costs a warm `ls` ~20 ms


@needs_two_cores
def test_an_interrupted_first_listing_leaves_no_worker_and_nothing_half_done(tmp_path: Path) -> None:
    store = _store(tmp_path)
    expected = _as_json(store)
    lister = subprocess.Popen(_script("ls", "--store", store, "--json", slow=True), cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    assert lister.stderr is not None
    said = lister.stderr.readline()  # printed before the pool starts
    assert "reading" in said and "processes" in said, said
    lister.send_signal(signal.SIGINT)  # the main process only, as `kill -INT` does (a terminal's Ctrl-C reaches all)
    out, err = lister.communicate(timeout=120)
    assert lister.returncode == 130, err
    assert "interrupted by SIGINT" in err and out == ""
    assert _processes_naming(str(store)) == []  # its workers ended with it
    assert _listed(_genrun("ls", "--store", store, "--json")) == expected  # whatever it had indexed, nothing is wrong


# -- the store page: each page of rows read, checked and rendered in a worker ----------------------------------------


def _site(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _page(store: Path, site: Path, **child: bool | int | str) -> tuple[dict[str, bytes], str]:
    """The store page of `store` in pages of 3 rows, made in a fresh process (`_genrun`): every page's bytes, and stderr."""
    site.mkdir()
    done = _genrun("report", "--store", store, "--html", site / "index.html", page_size=3, read_ahead_from=10**6, trace=True, **child)
    return _site(site), done.stderr


@needs_two_cores
def test_the_store_page_rendered_in_a_pool_is_the_page_one_process_renders(tmp_path: Path) -> None:
    store = _store(tmp_path)
    rows = len(list_store(store, use_index=False).rows)
    pages = -(-rows // 3)
    cold, said = _page(store, tmp_path / "cold")  # no index yet: every row read here, then each page rendered in a worker
    assert f"{pages} chunks, answered" in said and len(cold) == pages > 2
    warm, said = _page(store, tmp_path / "warm")  # each worker reads its rows from the index, checked against their seals
    assert f"{pages} chunks, answered" in said and warm == cold
    in_turn, said = _page(store, tmp_path / "in-turn", threaded=True)
    assert "pool of" not in said and in_turn == cold
    index_file(store).unlink()
    index_file(store).parent.rmdir()
    index_file(store).parent.write_text("in the way")  # no index to be had: the listing read whole, as `ls --no-index` does
    from_files, said = _page(store, tmp_path / "from-files")
    assert "cannot be opened" in said and from_files == cold
    linked = [name for name in cold["index.html"].decode().split('href="')[1:] if "/" in name.split('"')[0]]
    assert len(linked) == 3  # the first page's three rows link to their snapshots


@needs_two_cores
def test_the_store_page_shows_a_changed_seal_and_a_later_sign_off_as_they_are_now(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _page(store, tmp_path / "before")
    victim = next(p for p in store.iterdir() if "-run7-" in p.name)
    reseal_as_failed(victim)  # after indexing: the worker reading its page finds the seal changed
    now, said = _page(store, tmp_path / "resealed")
    assert "chunks, answered" in said  # the workers answered; one said its row changed, so the listing was read whole
    text = b"".join(now.values()).decode()
    line = text.split(f">{victim.name}</a>")[1].split("</tr>")[0]
    assert '<td class="failed">failed</td>' in line  # as its files say now, never the indexed "succeeded"
    assert run_cli("index", "--store", store, "--rebuild").returncode == 0
    later = next(p for p in store.iterdir() if "-run8-" in p.name)
    signed = run_cli("signoff", later, "--decision", "accept", "--by", "carol@example.com")
    assert signed.returncode == 0, signed.stderr
    now, said = _page(store, tmp_path / "signed")
    assert "chunks, answered" in said
    line = b"".join(now.values()).decode().split(f">{later.name}</a>")[1].split("</tr>")[0]
    assert "accept unsigned (carol@example.com)" in line
    with sqlite3.connect(index_file(store)) as db:  # judged in a worker, kept in the index by the parent
        assert db.execute("SELECT signoffs FROM rows WHERE id = ?", (later.name,)).fetchone() == ("accept unsigned (carol@example.com)",)


@needs_two_cores
@pytest.mark.parametrize("failure", ["die", "fail"])
def test_a_page_worker_that_dies_or_fails_costs_only_time(tmp_path: Path, failure: str) -> None:
    store = _store(tmp_path)
    expected, _ = _page(store, tmp_path / "expected")
    got, said = _page(store, tmp_path / "got", die=failure)
    assert "chunks, failed" in said and got == expected


# -- a sign-off filter: every row's signoffs/ looked at in a forked process while the rows are placed -----------------

_SIGNOFF_FILTERS = (["--unsigned"], ["--signed-by", "carol@example.com"], ["--signed-by", "alice@example.com", "--stop-reason", "eos"],
                    ["--unsigned", "--stop-reason", "max_length", "--limit", "2"], ["--unsigned", "--stop-reason", "eso"])


def _signed_after_indexing(tmp_path: Path) -> Path:
    """`_store` indexed, then a run signed off by carol: the index's judgement of that row no longer holds."""
    store = _store(tmp_path)
    assert run_cli("index", "--rebuild", "--store", store).returncode == 0
    later = next(p for p in store.iterdir() if "-run8-" in p.name)
    signed = run_cli("signoff", later, "--decision", "accept", "--by", "carol@example.com")
    assert signed.returncode == 0, signed.stderr
    return store


def _filtered(store: Path, filters: list[str], **child: bool | int | str) -> tuple[list[dict], list[str]]:
    """The filtered listing (`--json`) made in a fresh process, and its notes."""
    done = _genrun("ls", "--store", store, "--json", *filters, trace=True, read_ahead_from=10**6, **child)
    return _listed(done), [line for line in done.stderr.splitlines() if line.startswith("note:")]


def _from_files(store: Path, filters: list[str]) -> tuple[list[dict], list[str]]:
    done = run_cli("ls", "--store", store, "--json", "--no-index", *filters)
    assert done.returncode == 0, done.stderr
    return orjson.loads(done.stdout)["snapshots"], [line for line in done.stderr.splitlines() if line.startswith("note:")]


@needs_two_cores
def test_a_sign_off_filter_looking_beside_lists_what_the_files_say(tmp_path: Path) -> None:
    store = _signed_after_indexing(tmp_path)
    carol = _filtered(store, ["--signed-by", "carol@example.com"], signoffs_beside_from=1)[0]
    assert [row["name"] for row in carol] == ["run8"]  # signed after indexing: found by the forked look
    with sqlite3.connect(index_file(store)) as db:  # judged anew by the caller, kept in the index
        assert db.execute("SELECT signers FROM rows WHERE id = ?", (carol[0]["id"],)).fetchone() == ("carol@example.com",)
    later = store / carol[0]["id"]
    for number, filters in enumerate(_SIGNOFF_FILTERS):
        for child in ({}, {"threaded": True}):  # a forked look; the caller's own
            signed = run_cli("signoff", later, "--decision", "accept", "--by", f"reviewer{number}{len(child)}@example.com")
            assert signed.returncode == 0, signed.stderr  # each listing finds a row whose sign-offs changed since indexed
            expected = _from_files(store, filters)
            assert expected[0] or expected[1], filters  # each filter keeps a row, or says why none
            done = _genrun("ls", "--store", store, "--json", *filters, trace=True, read_ahead_from=10**6, signoffs_beside_from=1, **child)
            assert ("forked look answered" in done.stderr) != bool(child), (filters, done.stderr)
            assert (_listed(done), [line for line in done.stderr.splitlines() if line.startswith("note:")]) == expected, filters
    below, said = _filtered(store, ["--unsigned"], signoffs_beside_from=10**6)
    assert below == _from_files(store, ["--unsigned"])[0]  # below the threshold: no fork
    assert "forked look" not in "".join(said)


@needs_two_cores
@pytest.mark.parametrize("failure", ["die", "fail"])
def test_a_forked_look_that_dies_or_fails_costs_only_time(tmp_path: Path, failure: str) -> None:
    store = _signed_after_indexing(tmp_path)
    for filters in _SIGNOFF_FILTERS[:3]:
        done = _genrun("ls", "--store", store, "--json", *filters, trace=True, read_ahead_from=10**6, signoffs_beside_from=1, beside=failure)
        assert "forked look failed" in done.stderr
        assert _listed(done) == _from_files(store, filters)[0], filters


@needs_two_cores
def test_an_interrupted_sign_off_filter_leaves_no_forked_look(tmp_path: Path) -> None:
    store = _signed_after_indexing(tmp_path)
    lister = subprocess.Popen(_script("ls", "--store", store, "--json", "--unsigned", read_ahead_from=10**6, signoffs_beside_from=1,
                                      beside="slow"), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert lister.stderr is not None
    said = lister.stderr.readline()  # the forked look says so, then sleeps: the caller waits for it
    assert said == "forked look started\n", said
    lister.send_signal(signal.SIGINT)  # the caller only, as `kill -INT` does
    try:
        out, err = lister.communicate(timeout=120)
    finally:  # a caller that waits for its look forever fails the test, and leaves nothing behind either
        for pid in _processes_naming(str(store)):
            os.kill(pid, signal.SIGKILL)
    assert lister.returncode == 130, err
    assert "interrupted by SIGINT" in err and out == ""
    assert _processes_naming(str(store)) == []  # the forked look was ended and reaped with it
    assert _filtered(store, ["--unsigned"])[0] == _from_files(store, ["--unsigned"])[0]


# -- a whole listing: every row's keys compared with the index's, half in a forked process ----------------------------


@needs_two_cores
@pytest.mark.parametrize("child", [{}, {"threaded": True}, {"beside": "die"}, {"beside": "fail"}], ids=["forked", "threaded", "die", "fail"])
def test_a_whole_listing_comparing_keys_beside_lists_what_one_process_does(tmp_path: Path, child: dict) -> None:
    store = _signed_after_indexing(tmp_path)  # run8's sign-offs changed since indexed
    resealed = next(p for p in store.iterdir() if "-run7-" in p.name)
    reseal_as_failed(resealed)  # its seal changed since indexed
    shutil.rmtree(next(p for p in store.iterdir() if "-run5-" in p.name))  # removed since indexed
    done = _genrun("ls", "--store", store, "--json", trace=True, read_ahead_from=10**6, keys_beside_from=1, **child)
    said = "forked look failed" if "beside" in child else "forked look answered"
    assert (said in done.stderr) != ("threaded" in child), done.stderr
    listed = _listed(done)
    assert next(row for row in listed if row["id"] == resealed.name)["changed"]  # never the row the index holds
    in_turn = run_cli("ls", "--store", store, "--json")  # this process has threads: every row in turn, as always
    assert in_turn.returncode == 0, in_turn.stderr
    assert listed == orjson.loads(in_turn.stdout)["snapshots"]
    assert [line for line in done.stderr.splitlines() if line.startswith("note:")] == in_turn.stderr.splitlines()
    with sqlite3.connect(index_file(store)) as db:  # run8 judged anew, kept in the index; run5 gone from it
        assert db.execute("SELECT signers FROM rows WHERE name = 'run8'").fetchone() == ("carol@example.com",)
        assert db.execute("SELECT count(*) FROM rows WHERE name = 'run5'").fetchone() == (0,)


_FORKED = """
import os, sys, time
from genrun.runner._fork_pool import Forked

def answer():
    return {"answer": 42, "pid": os.getpid()}

def fails():
    raise ValueError("no")

def sleeps():
    print(os.getpid(), file=sys.stderr, flush=True)
    time.sleep(10**6)  # only a kill ends it

def answered(function):
    forked = Forked()
    assert forked.start(function)
    return forked.answer()

never = Forked()
never.abandon()  # never started: nothing to end
print(answered(answer)["answer"], answered(fails), answered(lambda: os._exit(0)), flush=True)
abandoned = Forked()
abandoned.start(sleeps)
"""

_ENDED_TWICE = """
pid = int(sys.stdin.readline())  # the test read the pid the process printed, and echoed it back
{end}()
{end}()  # twice: nothing left the second time
print(os.path.exists(f"/proc/{{pid}}"), flush=True)
"""


@needs_two_cores
def test_a_forked_function_answers_says_when_it_could_not_and_is_abandoned_cleanly() -> None:
    process = subprocess.Popen([sys.executable, "-c", _FORKED + _ENDED_TWICE.format(end="abandoned.abandon")], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    assert process.stdout.readline() == "42 None None\n"  # answered; raised; exited without sending an answer
    _ended_and_reaped(process)


def _ended_and_reaped(process: "subprocess.Popen[str]") -> None:
    """The script's forked process printed its pid on stderr; echoed back, the script ends that process and prints whether
    /proc still has it. It must not (killed and reaped: no process, no zombie); here it is killed if the script failed to."""
    assert process.stderr is not None
    pid = process.stderr.readline()
    try:
        out, err = process.communicate(pid, timeout=120)  # an end that waited for the function would never come
    finally:  # nothing left behind when it fails
        process.kill()
        if pid.strip().isdigit() and os.path.exists(f"/proc/{int(pid)}"):
            os.kill(int(pid), signal.SIGKILL)
    assert out == "False\n", err
    assert process.returncode == 0


_BOTH_ENDS = """
import os, sys, threading, time
from genrun.runner._fork_pool import FromBothEnds

N = 5 * FromBothEnds.BLOCK + 7  # blocks and a short last one
caller = os.getpid()

def mine(lo, hi):  # each item with the process that did it
    return [(i, os.getpid()) for i in range(lo, hi)]

def sleeps(lo, hi):
    if os.getpid() != caller:
        print(os.getpid(), file=sys.stderr, flush=True)
        time.sleep(10**6)  # only a kill ends it
    return mine(lo, hi)
"""

_SHARED = """
current = None

def handshake(lo, hi):  # the process does its first block, then waits until the caller has done one (no timing)
    if os.getpid() != caller and lo > 0:
        while current._marks[1] == N:
            time.sleep(0.001)
    return mine(lo, hi)

def shared(work, wait_for_the_process=False):
    global current
    both = current = FromBothEnds(work, N)
    try:
        started = both.start()
        if wait_for_the_process:  # the caller busy with other work until the process has done a block
            while started and both._marks[0] == 0:
                time.sleep(0.001)
        found = both.finish()
    finally:
        both.close()
    items = sorted({i for i, _ in found})
    assert items == list(range(N)), (len(items), N)  # every item, whoever did it (a block near the meeting maybe twice)
    return started, sorted({pid == caller for _, pid in found})

def dies(lo, hi):  # after its first block: what it did is not answered, so the caller does it again
    if os.getpid() != caller and lo > 0:
        os._exit(3)
    return mine(lo, hi)

def fails(lo, hi):
    if os.getpid() != caller and lo > 0:
        raise OSError(5, "Input/output error")
    return mine(lo, hi)

print("shared", *shared(handshake, wait_for_the_process=True), flush=True)  # both did some: [False, True]
print("died", *shared(dies, True), "failed", *shared(fails, True), flush=True)  # the caller did what the process left
threading.Thread(target=threading.Event().wait, daemon=True).start()  # a caller with another thread: no fork
print("threaded", *shared(mine), flush=True)
"""

_CLOSED = """
both = FromBothEnds(sleeps, N)
assert both.start()
""" + _ENDED_TWICE.format(end="both.close")


@needs_two_cores
def test_work_shared_from_both_ends_is_done_once_whoever_does_it() -> None:
    """`FromBothEnds`: a forked process from the first item up, the caller from the last down; every item answered, by
    both when the process got going first, by the caller alone when the process died, failed or could not be forked."""
    done = subprocess.run([sys.executable, "-c", _BOTH_ENDS + _SHARED], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["shared True [False, True]", "died True [True] failed True [True]", "threaded False [True]"]


@needs_two_cores
def test_work_shared_from_both_ends_leaves_no_process_when_closed() -> None:
    _ended_and_reaped(subprocess.Popen([sys.executable, "-c", _BOTH_ENDS + _CLOSED], cwd=REPO, stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
