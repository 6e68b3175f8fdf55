"""Audio files: header facts at plan time, decoded mono samples at the processor's rate at execution.

Decoding: `soundfile` (libsndfile, shipped in its wheel: WAV, FLAC, OGG/Vorbis, MP3 ...).
Resampling: `soxr` (libsoxr, the resampler librosa uses by default), quality `HQ`; which one was
used is recorded per row in `input-preparation.json`.
"""

from pathlib import Path
from typing import NamedTuple

from genrun.schemas import AudioFacts

RESAMPLE_QUALITY = "HQ"


class AudioUndecodable(ValueError):
    """The file is not audio libsndfile can decode."""


class DecodedAudio(NamedTuple):
    """Mono float32 samples at the rate the processor takes."""

    samples: object
    """# numpy float32 [samples]"""
    sample_rate: int
    """Rate of `samples` (the processor's)."""
    resampled_with: str | None
    """Resampler and quality when the file's rate differed, else `None`."""


def audio_facts(path: Path) -> AudioFacts:
    """Read the header (no samples); raises `AudioUndecodable` naming libsndfile's reason."""
    import soundfile

    try:
        info = soundfile.info(str(path))
    except (soundfile.LibsndfileError, RuntimeError) as exc:
        raise AudioUndecodable(str(exc)) from None
    if info.samplerate <= 0 or info.frames <= 0:
        raise AudioUndecodable(f"no samples (sample rate {info.samplerate}, {info.frames} frames)")
    return AudioFacts(sample_rate=info.samplerate, channels=info.channels, frames=info.frames,
                      seconds=info.frames / info.samplerate, format=f"{info.format} {info.subtype}")


def decode_audio(path: Path, target_rate: int) -> DecodedAudio:
    """All samples, mixed down to mono (channel mean), resampled to `target_rate` when the file's rate differs."""
    import numpy as np
    import soundfile

    samples, rate = soundfile.read(str(path), dtype="float32", always_2d=True)  # [frames, channels]
    mono = samples.mean(axis=1, dtype=np.float32)
    if rate == target_rate:
        return DecodedAudio(mono, rate, None)
    import soxr

    resampled = soxr.resample(mono, rate, target_rate, quality=RESAMPLE_QUALITY).astype(np.float32)
    return DecodedAudio(resampled, target_rate, f"soxr {soxr.__version__}, quality {RESAMPLE_QUALITY}, {rate} -> {target_rate} Hz")
