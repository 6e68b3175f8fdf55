"""`collector_paused`: the cyclic garbage collector is off inside a listing and as it was after, whatever happens."""

import gc
from pathlib import Path

import orjson
import pytest
from _store_helpers import make_run
from conftest import run_cli

from genrun.runner import listing
from genrun.runner._collector import collector_paused


def test_the_collector_is_paused_inside_and_back_after_even_on_an_error() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():  # a pause inside a pause leaves it to the outer one
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError), collector_paused():
        raise ValueError("a listing that fails")
    assert gc.isenabled()


def test_a_collector_turned_off_by_the_caller_stays_off() -> None:
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_listing_and_ls_run_without_it_and_leave_it_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "store"
    make_run(store, "run")
    enabled_while_scanning: list[bool] = []
    scan = listing._scan

    def observed_scan(store: Path, *args: object, **kwargs: object) -> "listing._Scanned":  # the real scan, noting the collector's state
        enabled_while_scanning.append(gc.isenabled())
        return scan(store, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(listing, "_scan", observed_scan)
    assert [row.name for row in listing.list_store(store).rows] == ["run"] and gc.isenabled()
    done = run_cli("ls", "--store", store, "--json")
    assert done.returncode == 0 and orjson.loads(done.stdout)["snapshots"][0]["name"] == "run" and gc.isenabled()
    assert enabled_while_scanning == [False, False]
