"""`progress.ndjson`: the append-only event stream of a run (docs/snapshot-format.md, `progress.ndjson`).

One `os.write` per line on the snapshot's append-only stream (`SnapshotDir.open_stream`: so a reader or a crash never
sees half a record from us), `fsync` at most every `fsync_every_s` seconds and at the terminal event.

The hot path is `step()`, called once per generated token by the streamer tee: one integer
add and two comparisons (count and a monotonic clock read); everything else happens only
when a record or a live-bar refresh is due.
"""

import fcntl
import os
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Protocol

import orjson

from genrun.schemas import FORMAT_VERSION, EndEvent, ExceptionEvent, FirstTokenEvent, InterruptedEvent, ProgressEvent, StartEvent
from genrun.schemas.progress import Unit, _Event
from genrun.snapshot_dir import AppendStream

from . import interrupts
from ._io import sync
from ._locks import still_ours
from .executing_process import refuse_other_process
from .memory import MemoryProbe

LIVE_REFRESH_S = 0.25  # seconds between live-bar refreshes (the file cadence is the request's)
NO_IDS: Callable[[], tuple[int, ...]] = tuple


class LiveSink(Protocol):
    """A display fed by the recorder (the rich bar on a TTY)."""

    def update(self, generated: int, units_per_s: float, rss_bytes: int | None) -> None:
        """Show the current count, rate and memory."""
        ...


class ProgressRecorder:
    """Writes `start`, `first_token`, `progress`, then one of `end` / `exception` / `interrupted`."""

    def __init__(
        self,
        stream: AppendStream,
        *,
        origin: float,
        unit: Unit,
        every_units: int,
        every_seconds: float,
        tokens_per_unit: int = 1,
        fsync_every_s: float = 5.0,
        memory: MemoryProbe | None = None,
        live: LiveSink | None = None,
    ) -> None:
        """`origin` is the run's `time.monotonic()` start; `t` of every record is relative to it. `stream`: `progress.ndjson`
        as the run's snapshot opened it (`open_stream`, new: progress of an earlier execution is evidence and must never be
        appended to)."""
        self._stream: AppendStream | None = stream
        # Held until close: `genrun watch` probes it to tell a live writer from a killed one (the kernel
        # releases it when this process dies, SIGKILL included). Advisory; nothing else contends for it.
        fcntl.flock(self._stream.fd, fcntl.LOCK_EX)
        self._opened = os.fstat(self._stream.fd)
        self._origin = origin
        self.unit = unit
        self._every_units = every_units
        self._every_s = every_seconds
        self._per_unit = tokens_per_unit
        self._fsync_every_s = fsync_every_s
        self.memory = memory or MemoryProbe()
        """The probe behind `rss_bytes` and the CUDA fields (also read for result.json's peaks)."""
        self._live = live
        self._seq = 0
        self._last_fsync = time.monotonic()
        self._last_ids: Callable[[], tuple[int, ...]] = NO_IDS
        self.steps = 0
        """Tokens (or diffusion steps) counted so far, over all outermost calls."""
        self.first_unit_at: float | None = None
        """`time.monotonic()` of the first counted step."""
        self._first_units = 0
        self._window_t = 0.0
        self._window_units = 0
        self._next_record_t = float("inf")
        self._next_live_t = float("inf")
        self._due_steps = 1  # the first step writes `first_token`
        self._due_t = float("inf")
        self._generation_end: float | None = None
        self.closed = False

    # -- hot path -------------------------------------------------------------------------------

    def step(self, n: int = 1) -> None:
        """Count `n` generated tokens; write a record when the unit or time cadence is due."""
        self.steps += n
        if self.steps >= self._due_steps or time.monotonic() >= self._due_t:
            self._on_due()

    def due(self) -> tuple[int, float]:
        """(steps, `time.monotonic()`) at which `step` next has work to do: a caller that counts units itself (the
        loop recorder) calls `step` only then, with the units since its last call, and writes the same records."""
        return self._due_steps, self._due_t

    # -- events ---------------------------------------------------------------------------------

    def start(self, planned_units: int | None, rows: int | None) -> None:
        """The model is loaded and generation is about to begin."""
        now = time.monotonic()
        self._write(
            StartEvent(
                wall_time=datetime.now(timezone.utc).isoformat(),
                unit=self.unit,
                planned_units=planned_units,
                rows=rows,
                schema_version=FORMAT_VERSION,
                **self._common(now),
            )
        )

    def set_last_ids(self, provider: Callable[[], tuple[int, ...]]) -> None:
        """Where `last_ids` come from (read only when a record is written)."""
        self._last_ids = provider

    def sync_steps(self, steps: int) -> None:
        """Set the count from the kept ids before the terminal event (a signal can land between an id and its count)."""
        self.steps = steps

    @property
    def generated(self) -> int:
        """Units so far (`steps // tokens_per_unit`)."""
        return self.steps // self._per_unit

    def mark_generation_end(self) -> None:
        """Generation returned: the `end` record's rate stops here, not when artifacts are written."""
        self._generation_end = time.monotonic()

    def end(self) -> None:
        """Generation finished normally."""
        now = time.monotonic()
        rate = self._rate(self._generation_end if self._generation_end is not None else now)
        self._terminal(EndEvent(units_per_s=rate, last_ids=self._last_ids(), **self._common(now)))

    def exception(self, type_name: str, message: str) -> None:
        """Generation or user code raised."""
        self._terminal(ExceptionEvent(type=type_name, message=message, **self._common(time.monotonic())))

    def interrupted(self, signal_name: str) -> None:
        """A signal stopped the run."""
        self._terminal(InterruptedEvent(signal=signal_name, **self._common(time.monotonic())))

    def close(self) -> None:
        """fsync (`_io.sync`: a sweep worker's group commit may do it) and close (idempotent); a terminal event does this
        itself."""
        if self._stream is None:
            return
        stream, self._stream = self._stream, None
        if not still_ours(stream.fd, self._opened):  # user code closed it: its number is not ours to sync or close
            self.memory.close()
            self.closed = True
            return
        try:
            sync(stream.fd)
        finally:
            stream.close()
            self.memory.close()
            self.closed = True

    # -- internals ------------------------------------------------------------------------------

    def _on_due(self) -> None:
        now = time.monotonic()
        units = self.generated
        if self.first_unit_at is None:
            self.first_unit_at = self._window_t = now
            self._first_units = self._window_units = units
            self._write(FirstTokenEvent(**self._common(now)))
            self._next_record_t = now + self._every_s
            if self._live is not None:
                self._next_live_t = now
        elif units >= self._next_record_units() or now >= self._next_record_t:
            window = now - self._window_t
            window_rate = (units - self._window_units) / window if window > 0 else 0.0
            self._write(
                ProgressEvent(
                    units_per_s=self._rate(now), window_units_per_s=window_rate, last_ids=self._last_ids(), **self._common(now)
                )
            )
            self._window_t, self._window_units = now, units
            self._next_record_t = now + self._every_s
        if self._live is not None and now >= self._next_live_t:
            self._live.update(units, self._rate(now), self.memory.rss_bytes())
            self._next_live_t = now + LIVE_REFRESH_S
        self._due_steps = (self._window_units // self._every_units + 1) * self._every_units * self._per_unit
        self._due_t = min(self._next_record_t, self._next_live_t)

    def _next_record_units(self) -> int:
        return (self._window_units // self._every_units + 1) * self._every_units

    def _rate(self, now: float) -> float:
        """Cumulative units/s since the first unit."""
        if self.first_unit_at is None or now <= self.first_unit_at:
            return 0.0
        return (self.generated - self._first_units) / (now - self.first_unit_at)

    def _common(self, now: float) -> dict:
        fields: dict = {"seq": self._seq, "t": now - self._origin, "generated": self.generated, "rss_bytes": self.memory.rss_bytes()}
        cuda = self.memory.cuda()
        if cuda is not None:
            fields.update(
                cuda_allocated_bytes=cuda.allocated, cuda_reserved_bytes=cuda.reserved, cuda_peak_allocated_bytes=cuda.peak_allocated
            )
        return fields

    def _write(self, event: _Event) -> None:
        if self._stream is None:
            raise RuntimeError("progress.ndjson is already closed; no event may follow a terminal one")
        refuse_other_process("writing progress.ndjson")
        line = orjson.dumps(event.model_dump(mode="json")) + b"\n"
        with interrupts.deferred():  # a signal here would leave a written line uncounted
            self._stream.write(line)
            self._seq += 1
        if time.monotonic() - self._last_fsync >= self._fsync_every_s:
            self._stream.fsync()
            self._last_fsync = time.monotonic()

    def _terminal(self, event: _Event) -> None:
        self._write(event)
        if self._live is not None:  # the last refresh may predate the last units
            self._live.update(event.generated, getattr(event, "units_per_s", self._rate(time.monotonic())), event.rss_bytes)
        self.close()
