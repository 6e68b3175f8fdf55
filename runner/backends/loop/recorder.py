"""`rec`, the recorder a loop receives: its configuration, its stages, their ids, counts and stops.

The contract (these names are public; the README and `genrun.backends` document them):

    rec.config({"temperature": 0.0, "eos_token_ids": [2]})    # once, before the first unit
    with rec.stage("ar", unit="frame", per_second=25, rows=1) as ar:
        ar.emit(0, ids)                                      # ids: any int sequence (list, numpy array)
        ar.stop(0, "eos", eos_token_id=ids[-1])              # genrun's stop vocabulary, or a reason of the loop's own
    with rec.stage("acoustic", unit="window", rows=1, consumes="ar") as acoustic:
        acoustic.advance(0, 1, consumed=200)                 # units without ids; `consumed`: source units read

Stages run in sequence. Each keeps its own counts per row (ids `emit`ted plus units `advance`d),
clock and memory, and writes `start` / `progress` / `end` records to `stage-progress.ndjson`; the
ids, the summary and the stop records are written when the run finishes, whatever ended it. The
hot path (`emit`) is a conversion of the ids in C, a list extend, an addition and two comparisons;
the run's ProgressRecorder is told the count, and a record written, only when the request's progress
cadence is due. Nothing here imports torch.
"""

import math
import operator
import os
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple, NoReturn

import orjson

from genrun.backends import (ProgressRecorder, StageEndEvent, StageProgressEvent, StageRecord, StageStartEvent, StageUnit, StopReason,
                             refuse_other_process, stop_if_requested)

from .evidence import stop_evidence_model

_index = operator.index  # int -> itself, numpy integer -> int, in C; a float or a string raises TypeError
_monotonic = time.monotonic
ID_MAX = 2**63 - 1
"""The largest id or count the evidence files hold (int64, as safetensors and orjson write them)."""
_NOT_ID_SEQUENCES = (bytes, bytearray, memoryview, str)
"""Iterables of integers (or one-character strings) that are text or raw bytes, never a row of ids."""

STAGE_UNITS: tuple[str, ...] = ("token", "frame", "window", "step", "sample")
VOCABULARY_FACTS: Mapping[str, tuple[str, ...]] = {
    "eos": ("eos_token_id",), "max_new_tokens": ("limit",), "max_length": ("limit",), "stop_string": ("stop_string",),
    "max_time": ("limit_s",), "completed": (),
}
"""Stop reasons a loop may claim from genrun's vocabulary, and the fact each must carry (verify checks them)."""
CORE_ONLY = ("interrupted", "exception", "unknown", "custom")
"""Reasons genrun assigns itself (a signal, a raise, no stop at all); `custom` is what a loop-defined reason becomes."""


class RecorderMisuse(RuntimeError):
    """A loop called the recorder wrongly (emit after stop, an unknown stage, a row out of range, ...)."""


class RowStop(NamedTuple):
    """A stop a loop claimed for one row of one stage."""

    reason: StopReason
    """The vocabulary reason (`custom` for a loop-defined one)."""
    facts: dict[str, Any]
    """Its evidence (`loop_reason` holds a loop-defined reason's name)."""


class Stage:
    """One stage of a loop: a context manager made by `rec.stage(...)`."""

    def __init__(self, rec: "LoopRecorder", name: str, unit: StageUnit, per_second: float | None, rows: int, consumes: str | None) -> None:
        self._rec, self.name, self.unit, self.per_second, self.rows, self.consumes = rec, name, unit, per_second, rows, consumes
        self.ids: list[list[int]] = [[] for _ in range(rows)]
        """Ids emitted per row."""
        self.advanced = [0] * rows
        """Units counted without ids, per row."""
        self.stops: dict[int, RowStop] = {}
        self.consumed: int | None = 0 if consumes is not None else None
        self.started_t = 0.0
        self.seconds = 0.0
        self.rss_peak_bytes: int | None = None
        self._open = False
        self._taking: dict[int, list[int]] = {}
        """Row -> its id list, for the rows that take units now (the stage is open, the row not stopped): one lookup checks
        all three on the hot path."""
        self._counts_core = rec.counts_in_core(unit)
        self._counted = 0
        """Units counted, all rows."""
        self._synced = 0
        """Of those, units the run's ProgressRecorder has been told (it is told only when it has a record due)."""
        self._record_units, self._record_t = rec.every_units, float("inf")
        """When this stage's next `stage-progress.ndjson` record is due (count, monotonic time)."""
        self._due_units, self._due_t = 0, float("inf")
        """The nearest of that and the ProgressRecorder's next record: the only thresholds the hot path compares."""

    # -- the loop's calls (hot path first) ------------------------------------------------------

    def emit(self, row: int, ids: Iterable[int]) -> None:
        """Append token/code ids to `row` (a list, a tuple, a numpy array); each id is one unit."""
        stop_if_requested()  # a signal the loop swallowed stops it at its next call, before anything is recorded
        kept = self._taking.get(row) if row.__class__ is int else None  # (True would find row 1)
        if kept is None:
            self._check(row, "emit")  # raises, naming what is wrong
            kept = self._taking[int(row)]  # it did not: a subclass of int (an IntEnum row)
        if isinstance(ids, _NOT_ID_SEQUENCES):  # bytes iterate as integers: b"hi" would be kept as ids 104, 105
            raise RecorderMisuse(f"stage {self.name!r}: emit(row {row}, {ids[:16]!r}): a {type(ids).__name__} is text or bytes, not ids; "
                                 "emit token/code ids (a list, a tuple, a numpy array of integers)")
        given = ids if ids.__class__ is list else ids.tolist() if hasattr(ids, "tolist") else ids  # numpy -> python numbers, in C
        try:
            values = [*map(_index, given)]
        except TypeError as exc:
            _invalid_ids(ids, self.name, row, exc)  # raises, naming the value
        if bool in map(type, given):  # operator.index turns True into 1
            _invalid_ids(given, self.name, row, None)
        if values and (min(values) < 0 or max(values) > ID_MAX):  # what stage-ids.json cannot hold is refused here, not at finish
            bad = next(v for v in values if not 0 <= v <= ID_MAX)
            raise RecorderMisuse(f"stage {self.name!r}: emit(row {row}, ...): id {bad} is outside 0..2**63-1; ids are non-negative int64 "
                                 "token/code ids")
        kept.extend(values)
        self._counted += len(values)
        if self._counted >= self._due_units or _monotonic() >= self._due_t:
            self._on_due()

    def advance(self, row: int, n: int = 1, *, consumed: int | None = None) -> None:
        """Count `n` units of `row` that have no ids (windows decoded, samples written); `consumed`: source units read."""
        stop_if_requested()
        self._check(row, "advance")
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= ID_MAX:
            raise RecorderMisuse(f"stage {self.name!r}: advance(row {row}, n={n!r}): n must be an integer in 0..2**63-1")
        if consumed is not None:
            self.consume(consumed)
        self.advanced[row] += n
        self._counted += n
        if self._counted >= self._due_units or _monotonic() >= self._due_t:
            self._on_due()

    def consume(self, n: int) -> None:
        """Record that this stage read `n` more units of the stage it `consumes` (each source unit once: verify names a total
        below what the source made, and fails one above it)."""
        if self.consumed is None:
            raise RecorderMisuse(f"stage {self.name!r}: consume({n!r}) but the stage was opened without consumes=\"<stage>\"")
        try:
            count = _index(n) if not isinstance(n, bool) else -1  # a numpy integer too; never a float or a bool
        except TypeError:
            count = -1
        if count < 0 or self.consumed + count > ID_MAX:
            raise RecorderMisuse(f"stage {self.name!r}: consume({n!r}): n is a whole number of {self.consumes!r} units read, "
                                 f">= 0 (so far {self.consumed}; the total stays below 2**63)")
        self.consumed += count

    def stop(self, row: int, reason: str, **evidence: Any) -> None:
        """Why `row` stopped: a reason of genrun's vocabulary with its fact (`eos` needs `eos_token_id`, `max_new_tokens` and
        `max_length` need `limit`, `stop_string` needs `stop_string`), `completed`, or a loop-defined reason with its evidence."""
        self._check(row, "stop")
        call = f"stage {self.name!r}: stop(row {row}, {reason!r})"
        if reason in CORE_ONLY:
            raise RecorderMisuse(f"{call}: {reason!r} is recorded by genrun itself; name the loop's own reason (e.g. 'budget_frames')")
        if not isinstance(reason, str) or not reason.isidentifier():
            raise RecorderMisuse(f"{call}: a reason is a word such as 'eos', 'max_new_tokens' or one of the loop's own")
        missing = [fact for fact in VOCABULARY_FACTS.get(reason, ()) if fact not in evidence]
        if missing:
            raise RecorderMisuse(f"{call} needs {', '.join(f'{m}=...' for m in missing)} as evidence (verify checks it against the ids)")
        facts = _json_values(evidence, f"{call}: evidence")
        stop = RowStop(reason, facts) if reason in VOCABULARY_FACTS else RowStop("custom", {"loop_reason": reason, **facts})  # type: ignore[arg-type]
        try:  # what the stop record cannot hold is refused now, while the loop can still be told
            stop_evidence_model(stop.reason)(**{**stop.facts, "stage": self.name, "units": 0, "ids": 0})
        except ValueError as exc:
            raise RecorderMisuse(f"{call}: the evidence does not fit its stop record: {_first_error(exc)}") from None
        self.stops[row] = stop
        del self._taking[row]

    # -- bookkeeping ----------------------------------------------------------------------------

    def units(self) -> tuple[int, ...]:
        """Units counted per row (ids emitted plus units advanced)."""
        return tuple(len(ids) + adv for ids, adv in zip(self.ids, self.advanced, strict=True))

    def _check(self, row: int, call: str) -> None:
        if not self._open:
            raise RecorderMisuse(f"stage {self.name!r}: {call}(row {row!r}) outside its `with rec.stage(...)` block")
        if isinstance(row, bool) or not isinstance(row, int) or not 0 <= row < self.rows:
            raise RecorderMisuse(f"stage {self.name!r}: {call}(row {row!r}): row out of range; the stage has rows 0..{self.rows - 1}")
        if row in self.stops:
            raise RecorderMisuse(f"stage {self.name!r}: {call}(row {row}) after stop(row {row}, {self.stops[row].reason!r}); "
                                 "a stopped row takes no more units")

    def _on_due(self) -> None:
        """A threshold was crossed: the ProgressRecorder is told the units since it was last told (it writes its record),
        this stage writes its own when its cadence is due, and the next thresholds are set. Records are written at the
        same counts as if every unit were passed on, for a fraction of the hot path's cost."""
        self._sync_core()
        now = _monotonic()
        if self._counted >= self._record_units or now >= self._record_t:
            self._record_units, self._record_t = self._counted + self._rec.every_units, now + self._rec.every_seconds
            self._rec.write_event(StageProgressEvent, self)
        self._set_thresholds()

    def _sync_core(self) -> None:
        if self._counts_core and self._counted > self._synced:
            # marked told first: a signal raised inside `step` (after it counted them, while its record is written) must
            # not leave them untold, or the stage's exit tells them again and progress.ndjson goes backwards at the end
            told, self._synced = self._counted - self._synced, self._counted
            self._rec.core.step(told)

    def _set_thresholds(self) -> None:
        self._due_units, self._due_t = self._record_units, self._record_t
        if self._counts_core:
            core_steps, core_t = self._rec.core.due()
            self._due_units = min(self._due_units, self._counted + max(1, core_steps - self._rec.core.steps))
            self._due_t = min(self._due_t, core_t)

    def __enter__(self) -> "Stage":
        self._rec.enter(self)
        self._open = True
        self._taking = dict(enumerate(self.ids))
        self.started_t = time.monotonic() - self._rec.origin
        self._record_t = time.monotonic() + self._rec.every_seconds
        self._set_thresholds()
        self._rec.write_event(StageStartEvent, self, unit=self.unit)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._open = False
        self._taking = {}
        self._sync_core()
        self.seconds = time.monotonic() - self._rec.origin - self.started_t
        self.rss_peak_bytes = self._rec.core.memory.peak_rss_bytes()
        self._rec.write_event(StageEndEvent, self, consumed=self.consumed)

    def record(self) -> StageRecord:
        """The stage as it ended (`stages.json`)."""
        return StageRecord(name=self.name, unit=self.unit, per_second=self.per_second, rows=self.rows, consumes=self.consumes,
                           consumed=self.consumed, units=self.units(), ids=tuple(len(i) for i in self.ids), started_t=self.started_t,
                           seconds=self.seconds, rss_peak_bytes=self.rss_peak_bytes)


class LoopRecorder:
    """`rec`: the loop's configuration and its stages, in order."""

    def __init__(self, *, core: ProgressRecorder, progress_fd: int, every_units: int, every_seconds: float,
                 on_config: Callable[[dict[str, Any] | None], None], outputs_dir: Path) -> None:
        self.core, self.every_units, self.every_seconds = core, every_units, every_seconds
        self.outputs_dir = outputs_dir
        """`<snapshot>/outputs/`: where the loop writes what it produces (a WAV, text); listed in `result.json`."""
        self.origin = time.monotonic()
        self.stages: list[Stage] = []
        self.config_frozen = False
        self._fd = progress_fd
        self._seq = 0
        self._on_config = on_config

    def config(self, mapping: Mapping[str, Any]) -> None:
        """The loop's effective configuration (written as the call config's `config`), once, before its first unit."""
        if self.config_frozen:
            when = "after its first stage began" if self.stages else "a second time"
            raise RecorderMisuse(f"rec.config(...) called {when}: the configuration is frozen before the first unit; call it once, first")
        if not isinstance(mapping, Mapping):
            raise RecorderMisuse(f"rec.config({type(mapping).__name__}): pass a mapping of the loop's settings")
        self._freeze(_json_values(dict(mapping), "rec.config(...): values"))

    def stage(self, name: str, *, unit: str, per_second: float | None = None, rows: int, consumes: str | None = None) -> Stage:
        """A stage to run next (`with rec.stage(...) as s:`); `unit` is one of token, frame, window, step, sample."""
        call = f"rec.stage({name!r})"
        if not isinstance(name, str) or not name:
            raise RecorderMisuse(f"rec.stage({name!r}): a stage needs a non-empty name")
        if any(s.name == name for s in self.stages):
            raise RecorderMisuse(f"{call}: a stage named {name!r} already ran; give each stage its own name")
        if unit not in STAGE_UNITS:
            raise RecorderMisuse(f"{call}: unit={unit!r} is not one of {', '.join(STAGE_UNITS)}")
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
            raise RecorderMisuse(f"{call}: rows={rows!r} must be an integer >= 1")
        if per_second is not None and (isinstance(per_second, bool) or not isinstance(per_second, int | float) or not 0 < per_second < math.inf):
            raise RecorderMisuse(f"{call}: per_second={per_second!r} must be a positive number (units per second of output) or None")
        if consumes is not None and not any(s.name == consumes for s in self.stages):
            ran = ", ".join(repr(s.name) for s in self.stages) or "none yet"
            raise RecorderMisuse(f"{call}: consumes={consumes!r} is not an earlier stage (stages so far: {ran})")
        return Stage(self, name, unit, float(per_second) if per_second is not None else None, rows, consumes)  # type: ignore[arg-type]

    def enter(self, stage: Stage) -> None:
        """A stage begins: the previous one must have ended; the configuration freezes now if the loop gave none."""
        if self.stages and self.stages[-1]._open:
            raise RecorderMisuse(f"rec.stage({stage.name!r}) entered while stage {self.stages[-1].name!r} is still open; stages run in sequence")
        if any(s is stage for s in self.stages):
            raise RecorderMisuse(f"stage {stage.name!r} entered twice; open a new rec.stage(...) for another stage")
        if not self.config_frozen:
            self._freeze(None)
        self.stages.append(stage)

    def counts_in_core(self, unit: str) -> bool:
        """Whether a stage's units are the run's unit (those count in `progress.ndjson` and `result.json`)."""
        return unit == self.core.unit

    def write_event(self, event: type, stage: Stage, **extra: Any) -> None:
        """Append one `stage-progress.ndjson` record (one `os.write` on an O_APPEND descriptor)."""
        record = event(seq=self._seq, t=time.monotonic() - self.origin, stage=stage.name, units=stage.units(),
                       ids=tuple(len(i) for i in stage.ids), rss_bytes=self.core.memory.rss_bytes(), **extra)
        self._seq += 1
        refuse_other_process("writing stage-progress.ndjson")
        os.write(self._fd, record.model_dump_json().encode() + b"\n")

    def _freeze(self, config: dict[str, Any] | None) -> None:
        self.config_frozen = True
        self._on_config(config)


def _invalid_ids(ids: Any, stage: str, row: int, error: TypeError | None) -> NoReturn:
    """Raise naming what `emit` was given that is not a sequence of integer ids (the hot path's checks failed)."""
    try:
        values = list(ids.tolist() if hasattr(ids, "tolist") else ids)
    except TypeError:
        raise RecorderMisuse(f"stage {stage!r}: emit(row {row}, {ids!r}): ids is a {type(ids).__name__}; pass a sequence of ids "
                             "(a list, a tuple, a numpy array), e.g. emit(row, [token_id])") from None
    for value in values:
        if isinstance(value, bool) or not hasattr(value, "__index__"):
            raise RecorderMisuse(f"stage {stage!r}: emit(row {row}, ...): {value!r} is not an integer id; emit token/code ids only")
    raise RecorderMisuse(f"stage {stage!r}: emit(row {row}, ...): the ids could not be read as integers ({error}); "
                         "pass a list, a tuple or a numpy array of ids")


def _json_values(mapping: dict[str, Any], what: str) -> dict[str, Any]:
    """`mapping` as the JSON its file will hold; a value JSON cannot hold exactly (NaN, infinity, an integer beyond 64 bits,
    an object) is refused naming it, instead of failing the write when the run finishes."""
    try:
        data = orjson.dumps(mapping, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
    except TypeError as exc:
        raise RecorderMisuse(f"{what} must be JSON values (numbers, strings, lists, mappings): {exc}") from None
    bad = _not_finite(mapping, "")
    if bad is not None:  # orjson writes NaN and infinity as null: the value would change on its way to the file
        raise RecorderMisuse(f"{what} must be finite numbers: {bad or 'the value'} is NaN or infinite (JSON has neither); "
                             "record None or a string")
    return orjson.loads(data)


def _not_finite(value: Any, path: str) -> str | None:
    """The key path of the first NaN or infinite number in `value` (numpy values and arrays included); None: there is none."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):  # a numpy array or scalar
        value = value.tolist()
    if isinstance(value, float):
        return None if math.isfinite(value) else path
    if isinstance(value, Mapping):
        items: Iterable[tuple[Any, Any]] = value.items()
    elif isinstance(value, list | tuple):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = _not_finite(item, f"{path}.{key}" if path else str(key))
        if found is not None:
            return found
    return None


def _first_error(exc: ValueError) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        first = errors()[0]
        return f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
    return str(exc)
