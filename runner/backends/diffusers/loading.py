"""Loading a diffusers pipeline from the frozen directory: the `[model] loader` or `DiffusionPipeline.from_pretrained`,
offline, at the request's dtype (per component for `auto`), checked against what the denoiser really holds."""

from pathlib import Path
from typing import Any
from genrun.backends import LoadContext, resolve_callable

from . import _files as files


def load_pipeline(ctx: LoadContext) -> Any:
    """`[model] loader` when given (it may return the pipeline or `(pipeline, anything)`), else
    `DiffusionPipeline.from_pretrained` from the frozen directory, offline, at the request's dtype, on its device."""
    from diffusers import DiffusionPipeline

    spec = ctx.request.model
    if spec.loader is not None:
        loader = resolve_callable(spec.loader, "[model] loader")
        loaded = loader(str(ctx.model_dir), spec.dtype, ctx.device, **spec.loader_kwargs)
        pipe = loaded[0] if isinstance(loaded, tuple) and loaded else loaded
        if not isinstance(pipe, DiffusionPipeline):
            raise TypeError(f"[model] loader {spec.loader!r} returned {type(pipe).__name__}; it must return a diffusers DiffusionPipeline")
        return pipe
    dtype = load_dtype(ctx.model_dir, spec.dtype)
    pipe = DiffusionPipeline.from_pretrained(str(ctx.model_dir), local_files_only=True, **{dtype_keyword(): dtype})
    pipe.to(ctx.device)
    check_loaded_dtype(pipe, spec.dtype)
    return pipe


def load_dtype(model_dir: Path, requested: str) -> Any:
    """The torch dtype for `from_pretrained`; for `auto`, each component's stored dtype (diffusers alone would load float32)."""
    import torch

    if requested != "auto":
        return getattr(torch, requested)
    index = files.read_index(model_dir)
    per_component = {name: files.stored_float_dtype(w) for name, w in files.component_weights(model_dir, index).items()}
    mapping = {name: getattr(torch, dtype) for name, dtype in per_component.items() if dtype is not None}
    mapping["default"] = torch.float32
    return mapping


def dtype_keyword() -> str:
    """`dtype` on diffusers >= 0.42 (where `torch_dtype` is deprecated), `torch_dtype` before."""
    import diffusers

    major, minor = (int(p) for p in diffusers.__version__.split(".")[:2])
    return "dtype" if (major, minor) >= (0, 42) else "torch_dtype"


def check_loaded_dtype(pipe: Any, requested: str) -> None:
    """An explicit dtype must really be what the denoiser holds (an ignored keyword would be a silent change)."""
    if requested == "auto":
        return
    denoiser = denoiser_of(pipe)
    actual = str(getattr(denoiser, "dtype", "")).removeprefix("torch.")
    if denoiser is not None and actual != requested:
        raise RuntimeError(f"[model] dtype = {requested!r} but the pipeline's denoiser loaded as {actual}; diffusers ignored the dtype")


def denoiser_of(pipe: Any) -> Any:
    """The pipeline's denoising network (UNet or transformer), `None` when it has none genrun knows."""
    return next((getattr(pipe, name) for name in files.DENOISER_COMPONENTS if getattr(pipe, name, None) is not None), None)
