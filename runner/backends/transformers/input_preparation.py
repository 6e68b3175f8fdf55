"""`[input]` -> the tensors generate receives, and `input-preparation.json`: what each row became.

The record is measured from what the tokenizer / processor returned, never predicted: prompt ids
are the attention-masked ids, audio seconds received come from the feature frames (attention
mask when the processor returns one) times the hop length, and truncation is the difference
between what was supplied and what came back, attributed to the component that dropped it.
"""

from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from genrun.backends import (Architecture, AudioReceived, DecoderPrompt, ImageReceived, InputFile, InputPreparation, InputSpec, PreparedRow, Truncation,
                             decode_audio, load_image)

from ._processor import tokenizer_of
from ._prompts import prepare_tokenizer

DECODER_ONLY_LENGTH = "prompt + new tokens (the prompt, audio placeholder tokens included, shares the decoder context)"
ENCODER_DECODER_LENGTH = "decoder tokens only (the encoder input is not counted); max_new_tokens excludes the decoder prompt"


class MediaRow(NamedTuple):
    """A frozen media file and where execution reads it."""

    file: InputFile
    path: Path


class PreparedInputs(NamedTuple):
    """The keyword tensors for generate and their record."""

    model_inputs: Any
    """`BatchEncoding` / `BatchFeature`: `input_ids`, `input_features`, `attention_mask`, ..."""
    record: InputPreparation


def prepare_model_inputs(spec: InputSpec, processor: Any, architecture: Architecture, media: Sequence[MediaRow] = ()) -> PreparedInputs:
    """Tokenise / featurise `[input]` (left-padded prompts for decoder-only models) and describe every row."""
    tokenizer = tokenizer_of(processor)
    if architecture == "decoder_only":
        prepare_tokenizer(tokenizer)
    texts = rendered_texts(tokenizer, spec)
    audio = [decode_audio(m.path, processor.feature_extractor.sampling_rate) for m in media if m.file.kind == "audio"]
    images = [load_image(m.path) for m in media if m.file.kind == "image"]
    kwargs = dict(spec.processor_kwargs)
    call: dict[str, Any] = {"return_tensors": "pt"}
    if audio:
        call.update(audio=[a.samples for a in audio], sampling_rate=audio[0].sample_rate)
    if images:
        call["images"] = images
    if texts is not None:
        copies = max(len(audio), len(images), 1)
        call["text"] = list(texts) * copies if len(texts) == 1 and copies > 1 else list(texts)
        call["padding"] = kwargs.pop("padding", True)
        if spec.messages is not None:
            call["add_special_tokens"] = False
    if audio or images:
        encoded = processor(**call, **kwargs)
    else:
        encoded = tokenizer(call["text"], **{k: v for k, v in call.items() if k != "text"}, **kwargs)
    full_lengths = untruncated_lengths(tokenizer, call.get("text") or (list(texts) if texts else None), spec) if _truncates(kwargs) else None
    rows: list[PreparedRow] = []
    batch = _batch_size(encoded)
    for i in range(batch):
        ids = _row_ids(encoded, i)
        truncations = []
        if full_lengths is not None and full_lengths[i] > len(ids):
            truncations.append(Truncation(component=type(tokenizer).__name__, cause=_tokenizer_cause(kwargs, tokenizer), unit="tokens",
                                          dropped=full_lengths[i] - len(ids), side=tokenizer.truncation_side))
        audio_row = _audio_row(encoded, i, media, audio, processor, kwargs, truncations) if audio else None
        image_row = _image_row(encoded, i, media, processor, images[i], truncations) if images else None
        rows.append(PreparedRow(
            row=i, rendered_prompt=(call.get("text") or [None] * batch)[i] if texts is not None else None, prompt_token_ids=tuple(ids),
            prompt_tokens=len(ids), pad_count=_pad_count(encoded, i), audio=audio_row, image=image_row, truncations=tuple(truncations),
        ))
    feature_extractor = getattr(processor, "feature_extractor", None) or getattr(processor, "image_processor", None)
    record = InputPreparation(
        architecture=architecture,
        length_counts=ENCODER_DECODER_LENGTH if architecture == "encoder_decoder" else DECODER_ONLY_LENGTH,
        processor=type(processor).__name__ if processor is not tokenizer else None,
        feature_extractor=type(feature_extractor).__name__ if feature_extractor is not None else None,
        tokenizer=type(tokenizer).__name__,
        processor_kwargs=dict(spec.processor_kwargs),
        padding_side=str(getattr(tokenizer, "padding_side", "right")),
        model_input_names=tuple(encoded.keys()),
        rows=tuple(rows),
    )
    return PreparedInputs(encoded, record)


def with_loading_facts(record: InputPreparation, *, processor_dir: str | None, decoder_prompts: Sequence[DecoderPrompt] | None) -> InputPreparation:
    """The record with what only the loaded model knows: where the processor came from, each row's forced decoder tokens."""
    rows = record.rows
    if decoder_prompts is not None:
        rows = tuple(row.model_copy(update={"decoder_prompt": prompt}) for row, prompt in zip(rows, decoder_prompts, strict=True))
    return record.model_copy(update={"processor_dir": processor_dir, "rows": rows})


def rendered_texts(tokenizer: Any, spec: InputSpec) -> tuple[str, ...] | None:
    """The exact strings tokenised: the chat template applied to `messages`, else the prompts; `None` without text."""
    if spec.messages is not None:
        conversation = [m.model_dump() for m in spec.messages]
        return (tokenizer.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True),)
    return spec.texts()


def untruncated_lengths(tokenizer: Any, texts: list[str] | None, spec: InputSpec) -> list[int] | None:
    """Token counts of the same texts without truncation (what a `max_length` cut is measured against)."""
    if not texts:
        return None
    encoded = tokenizer(texts, add_special_tokens=spec.messages is None, truncation=False)
    return [len(ids) for ids in encoded["input_ids"]]


def _truncates(kwargs: dict[str, Any]) -> bool:
    return bool(kwargs.get("truncation")) or (kwargs.get("max_length") is not None and kwargs.get("truncation") is not False)


def _tokenizer_cause(kwargs: dict[str, Any], tokenizer: Any) -> str:
    limit = kwargs.get("max_length", getattr(tokenizer, "model_max_length", None))
    return f"truncation={kwargs.get('truncation', True)!r}, max_length={limit} (truncation_side={tokenizer.truncation_side!r})"


def _batch_size(encoded: Any) -> int:
    for key in ("input_ids", "input_features", "pixel_values"):
        if key in encoded:
            return int(encoded[key].shape[0])
    raise ValueError(f"the processor returned none of input_ids, input_features, pixel_values (got {sorted(encoded.keys())})")


def _row_ids(encoded: Any, row: int) -> list[int]:
    """Unpadded ids of one row (`[]` when the encoder takes features only, e.g. Whisper)."""
    if "input_ids" not in encoded:
        return []
    ids = encoded["input_ids"][row]
    mask = encoded.get("attention_mask")
    if mask is not None and mask.shape == encoded["input_ids"].shape:
        ids = ids[mask[row].bool()]
    return [int(t) for t in ids.tolist()]


def _pad_count(encoded: Any, row: int) -> int:
    mask = encoded.get("attention_mask")
    if "input_ids" not in encoded or mask is None or mask.shape != encoded["input_ids"].shape:
        return 0
    return int((mask[row] == 0).sum())


def _audio_row(encoded: Any, row: int, media: Sequence[MediaRow], audio: list, processor: Any, kwargs: dict[str, Any],
               truncations: list[Truncation]) -> AudioReceived:
    """Seconds received = feature frames x hop / rate, capped at the supplied duration (padding is not audio)."""
    extractor = processor.feature_extractor
    item = [m.file for m in media if m.file.kind == "audio"][row]
    assert item.audio is not None, "plan time records the header facts of every audio file"
    decoded = audio[row]
    rate, hop = decoded.sample_rate, getattr(extractor, "hop_length", None)
    supplied = item.audio.seconds
    frames = _feature_frames(encoded, row)
    decoded_seconds = len(decoded.samples) / rate
    received = min(frames * hop / rate, decoded_seconds) if hop and frames is not None else decoded_seconds
    window = getattr(extractor, "chunk_length", None)
    dropped = supplied - received
    if hop and dropped > hop / rate:  # more than one frame's worth missing: the extractor cut it
        n_samples = getattr(extractor, "n_samples", None)
        limit = f"n_samples={n_samples}: {n_samples / rate:.1f} s" if n_samples else f"{received:.1f} s"
        truncations.append(Truncation(component=type(extractor).__name__, cause=f"truncation={kwargs.get('truncation', True)!r} ({limit})",
                                      unit="seconds", dropped=round(dropped, 3), side="right"))
    return AudioReceived(
        input_seconds=supplied, file_sample_rate=item.audio.sample_rate, model_sample_rate=rate, resampled_with=decoded.resampled_with,
        feature_frames=frames, hop_length=hop, seconds_received=round(received, 3),
        long_form=bool(window) and received > window, window_seconds=float(window) if window else None,
    )


def _feature_frames(encoded: Any, row: int) -> int | None:
    """Frames of audio features for the row: a feature-level attention mask when returned, else the tensor's frame axis."""
    for key in ("feature_attention_mask", "attention_mask"):
        mask = encoded.get(key)
        if mask is not None and "input_features" in encoded and mask.shape[-1] == encoded["input_features"].shape[-1]:
            return int(mask[row].sum())
    features = encoded.get("input_features")
    return int(features.shape[-1]) if features is not None else None


def _image_row(encoded: Any, row: int, media: Sequence[MediaRow], processor: Any, image: Any, truncations: list[Truncation]) -> ImageReceived:
    item = [m.file for m in media if m.file.kind == "image"][row]
    assert item.image is not None, "plan time records the facts of every image file"
    pixels = encoded.get("pixel_values")
    height, width = (int(pixels.shape[-2]), int(pixels.shape[-1])) if pixels is not None else (None, None)
    if width is not None and height is not None:  # both or neither: the last two axes of pixel_values
        crop = _center_crop(processor, image, item.image.width, item.image.height, width, height)
        if crop is not None:
            truncations.append(crop)
    return ImageReceived(width=item.image.width, height=item.image.height, received_width=width, received_height=height)


def _center_crop(processor: Any, image: Any, width: int, height: int, received_width: int, received_height: int) -> Truncation | None:
    """What a center crop dropped, measured: the image processor run again with `do_center_crop=False` gives the size before the
    crop; the rows and columns it cut, scaled back to the supplied image's pixels, are the truncation. `None` without a crop."""
    extractor = getattr(processor, "image_processor", None)
    if extractor is None or not getattr(extractor, "do_center_crop", False):
        return None
    uncropped = extractor(images=[image], do_center_crop=False, return_tensors="pt")["pixel_values"]
    before_height, before_width = int(uncropped.shape[-2]), int(uncropped.shape[-1])
    if (before_height, before_width) == (received_height, received_width):
        return None
    rows = round((before_height - received_height) * height / before_height)
    cols = round((before_width - received_width) * width / before_width)
    return Truncation(
        component=type(extractor).__name__,
        cause=f"do_center_crop=True, crop_size={received_width}x{received_height} of the {before_width}x{before_height} resized image",
        unit="pixels", dropped=width * height - (width - cols) * (height - rows), side="both", rows_dropped=rows, cols_dropped=cols,
    )
