"""A model a run loads itself is released (`LoadedModel.release`: vLLM stops its engine-core process there) once the
snapshot is sealed, whatever the run's end; a model handed in preloaded is its owner's to release.

In process, on the example plugin backend (`genrun.examples.counter_backend`), whose `load` is wrapped to attach a
`release` that notes whether the snapshot was sealed when it was called. (vLLM's own case, the engine core's shutdown
lines missing from the sealed run log, is in tests_vllm/test_vllm_engine_core_process.py.)
"""

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from _plugin_helpers import counter_installed, counter_request  # noqa: F401  (a fixture)
from conftest import write_request
from genrun.analysis import verify_snapshot
from genrun.runner.execute import execute_snapshot, load_for_snapshot
from genrun.runner.plan import plan_request
from genrun.runner.store import is_sealed


def _releasing(counter: type, monkeypatch: pytest.MonkeyPatch, snapshot: Callable[[], Path],
               fails: bool = False) -> list[bool]:
    """Wrap the counter's `load` so that its model's `release` appends whether `snapshot()` is sealed (and then raises
    when `fails`); the list of those calls."""
    released: list[bool] = []
    load = counter.load

    def load_with_release(self: Any, ctx: Any) -> Any:
        def release() -> None:
            released.append(is_sealed(snapshot()))
            if fails:
                raise RuntimeError("the device would not let go")
        return replace(load(self, ctx), release=release)

    monkeypatch.setattr(counter, "load", load_with_release)
    return released


def _plan(tmp_path: Path, steps: int = 3, extra: str = "") -> Path:
    return plan_request(write_request(tmp_path, counter_request(tmp_path, steps=steps) + extra), store=tmp_path / "store")


def test_a_run_releases_the_model_it_loaded_once_after_its_seal(tmp_path: Path, counter_installed: type,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    snapshot = _plan(tmp_path)
    released = _releasing(counter_installed, monkeypatch, lambda: snapshot)
    result = execute_snapshot(snapshot, live=False)
    assert result.status == "succeeded"
    assert released == [True]  # once, and the seal was on disk by then


def test_a_failed_run_releases_its_model_after_its_seal_too(tmp_path: Path, counter_installed: type,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    snapshot = _plan(tmp_path, steps=4, extra="fail_at = 2\n")
    released = _releasing(counter_installed, monkeypatch, lambda: snapshot)
    result = execute_snapshot(snapshot, live=False)
    assert result.status == "failed" and result.exception is not None
    assert released == [True]


def test_a_preloaded_model_is_left_to_its_owner(tmp_path: Path, counter_installed: type, monkeypatch: pytest.MonkeyPatch) -> None:
    snapshot = _plan(tmp_path)
    released = _releasing(counter_installed, monkeypatch, lambda: snapshot)
    loaded = load_for_snapshot(snapshot)
    result = execute_snapshot(snapshot, live=False, loaded=loaded)
    assert result.status == "succeeded" and is_sealed(snapshot)
    assert released == []  # a sweep worker or the server keeps it for the next snapshot
    loaded.release()
    assert released == [True]


def test_a_release_that_fails_after_the_seal_leaves_the_run_as_sealed_and_says_so(
        tmp_path: Path, counter_installed: type, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    snapshot = _plan(tmp_path)
    released = _releasing(counter_installed, monkeypatch, lambda: snapshot, fails=True)
    result = execute_snapshot(snapshot, live=False)
    assert (result.status, result.exit_code) == ("succeeded", 0)
    assert released == [True]
    assert not [f.name for f in verify_snapshot(snapshot).findings if f.status == "FAIL"]
    assert ("genrun: warning: the counter model was not released cleanly after the run was sealed "
            "(RuntimeError: the device would not let go)") in capfd.readouterr().err
