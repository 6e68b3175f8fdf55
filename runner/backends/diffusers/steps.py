"""Counting denoising steps: a `callback_on_step_end` observer and a proxy for the pipeline's tqdm progress bar.

Pipelines whose `__call__` takes `callback_on_step_end` call it once per scheduler timestep
(`len(timesteps)`, which can differ from `num_inference_steps`: PNDM runs one more); older
pipelines (DDPM, DDIM, DiT, ...) have no callback, and their loop runs through
`self.progress_bar(...)`, so the bar is wrapped on the instance and its iterations
(`for t in progress_bar(timesteps)`) or `update()` calls (`total=` form) are counted. The bar is
wrapped either way: its creation, right before the denoising loop, is when the real number of
timesteps is known, and that is when the `start` event is written.
"""

from typing import Any
from genrun.backends import ProgressRecorder, RunInterrupted, deferred, first_signal



class StepObserver:
    """Counts denoising steps into the recorder and, with a callback, turns a held signal into the pipeline's interrupt flag."""

    def __init__(self, recorder: ProgressRecorder, *, by_callback: bool, fallback_planned: int | None, rows: int) -> None:
        self._recorder = recorder
        self.by_callback = by_callback
        """Count in `callback_on_step_end` (else in the progress bar)."""
        self._fallback_planned = fallback_planned
        self._rows = rows
        self.steps = 0
        """Denoising steps completed."""
        self.planned: int | None = None
        """Timesteps of the loop, as the pipeline set them up (sum over loops when it runs several)."""
        self.loops = 0
        """Progress bars the pipeline opened (one per denoising loop)."""
        self.started = False
        """The `start` event was written."""
        self.interrupt_flag_set_at: int | None = None
        """Steps done when the pipeline's `_interrupt` flag was set."""

    def begin(self, planned: int | None) -> None:
        """A denoising loop is about to run `planned` timesteps; the first one writes `start`."""
        if self.loops == 0:
            self.planned = planned
        elif planned is not None:
            self.planned = (self.planned or 0) + planned
        self.loops += 1
        self.ensure_started()

    def ensure_started(self) -> None:
        """Write `start` once: at the first loop, or at the first counted step / the end when no loop was seen
        (a pipeline without a progress bar, or a failure before its loop), with the dry-run count."""
        if not self.started:
            self.started = True
            self._recorder.start(self.planned if self.loops else self._fallback_planned, self._rows)

    def count(self, n: int = 1) -> None:
        """`n` steps finished."""
        self.ensure_started()
        # Held together: a signal between the stream's count and ours would leave a record past the stop.
        with deferred():
            self._recorder.step(n)
            self.steps += n

    def on_step_end(self, pipe: Any, step: int, timestep: Any, callback_kwargs: dict[str, Any]) -> dict[str, Any]:
        """`callback_on_step_end(pipe, i, t, kwargs)`: count; on a held signal, ask the loop to skip what remains."""
        self.count()
        signal_name = first_signal()
        if signal_name is not None and self.interrupt_flag_set_at is None:
            if not isinstance(getattr(type(pipe), "interrupt", None), property):
                raise RunInterrupted(signal_name)  # this loop never reads the flag: stopping it means raising
            pipe._interrupt = True
            self.interrupt_flag_set_at = self.steps
        return {}

    def wrap_progress_bar(self, pipe: Any) -> None:
        """Shadow `pipe.progress_bar` on the instance: learn the loop length, and count steps when there is no callback."""
        original = pipe.progress_bar
        observer = self

        def progress_bar(iterable: Any = None, total: int | None = None) -> "_ObservedBar":
            bar = original(iterable=iterable, total=total)
            planned = total if total is not None else (len(iterable) if hasattr(iterable, "__len__") else None)
            real = getattr(pipe, "_num_timesteps", None)
            if observer.by_callback and isinstance(real, int):
                planned = real  # the callback fires once per timestep; the bar may count scheduler-order updates
            observer.begin(planned)
            return _ObservedBar(bar, None if observer.by_callback else observer)

        pipe.progress_bar = progress_bar


class _ObservedBar:
    """A tqdm bar whose iterations / updates are counted as steps (when `observer` is given)."""

    def __init__(self, inner: Any, observer: StepObserver | None) -> None:
        self._inner = inner
        self._observer = observer

    def __iter__(self) -> Any:
        for item in self._inner:
            yield item
            if self._observer is not None:  # resumed: the loop body for `item` finished
                self._observer.count()

    def __enter__(self) -> "_ObservedBar":
        self._inner.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Any:
        return self._inner.__exit__(*exc)

    def update(self, n: int = 1) -> Any:
        result = self._inner.update(n)
        if self._observer is not None:
            self._observer.count(n)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
