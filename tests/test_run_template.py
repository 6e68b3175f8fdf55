"""The run template the core owns (`genrun.runner.run_template`): whatever a backend's step does, the run is
classified once, `finish` is called once, and the snapshot is sealed.

Driven through the test plugin backend (in-process, registered through its entry point) with one of its
steps replaced by one that fails: the core, not the backend, must turn each into evidence.
"""

from pathlib import Path
from typing import Any

import pytest

from _diffusion_helpers import events
from _plugin_helpers import counter_installed, counter_request  # noqa: F401  (a fixture)
from conftest import write_request
from genrun.analysis import verify_snapshot
from genrun.runner.execute import execute_snapshot
from genrun.runner.plan import plan_request
from genrun.runner.store import is_sealed
from genrun.schemas import GenerationStop, Result, layout


def _run(tmp_path: Path, text: str) -> tuple[Result, Path]:
    snapshot = plan_request(write_request(tmp_path, text), store=tmp_path / "store")
    return execute_snapshot(snapshot, live=False), snapshot


def _stops(snapshot: Path) -> tuple[Any, ...]:
    return GenerationStop.model_validate_json((snapshot / layout.STOP).read_bytes()).sequences


def _replace_run_step(monkeypatch: pytest.MonkeyPatch, backend: type, step: str, replacement: Any) -> None:
    """Every run the backend starts has `step` (`generate` or `finish`) replaced by `replacement(original, *args)`."""
    start = backend.start

    def start_replaced(self: Any, ctx: Any) -> Any:
        run = start(self, ctx)
        original = getattr(run, step)
        setattr(run, step, lambda *args: replacement(original, *args))
        return run

    monkeypatch.setattr(backend, "start", start_replaced)


def test_a_failed_load_still_finishes_the_run_and_seals(tmp_path: Path, counter_installed: type) -> None:
    result, snapshot = _run(tmp_path, counter_request(tmp_path, config='{"begin": 7}\n'))  # no "start": the load raises KeyError
    assert (result.status, result.exit_code, result.exception.type, result.timings.load_s) == ("failed", 1, "KeyError", None)
    (stop,) = _stops(snapshot)  # the backend's finish ran (after the core classified the load's failure)
    assert (stop.reason, stop.generated, stop.exception.type) == ("exception", 0, "KeyError")
    assert (snapshot / "outputs" / "count.txt").read_text() == ""
    assert [e.event for e in events(snapshot)] == ["exception"] and is_sealed(snapshot)


def test_an_exception_escaping_finish_is_a_sealed_failed_run(tmp_path: Path, counter_installed: type, monkeypatch: pytest.MonkeyPatch) -> None:
    def finish_raising(original: Any, end: Any) -> Any:
        raise RuntimeError("the backend could not write its evidence")

    _replace_run_step(monkeypatch, counter_installed, "finish", finish_raising)
    result, snapshot = _run(tmp_path, counter_request(tmp_path, steps=3))
    assert (result.status, result.exit_code, result.exception.type) == ("failed", 1, "RuntimeError")
    assert result.exception.message == "the backend could not write its evidence"
    assert result.generated == 3 and _stops(snapshot) == ()  # what the recorder counted; no stop records without finish
    assert events(snapshot)[-1].event == "exception" and is_sealed(snapshot)


def test_a_keyboard_interrupt_from_generate_is_classified_as_sigint(tmp_path: Path, counter_installed: type,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Where genrun's handler is not installed, Ctrl-C arrives as KeyboardInterrupt: the core says SIGINT, for every backend."""
    def generate_interrupted(original: Any, loaded: Any) -> None:
        original(loaded)
        raise KeyboardInterrupt

    _replace_run_step(monkeypatch, counter_installed, "generate", generate_interrupted)
    result, snapshot = _run(tmp_path, counter_request(tmp_path, steps=2))
    assert (result.status, result.exit_code, result.signal, result.exception) == ("interrupted", 130, "SIGINT", None)
    (stop,) = _stops(snapshot)
    assert (stop.reason, stop.generated) == ("interrupted", 2)
    assert events(snapshot)[-1].event == "interrupted" and is_sealed(snapshot)
    failed = [(f.name, f.message) for f in verify_snapshot(snapshot).findings if f.status == "FAIL"]
    assert not failed, failed
