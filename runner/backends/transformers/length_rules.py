"""generate's length rules, the rows decoded in parallel, and the frame-rate estimate of `[units]`.

transformers-specific: these mirror how `generate` fills `max_length` / `max_new_tokens` and how
classifier-free guidance (MusicGen) doubles the decoded rows.
"""

from typing import Any, NamedTuple

from genrun.backends import LIBRARY_DEFAULT_NEW_TOKENS, DomainEstimate, FrameRateSource, LengthSource, Request


class LengthLimit(NamedTuple):
    """The length generate will stop at, and who set it."""

    max_length: int
    """Absolute length incl. the (padded) prompt."""
    new_tokens: int
    """max_length - prompt."""
    source: LengthSource


def effective_length(prompt_tokens: int, overrides: dict[str, Any], checkpoint: dict[str, Any], context: int | None) -> LengthLimit:
    """Mirror generate's length rules (transformers 5.x `_prepare_generated_length`).

    Request values win, unset ones are filled from the checkpoint's generation_config;
    `max_new_tokens` wins over `max_length`; with neither set, prompt + 20 capped at the context.
    """
    tables: tuple[tuple[LengthSource, dict[str, Any]], ...] = (("request", overrides), ("model_generation_config", checkpoint))
    for key in ("max_new_tokens", "max_length"):
        for source, table in tables:
            value = table.get(key)
            if value is None:
                continue
            if key == "max_new_tokens":
                return LengthLimit(prompt_tokens + value, value, source)
            return LengthLimit(value, value - prompt_tokens, source)
    limit = prompt_tokens + LIBRARY_DEFAULT_NEW_TOKENS
    if context is not None:
        limit = min(limit, context)
    return LengthLimit(limit, limit - prompt_tokens, "library_default")


def rows_per_request(request: Request, batch_size: int, checkpoint: dict[str, Any] | None = None) -> int:
    """Rows decoded in parallel: batch x return sequences x beams x CFG-style rows.

    `guidance_scale > 1` (request, else the checkpoint's generation config) doubles the rows, as
    classifier-free guidance decodes a conditional and an unconditional row per request (MusicGen).
    """
    gen = request.generation
    guidance = gen.get("guidance_scale", (checkpoint or {}).get("guidance_scale"))
    cfg_rows = 2 if guidance is not None and guidance > 1 else 1
    return batch_size * int(gen.get("num_return_sequences") or 1) * int(gen.get("num_beams") or 1) * cfg_rows * request.budget.rows_per_request


class FrameRate(NamedTuple):
    """Frames per second of a frame-unit output, and who said so."""

    per_second: float
    source: FrameRateSource
    """`model_codec` (the backend read it from the checkpoint) or `request` (`[units] per_second`)."""


def domain_estimate(request: Request, requested_units: int | None, prompt_tokens: int, context: int | None,
                    frame_rate: FrameRate | None = None) -> DomainEstimate | None:
    """Estimates from `[budget]` input seconds and `[units]` requested seconds x the frame rate, when known."""
    budget, units = request.budget, request.units
    frames = round(frame_rate.per_second * units.requested_seconds) if frame_rate is not None and units.requested_seconds else None
    if budget.input_seconds is None and frame_rate is None:
        return None

    def scaled(density: float | None) -> int | None:
        return round(budget.input_seconds * density) if budget.input_seconds and density else None

    observed, conservative = scaled(budget.units_per_input_second), scaled(budget.conservative_units_per_input_second)

    def fits(estimate: int | None) -> bool | None:
        return None if estimate is None or requested_units is None else estimate <= requested_units

    return DomainEstimate(
        input_seconds=budget.input_seconds,
        observed_units=observed,
        conservative_units=conservative,
        context_constrained_units=None if context is None else max(context - prompt_tokens, 0),
        requested_frames=frames,
        frames_per_second=frame_rate.per_second if frame_rate is not None else None,
        frames_per_second_source=frame_rate.source if frame_rate is not None else None,
        observed_fits_budget=fits(observed),
        conservative_fits_budget=fits(conservative),
    )
