"""Tiny diffusers pipelines built in the test session, request text for them, and snapshot readers.

`build_tiny_sd` makes a real `StableDiffusionPipeline` (UNet2DCondition + AutoencoderKL + a
one-layer CLIPTextModel + the bundled tiny-lm word-level tokenizer) with a **PNDM** scheduler:
PNDM runs `num_inference_steps + 1` timesteps and the pipeline has `callback_on_step_end`, so it
exercises the callback path and a step count that differs from `num_inference_steps`.
`build_tiny_audio` makes a `DanceDiffusionPipeline` (UNet1DModel + IPNDM) whose output is audio.
"""

import json
from pathlib import Path
from typing import Any

import orjson

from genrun.schemas import EVENT_ADAPTER, layout

REPO = Path(__file__).resolve().parent.parent
TINY_DDIM = REPO / "examples" / "models" / "tiny-ddim"
TINY_LM = REPO / "examples" / "models" / "tiny-lm"
USER_CODE = Path(__file__).resolve().parent / "test_diffusers_backend"
"""Real user modules (a `[model] loader`) copied beside request files."""


def build_tiny_sd(out: Path) -> Path:
    """A ~4 MB random StableDiffusionPipeline with a PNDM scheduler (16x16 images, 8x8 latents)."""
    import torch
    from diffusers import AutoencoderKL, PNDMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import AutoTokenizer, CLIPTextConfig, CLIPTextModel

    torch.manual_seed(0)
    unet = UNet2DConditionModel(
        block_out_channels=(32, 64), layers_per_block=1, sample_size=8, in_channels=4, out_channels=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"), up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        cross_attention_dim=32, norm_num_groups=8, attention_head_dim=4,
    )
    vae = AutoencoderKL(
        block_out_channels=[8, 16], in_channels=3, out_channels=3, latent_channels=4, norm_num_groups=8,
        down_block_types=["DownEncoderBlock2D"] * 2, up_block_types=["UpDecoderBlock2D"] * 2, sample_size=16,
    )
    tokenizer = AutoTokenizer.from_pretrained(TINY_LM)
    tokenizer.model_max_length = 16
    text_encoder = CLIPTextModel(CLIPTextConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=37, num_hidden_layers=1, num_attention_heads=4,
        max_position_embeddings=16, bos_token_id=1, eos_token_id=2, pad_token_id=0, projection_dim=32,
    ))
    pipe = StableDiffusionPipeline(
        vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, unet=unet,
        scheduler=PNDMScheduler(skip_prk_steps=True, steps_offset=1),
        safety_checker=None, feature_extractor=None, requires_safety_checker=False,
    )
    pipe.save_pretrained(out)
    return out


def build_tiny_audio(out: Path) -> Path:
    """A random DanceDiffusionPipeline: stereo audio at 16 kHz, 1024 samples (0.064 s) by default."""
    import torch
    from diffusers import DanceDiffusionPipeline, IPNDMScheduler, UNet1DModel

    torch.manual_seed(0)
    unet = UNet1DModel(
        sample_size=1024, sample_rate=16000, in_channels=2, out_channels=2, extra_in_channels=16, time_embedding_dim=16,
        block_out_channels=(32, 32, 64), down_block_types=("DownBlock1DNoSkip", "DownBlock1D", "AttnDownBlock1D"),
        up_block_types=("AttnUpBlock1D", "UpBlock1D", "UpBlock1DNoSkip"), mid_block_type="UNetMidBlock1D",
        use_timestep_embedding=False, flip_sin_to_cos=True, time_embedding_type="fourier",
    )
    DanceDiffusionPipeline(unet=unet, scheduler=IPNDMScheduler()).save_pretrained(out)
    return out


def diffusion_request(model: Path, *, name: str = "d", steps: int | None = 10, prompt: str | None = None,
                      every_units: int = 1, dtype: str = "float32", generation: str = "", tables: str = "") -> str:
    """TOML for a diffusers request; `generation` adds lines to [generation], `tables` appends whole tables."""
    lines = [f'name = "{name}"', "seed = 0", "[model]", f'path = "{model}"', 'backend = "diffusers"', f'dtype = "{dtype}"', 'device = "cpu"']
    if prompt is not None:
        lines += ["[input]", f'prompt = "{prompt}"']
    lines.append("[generation]")
    if steps is not None:
        lines.append(f"num_inference_steps = {steps}")
    if generation:
        lines.append(generation)
    lines += ["[progress]", f"every_units = {every_units}", "every_seconds = 30.0", tables]
    return "\n".join(lines) + "\n"


def events(snapshot: Path) -> list[Any]:
    """Every `progress.ndjson` record, parsed through the schema."""
    return [EVENT_ADAPTER.validate_json(line) for line in (snapshot / layout.PROGRESS).read_bytes().splitlines()]


def read_json(snapshot: Path, name: str) -> Any:
    """One JSON artifact as plain data."""
    return orjson.loads((snapshot / name).read_bytes())


def only_snapshot(store: Path) -> Path:
    """The single snapshot directory in `store` (dot-prefixed temporaries excluded)."""
    found = [p for p in store.iterdir() if p.is_dir() and not p.name.startswith(".")]
    assert len(found) == 1, f"expected one snapshot in {store}, found {[p.name for p in found]}"
    return found[0]


def unit_records(snapshot: Path) -> list[Any]:
    """`first_token` and `progress` records: with `every_units = 1`, one per step."""
    return [e for e in events(snapshot) if e.event in ("first_token", "progress")]


def model_index(model: Path) -> dict[str, Any]:
    """`model_index.json` of a pipeline directory."""
    return json.loads((model / "model_index.json").read_text())
