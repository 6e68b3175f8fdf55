"""Build ``tiny-llava``: a random-weight LLaVA (CLIP vision tower + Llama decoder) with a locally built processor,
and the example images.

Why this exists: image-to-text runs must be testable offline; the record (image size supplied vs the
pixels the model received, the image tokens inside the prompt) is the point, so the weights are random.

- Processor: `LlavaProcessor` = `CLIPImageProcessor` (resize shortest edge to 32, centre crop 32x32)
  + a byte-level tokenizer built here with an `<image>` token (expanded to 16 image tokens: 32/8 squared).
- Model: `LlavaForConditionalGeneration` from tiny configs (hidden 16, one layer each).
- Images (``examples/images/``): `gradient-64x48.png` made with numpy, and `not-an-image.png` (text).

Usage::

    python examples/models/make_tiny_llava.py [--out DIR] [--images DIR]

Deterministic (fixed seed).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image
from transformers import CLIPImageProcessor, GenerationConfig, LlavaConfig, LlavaForConditionalGeneration, LlavaProcessor

from _build import byte_level_tokenizer, parse_args, save_checkpoint  # sibling module: the scripts run as `python examples/models/make_*.py`

SEED = 0
HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "tiny-llava"
DEFAULT_IMAGES = HERE.parent / "images"
SPECIALS = ("<|endoftext|>", "<image>")


def build_tokenizer():
    return byte_level_tokenizer(SPECIALS)


def write_images(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    y, x = np.mgrid[0:48, 0:64]
    pixels = np.stack([x * 4, y * 5, (x + y) * 2], axis=-1).astype(np.uint8)  # [height, width, rgb]
    Image.fromarray(pixels, "RGB").save(out / "gradient-64x48.png", optimize=False)
    (out / "not-an-image.png").write_text("this is text, not a PNG\n")


def main() -> None:
    args = parse_args(__doc__, DEFAULT_OUT, ("--images", DEFAULT_IMAGES))
    tokenizer = build_tokenizer()
    eos, image = (tokenizer.convert_tokens_to_ids(t) for t in SPECIALS)
    image_processor = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    processor = LlavaProcessor(image_processor=image_processor, tokenizer=tokenizer, patch_size=8, vision_feature_select_strategy="default",
                               num_additional_image_tokens=1, image_token="<image>")
    config = LlavaConfig(
        vision_config={"model_type": "clip_vision_model", "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
                       "num_attention_heads": 2, "image_size": 32, "patch_size": 8, "projection_dim": 16},
        text_config={"model_type": "llama", "vocab_size": len(tokenizer), "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
                     "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 256, "eos_token_id": eos, "pad_token_id": eos},
        image_token_index=image, vision_feature_select_strategy="default", vision_feature_layer=-1,
    )
    torch.manual_seed(SEED)
    model = LlavaForConditionalGeneration(config).eval()
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=eos)
    save_checkpoint(args.out, model, processor)
    write_images(args.images)


if __name__ == "__main__":
    main()
