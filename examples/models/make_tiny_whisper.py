"""Build ``tiny-whisper`` (a random-weight Whisper with a locally built processor) and the example WAV files.

Why this exists: speech-to-text runs must be testable offline. The point of the model is the
record genrun leaves (what the feature extractor did to the audio, the decoder's context limit,
the long-form windows), not the transcript, so the weights are random.

- Processor: the stock ``WhisperFeatureExtractor`` (16 kHz, 80 mel bins, 30 s windows, hop 160)
  and a ``WhisperTokenizer`` built here from a byte-level vocabulary (256 byte tokens) plus
  Whisper's special tokens and the 1,501 timestamp tokens ``<|0.00|>`` .. ``<|30.00|>`` that
  long-form generation needs. Nothing is downloaded.
- Model: ``WhisperForConditionalGeneration`` from a tiny ``WhisperConfig`` (d_model 16, one
  encoder and one decoder layer), ``max_target_positions = 96`` so the decoder limit is visible.
- Audio (``examples/audio/``): sine tones made with numpy, int16 mono. ``tone-3s.wav`` (16 kHz,
  3.0 s), ``tone-5s.wav`` (16 kHz, 5.0 s), ``tone-34s-8k.wav`` (8 kHz, 34.0 s: over Whisper's
  30 s window, and at a rate the processor does not take, so it is resampled) and
  ``not-audio.wav`` (text bytes with a .wav name, for the refusal tests).

Usage::

    python examples/models/make_tiny_whisper.py [--out DIR] [--audio DIR]

Deterministic: fixed seed and a fixed thread count give byte-identical files on the same stack.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile
import torch
from transformers import GenerationConfig, WhisperConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration, WhisperProcessor, WhisperTokenizer
from transformers.convert_slow_tokenizer import bytes_to_unicode

from _build import parse_args, save_checkpoint  # sibling module: the scripts run as `python examples/models/make_*.py`

SEED = 0
HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "tiny-whisper"
DEFAULT_AUDIO = HERE.parent / "audio"
SPECIALS = ("<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|translate|>", "<|transcribe|>",
            "<|startoflm|>", "<|startofprev|>", "<|nospeech|>", "<|notimestamps|>")
TIMESTAMPS = tuple(f"<|{i * 0.02:.2f}|>" for i in range(1501))  # 0.00 .. 30.00 in 20 ms steps
MAX_TARGET_POSITIONS = 96


def build_tokenizer() -> WhisperTokenizer:
    """Byte-level BPE with no merges: every byte is one token, then the special and timestamp tokens."""
    vocab = {char: i for i, char in enumerate(bytes_to_unicode().values())}
    for token in (*SPECIALS, *TIMESTAMPS):
        vocab[token] = len(vocab)
    tokenizer = WhisperTokenizer(vocab=vocab, merges=[], additional_special_tokens=list(SPECIALS[1:]))
    tokenizer.add_tokens(list(TIMESTAMPS))
    return tokenizer


def build_model(vocab_size: int, ids: dict[str, int]) -> WhisperForConditionalGeneration:
    config = WhisperConfig(
        vocab_size=vocab_size, num_mel_bins=80, d_model=16, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
        max_source_positions=1500, max_target_positions=MAX_TARGET_POSITIONS,
        pad_token_id=ids["<|endoftext|>"], bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|endoftext|>"],
        decoder_start_token_id=ids["<|startoftranscript|>"],
    )
    torch.manual_seed(SEED)
    model = WhisperForConditionalGeneration(config).eval()
    model.generation_config = GenerationConfig(
        decoder_start_token_id=ids["<|startoftranscript|>"], eos_token_id=ids["<|endoftext|>"],
        pad_token_id=ids["<|endoftext|>"], bos_token_id=ids["<|endoftext|>"],
        no_timestamps_token_id=ids["<|notimestamps|>"], is_multilingual=False, max_initial_timestamp_index=50,
        begin_suppress_tokens=[ids["<|endoftext|>"]], max_length=MAX_TARGET_POSITIONS,
        # Random weights would emit timestamp tokens, which make Whisper seek by them (several windows for 3 s);
        # suppressing them makes the window count a fact of the audio: 1 up to 30 s, 2 for the 34 s file.
        suppress_tokens=list(range(ids["<|notimestamps|>"] + 1, ids["<|notimestamps|>"] + 1 + len(TIMESTAMPS))),
    )
    return model


def tone(seconds: float, rate: int, hz: float) -> np.ndarray:
    """A sine tone with a little deterministic noise, as int16 samples."""
    t = np.arange(round(seconds * rate)) / rate
    noise = np.random.default_rng(SEED).normal(0, 0.01, t.shape)
    return (np.clip(0.3 * np.sin(2 * np.pi * hz * t) + noise, -1, 1) * 32767).astype(np.int16)


def write_audio(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, seconds, rate, hz in (("tone-3s.wav", 3.0, 16000, 440.0), ("tone-5s.wav", 5.0, 16000, 330.0),
                                    ("tone-34s-8k.wav", 34.0, 8000, 220.0)):
        soundfile.write(out / name, tone(seconds, rate, hz), rate, subtype="PCM_16")
    (out / "not-audio.wav").write_text("this is text, not a RIFF/WAVE file\n")


def main() -> None:
    args = parse_args(__doc__, DEFAULT_OUT, ("--audio", DEFAULT_AUDIO))
    tokenizer = build_tokenizer()
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in SPECIALS}
    processor = WhisperProcessor(feature_extractor=WhisperFeatureExtractor(feature_size=80), tokenizer=tokenizer)
    model = build_model(len(tokenizer), ids)
    save_checkpoint(args.out, model, processor)
    write_audio(args.audio)


if __name__ == "__main__":
    main()
