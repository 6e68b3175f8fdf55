"""MusicGen-style text-to-music models (MusicGen, MusicGen-Melody) in the transformers backend.

They load through `AutoModelForTextToWaveform` (not `AutoModelForCausalLM`), and their `generate`
override runs its own loop and returns decoded audio `[batch, channels, samples]`, not ids. The
instrumentation reaches that override (`instrument/own_generate.py`); this module holds what the
backend does differently for them: loading, frame units from the audio codec, and the WAV files.

Units: one decoding step emits one frame column for every codebook (rows of the saved ids are
`batch x codebooks`, in MusicGen's delay pattern, exactly as the decoder produced them). Frames
per second and the sampling rate come from the codec config (`audio_encoder.config.frame_rate`,
`.sampling_rate`), never from a request hint: at plan time from the checkpoint's config (no
weights; a `[units] per_second` that disagrees is refused), after generation from the loaded
codec; produced seconds are the decoded audio's samples over the sampling rate.
"""

import json
import math
from pathlib import Path
from typing import Any, NamedTuple

from genrun.backends import PlanContext, Request, RequestError, UnitsSpec, save_audio

from ._checkpoint_config import checkpoint_config
from .length_rules import FrameRate

MODEL_TYPES = ("musicgen", "musicgen_melody")
"""`config.json` `model_type`s served here."""


class Codec(NamedTuple):
    """What the audio codec says about time."""

    frames_per_second: float
    """Codec frames per second of audio (`frame_rate`)."""
    sampling_rate: int
    """Audio samples per second."""


class AudioOutput(NamedTuple):
    """The decoded audio of one generate call."""

    call_index: int
    """The outermost call that returned it."""
    codebooks: int
    """Rows of the generated ids per batch item."""
    codec: Codec
    """Frame and sampling rates."""
    files: tuple[str, ...]
    """WAV files written under `outputs/`."""
    frames: tuple[int, ...]
    """Codec frames per batch item (samples x frames_per_second / sampling_rate)."""
    seconds: tuple[float, ...]
    """Seconds of audio per batch item."""


def is_music_model(model_dir: Path) -> bool:
    """`config.json` names a MusicGen-family model."""
    config = model_dir / "config.json"
    if not config.is_file():
        return False
    return json.loads(config.read_text()).get("model_type") in MODEL_TYPES


def is_music_instance(model: Any) -> bool:
    """A loaded MusicGen-family model (its config's `model_type`)."""
    return getattr(getattr(model, "config", None), "model_type", None) in MODEL_TYPES


def checkpoint_frame_rate(context: PlanContext, model_dir: Path) -> float | None:
    """Frames per second of a MusicGen-family checkpoint's audio codec, from its config files (no weights); `None` for
    other models. `frame_rate` is a property of the codec config (EnCodec: ceil(sampling_rate / hop)), not a stored key."""
    if not is_music_model(model_dir):
        return None
    config = checkpoint_config(context, model_dir, trust_remote_code=False)  # a built-in architecture: no remote code to trust
    rate = getattr(getattr(config, "audio_encoder", None), "frame_rate", None)
    return float(rate) if rate is not None else None


def planned_frame_rate(context: PlanContext, units: UnitsSpec, model_dir: Path) -> FrameRate | None:
    """The frame rate a plan counts with: the codec's for MusicGen-family models (a disagreeing `per_second` is refused),
    else `[units] per_second` for frame units, which is then required (an entry point's model has no rate genrun can read)."""
    codec_rate = checkpoint_frame_rate(context, model_dir)
    if codec_rate is not None:
        if units.per_second is not None and not math.isclose(units.per_second, codec_rate, rel_tol=1e-9):
            raise RequestError(f"[units] per_second = {units.per_second:g} disagrees with the model's audio codec, which emits "
                               f"{codec_rate:g} frames per second (audio_encoder frame_rate in {model_dir / 'config.json'}); "
                               f"remove per_second (genrun reads the rate from the codec) or set it to {codec_rate:g}")
        return FrameRate(codec_rate, "model_codec")
    if units.name != "frame":
        return None
    if units.per_second is None:
        raise RequestError("[units] name = 'frame' needs 'per_second' (frames per second of output, e.g. 25): genrun reads the "
                           "rate from the model only for MusicGen-family audio codecs, and this model is not one")
    return FrameRate(units.per_second, "request")


def load(path: str, dtype: Any, device: str, options: dict[str, Any], processor_dir: Path, for_entrypoint: bool) -> tuple[Any, Any]:
    """The full text-to-music model and its tokenizer, from `processor_dir` (the model directory, or the frozen
    `[model] processor`); an entry point gets the processor where there is one (MusicGen-Melody's computes chroma from
    audio, and needs torchaudio), as its code may feed audio through it."""
    from transformers import AutoModelForTextToWaveform, AutoProcessor, AutoTokenizer

    model = AutoModelForTextToWaveform.from_pretrained(path, dtype=dtype, **options)
    model.to(device)
    model.eval()
    has_processor = (processor_dir / "preprocessor_config.json").is_file()
    auto = AutoProcessor if for_entrypoint and has_processor else AutoTokenizer  # plain requests condition on text only
    return model, auto.from_pretrained(str(processor_dir), **options)


def validate_request(context: PlanContext, request: Request, model_dir: Path) -> None:
    """MusicGen-family refusals at plan time: media inputs (genrun conditions on text only) and the frame rate rules."""
    if request.input.media_files() and is_music_model(model_dir):
        raise RequestError("[input] audio/images are not passed to MusicGen-family models by genrun: plain requests condition on "
                           "the text alone (MusicGen-Melody's chroma extractor needs torchaudio and that path is not wired or "
                           "tested yet); remove them, or pass the audio path to your own [entrypoint] in its kwargs")
    planned_frame_rate(context, request.units, model_dir)


def codec(model: Any) -> Codec | None:
    """Frame rate and sampling rate from the model's audio codec config (`None` when it has none)."""
    config = getattr(getattr(model, "audio_encoder", None), "config", None)
    if config is None or getattr(config, "frame_rate", None) is None:
        return None
    return Codec(float(config.frame_rate), int(config.sampling_rate))


def save_call_audio(outputs_dir: Path, call_index: int, audio: Any, codec_info: Codec, id_rows: int) -> AudioOutput:
    """`audio_<i>.wav` per batch item (`call<k>_audio_<i>.wav` for calls after the first)."""
    prefix = "audio" if call_index == 0 else f"call{call_index}_audio"
    files = tuple(save_audio(outputs_dir, audio, codec_info.sampling_rate, prefix=prefix))
    samples = [int(item.shape[-1]) for item in audio]
    seconds = tuple(s / codec_info.sampling_rate for s in samples)
    frames = tuple(round(s * codec_info.frames_per_second) for s in seconds)
    return AudioOutput(call_index, max(1, id_rows // max(1, len(samples))), codec_info, files, frames, seconds)


def audio_evidence(audio: AudioOutput) -> Any:
    """The `generation-calls.json` record of one call's audio."""
    from genrun.backends import AudioEvidence

    return AudioEvidence(codebooks=audio.codebooks, frames_per_second=audio.codec.frames_per_second, sampling_rate=audio.codec.sampling_rate,
                         frames=audio.frames, seconds=audio.seconds, files=audio.files)
