"""What a diffusers pipeline directory says about itself, read from its files only (no torch, no weights loaded).

`model_index.json` names the pipeline class and its components; each component folder holds a
`config.json` and weights. Safetensors headers (8-byte length + JSON) give every tensor's dtype
and shape, so the pre-flight knows the bytes at the run dtype and "auto" knows the stored dtype
without reading a single weight.
"""

import inspect
import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple
from genrun.backends import WEIGHT_SUFFIXES, RequestError



SAFETENSORS_DTYPE_BYTES = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1,
    "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1, "U16": 2, "U32": 4, "U64": 8,
}
FLOAT_DTYPE_NAMES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16"}
"""Safetensors dtype code -> torch dtype name, for the floating types a run dtype replaces."""
DENOISER_COMPONENTS = ("unet", "transformer", "prior")
"""Component names of the network the denoising loop calls once (or more) per step, in lookup order."""
_MAX_HEADER_BYTES = 100 * 2**20  # a larger header is not a safetensors file


class PipelineIndex(NamedTuple):
    """`model_index.json`: the pipeline class and its components."""

    class_name: str
    """`_class_name`, e.g. `DDIMPipeline`."""
    components: dict[str, tuple[str | None, str | None]]
    """Component name -> (library, class); `(None, None)` for an absent optional component."""


class TensorBytes(NamedTuple):
    """Bytes of one component's weights, split by whether a run dtype would convert them."""

    float_elements: dict[str, int]
    """Safetensors float dtype code -> element count."""
    other_bytes: int
    """Integer/bool tensors and non-safetensors weight files, kept as stored."""


def read_index(model_dir: Path) -> PipelineIndex:
    """Parse `model_index.json`; RequestError when the directory is not a diffusers pipeline."""
    path = Path(model_dir) / "model_index.json"
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise RequestError(f"[model] backend = 'diffusers' but {model_dir} has no model_index.json; give a diffusers pipeline directory") from None
    except (OSError, ValueError) as exc:
        raise RequestError(f"[model] {path} cannot be read as JSON ({exc}); the pipeline directory is damaged") from None
    components = {}
    for name, value in raw.items():
        if name.startswith("_") or not isinstance(value, list) or len(value) != 2:
            continue
        library, class_name = value
        components[name] = (library, class_name)
    return PipelineIndex(raw["_class_name"], components)


def pipeline_class(model_dir: Path) -> type:
    """The diffusers class `model_index.json` names (imports diffusers)."""
    class_name = read_index(model_dir).class_name
    try:
        import diffusers
    except ImportError:
        raise RequestError(f"[model] backend = 'diffusers' needs the diffusers extra: pip install 'genrun[diffusers]' (from a checkout of genrun: pip install -e '.[diffusers]')") from None
    found = getattr(diffusers, class_name, None)
    if found is None:
        raise RequestError(f"model_index.json names pipeline class {class_name!r}, which diffusers {diffusers.__version__} does not have")
    return found


def call_defaults(cls: type) -> dict[str, Any]:
    """Parameter name -> default of `cls.__call__` (`inspect.Parameter.empty` when it has none)."""
    params = inspect.signature(cls.__call__).parameters
    return {
        name: p.default
        for name, p in params.items()
        if name != "self" and p.kind not in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)
    }


def component_config(model_dir: Path, component: str) -> dict[str, Any] | None:
    """`<component>/config.json` (or the scheduler's `scheduler_config.json`), `None` when absent."""
    folder = Path(model_dir) / component
    for name in ("config.json", "scheduler_config.json"):
        if (folder / name).is_file():
            return json.loads((folder / name).read_text())
    return None


def denoiser(model_dir: Path, index: PipelineIndex) -> tuple[str, dict[str, Any]] | None:
    """(component name, config) of the UNet / transformer the loop runs each step, when there is one."""
    for name in DENOISER_COMPONENTS:
        if index.components.get(name, (None, None))[1] is not None:
            config = component_config(model_dir, name)
            if config is not None:
                return name, config
    return None


def vae_scale_factor(model_dir: Path, index: PipelineIndex) -> int:
    """Pixels per latent cell: 2 ** (VAE levels - 1) as diffusers computes it; 1 without a VAE (pixel-space models)."""
    if index.components.get("vae", (None, None))[1] is None:
        return 1
    config = component_config(model_dir, "vae") or {}
    levels = len(config.get("block_out_channels") or [0])
    return 2 ** (levels - 1)


def component_weights(model_dir: Path, index: PipelineIndex) -> dict[str, TensorBytes]:
    """Per component with a folder: the weights `from_pretrained` loads (non-variant safetensors first)."""
    found = {}
    for name, (_, class_name) in index.components.items():
        folder = Path(model_dir) / name
        if class_name is None or not folder.is_dir():
            continue
        found[name] = _folder_weights(folder)
    return found


def stored_float_dtype(weights: TensorBytes) -> str | None:
    """The floating dtype holding most elements of a component (`None` when unknown, e.g. `.bin` only)."""
    if not weights.float_elements:
        return None
    code = max(weights.float_elements, key=weights.float_elements.__getitem__)
    return FLOAT_DTYPE_NAMES[code]


def weight_bytes_at(weights: TensorBytes, dtype_bytes: int | None) -> int:
    """Bytes once loaded: floats at `dtype_bytes` each (`None`: as stored), everything else as stored."""
    floats = sum(
        count * (dtype_bytes if dtype_bytes is not None else SAFETENSORS_DTYPE_BYTES[code])
        for code, count in weights.float_elements.items()
    )
    return floats + weights.other_bytes


def _folder_weights(folder: Path) -> TensorBytes:
    safetensors = sorted(p for p in folder.glob("*.safetensors") if not _is_variant(p))
    if not safetensors:
        others = [p for p in folder.iterdir() if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES)]
        return TensorBytes({}, sum(p.stat().st_size for p in others))
    floats: dict[str, int] = {}
    other = 0
    for path in safetensors:
        for code, elements in _header_tensors(path):
            if code in FLOAT_DTYPE_NAMES:
                floats[code] = floats.get(code, 0) + elements
            else:
                other += elements * SAFETENSORS_DTYPE_BYTES.get(code, 1)
    return TensorBytes(floats, other)


def _is_variant(path: Path) -> bool:
    """`diffusion_pytorch_model.fp16.safetensors` / `model.fp16-00001-of-00002.safetensors` are variants, not the default weights."""
    stem = path.name.removesuffix(".safetensors")
    return "." in stem


def _header_tensors(path: Path) -> Iterator[tuple[str, int]]:
    """(dtype code, element count) of every tensor in a safetensors file, from its header only."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise RequestError(f"[model] weight file {path} is truncated ({len(head)} bytes); fetch the model again")
        (length,) = struct.unpack("<Q", head)
        if length > _MAX_HEADER_BYTES:
            raise RequestError(f"[model] weight file {path} does not start with a safetensors header; fetch the model again")
        header = json.loads(f.read(length))
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        elements = 1
        for dim in entry["shape"]:
            elements *= dim
        yield entry["dtype"], elements


def pipeline_call_parameters(model_dir: Path) -> list[str]:
    """Parameters of the diffusers pipeline class's `__call__`, named by `model_index.json` (the valid `[generation]` keys)."""
    params = inspect.signature(pipeline_class(model_dir).__call__).parameters
    return sorted(name for name in params if name != "self" and params[name].kind is not inspect.Parameter.VAR_KEYWORD)
