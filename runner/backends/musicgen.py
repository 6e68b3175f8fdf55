"""MusicGen-style text-to-music models (MusicGen, MusicGen-Melody) in the transformers backend.

They load through `AutoModelForTextToWaveform` (not `AutoModelForCausalLM`), and their `generate`
override runs its own loop and returns decoded audio `[batch, channels, samples]`, not ids. The
instrumentation reaches that override (`instrument/own_generate.py`); this module holds what the
backend does differently for them: loading, frame units from the audio codec, and the WAV files.

Units: one decoding step emits one frame column for every codebook (rows of the saved ids are
`batch x codebooks`, in MusicGen's delay pattern, exactly as the decoder produced them). Frames
per second and the sampling rate come from the codec config (`audio_encoder.config.frame_rate`,
`.sampling_rate`), never from a request hint; produced seconds are the decoded audio's samples over
the sampling rate.
"""

import json
from pathlib import Path
from typing import Any, NamedTuple

from ._media import save_audio

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


def load(path: str, dtype: Any, device: str, options: dict[str, Any], processor_dir: Path) -> tuple[Any, Any]:
    """The full text-to-music model and its processor (MusicGen-Melody) or tokenizer (MusicGen), the latter from
    `processor_dir` (the model directory, or the frozen `[model] processor`)."""
    from transformers import AutoModelForTextToWaveform, AutoProcessor, AutoTokenizer

    model = AutoModelForTextToWaveform.from_pretrained(path, dtype=dtype, **options)
    model.to(device)
    model.eval()
    has_processor = (processor_dir / "preprocessor_config.json").is_file()
    auto = AutoProcessor if has_processor else AutoTokenizer
    processor = auto.from_pretrained(str(processor_dir), **options)
    return model, processor


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
    from genrun.schemas import AudioEvidence

    return AudioEvidence(codebooks=audio.codebooks, frames_per_second=audio.codec.frames_per_second, sampling_rate=audio.codec.sampling_rate,
                         frames=audio.frames, seconds=audio.seconds, files=audio.files)
