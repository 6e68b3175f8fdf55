"""Each request's `SamplingParams` as vLLM's own "auto" semantics build them (the checkpoint's generation_config.json
under the request's `[generation]`), with who set every field."""

import json
from typing import Any

from ._evidence import LimitSource, SamplingSource
from ._keys import sampling_fields


def build_sampling(generation: dict[str, Any], checkpoint: dict[str, Any], **set_by_genrun: Any) -> tuple[Any, dict[str, Any], dict[str, SamplingSource]]:
    """`(SamplingParams, params, sources)`: request over checkpoint over vLLM's defaults; `params` holds every user field as built."""
    from vllm import SamplingParams

    sampling = SamplingParams.from_optional(**{**checkpoint, **generation, **set_by_genrun})
    sources: dict[str, SamplingSource] = {}
    params: dict[str, Any] = {}
    for name in sampling_fields():
        if not hasattr(sampling, name):
            continue
        params[name] = _json_value(getattr(sampling, name))
        sources[name] = "request" if name in generation else "checkpoint" if name in checkpoint else "vllm_default"
    return sampling, params, sources


def limit_source(source: SamplingSource) -> LimitSource:
    """The stop record's word for who set `max_tokens`."""
    return {"request": "request", "checkpoint": "model_generation_config", "vllm_default": "library_default"}[source]  # type: ignore[return-value]


def _json_value(value: Any) -> Any:
    """The value as JSON holds it; objects vLLM keeps (structured-output specs) as their repr."""
    try:
        json.dumps(value)
        return value
    except TypeError:
        return repr(value)
