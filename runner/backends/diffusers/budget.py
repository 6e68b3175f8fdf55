"""Pre-flight for diffusers pipelines (`token-budget.json` with `units = "step"`), from files only.

Memory model, stated so it can be argued with:

    required = weights + latents + activations + margin

- **weights**: every component's default (non-variant) weights, float tensors at the run dtype
  (`[model] dtype`, or for `auto` each component's stored dtype, which is what the backend
  loads), integer tensors as stored; read from safetensors headers.
- **latents**: rows x `in_channels` x spatial cells x frames x dtype bytes of the denoiser
  (`unet` / `transformer`). Spatial cells come from `[generation] height/width` divided by the
  VAE scale factor when given, else from the denoiser's `sample_size`. Rows = prompts x images
  per prompt x guidance rows (2 when the effective `guidance_scale` > 1, diffusers' rule for
  classifier-free guidance, or `[budget] rows_per_request` if that is larger).
- **activations**: latents x (widest channel count of the denoiser / `in_channels`) x
  `LIVE_FEATURE_MAPS`: a handful of feature maps as wide as the widest block, held at latent
  resolution. A coarse figure (attention score matrices and the VAE decode at full
  resolution are not modelled); the margin is what covers the rest.
- **margin**: `[budget] memory_margin_fraction` of the device's total memory.

Requested units are denoising steps: `[generation] num_inference_steps`, else the default of
the pipeline's `__call__` (recorded as `library_default`). The scheduler may run a different
number of timesteps (PNDM runs one more); the backend records the real count.
"""

import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from genrun.backends import DTYPE_BYTES, TORCH_PACKAGES, Request, RequestError, TokenBudget, TorchRuntime, human_bytes, memory_fit, with_refusals

from . import _files as files

LIVE_FEATURE_MAPS = 8
"""Feature maps of the widest width assumed alive at once during one denoiser call (see the module docstring)."""
STEPS_KEY = "num_inference_steps"
PER_PROMPT_KEYS = ("batch_size", "num_images_per_prompt", "num_videos_per_prompt", "num_waveforms_per_prompt")
"""Call arguments that multiply the rows of one prompt."""
DURATION_KEYS = ("audio_length_in_s", "audio_end_in_s", "duration")
"""Call arguments that give an audio duration in seconds."""
RUNNER_OWNED = {
    "prompt": "give the prompt in [input] prompt (or [input] prompts for a batch)",
    "generator": "genrun seeds its own torch.Generator from the top-level 'seed'; set seed instead",
    "callback_on_step_end": "genrun observes every step through it; remove the key",
    "callback_on_step_end_tensor_inputs": "genrun sets it together with its step callback; remove the key",
    "callback": "genrun observes steps itself; remove the key",
    "callback_steps": "genrun observes steps itself; remove the key",
    "return_dict": "genrun needs the pipeline's output object to save it; remove the key",
}
"""`[generation]` keys the pipeline accepts but genrun must own, with the fix."""

# pipelines' text encoders are transformers models
DIFFUSERS_RUNTIME = TorchRuntime(("diffusers", "transformers", *TORCH_PACKAGES))
"""Devices, determinism, threads and versions as torch sees them: the backend's `runtime`."""


class CallPlan(NamedTuple):
    """What the request asks of the pipeline call, as far as the pre-flight needs it."""

    pipeline_class: str
    defaults: dict[str, Any]
    """`__call__` parameter -> default."""
    steps: int | None
    """`num_inference_steps` (request, else the signature default); `None` when the call has no such argument."""
    steps_from_request: bool
    rows: int
    """Rows the denoiser processes per step (batch x per prompt x guidance rows)."""
    batch: int
    """Outputs requested (prompts x per prompt)."""


def estimate_diffusers_budget(request: Request, model_dir: Path, weight_bytes: int, force: bool) -> TokenBudget:
    """Plan-time checks of the call and the memory pre-flight; raises RequestError (exit 2) for a call that cannot work.

    `weight_bytes` (model.json, all weight files as stored) is the fallback when the headers give nothing.
    """
    index = files.read_index(model_dir)
    cls = files.pipeline_class(model_dir)
    plan = plan_call(request, cls)
    weights = run_weight_bytes(model_dir, index, request.model.dtype) or weight_bytes
    denoiser = files.denoiser(model_dir, index)
    dtype_bytes = DTYPE_BYTES.get(request.model.dtype, 4)
    if denoiser is not None and request.model.dtype == "auto":
        stored = files.stored_float_dtype(files.component_weights(model_dir, index).get(denoiser[0], files.TensorBytes({}, 0)))
        dtype_bytes = DTYPE_BYTES.get(stored or "float32", 4)
    latents = latent_bytes(request, plan, denoiser[1] if denoiser else None, files.vae_scale_factor(model_dir, index), dtype_bytes)
    activations = latents * activation_multiplier(denoiser[1] if denoiser else None)
    memory = memory_fit(request.model.device, request.budget.memory_margin_fraction, weights + latents + activations, DIFFUSERS_RUNTIME)
    draft = TokenBudget(
        units="step",
        prompt_tokens=None,
        batch_size=plan.batch,
        requested_units=plan.steps,
        requested_units_source=None if plan.steps is None else ("request" if plan.steps_from_request else "library_default"),
        effective_max_length=None,
        context_limit=None,
        fits_context=None,
        kv_bytes_per_token=None,
        rows_per_request=plan.rows,
        kv_bytes_at_budget=None,
        weight_bytes=weights,
        activation_bytes_estimate=latents + activations,
        **memory._asdict(),
        domain=None,
        refusals=(),
        forced=False,
    )
    refusals = memory_refusals(draft, latents, activations, request.budget.memory_margin_fraction)
    return with_refusals(draft, refusals, force)


def plan_call(request: Request, cls: type) -> CallPlan:
    """Refuse what the pipeline cannot take (a prompt it has no argument for, keys genrun owns); work out steps and rows."""
    defaults = files.call_defaults(cls)
    name = cls.__name__
    given = request.input
    if given.messages is not None:
        raise RequestError(f"[input] messages: diffusers pipelines take no chat messages ({name}); give [input] prompt instead")
    texts = given.texts()
    if texts is not None and "prompt" not in defaults:
        field = "prompt" if given.prompt is not None else "prompts"
        raise RequestError(
            f"[input] {field} is set but {name}.__call__ takes no 'prompt' (an unconditional pipeline); remove [input] {field}"
        )
    problems = [f"[generation] {key}: {fix}" for key, fix in RUNNER_OWNED.items() if key in request.generation]
    steps = request.generation.get(STEPS_KEY)
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        problems.append(f"[generation] {STEPS_KEY} = {steps!r} must be a positive integer, e.g. {STEPS_KEY} = 25")
    for key in PER_PROMPT_KEYS:
        value = request.generation.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            problems.append(f"[generation] {key} = {value!r} must be a positive integer")
    if problems:
        raise RequestError(f"[generation] refused for {name} ({len(problems)} problem{'s' if len(problems) > 1 else ''}):"
                           + "".join(f"\n  - {p}" for p in problems))
    steps_default = _default(defaults, STEPS_KEY)
    effective_steps = steps if steps is not None else steps_default
    batch = (len(texts) if texts else 1) * _per_prompt(request.generation, defaults)
    return CallPlan(
        pipeline_class=name,
        defaults=defaults,
        steps=effective_steps if isinstance(effective_steps, int) else None,
        steps_from_request=steps is not None,
        rows=batch * guidance_rows(request, defaults),
        batch=batch,
    )


def guidance_rows(request: Request, defaults: Mapping[str, Any]) -> int:
    """2 when classifier-free guidance will run (effective `guidance_scale` > 1), or `[budget] rows_per_request` if larger."""
    scale = request.generation.get("guidance_scale", _default(defaults, "guidance_scale"))
    cfg = 2 if isinstance(scale, (int, float)) and not isinstance(scale, bool) and scale > 1 else 1
    return max(cfg, request.budget.rows_per_request)


def run_weight_bytes(model_dir: Path, index: files.PipelineIndex, dtype: str) -> int:
    """Weights as loaded: floats at `dtype`, or for `auto` at each component's dominant stored dtype."""
    total = 0
    for weights in files.component_weights(model_dir, index).values():
        if dtype == "auto":
            stored = files.stored_float_dtype(weights)
            total += files.weight_bytes_at(weights, DTYPE_BYTES.get(stored) if stored else None)
        else:
            total += files.weight_bytes_at(weights, DTYPE_BYTES[dtype])
    return total


def latent_bytes(request: Request, plan: CallPlan, config: Mapping[str, Any] | None, scale: int, dtype_bytes: int) -> int:
    """rows x channels x spatial cells x frames x dtype bytes (0 when the pipeline has no denoiser config)."""
    if config is None:
        return 0
    channels = int(config.get("in_channels") or config.get("num_channels_latents") or 1)
    return plan.rows * channels * spatial_cells(request, plan, config, scale) * dtype_bytes


def spatial_cells(request: Request, plan: CallPlan, config: Mapping[str, Any], scale: int) -> int:
    """Latent cells per channel: requested height x width / scale^2, else the config's `sample_size`; x requested frames."""
    gen = request.generation
    sample = config.get("sample_size")
    height, width = gen.get("height"), gen.get("width")
    if isinstance(height, int) and isinstance(width, int):
        cells = max(height // scale, 1) * max(width // scale, 1)
    elif isinstance(sample, int):
        cells = sample * sample if _is_2d(config) else sample
    elif isinstance(sample, (list, tuple)) and sample:
        cells = 1
        for size in sample:
            cells *= int(size)
    else:
        cells = 1
    frames = gen.get("num_frames", _default(plan.defaults, "num_frames"))
    return cells * (frames if isinstance(frames, int) and frames > 0 else 1)


def activation_multiplier(config: Mapping[str, Any] | None) -> int:
    """(widest channel count / input channels) x LIVE_FEATURE_MAPS, at least LIVE_FEATURE_MAPS."""
    if config is None:
        return 0
    channels = int(config.get("in_channels") or 1)
    widths = list(config.get("block_out_channels") or [])
    heads, head_dim = config.get("num_attention_heads"), config.get("attention_head_dim")
    if isinstance(heads, int) and isinstance(head_dim, int):
        widths.append(heads * head_dim)
    widest = max(widths, default=channels)
    return max(widest // channels, 1) * LIVE_FEATURE_MAPS


def memory_refusals(budget: TokenBudget, latents: int, activations: int, margin_fraction: float) -> tuple[str, ...]:
    """The memory refusal naming every term, or nothing when it fits (or free memory is unknown)."""
    if budget.fits_memory is not False:
        return ()
    return (
        f"needs ~{human_bytes(budget.required_bytes)} (weights {human_bytes(budget.weight_bytes)} + latents {human_bytes(latents)} "
        f"for {budget.rows_per_request} row(s) + activations {human_bytes(activations)} + margin {human_bytes(budget.margin_bytes)}, "
        f"i.e. [budget] memory_margin_fraction {margin_fraction:g} x total {human_bytes(budget.device_memory_total_bytes or 0)}) "
        f"but {budget.device} has {human_bytes(budget.device_memory_free_bytes or 0)} free; lower the batch or the image size, "
        "use a smaller [model] dtype, lower memory_margin_fraction, or free memory",
    )


def _per_prompt(generation: Mapping[str, Any], defaults: Mapping[str, Any]) -> int:
    count = 1
    for key in PER_PROMPT_KEYS:
        value = generation.get(key, _default(defaults, key))
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            count *= value
    return count


def _default(defaults: Mapping[str, Any], key: str) -> Any:
    value = defaults.get(key)
    return None if value is inspect.Parameter.empty else value


def _is_2d(config: Mapping[str, Any]) -> bool:
    """1-D denoisers (audio `UNet1DModel`) have a `sample_size` in samples, not a square side."""
    class_name = str(config.get("_class_name", ""))
    return "1D" not in class_name
