"""Save a generated output under `outputs/`: PNG images, WAV audio, numbered PNG frames or `.npy` arrays.

Every file is written atomically (`write_bytes_atomic`), so a file under `outputs/` is either
complete or absent. Fields of an output object that are not media (e.g. `nsfw_content_detected`) go
to `pipeline-output.json`, so nothing the model returned is silently dropped. numpy (and Pillow, for
PNG) are imported by the functions that need them: `genrun.backends` re-exports these without them.
"""

import io
import wave
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from genrun.schemas.rendering import array_or

from ._io import write_bytes_atomic

if TYPE_CHECKING:
    import numpy as np

IMAGE_FIELDS = ("images", "image")
AUDIO_FIELDS = ("audios", "audio")
VIDEO_FIELDS = ("frames", "videos", "video")
OTHER_FIELDS_FILE = "pipeline-output.json"


def save_output_fields(outputs_dir: Path, output: Any, sample_rate: int | None, *, latents: bool = False) -> tuple[str, ...]:
    """Write every field of an output object (a mapping, e.g. a diffusers pipeline's output, or one value); returns the
    paths written, relative to `outputs_dir`. `sample_rate`: of audio fields (`None`: unknown, saved as `.npy`).

    `latents` (the call asked for `output_type = "latent"`): arrays are saved as `.npy`, never as
    pictures (4 latent channels would otherwise pass for an RGBA image).
    """
    fields = dict(output.items()) if isinstance(output, Mapping) else {"output": output}
    written: list[str] = []
    others: dict[str, Any] = {}
    for name, value in fields.items():
        if value is None:
            others[name] = None
        elif latents and _is_array(value):
            written.append(save_array(outputs_dir, f"{name}.npy", value))
        elif name in IMAGE_FIELDS:
            written += save_images(outputs_dir, value, prefix="image")
        elif name in AUDIO_FIELDS:
            written += save_audio(outputs_dir, value, sample_rate, prefix="audio")
        elif name in VIDEO_FIELDS:
            written += save_video(outputs_dir, value, prefix="video")
        elif _is_array(value):
            written.append(save_array(outputs_dir, f"{name}.npy", value))
        else:
            others[name] = value
    if others:
        data = orjson.dumps(others, default=_describe, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
        write_bytes_atomic(outputs_dir / OTHER_FIELDS_FILE, data + b"\n")
        written.append(OTHER_FIELDS_FILE)
    return tuple(written)


def save_images(outputs_dir: Path, images: Any, prefix: str) -> list[str]:
    """PIL images or an array batch -> `<prefix>_<i>.png`; latents (not 1/3/4 channels) -> `<prefix>s.npy`."""
    if _is_array(images):
        array = _to_numpy(images)
        if array.ndim == 4 and array.shape[1] in (1, 3, 4) and array.shape[-1] not in (1, 3, 4):
            array = array.transpose(0, 2, 3, 1)  # [batch, channels, h, w] -> [batch, h, w, channels]
        if array.ndim != 4 or array.shape[-1] not in (1, 3, 4):
            return [save_array(outputs_dir, f"{prefix}s.npy", array)]
        images = list(array)
    return [_save_png(outputs_dir, f"{prefix}_{i}.png", image) for i, image in enumerate(images)]


def save_video(outputs_dir: Path, frames: Any, prefix: str) -> list[str]:
    """Per video, numbered PNG frames `<prefix>_<i>/frame_<j>.png` (PIL lists); arrays and tensors -> `<prefix>s.npy`."""
    if _is_array(frames):
        return [save_array(outputs_dir, f"{prefix}s.npy", _to_numpy(frames))]
    written = []
    for i, video in enumerate(frames):
        folder = f"{prefix}_{i}"
        (outputs_dir / folder).mkdir(parents=True, exist_ok=True)
        written += [_save_png(outputs_dir, f"{folder}/frame_{j:05d}.png", frame) for j, frame in enumerate(video)]
    return written


def save_audio(outputs_dir: Path, audio: Any, sample_rate: int | None, prefix: str) -> list[str]:
    """`[batch, channels, samples]` (or `[batch, samples]`) floats in [-1, 1] -> 16-bit PCM `<prefix>_<i>.wav`;
    without a known sample rate -> `<prefix>s.npy` (a WAV with a guessed rate would misstate the duration)."""
    array = _to_numpy(audio)
    if sample_rate is None or array.ndim not in (2, 3):
        return [save_array(outputs_dir, f"{prefix}s.npy", array)]
    if array.ndim == 2:
        array = array[:, None, :]
    return [write_wav(outputs_dir / f"{prefix}_{i}.wav", item, sample_rate) for i, item in enumerate(array)]


def write_wav(path: Path, samples: "np.ndarray", sample_rate: int) -> str:
    """One clip `[channels, samples]` as 16-bit PCM (clipped to [-1, 1]); returns the file name."""
    import numpy as np

    pcm = (np.clip(samples.astype(np.float64), -1.0, 1.0) * 32767.0).round().astype("<i2")
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as wav:
        wav.setnchannels(pcm.shape[0])
        wav.setsampwidth(2)
        wav.setframerate(sample_rate)
        wav.writeframes(np.ascontiguousarray(pcm.T).tobytes())  # interleaved: [samples, channels]
    write_bytes_atomic(path, buffer.getvalue())
    return path.name


def save_array(outputs_dir: Path, name: str, value: Any) -> str:
    """Any array or tensor as `.npy` (float32 for bfloat16, which numpy lacks)."""
    import numpy as np

    buffer = io.BytesIO()
    np.save(buffer, _to_numpy(value), allow_pickle=False)
    write_bytes_atomic(outputs_dir / name, buffer.getvalue())
    return name


def _save_png(outputs_dir: Path, rel: str, image: Any) -> str:
    """A PIL image or an `[h, w, c]` array as PNG at `outputs_dir/rel`; returns `rel`."""
    import numpy as np
    from PIL import Image

    if not isinstance(image, Image.Image):
        array = _to_numpy(image)
        if array.dtype.kind == "f":  # diffusers' "np" output: floats in [0, 1]
            array = (np.clip(array, 0.0, 1.0) * 255.0).round().astype(np.uint8)
        if array.ndim == 3 and array.shape[-1] == 1:
            array = array[..., 0]
        image = Image.fromarray(array)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    write_bytes_atomic(outputs_dir / rel, buffer.getvalue())
    return rel


def _is_array(value: Any) -> bool:
    cls = type(value)  # by module, so that telling an array apart never imports numpy or torch
    return (cls.__module__ == "numpy" and cls.__name__ == "ndarray") or cls.__module__.startswith("torch")


def _to_numpy(value: Any) -> "np.ndarray":
    import numpy as np

    if isinstance(value, np.ndarray):
        return value
    if type(value).__module__.startswith("torch"):
        tensor = value.detach().cpu()
        if str(tensor.dtype) == "torch.bfloat16":
            tensor = tensor.float()
        return tensor.numpy()
    if isinstance(value, Sequence):
        return np.asarray([_to_numpy(v) for v in value])
    return np.asarray(value)


_describe = array_or(repr)
"""orjson's `default` for other output fields: arrays to lists, anything else by repr."""
