"""`input-files.json` and `input-preparation.json` models: JSON round trips, unknown keys refused, `[input]` media keys."""

import orjson
import pytest
from pydantic import BaseModel, ValidationError

from genrun.schemas import (AudioFacts, AudioReceived, ImageFacts, ImageReceived, InputFile, InputFiles, InputPreparation, InputSpec,
                            PreparedRow, Truncation)


def _hand_made() -> list[BaseModel]:
    audio = AudioFacts(sample_rate=8000, channels=1, frames=272000, seconds=34.0, format="WAV PCM_16")
    files = InputFiles(copied=True, files=(
        InputFile(kind="audio", row=0, source_path="/a/talk.wav", frozen_path="inputs/0-audio-talk.wav", size_bytes=10, sha256="0" * 64, audio=audio),
        InputFile(kind="image", row=0, source_path="/a/cat.png", frozen_path=None, size_bytes=5, sha256="1" * 64,
                  image=ImageFacts(width=64, height=48, mode="RGB", format="PNG")),
    ))
    cut = Truncation(component="WhisperFeatureExtractor", cause="truncation=True", unit="seconds", dropped=4.0, side="right")
    row = PreparedRow(row=0, rendered_prompt=None, prompt_token_ids=(), prompt_tokens=0, pad_count=0, truncations=(cut,),
                      audio=AudioReceived(input_seconds=34.0, file_sample_rate=8000, model_sample_rate=16000, resampled_with="soxr",
                                          feature_frames=3000, hop_length=160, seconds_received=30.0, window_seconds=30.0))
    image_row = PreparedRow(row=1, rendered_prompt="x", prompt_token_ids=(1, 2), prompt_tokens=2, pad_count=1,
                            image=ImageReceived(width=64, height=48, received_width=32, received_height=32))
    preparation = InputPreparation(architecture="encoder_decoder", length_counts="decoder tokens", processor="WhisperProcessor",
                                   feature_extractor="WhisperFeatureExtractor", tokenizer="WhisperTokenizer", processor_kwargs={},
                                   padding_side="right", model_input_names=("input_features",), rows=(row, image_row))
    return [files, preparation]


@pytest.mark.parametrize("instance", _hand_made(), ids=lambda m: type(m).__name__)
def test_round_trip_and_unknown_key_refused(instance: BaseModel) -> None:
    data = instance.model_dump(mode="json")
    assert type(instance).model_validate_json(orjson.dumps(data)) == instance
    with pytest.raises(ValidationError, match="surprise"):
        type(instance).model_validate(data | {"surprise": 1})


def test_input_media_keys_keep_their_written_shape_and_copy_is_read_and_written_as_copy() -> None:
    spec = InputSpec.model_validate({"audio": "a.wav", "copy": False})
    assert spec.audio == "a.wav" and spec.audio_files() == ("a.wav",) and spec.copy_files is False
    assert orjson.loads(spec.model_dump_json())["copy"] is False  # request.json round-trips to the source
    assert InputSpec.model_validate({"audio": ["a.wav", "b.wav"]}).media_files() == (("audio", 0, "a.wav"), ("audio", 1, "b.wav"))
    with pytest.raises(ValidationError, match="empty path"):
        InputSpec.model_validate({"audio": ["a.wav", ""]})
    with pytest.raises(ValidationError, match="cop"):
        InputSpec.model_validate({"audio": "a.wav", "coppy": False})
