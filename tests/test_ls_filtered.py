"""`genrun ls` with a filter reads only the rows it shows: the rows the index holds are matched on its values (sign-offs
judged as they are now), each shown row is checked against its seal, and it lists exactly what it lists without the index."""

import io
import itertools
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import orjson
import pytest
from _store_helpers import Signers, indexed_ids, make_run, make_signers, make_sweep, reseal_as_failed, sign
from conftest import run_cli

from genrun.runner import listing as listing_module
from genrun.runner import store as store_module
from genrun.runner.cli import main
from genrun.runner.listing import Listing, list_store
from genrun.schemas import layout

ALICE, BOB, CAROL = "alice@example.com", "bob@example.com", "carol@example.com"
START = datetime(2026, 1, 1, tzinfo=timezone.utc)


@pytest.fixture(scope="module", autouse=True)
def signers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Signers]:
    """Keys of alice, bob and carol, trusted by every `ls` of this module (`GENRUN_ALLOWED_SIGNERS`)."""
    made = make_signers(tmp_path_factory.mktemp("keys"), [ALICE, BOB, CAROL])
    with pytest.MonkeyPatch.context() as patched:
        patched.setenv("GENRUN_ALLOWED_SIGNERS", str(made.allowed))
        yield made




def _make_store(root: Path, signers: Signers) -> Path:
    """Ten rows an hour apart (so --since/--until split them): runs of each state, backend and sign-off, a sweep whose
    items are listed under it, an unsealed run; indexed by a first listing."""
    store = root / "store"
    hours = itertools.count()
    real = store_module.new_snapshot_id
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(store_module, "new_snapshot_id", lambda name, now=None: real(name, START + timedelta(hours=next(hours))))
        make_run(store, "eval-a", reasons=("eos",), generated=5)
        make_run(store, "eval-b", status="failed", reasons=("exception",), backend="diffusers")
        sign(make_run(store, "chat", reasons=("max_new_tokens",), generated=40), ALICE, signers)
        items = [make_run(store, f"item{i}", reasons=("eos",) if i % 2 else ("max_new_tokens",)) for i in range(3)]
        make_sweep(store, items, name="nightly")
        sign(make_run(store, "eval-c", reasons=("max_new_tokens", "eos"), generated=7), BOB, signers)
        make_run(store, "late", status="failed", reasons=("max_new_tokens",))
        make_run(store, "draft", seal=False)
    assert list_store(store).total == 10 and len(indexed_ids(store)) == 9
    return store


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, signers: Signers) -> Path:
    return _make_store(tmp_path_factory.mktemp("filtered"), signers)


@pytest.fixture
def store(tmp_path: Path, signers: Signers) -> Path:
    """A store of its own, for a test that changes it."""
    return _make_store(tmp_path, signers)


@pytest.fixture
def listed(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Listing]]:
    """What `list_store` handed the real CLI, call by call (which rows it read, how many it left unchecked)."""
    seen: list[Listing] = []

    def spy(*args: Any, **kwargs: Any) -> Listing:
        seen.append(list_store(*args, **kwargs))
        return seen[-1]

    monkeypatch.setattr(listing_module, "list_store", spy)
    yield seen


def _ls(store: Path, *args: str) -> dict:
    done = run_cli("ls", "--store", store, "--json", *args)
    assert done.returncode == 0, done.stderr
    return orjson.loads(done.stdout)


def _ids(store: Path, *args: str) -> list[str]:
    return [row["id"] for row in _ls(store, *args)["snapshots"]]


def _id(store: Path, name: str) -> str:
    return next(p.name for p in store.iterdir() if f"-{name}-" in p.name)


FILTERS = [["--state", "failed"], ["--state", "sealed"], ["--state", "incomplete"], ["--state", "sweep"],
           ["--stop-reason", "max_new_tokens"], ["--stop-reason", "eos", "--stop-reason", "exception"], ["--backend", "diffusers"],
           ["--name", "eval-*"], ["--unsigned"], ["--signed-by", ALICE], ["--sweep", "nightly"], ["--since", "2026-01-01T05:00"],
           ["--until", "2026-01-01T05:00"], ["--state", "succeeded", "--stop-reason", "max_new_tokens", "--unsigned"]]
ARRANGED = [[], ["--limit", "2"], ["--limit", "2", "--reverse"], ["--reverse"], ["--sort", "generated", "--limit", "2"]]


def test_each_filter_lists_from_the_index_what_it_lists_from_the_files(shared: Path, listed: list[Listing]) -> None:
    whole = list_store(shared, use_cache=False).rows
    sealed = sum(row.sealed for row in whole)
    assert [row.sweep is not None for row in whole].count(True) == 3  # the items under their sweep
    for filters in FILTERS:
        filters = [_id(shared, "nightly") if arg == "nightly" else arg for arg in filters]
        every = _ls(shared, "--no-index", *filters)["snapshots"]
        assert 0 < len(every) < len(whole), filters  # each filter keeps some rows and leaves some out
        for arranged in ARRANGED:
            args = [*filters, *arranged]
            assert _ls(shared, *args) == _ls(shared, "--no-index", *args), args
            listing = listed[-2]  # the indexed call's (the last is --no-index's)
            assert listing.total == len(whole) and listing.matched == len(every), args
            # only the rows list_store handed back were checked against their seals: every other sealed row was decided
            # from the index (a limit without --sort: only the rows shown)
            assert listing.unchecked == sealed - sum(row.sealed for row in listing.rows), args
            if arranged[:1] == ["--limit"]:
                assert len(listing.rows) == min(2, len(every)), args


def test_the_sweep_filter_lists_its_items_under_their_sweep_from_the_index(shared: Path, listed: list[Listing]) -> None:
    sweep = _id(shared, "nightly")
    items = _ls(shared, "--sweep", sweep[:20], "--limit", "2")["snapshots"]
    assert [row["id"] for row in items] == sorted(p.name for p in shared.iterdir() if "-item" in p.name)[-2:]
    assert {row["sweep"] for row in items} == {sweep} and listed[-1].unchecked == 9 - 2


def test_a_terminal_shows_the_newest_matched_rows_and_counts_the_rest(shared: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      listed: list[Listing]) -> None:
    from genrun.runner.cli import ls

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(ls, "TERMINAL_ROWS", 2)
    monkeypatch.setenv("COLUMNS", "200")
    succeeded = _ids(shared, "--no-index", "--state", "succeeded")
    for args, shown in (([], succeeded[-2:]), (["--reverse"], succeeded[::-1][:2])):
        screen = Terminal()
        with monkeypatch.context() as patched:
            patched.setattr(sys, "stdout", screen)
            assert main(["ls", "--store", str(shared), "--state", "succeeded", *args]) == 0
        lines = screen.getvalue().splitlines()
        assert lines[0] == f"2 of 10 snapshot(s) in {shared}"
        assert [line.split("└")[-1].split()[0] for line in lines[2:4]] == shown
        assert lines[4] == f"… {len(succeeded) - 2} {'later' if args else 'earlier'} row(s) not shown: --limit 0 lists every one (so does piping)"
        assert listed[-1].unchecked == 9 - 2  # the terminal's rows alone were read


def test_sign_offs_added_or_revoked_after_indexing_are_judged_as_they_are_now(store: Path, signers: Signers) -> None:
    eval_a, chat = _id(store, "eval-a"), _id(store, "chat")
    sign(store / eval_a, CAROL, signers)  # the oldest row: outside any window of the newest
    record = next(p.name for p in (store / chat / layout.SIGNOFFS_DIR).iterdir() if p.suffix == ".json")
    revoked = run_cli("signoff", store / chat, "--revoke", record, "--by", ALICE)
    assert revoked.returncode == 0, revoked.stderr
    assert _ids(store, "--signed-by", CAROL, "--limit", "1") == [eval_a]  # the index holds it unsigned
    assert _ids(store, "--signed-by", ALICE) == []  # the index holds it signed by alice
    unsigned = _ids(store, "--unsigned", "--limit", "20")
    assert chat in unsigned and eval_a not in unsigned
    for args in (["--unsigned"], ["--unsigned", "--limit", "3", "--reverse"], ["--signed-by", CAROL, "--limit", "1"]):
        assert _ls(store, *args) == _ls(store, "--no-index", *args), args


def test_a_seal_changed_on_a_shown_row_is_marked_and_on_one_not_shown_is_not_read(store: Path, listed: list[Listing]) -> None:
    eval_a, eval_c = _id(store, "eval-a"), _id(store, "eval-c")
    reseal_as_failed(store / eval_a)  # the oldest: outside every window of the newest rows below
    args = ["--backend", "transformers", "--limit", "2"]
    assert _ls(store, *args) == _ls(store, "--no-index", *args)
    assert listed[-2].unchecked == 9 - 1  # the newest two: one sealed (checked), the unsealed draft (read)
    # decided by what the index holds, its files unread: a changed seal is caught where a row is shown
    assert eval_a not in _ids(store, "--state", "failed", "--limit", "5") and eval_a in _ids(store, "--no-index", "--state", "failed")
    reseal_as_failed(store / eval_c)  # shown: every row is read and judged, as without the index
    human = run_cli("ls", "--store", store, "--backend", "transformers", "--limit", "3")
    assert "(seal changed)" in human.stdout and f"note: {eval_c}: the seal changed since it was cached" in human.stderr
    changed = next(row for row in listed[-1].rows if row.id == eval_c)
    assert (changed.state, changed.generated) == ("failed", 99) and listed[-1].unchecked == 0
    for args in (["--state", "succeeded", "--limit", "2"], ["--name", "eval-*", "--limit", "1", "--reverse"]):
        assert _ids(store, *args) == _ids(store, "--no-index", *args), args  # eval-c matched by the index, found changed
        assert listed[-2].unchecked == 0


def test_rows_the_index_does_not_hold_are_filtered_on_their_files(store: Path, listed: list[Listing]) -> None:
    draft = _id(store, "draft")
    store_module.seal_snapshot(store / draft)  # sealed after indexing: succeeded now, no longer incomplete
    fresh = make_run(store, "fresh", status="failed", reasons=("stop_string",))
    unsealed = make_run(store, "wip", reasons=("stop_string",), seal=False)
    planning = store / f"{layout.PLANNING_PREFIX}abandoned"
    planning.mkdir()
    assert _ids(store, "--state", "succeeded", "--limit", "1") == [draft]
    assert _ids(store, "--state", "failed", "--limit", "1") == [fresh.name]
    assert _ids(store, "--state", "incomplete") == [unsealed.name]
    assert _ids(store, "--stop-reason", "stop_string", "--limit", "5") == [fresh.name, unsealed.name]
    assert _ids(store, "--state", "abandoned", "--limit", "5") == [planning.name]
    assert listed[-1].unchecked == 11  # every indexed row (the two read above are indexed now) decided from the index
    assert {draft, fresh.name} <= indexed_ids(store)


def test_a_stop_reason_no_row_has_names_the_reasons_of_the_rows_matched_from_the_index(shared: Path, listed: list[Listing]) -> None:
    for reason, others, here in (("eso", [], "eos, exception, max_new_tokens"),
                                 ("eos", ["--state", "failed", "--limit", "3"], "exception, max_new_tokens")):
        typo = run_cli("ls", "--store", shared, "--stop-reason", reason, *others)
        assert typo.returncode == 0 and typo.stdout.startswith("0 of 10 snapshot(s)"), typo.stderr
        assert f"note: no snapshot stopped by {reason!r}; reasons here: {here}" in typo.stderr
        assert listed[-1].unchecked == 9 and listed[-1].matched == 0  # from the index alone
        assert typo.stderr == run_cli("ls", "--store", shared, "--no-index", "--stop-reason", reason, *others).stderr
    # with a sign-off filter the reasons named are those of the rows it keeps, as judged now (`listing._signed_now`)
    sweep = _id(shared, "nightly")
    for others in (["--signed-by", ALICE], ["--unsigned", "--limit", "2"], ["--sweep", sweep, "--unsigned"]):
        typo = run_cli("ls", "--store", shared, "--stop-reason", "eso", *others)
        assert typo.returncode == 0 and "note: no snapshot stopped by 'eso'; reasons here: " in typo.stderr, (others, typo.stderr)
        assert typo.stderr == run_cli("ls", "--store", shared, "--no-index", "--stop-reason", "eso", *others).stderr, others


def test_the_index_decides_the_edge_cases_of_each_filter_as_the_rows_do(shared: Path, listed: list[Listing]) -> None:
    """Each filter's SQL form (`RowFilter.index_where`) keeps what its row form keeps where they could part: a time
    between two seconds and in another zone, a wildcard class, a wanted reason holding the separator of a row's reasons,
    states that name sealed or sweep rows wholesale, a sweep named by a prefix with other filters."""
    sweep = _id(shared, "nightly")
    cases = [["--since", "2026-01-01T04:59:59.5"], ["--since", "2026-01-01T05:00:00.5"], ["--until", "2026-01-01T05:00:00.000001"], ["--since", "2026-01-01T06:30+02:00"],
             ["--until", "2026-01-01T03:00:00-01:00"], ["--name", "eval-[!a]"], ["--name", "item?"], ["--name", "*"],
             ["--stop-reason", "eos, max_new_tokens"], ["--stop-reason", "exception", "--stop-reason", "eos, max_new_tokens"],
             ["--state", "sealed", "--state", "failed"], ["--state", "sweep", "--state", "incomplete"],
             ["--sweep", sweep[:18], "--stop-reason", "eos"], ["--sweep", sweep, "--name", "item[02]"],
             ["--backend", "transformers", "--since", "2026-01-01T02:00", "--until", "2026-01-01T08:00", "--state", "succeeded"]]
    for args in cases:
        for arranged in ([], ["--limit", "1"]):
            indexed = run_cli("ls", "--store", shared, "--json", *args, *arranged)
            assert indexed.returncode == 0, indexed.stderr
            assert listed[-1].unchecked == 9 - sum(row.sealed for row in listed[-1].rows), args  # decided by the index
            files = run_cli("ls", "--store", shared, "--json", "--no-index", *args, *arranged)
            assert (indexed.stdout, indexed.stderr) == (files.stdout, files.stderr), args
    assert _ids(shared, "--stop-reason", "eos, max_new_tokens") == []  # eval-c's cell: its reasons are matched one by one
    item1, item2 = _id(shared, "item1"), _id(shared, "item2")  # planned at 04:00:00 and 05:00:00
    for since, kept in (("2026-01-01T04:59:59.5", {item2}), ("2026-01-01T05:00:00.5", set()), ("2026-01-01T06:00+01:00", {item2}),
                        ("2026-01-01T04:00:00", {item1, item2})):
        assert {item1, item2} & set(_ids(shared, "--since", since)) == kept, since
    for until, kept in (("2026-01-01T05:00:00.000001", {item1, item2}), ("2026-01-01T05:00", {item1}), ("2026-01-01T05:00+01:00", set())):
        assert {item1, item2} & set(_ids(shared, "--until", until)) == kept, until
