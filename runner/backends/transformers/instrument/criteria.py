"""Per-row stop evidence, recorded live by the stopping-criteria list generate builds.

transformers' `StoppingCriteriaList.__call__` ORs every criterion and discards the individual
results, so afterwards nobody can tell EOS from a length cap when pad == eos, or a
stop string when no EOS is configured. `RecordingCriteriaList` is a drop-in replacement that
evaluates each criterion separately and remembers, per row, which ones fired at the step the
row finished, the sequence length then, and the last token id.

Two bookkeeping modes with the same result:
- `host` (CPU tensors): the common step costs one `any()` on a CPU tensor (no device to wait
  for); the bookkeeping runs only at the few steps where some row is done.
- `device` (CUDA/MPS): no host synchronisation at all; a few `torch.where` updates on the device
  per step, read back once when the call ends.
"""

from collections.abc import Callable
from typing import Any, Literal, NamedTuple, cast

import torch
from transformers.generation.stopping_criteria import (
    EosTokenCriteria,
    MaxLengthCriteria,
    MaxTimeCriteria,
    StoppingCriteria,
    StoppingCriteriaList,
    StopStringCriteria,
)
from genrun.backends import deferred


CriterionKind = Literal["eos", "stop_string", "max_new_tokens", "max_length", "max_time", "custom"]
KIND_PRIORITY: tuple[CriterionKind, ...] = ("eos", "stop_string", "max_new_tokens", "max_length", "max_time")
"""When several criteria fire at the same step the row is attributed to the first of these."""


class RowCriteria(NamedTuple):
    """What the criteria list saw for one row."""

    finished: bool
    """Some criterion fired for this row."""
    stop_length: int | None
    """Sequence length (prompt included) at the step the row finished."""
    last_token_id: int | None
    """The row's last id at that step."""
    fired: tuple[str, ...]
    """Class names of the criteria that fired at that step, in list order."""
    kinds: tuple[CriterionKind, ...]
    """Their kinds, in list order."""


def criterion_kind(criterion: Any, max_length: int | None, max_new_tokens: int | None) -> CriterionKind:
    """Classify one criterion; a MaxLengthCriteria derived from `max_new_tokens` counts as `max_new_tokens`."""
    if isinstance(criterion, EosTokenCriteria):
        return "eos"
    if isinstance(criterion, StopStringCriteria):
        return "stop_string"
    if isinstance(criterion, MaxTimeCriteria):
        return "max_time"
    if isinstance(criterion, MaxLengthCriteria):
        # generate set max_length = prompt + max_new_tokens; a user's own MaxLengthCriteria with
        # another limit is an absolute length cap.
        if max_new_tokens is not None and criterion.max_length == max_length:
            return "max_new_tokens"
        return "max_length"
    return "custom"


class RecordingCriteriaList(StoppingCriteriaList):
    """A `StoppingCriteriaList` that keeps, per row, which criteria stopped it."""

    def __init__(
        self,
        criteria: StoppingCriteriaList,
        max_length: int | None,
        max_new_tokens: int | None,
        mode: str | None = None,
        *,
        on_step: Callable[[int], None] | None = None,
        beam_search: bool = False,
    ) -> None:
        """`mode`: `host`, `device`, or `None` to choose from the first `input_ids` device.

        `on_step`: called once per decoding step (paths without a streamer, e.g. beam search).
        `beam_search`: the rows are candidate beams; keep each finished candidate's ids so the
        returned sequences can be matched to what stopped them (`returned_row_states`).
        """
        super().__init__(criteria)
        self.on_step = on_step
        self.beam_search = beam_search
        self.last_input_ids: torch.Tensor | None = None
        """The sequences (prompt included) at the last step the list was asked about."""
        self._finished_candidates: dict[int, dict[tuple[int, ...], tuple[bool, ...]]] = {}  # length -> ids -> fired mask
        self.kinds: tuple[CriterionKind, ...] = tuple(criterion_kind(c, max_length, max_new_tokens) for c in self)
        self.names: tuple[str, ...] = tuple(type(c).__name__ for c in self)
        self.mode = mode
        self.rows: int | None = None
        # host mode: python lists, filled only at steps where rows finish
        self._done: torch.Tensor | None = None  # [rows] bool
        self._stop_length: list[int | None] = []
        self._last: list[int | None] = []
        self._fired: list[tuple[bool, ...]] = []
        # device mode: one tuple swapped atomically (a signal between two stores cannot split it)
        self._device_state: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
        results = [c(input_ids, scores, **kwargs) for c in self]
        self.last_input_ids = input_ids  # a reference, no copy: the loop builds a new tensor each step
        if self.rows is None:
            self._initialise(input_ids)
        if not results:  # a bool tensor; transformers' annotation names the legacy `torch.BoolTensor` type
            return cast(torch.BoolTensor, torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device))
        if not all(isinstance(r, torch.Tensor) for r in results):  # ConfidenceCriteria returns a python bool
            results = [self._as_rows(r, input_ids) for r in results]
        is_done = results[0]
        for r in results[1:]:
            is_done = is_done | r
        if self.on_step is not None:
            self.on_step(1)
        if self.beam_search:
            self._record_candidates(results, is_done, input_ids)
        elif self.mode == "host":
            if is_done.any():
                self._record_host(results, is_done, input_ids)
        else:
            self._record_device(results, is_done, input_ids)
        return is_done

    def row_states(self) -> tuple[RowCriteria, ...]:
        """Per-row evidence (reads device state back once); empty if generate never called the list."""
        if self.rows is None:
            return ()
        if self.mode == "device" and self._device_state is not None:
            done, fired, stop_length, last = (t.tolist() for t in self._device_state)
            return tuple(self._row(done[i], stop_length[i], last[i], tuple(fired[i])) for i in range(self.rows))
        return tuple(
            self._row(self._stop_length[i] is not None, self._stop_length[i], self._last[i], self._fired[i]) for i in range(self.rows)
        )

    def returned_row_states(self, returned: torch.Tensor) -> tuple[RowCriteria | None, ...]:
        """Beam search: per returned sequence (`[rows, prompt + new]`), the finished candidate it is.

        A returned sequence is a candidate the beam search finalised when the criteria fired for it,
        followed by fill ids up to the longest returned row: the longest recorded candidate that is a
        prefix of the row, with a uniform remainder, is the one (`None` when no candidate matches).
        """
        states: list[RowCriteria | None] = []
        lengths = sorted(self._finished_candidates, reverse=True)
        for row in returned.tolist():
            match = None
            for length in lengths:
                if length > len(row) or len(set(row[length:])) > 1:
                    continue
                fired = self._finished_candidates[length].get(tuple(row[:length]))
                if fired is not None:
                    match = self._row(True, length, row[length - 1], fired)
                    break
            states.append(match)
        return tuple(states)

    # -- internals ------------------------------------------------------------------------------

    def _record_candidates(self, results: list[torch.Tensor], is_done: torch.Tensor, input_ids: torch.Tensor) -> None:
        if not is_done.any():
            return
        per_criterion = [r.tolist() for r in results]
        finished = self._finished_candidates.setdefault(int(input_ids.shape[1]), {})
        for row in is_done.nonzero().flatten().tolist():
            finished[tuple(input_ids[row].tolist())] = tuple(bool(values[row]) for values in per_criterion)

    def _initialise(self, input_ids: torch.Tensor) -> None:
        rows, device = input_ids.shape[0], input_ids.device
        if self.mode is None:
            self.mode = "host" if device.type == "cpu" else "device"
        self._done = torch.zeros(rows, dtype=torch.bool, device=device)
        self._stop_length = [None] * rows
        self._last = [None] * rows
        self._fired = [()] * rows
        self._device_state = (
            torch.zeros(rows, dtype=torch.bool, device=device),
            torch.zeros(rows, len(self), dtype=torch.bool, device=device),
            torch.full((rows,), -1, dtype=torch.long, device=device),
            torch.full((rows,), -1, dtype=torch.long, device=device),
        )
        self.rows = rows

    @staticmethod
    def _as_rows(result: Any, input_ids: torch.Tensor) -> torch.Tensor:
        if isinstance(result, torch.Tensor):
            return result
        return torch.full((input_ids.shape[0],), bool(result), dtype=torch.bool, device=input_ids.device)

    def _record_host(self, results: list[torch.Tensor], is_done: torch.Tensor, input_ids: torch.Tensor) -> None:
        assert self._done is not None, "_initialise sets the host state at the first step"
        newly = is_done & ~self._done
        if not newly.any():
            return
        length = input_ids.shape[1]
        last = input_ids[:, -1].tolist()
        per_criterion = [r.tolist() for r in results]
        with deferred():  # all rows of this step are recorded, or none
            for row in newly.nonzero().flatten().tolist():
                self._stop_length[row] = length
                self._last[row] = last[row]
                self._fired[row] = tuple(bool(values[row]) for values in per_criterion)
            self._done = self._done | is_done

    def _record_device(self, results: list[torch.Tensor], is_done: torch.Tensor, input_ids: torch.Tensor) -> None:
        assert self._device_state is not None, "_initialise sets the device state at the first step"
        done, fired, stop_length, last = self._device_state
        newly = is_done & ~done
        now = torch.stack(results, dim=1)  # [rows, criteria]
        self._device_state = (
            done | is_done,
            torch.where(newly[:, None], now, fired),
            torch.where(newly, input_ids.shape[1], stop_length),
            torch.where(newly, input_ids[:, -1], last),
        )

    def _row(self, finished: bool, stop_length: int | None, last: int | None, fired_mask: tuple[bool, ...]) -> RowCriteria:
        if not finished or stop_length is None or last is None:  # a finished row always has both
            return RowCriteria(False, None, None, (), ())
        names = tuple(n for n, f in zip(self.names, fired_mask) if f)
        kinds = tuple(k for k, f in zip(self.kinds, fired_mask) if f)
        return RowCriteria(True, int(stop_length), int(last), names, kinds)


def primary_kind(kinds: tuple[CriterionKind, ...]) -> CriterionKind | None:
    """The kind that explains the stop (`KIND_PRIORITY`), or `None` when only custom criteria fired."""
    for kind in KIND_PRIORITY:
        if kind in kinds:
            return kind
    return None


__all__ = ["CriterionKind", "RecordingCriteriaList", "RowCriteria", "StoppingCriteria", "criterion_kind", "primary_kind"]
