"""Build ``tiny-musicgen``: a random-weight MusicGen (T5 text encoder, 2-codebook decoder, EnCodec) with a word-level tokenizer.

Why this exists: MusicGen runs its own `generate` (never transformers' loop), decodes codec frames into audio and
counts its output in frames at the codec's rate; genrun's record (frame units, WAV outputs, `early_stop`) must hold
for it, offline. Random weights: the record is the point, not the music.

- Text encoder: T5 (d_model 16, one layer); tokenizer: word-level over the words of "a calm piano song with drums".
- Decoder: 2 codebooks of 16 codes, one layer. Its delay pattern costs one step: N steps decode N - 1 frames.
- Audio codec: EnCodec at 800 Hz with hop 16 -> 50 frames per second (`audio_encoder.frame_rate`).
- `generation_config.json`: greedy, `guidance_scale` 3.0 (classifier-free guidance on, as in the released checkpoints).

`build_tiny_musicgen(dest, melody=True)` builds MusicGen-Melody from the same parts (chroma conditioning, a
decoder-only model over the conditions) for the tests; only MusicGen is bundled.

Usage::

    python examples/models/make_tiny_musicgen.py [--out DIR]

Deterministic (fixed seed, one thread): the same safetensors bytes each time with the same torch/transformers.
"""

from __future__ import annotations

import json
from pathlib import Path

SEED = 0
HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "tiny-musicgen"
CODEBOOKS, SAMPLING_RATE, FRAMES_PER_SECOND = 2, 800, 50  # 800 Hz / (hop 4 x 4) = 50 frames per second
WORDS = ("<pad>", "</s>", "<unk>", *"a calm piano song with drums".split())
MELODY_PREPROCESSOR = {"feature_extractor_type": "MusicgenMelodyFeatureExtractor", "processor_class": "MusicgenMelodyProcessor",
                       "feature_size": 12, "sampling_rate": SAMPLING_RATE, "hop_length": 64, "chunk_length": 30, "n_fft": 256,
                       "num_chroma": 12, "padding_value": 0.0, "return_attention_mask": False, "stem_indices": [3, 2]}
"""`preprocessor_config.json` of the tiny Melody, in the layout of facebook/musicgen-melody's (scaled down)."""


def build_tiny_musicgen(dest: Path, melody: bool = False) -> Path:
    """MusicGen, or MusicGen-Melody (`melody`: the same parts, chroma conditioning), saved with its tokenizer into `dest`."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import (EncodecConfig, MusicgenConfig, MusicgenDecoderConfig, MusicgenForConditionalGeneration, MusicgenMelodyConfig,
                              MusicgenMelodyDecoderConfig, MusicgenMelodyForConditionalGeneration, PreTrainedTokenizerFast, T5Config)

    torch.manual_seed(SEED)
    text = T5Config(vocab_size=32, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=2, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    audio = EncodecConfig(target_bandwidths=[1.5], sampling_rate=SAMPLING_RATE, audio_channels=1, num_filters=4, hidden_size=16, codebook_size=16,
                          codebook_dim=16, upsampling_ratios=[4, 4], num_residual_layers=1, num_lstm_layers=1, compress=2)
    decoder_config, config_class, model_class = ((MusicgenMelodyDecoderConfig, MusicgenMelodyConfig, MusicgenMelodyForConditionalGeneration)
                                                 if melody else (MusicgenDecoderConfig, MusicgenConfig, MusicgenForConditionalGeneration))
    decoder = decoder_config(vocab_size=16, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, ffn_dim=32, num_codebooks=CODEBOOKS,
                             max_position_embeddings=128, pad_token_id=16, bos_token_id=16, decoder_start_token_id=16)
    extra = {"num_chroma": 12, "chroma_length": 8} if melody else {}
    model = model_class(config_class(text_encoder=text.to_dict(), audio_encoder=audio.to_dict(), decoder=decoder.to_dict(), **extra)).eval()
    for key in ("decoder_start_token_id", "pad_token_id", "bos_token_id"):
        setattr(model.generation_config, key, 16)
    model.generation_config.do_sample = False
    model.generation_config.guidance_scale = 3.0  # as the released checkpoints: CFG on by default
    model.save_pretrained(dest)
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>", eos_token="</s>", unk_token="<unk>").save_pretrained(dest)
    if melody:  # as the released checkpoint ships it; its chroma extractor cannot be built here (it needs torchaudio)
        (dest / "preprocessor_config.json").write_text(json.dumps(MELODY_PREPROCESSOR))
    return dest


def main() -> None:
    import shutil

    from _build import parse_args  # sibling module: the scripts run as `python examples/models/make_*.py`

    args = parse_args(__doc__, DEFAULT_OUT)
    if args.out.exists():
        shutil.rmtree(args.out)
    build_tiny_musicgen(args.out)
    print(json.dumps({"out": str(args.out), "bytes": {p.name: p.stat().st_size for p in sorted(args.out.iterdir())}}, indent=1))


if __name__ == "__main__":
    main()
