"""One rule for a late signal, the same for every backend: a SIGINT that arrives after generation ended
(while the run's `finish` saves ids and outputs) is counted and noted in `result.json`, not acted on.

Each test delivers a real SIGINT to this process from inside the saving step of a real run (the
built-in backends through the function that writes their ids / outputs, the plugin backend at the
start of its `finish`); the core has disarmed the gate by then, so the run ends with the status its
generation ended with, sealed, and its evidence complete.
"""

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from _diffusion_helpers import TINY_DDIM, diffusion_request, events
from _plugin_helpers import counter_installed, counter_request  # noqa: F401  (a fixture)
from conftest import tiny_request, write_request
from genrun.analysis import verify_snapshot
from genrun.runner.execute import execute_snapshot
from genrun.runner.plan import plan_request
from genrun.runner.store import is_sealed
from genrun.schemas import GenerationStop, Result, layout

LATE_NOTE = "received SIGINT after generation ended; counted, not acted on"


def _sigint_first(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function`, preceded by a real SIGINT to this process (delivered before `function` writes anything)."""
    def with_signal(*args: Any, **kwargs: Any) -> Any:
        os.kill(os.getpid(), signal.SIGINT)
        return function(*args, **kwargs)
    return with_signal


def _run(tmp_path: Path, text: str) -> tuple[Result, Path]:
    snapshot = plan_request(write_request(tmp_path, text), store=tmp_path / "store")
    return execute_snapshot(snapshot, live=False), snapshot


def _assert_late_signal_noted_not_acted_on(result: Result, snapshot: Path, reasons: set[str]) -> None:
    assert (result.status, result.exit_code, result.signal) == ("succeeded", 0, None)
    assert any(note.startswith(LATE_NOTE) for note in result.notes), result.notes
    assert is_sealed(snapshot)
    stops = GenerationStop.model_validate_json((snapshot / layout.STOP).read_bytes()).sequences
    assert stops and {s.reason for s in stops} <= reasons, [s.reason for s in stops]
    assert events(snapshot)[-1].event == "end"
    failed = [(f.name, f.message) for f in verify_snapshot(snapshot).findings if f.status == "FAIL"]
    assert not failed, failed


def test_transformers_late_signal_while_ids_are_saved(tmp_path: Path, tiny_lm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from genrun.runner.backends.transformers import backend as transformers_backend

    monkeypatch.setattr(transformers_backend, "save_token_rows", _sigint_first(transformers_backend.save_token_rows))
    result, snapshot = _run(tmp_path, tiny_request(tiny_lm, generation="max_new_tokens = 4"))
    _assert_late_signal_noted_not_acted_on(result, snapshot, {"eos", "max_new_tokens"})
    assert result.generated > 0 and (snapshot / layout.TOKEN_IDS).is_file()


def test_diffusers_late_signal_while_outputs_are_saved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from genrun.runner.backends.diffusers import backend as diffusers_backend

    monkeypatch.setattr(diffusers_backend, "save_output_fields", _sigint_first(diffusers_backend.save_output_fields))
    result, snapshot = _run(tmp_path, diffusion_request(TINY_DDIM, name="ddim-late", steps=3))
    _assert_late_signal_noted_not_acted_on(result, snapshot, {"completed"})
    assert result.generated == 3 and result.outputs == ("image_0.png",)


def test_plugin_backend_late_signal_while_it_finishes(tmp_path: Path, counter_installed: type, monkeypatch: pytest.MonkeyPatch) -> None:
    start = counter_installed.start

    def start_with_late_signal(self: Any, ctx: Any) -> Any:
        run = start(self, ctx)
        run.finish = _sigint_first(run.finish)
        return run

    monkeypatch.setattr(counter_installed, "start", start_with_late_signal)
    result, snapshot = _run(tmp_path, counter_request(tmp_path, steps=3))
    _assert_late_signal_noted_not_acted_on(result, snapshot, {"completed"})
    assert (snapshot / "outputs" / "count.txt").read_text() == "7 8 9\n"
