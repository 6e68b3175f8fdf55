"""A two-stage "song" recorded by genrun's loop backend: frames, then windows of audio, in numpy only.

Stage `ar` (unit frame, 25 per second) walks frame codes, `code' = (a * code + b) mod codes`, from a
code set by the prompt, until it emits the EOS frame or reaches `max_frames`. Stage `acoustic`
(unit window, `consumes="ar"`) decodes windows of `window_frames` frames on a hop of `hop_frames`
(the seed's 200 / 100 geometry scaled down), overlap-adds them with a Hann window and writes
`outputs/song.wav`. When the EOS frame comes before `[units] requested_seconds`, the song is short:
genrun's verify says `early_stop`, as for any frame run.
"""

import json
import wave
from pathlib import Path
from typing import Any

import numpy as np


def generate(model_dir: Path, inputs: dict[str, Any], generation: dict[str, Any], rec: Any, max_frames: int = 100) -> None:
    """`[loop] kwargs = { max_frames = N }`: the AR stage's frame budget."""
    model = json.loads((model_dir / "config.json").read_text())
    fps, window, hop = model["frames_per_second"], model["window_frames"], model["hop_frames"]
    first = 1 + sum(inputs["prompts"][0].encode()) % (model["codes"] - 1)
    rec.config({"max_frames": max_frames, "first_code": first, "eos_frame": model["eos_frame"], "eos_token_ids": [model["eos_frame"]],
                "window_frames": window, "hop_frames": hop, "sample_rate": model["sample_rate"]})
    frames = []
    with rec.stage("ar", unit="frame", per_second=fps, rows=1) as ar:
        code = first
        while len(frames) < max_frames:
            code = (model["step_multiplier"] * code + model["step_offset"]) % model["codes"]
            frames.append(code)
            ar.emit(0, np.asarray([code]))
            if code == model["eos_frame"]:
                ar.stop(0, "eos", eos_token_id=code)
                break
        else:
            ar.stop(0, "max_new_tokens", limit=max_frames)
    samples_per_frame = model["sample_rate"] // fps
    starts = range(0, max(len(frames) - window, 0) + hop, hop)  # the last window is padded to reach the last frame
    song = np.zeros((starts[-1] + window) * samples_per_frame)
    with rec.stage("acoustic", unit="window", rows=1, consumes="ar") as acoustic:
        read = 0
        for start in starts:
            chunk = frames[start:start + window]
            song[start * samples_per_frame:(start + window) * samples_per_frame] += _decode(chunk + chunk[-1:] * (window - len(chunk)), model)
            new = min(start + window, len(frames)) - read
            read += new
            acoustic.advance(0, 1, consumed=new)
        acoustic.stop(0, "completed")
    _write_wav(rec.outputs_dir / "song.wav", song[: len(frames) * samples_per_frame], model["sample_rate"])


def _decode(codes: list[int], model: dict[str, Any]) -> np.ndarray:
    """One window: a tone per frame at the code's pitch, shaped by a Hann window (overlap-add on the hop)."""
    n = model["sample_rate"] // model["frames_per_second"]
    t = np.arange(n * len(codes)) / model["sample_rate"]
    pitch = np.repeat([model["base_hz"] + model["hz_per_code"] * c for c in codes], n)
    return 0.4 * np.sin(2 * np.pi * pitch * t) * np.hanning(n * len(codes))


def _write_wav(path: Path, samples: np.ndarray, rate: int) -> None:
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes((np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes())
