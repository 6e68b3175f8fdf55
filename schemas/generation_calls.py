"""`generation-calls.json`: how each generate call ran and how much of it genrun could record."""

from typing import Literal

from ._base import Strict

EvidenceLevel = Literal["full", "partial"]
CallPath = Literal["generate", "beam_search", "assisted", "continuous_batching", "own_generate"]


class AudioEvidence(Strict):
    """A call that returned decoded audio (MusicGen-style): how its ids map to frames and seconds."""

    codebooks: int
    """Rows of the saved ids per batch item (one per codebook, in the decoder's delay pattern)."""
    frames_per_second: float
    """Codec frames per second (`audio_encoder.config.frame_rate`)."""
    sampling_rate: int
    """Audio samples per second of the codec."""
    frames: tuple[int, ...]
    """Decoded frames per batch item: decoding steps minus the `codebooks - 1` steps of the delay pattern."""
    seconds: tuple[float, ...]
    """Seconds of audio per batch item (samples / sampling_rate)."""
    files: tuple[str, ...]
    """WAV files under `outputs/`."""


class CallEvidence(Strict):
    """One outermost generate call of the run."""

    call_index: int
    """Index of the call (rows of `generation-stop.json` carry it)."""
    model_class: str
    """Class of the model generate ran on."""
    path: CallPath
    """How it generated: transformers' loop, beam search, assisted/prompt-lookup decoding, continuous batching, or the model's own `generate` (MusicGen)."""
    evidence_level: EvidenceLevel
    """`partial` when something could not be recorded; `missing` says what and why."""
    missing: tuple[str, ...]
    """What could not be recorded for this call, and why."""
    nested_calls: int
    """generate calls made from inside this one (an assistant's drafts); passed through, not recorded separately."""
    draft_tokens_proposed: int | None = None
    """Assisted decoding: tokens the assistant's calls proposed (`None` when not measured)."""
    draft_tokens_accepted: int | None = None
    """Assisted/prompt-lookup decoding: tokens emitted beyond one per verification step."""
    audio: AudioEvidence | None = None
    """Set when the call returned decoded audio (MusicGen-style models)."""


class GenerationCalls(Strict):
    """Per-call evidence levels, the instrumentation self-check, and calls that were not the run's."""

    schema_version: Literal[1] = 1
    """Version of this file's layout."""
    transformers_version: str
    """The installed transformers the self-check inspected."""
    self_check_problems: tuple[str, ...]
    """Private methods or parameters genrun hooks that the installed transformers lacks (reduced evidence)."""
    evidence_level: EvidenceLevel
    """`partial` when any call is partial or the self-check found a problem."""
    calls: tuple[CallEvidence, ...]
    """Outermost calls, in order."""
    foreign_thread_calls: int
    """generate calls from threads that are not the run's: passed through untouched, not recorded."""
