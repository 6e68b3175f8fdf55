"""Build and save ``tiny-ddim``: an unconditional ``DDIMPipeline`` with a random ~2 MB ``UNet2DModel``.

Why this exists: tests and examples need a real diffusers pipeline that loads
offline with ``DiffusionPipeline.from_pretrained`` and runs on a CPU in well
under a second, so the diffusers backend (per-step progress, interruption,
outputs, the memory pre-flight) is exercised end to end.  Its images are noise
(the weights are random); what matters is that every step really runs the UNet.

Usage::

    python examples/models/make_tiny_pipeline.py [--out DIR]

Deterministic: the weights come from ``torch.manual_seed(0)`` and are saved as
safetensors, so rebuilding with the same torch/diffusers versions gives
byte-identical files.  The script reloads the saved pipeline, runs 10 DDIM
steps, and exits non-zero unless it produced one 32x32 image in 10 steps and the
directory is under 5 MB.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from diffusers import DDIMPipeline, DDIMScheduler, DiffusionPipeline, UNet2DModel
from diffusers.utils import logging as diffusers_logging

SEED = 0
SAMPLE_SIZE = 32  # pixels; the UNet works directly on RGB (no VAE)
MAX_DIR_BYTES = 5 * 2**20
CHECK_STEPS = 10
DEFAULT_OUT = Path(__file__).resolve().parent / "tiny-ddim"


def build_unet() -> UNet2DModel:
    """Two resolution levels (32 and 64 channels), one layer each, attention at the lower level."""
    torch.manual_seed(SEED)
    return UNet2DModel(
        sample_size=SAMPLE_SIZE,
        in_channels=3,
        out_channels=3,
        layers_per_block=1,
        block_out_channels=(32, 64),
        down_block_types=("DownBlock2D", "AttnDownBlock2D"),
        up_block_types=("AttnUpBlock2D", "UpBlock2D"),
        norm_num_groups=8,
    )


def build_pipeline() -> DDIMPipeline:
    """The UNet plus a DDIM scheduler with the usual 1000 training timesteps."""
    return DDIMPipeline(unet=build_unet(), scheduler=DDIMScheduler(num_train_timesteps=1000))


def dir_size(path: Path) -> int:
    """Bytes of every file under `path`."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def check(out: Path) -> list[str]:
    """Reload from disk (offline) and run a short generation; returns the problems found."""
    pipe = DiffusionPipeline.from_pretrained(out, local_files_only=True)
    pipe.set_progress_bar_config(disable=True)
    steps: list[int] = []
    handle = pipe.unet.register_forward_hook(lambda module, args, output: steps.append(1))
    images = pipe(num_inference_steps=CHECK_STEPS, generator=torch.Generator().manual_seed(SEED), output_type="np").images
    handle.remove()
    problems = []
    if type(pipe).__name__ != "DDIMPipeline":
        problems.append(f"reloaded as {type(pipe).__name__}, not DDIMPipeline")
    if images.shape != (1, SAMPLE_SIZE, SAMPLE_SIZE, 3):
        problems.append(f"image shape {images.shape}, expected (1, {SAMPLE_SIZE}, {SAMPLE_SIZE}, 3)")
    if len(steps) != CHECK_STEPS:
        problems.append(f"{len(steps)} UNet calls for {CHECK_STEPS} steps")
    if not list(out.rglob("*.safetensors")):
        problems.append("no safetensors weights were written")
    if dir_size(out) >= MAX_DIR_BYTES:
        problems.append(f"{dir_size(out)} bytes, not under {MAX_DIR_BYTES}")
    return problems


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output directory (default {DEFAULT_OUT})")
    return parser.parse_args()


def main() -> int:
    """Build, save and check; return a process exit status."""
    args = parse_args()
    diffusers_logging.disable_progress_bar()
    torch.set_num_threads(2)
    pipe = build_pipeline()
    args.out.mkdir(parents=True, exist_ok=True)
    pipe.save_pretrained(args.out, safe_serialization=True)
    started = time.perf_counter()
    problems = check(args.out)
    seconds = time.perf_counter() - started
    for problem in problems:
        print(f"FAIL {problem}", file=sys.stderr)
    params = sum(p.numel() for p in pipe.unet.parameters())
    print(f"tiny-ddim: params={params} dir_bytes={dir_size(args.out)} check_s={seconds:.2f} ({CHECK_STEPS} steps) out={args.out}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
