"""Media inputs on the record: `input-files.json` (frozen at plan time) and `input-preparation.json`
(written at execution, before generate): what each file was, and what the model actually received."""

from typing import Any, Literal

from ._base import Strict

MediaKind = Literal["audio", "image"]
TruncationUnit = Literal["tokens", "samples", "seconds", "pixels"]
TruncationSide = Literal["left", "right", "both"]
"""`both`: equally from both ends (an image center crop: top and bottom rows, left and right columns)."""
Architecture = Literal["decoder_only", "encoder_decoder"]
"""Decoder-only (the prompt shares the context with the output) or encoder-decoder."""


class AudioFacts(Strict):
    """What decoding the audio file header said (libsndfile via `soundfile`)."""

    sample_rate: int
    """Samples per second in the file."""
    channels: int
    """Channels in the file (mixed down to mono before the processor)."""
    frames: int
    """Samples per channel."""
    seconds: float
    """Duration: frames / sample_rate."""
    format: str
    """Container and subtype, e.g. `WAV PCM_16`."""


class ImageFacts(Strict):
    """What opening the image said (Pillow)."""

    width: int
    """Pixels."""
    height: int
    """Pixels."""
    mode: str
    """Pillow mode, e.g. `RGB`."""
    format: str | None
    """Pillow format, e.g. `PNG`."""


class InputFile(Strict):
    """One media file of the request."""

    kind: MediaKind
    """`audio` or `image`."""
    row: int
    """Batch row it feeds."""
    source_path: str
    """Absolute path of the file when it was planned."""
    frozen_path: str | None
    """Snapshot-relative copy (`inputs/...`), or `None` with `copy = false` (only the hash is frozen)."""
    size_bytes: int
    """File size."""
    sha256: str
    """Hex digest of the file's bytes."""
    audio: AudioFacts | None = None
    """Audio header facts (audio only)."""
    image: ImageFacts | None = None
    """Image facts (images only)."""


class InputFiles(Strict):
    """`input-files.json`: every media file of the request, validated and identified at plan time."""

    schema_version: Literal[1] = 1
    """Version of this file's layout."""
    copied: bool
    """`[input] copy`: files are in `inputs/` (true) or only hashed (false; execute re-hashes them)."""
    files: tuple[InputFile, ...]
    """In request order: audio rows, then image rows."""


class Truncation(Strict):
    """Input dropped before the model saw it."""

    component: str
    """Who dropped it: the class name (`WhisperFeatureExtractor`, `PreTrainedTokenizerFast`, ...)."""
    cause: str
    """The setting responsible, e.g. `truncation=True (n_samples=480000: 30.0 s)` or `max_length=4`."""
    unit: TruncationUnit
    """What `dropped` counts."""
    dropped: float
    """How much was dropped."""
    side: TruncationSide
    """Which end was dropped."""
    rows_dropped: int | None = None
    """Images: pixel rows of the supplied image dropped (in its own pixels), `None` otherwise."""
    cols_dropped: int | None = None
    """Images: pixel columns of the supplied image dropped (in its own pixels), `None` otherwise."""


class AudioReceived(Strict):
    """One audio row: what was supplied and what the model received."""

    input_seconds: float
    """Duration of the supplied file."""
    file_sample_rate: int
    """Sample rate of the file."""
    model_sample_rate: int
    """Sample rate the processor takes (the audio is resampled to it when they differ)."""
    resampled_with: str | None
    """Resampler used (`soxr <version>, quality HQ`), `None` when no resampling was needed."""
    feature_frames: int | None
    """Feature frames the model received for this row (attention mask sum when given, else the tensor's frames)."""
    hop_length: int | None
    """Samples per feature frame."""
    seconds_received: float
    """Seconds of the supplied audio the model received: min(feature frames x hop / rate, input seconds)."""
    long_form: bool = False
    """More than one processor window: the model runs sequential windows over it (Whisper long-form)."""
    window_seconds: float | None = None
    """The feature extractor's window (`chunk_length`, 30 s for Whisper), when it has one."""


class ImageReceived(Strict):
    """One image row: size before and after the processor."""

    width: int
    """Pixels supplied."""
    height: int
    """Pixels supplied."""
    received_width: int | None
    """Pixel-value width the model received."""
    received_height: int | None
    """Pixel-value height the model received."""


class DecoderPrompt(Strict):
    """The tokens an encoder-decoder's own generate forces at the start of the decoder (Whisper: start, language, task,
    notimestamps), as its generate builds them for this row."""

    token_ids: tuple[int, ...]
    """Forced decoder ids, in order."""
    text: str
    """Their decode, special tokens kept (e.g. `<|startoftranscript|><|en|><|transcribe|><|notimestamps|>`)."""
    built_by: str
    """The method that built them, e.g. `WhisperForConditionalGeneration._retrieve_init_tokens`."""


class PreparedRow(Strict):
    """What one batch row became before generate."""

    row: int
    """Batch row."""
    rendered_prompt: str | None
    """The text given to the tokenizer/processor (chat template applied), `None` without text."""
    prompt_token_ids: tuple[int, ...]
    """Token ids of this row as the model received them, unpadded (empty for an encoder fed features only, e.g. Whisper: its
    decoder prompt is `decoder_prompt`)."""
    prompt_tokens: int
    """Unpadded prompt length (includes audio placeholder tokens an audio LLM's processor inserted)."""
    pad_count: int
    """Pad tokens added to this row."""
    audio: AudioReceived | None = None
    """Audio facts (audio rows)."""
    image: ImageReceived | None = None
    """Image facts (image rows)."""
    truncations: tuple[Truncation, ...] = ()
    """Everything dropped from this row's input, by component."""
    decoder_prompt: DecoderPrompt | None = None
    """Encoder-decoders whose generate forces decoder tokens (Whisper): those tokens; `None` otherwise or when they are
    only decided inside generate (language detection)."""


class InputPreparation(Strict):
    """`input-preparation.json`: what `[input]` became, written before generate."""

    schema_version: Literal[1] = 1
    """Version of this file's layout."""
    architecture: Architecture
    """Decoder-only (the prompt shares the context with the output) or encoder-decoder."""
    length_counts: str
    """What generate's `max_length` / `max_new_tokens` count, e.g. `decoder tokens (the encoder input is not counted)`."""
    processor: str | None
    """Processor class used for media (`WhisperProcessor`, ...), `None` for text only (where it was loaded from: `processor_dir`)."""
    feature_extractor: str | None
    """Feature extractor class, when there is one."""
    tokenizer: str
    """Tokenizer class."""
    processor_dir: str | None = None
    """Snapshot-relative directory the processor / tokenizer was loaded from when `[model] processor` replaced the
    checkpoint's own (`processor`, the frozen copy); `None`: the checkpoint's."""
    processor_kwargs: dict[str, Any]
    """`[input] processor_kwargs` as passed."""
    padding_side: str
    """Side pad tokens were added on."""
    model_input_names: tuple[str, ...]
    """Tensors passed to generate (`input_ids`, `input_features`, `attention_mask`, ...)."""
    rows: tuple[PreparedRow, ...]
    """One per batch row."""
