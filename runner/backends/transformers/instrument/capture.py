"""Typed records of the generate calls made during a run, and the per-row results derived from them."""

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import torch

from genrun.backends import GenerationConfigBeforeGenerate, LimitSource

from .criteria import RecordingCriteriaList, RowCriteria
from .effective_config import CallArguments
from .selfcheck import IMPORT_CHECK, SelfCheck
from .streamer import TeeStreamer

CallPath = Literal["generate", "beam_search", "assisted", "continuous_batching", "own_generate"]
"""How a call generated: transformers' generate loop, beam search, assisted / prompt-lookup decoding,
continuous batching (`cache_implementation="paged"` or `generate_batch`), or a model's own `generate`
override that never calls transformers' (MusicGen)."""


class RequestOutput(NamedTuple):
    """One request of a continuous-batching call, as `generate_batch` returned it."""

    ids: tuple[int, ...]
    """Generated ids (no prompt)."""
    prompt_length: int
    """Length of this request's prompt."""
    criteria: RowCriteria
    """Its stop, from generate_batch's own completion rule (last id in the EOS set, or the limit)."""


class RowTokens(NamedTuple):
    """One generated row of one outermost call."""

    call_index: int
    """Outermost call it belongs to."""
    row: int
    """Row within that call."""
    ids: torch.Tensor
    """New ids kept for the row, `[count]` int64 on the CPU (no prompt, nothing after the stop)."""
    criteria: RowCriteria | None
    """What the criteria list saw; `None` if generate never built it."""
    stop_within_ids: bool
    """The recorded stop step is among the kept ids (False: the run ended before that step's id arrived)."""
    prompt_length: int | None = None
    """This row's own prompt length when rows of the call had prompts of their own (continuous batching); `None`: the
    call's (a padded batch shares one)."""


@dataclass
class CallCapture:
    """Everything recorded about one outermost generate call."""

    index: int
    """0 for the first outermost call of the run."""
    model: Any
    """The model whose generate this is (instance hooks record only for their own model's call)."""
    arguments: CallArguments
    """What the caller passed."""
    caller: LimitSource
    """`request` (genrun's own call) or `entrypoint` (user code)."""
    stream: TeeStreamer | None
    """The tee (absent for beam search and continuous batching, which refuse streamers)."""
    input_rows: int | None
    """Rows of the input tensor the caller passed, when one was passed."""
    prompt_length: int | None = None
    """Padded prompt length generate used (`input_ids_length` of `_prepare_generated_length`)."""
    batch_rows: int | None = None
    """Rows decoded (input rows x max(num_beams, num_return_sequences))."""
    has_default_max_length: bool | None = None
    """generate's own flag: no `max_length` anywhere before the merge."""
    criteria: RecordingCriteriaList | None = None
    """The recording criteria list generate decoded with."""
    config: GenerationConfigBeforeGenerate | None = None
    """The effective config artifact (written before the first token)."""
    returned: torch.Tensor | None = None
    """`sequences` generate returned (`[rows, prompt + new]`), when it returned."""
    exception: BaseException | None = None
    """What generate raised, if it did."""
    path: CallPath = "generate"
    """How the call generated."""
    missing: list[str] = field(default_factory=list)
    """What could not be recorded for this call, and why (empty: full evidence)."""
    nested_calls: int = 0
    """generate calls made from inside this one (an assistant model's drafts, deprecated modes)."""
    draft_tokens_proposed: int | None = None
    """Assisted decoding: new tokens the assistant's nested calls returned."""
    guidance_scale: float | None = None
    """`guidance_scale` when the length was prepared (MusicGen clears it once its CFG processor is built)."""
    requests: tuple[RequestOutput, ...] | None = None
    """Continuous batching: one entry per request."""
    output: Any = None
    """What an own-loop `generate` override returned (e.g. MusicGen's audio), for the backend to save."""

    @property
    def rows(self) -> int:
        """Rows this call decoded (or would have): prompt put, else generate's own count, else the input."""
        if self.returned is not None:
            return int(self.returned.shape[0])
        if self.stream is not None and self.stream.prompt is not None:
            return int(self.stream.prompt.shape[0])
        if self.criteria is not None and self.criteria.rows is not None:
            return self.criteria.rows
        if self.batch_rows is not None:
            return self.batch_rows
        return self.input_rows or 0

    @property
    def draft_tokens_accepted(self) -> int | None:
        """Assisted decoding: tokens emitted beyond one per verification step (drafts the model accepted)."""
        if self.path != "assisted" or self.stream is None:
            return None
        return self.stream.multi_token_extra

    def new_ids(self) -> torch.Tensor:
        """`[rows, steps]` of new ids: what generate returned when it did, else what was streamed."""
        if self.returned is not None and self.prompt_length is not None:
            return self.returned[:, self.prompt_length :].to("cpu", torch.long)
        if self.path == "own_generate" and self.criteria is not None and self.criteria.last_input_ids is not None and self.prompt_length is not None:
            return self.criteria.last_input_ids[:, self.prompt_length :].to("cpu", torch.long)
        if self.stream is not None:
            return self.stream.tokens().T
        return torch.zeros((self.rows, 0), dtype=torch.long)

    def row_tokens(self) -> tuple[RowTokens, ...]:
        """Per row: ids up to and including the recorded stop step (trailing pads and post-stop ids dropped)."""
        if self.requests is not None:
            return tuple(
                RowTokens(self.index, row, torch.tensor(r.ids, dtype=torch.long), r.criteria, True, r.prompt_length)
                for row, r in enumerate(self.requests)
            )
        ids = self.new_ids()
        states: tuple[RowCriteria | None, ...] = self.criteria.row_states() if self.criteria is not None else ()
        if self.path == "beam_search":  # the criteria's rows are candidate beams: match the returned sequences instead
            states = self.criteria.returned_row_states(self.returned) if self.criteria is not None and self.returned is not None else ()
        available = ids.shape[1]
        rows = []
        for row in range(ids.shape[0]):
            state = states[row] if row < len(states) else None
            count, within = available, False
            if state is not None and state.finished and state.stop_length is not None and self.prompt_length is not None:
                needed = state.stop_length - self.prompt_length
                if needed <= available:
                    count, within = needed, True
            rows.append(RowTokens(self.index, row, ids[row, :count].clone(), state, within))
        return tuple(rows)

    @property
    def steps(self) -> int:
        """Decoding steps of the furthest row (what `progress.ndjson` counts for this call)."""
        return max((int(r.ids.shape[0]) for r in self.row_tokens()), default=0)


def returned_sequences(result: Any) -> torch.Tensor | None:
    """`sequences` of a generate result (a tensor, or a `GenerateOutput` with `.sequences`)."""
    if isinstance(result, torch.Tensor):
        return result
    sequences = getattr(result, "sequences", None)
    return sequences if isinstance(sequences, torch.Tensor) else None


@dataclass
class CaptureSession:
    """The run-wide collector the patched generate reports to."""

    caller: LimitSource
    """Who the outermost calls come from: `request` or `entrypoint`."""
    on_step: Callable[[int], None]
    """Called with the number of new ids per decoding step (the recorder's `step`)."""
    on_config: Callable[[CallCapture], None]
    """Called inside generate once the effective config exists (writes the artifact)."""
    on_call_start: Callable[[CallCapture], None] = lambda call: None
    """Called when an outermost call begins (e.g. to point the recorder's `last_ids` at its stream)."""
    calls: list[CallCapture] = field(default_factory=list)
    """Outermost calls, in order."""
    nested_calls: int = 0
    """generate calls made from inside another (assistant models, deprecated modes); not recorded separately."""
    foreign_thread_calls: int = 0
    """generate calls from threads that are not the run's (passed through, not recorded)."""
    thread_id: int = field(default_factory=threading.get_ident)
    """The run's thread (threads it starts while instrumented belong to the run too)."""
    self_check: SelfCheck = IMPORT_CHECK
    """Which hooks the installed transformers allows (re-checked when instrumentation starts)."""
    caller_keys: frozenset[str] | None = None
    """Generation keys the caller set, when known (genrun's own call: the request's); see `CallArguments.caller_keys`."""
