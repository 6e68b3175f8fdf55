"""Decode saved token ids without torch or transformers, using the `tokenizers` library.

The tokenizer is the `tokenizer.json` listed in the snapshot's `model.json`, read from the
model directory recorded there; its sha256 must equal the frozen one, otherwise decoding would
compare the saved text against a different tokenizer. When any of that is impossible (no
`tokenizer.json`, directory gone, hash differs, `tokenizers` not installed) the caller gets a
reason instead of a decoder, and the checks that need it are skipped with that reason.
"""

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

import orjson

from genrun.schemas import ModelIdentity
from genrun.schemas.digests import sha256_bytes

from genrun._safe_read import UnsafeFile, read_model_file

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"

# transformers' `clean_up_tokenization` (tokenization_utils_base.py, 5.x): applied after the
# backend decode when `clean_up_tokenization_spaces` is true and the model is not BPE.
_CLEANUPS = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
             (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))


class TextDecoder:
    """Decodes ids the way transformers' fast tokenizer does (`decode(ids, skip_special_tokens=...)`)."""

    def __init__(self, tokenizer: object, clean_up_spaces: bool, path: Path) -> None:
        self._tokenizer = tokenizer
        self._clean_up_spaces = clean_up_spaces
        self.path = path
        """The verified `tokenizer.json`."""

    def decode(self, ids: Sequence[int], skip_special_tokens: bool) -> str:
        """Text of `ids`, with or without special tokens; `DecodeFailed` when the tokenizer's own code gives up."""
        try:
            text = self._tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)  # type: ignore[attr-defined]
        except BaseException as exc:  # a Rust panic (a decoder regex over onig's retry limit) is a BaseException
            if type(exc).__name__ != "PanicException":
                raise
            raise DecodeFailed(f"{self.path} fails to decode {len(ids)} saved ids: {str(exc)[:200]}") from None
        if self._clean_up_spaces:
            for old, new in _CLEANUPS:
                text = text.replace(old, new)
        return text

    def token(self, token_id: int) -> str | None:
        """The vocabulary entry of one id (`None` when out of range)."""
        return self._tokenizer.id_to_token(int(token_id))  # type: ignore[attr-defined]


class DecodeFailed(ValueError):
    """The tokenizer's decoder failed on saved ids (a panic in its native code); the message names the tokenizer file."""


class DecoderUnavailable(NamedTuple):
    """Why ids cannot be decoded here."""

    reason: str
    hostile: bool = False
    """The tokenizer file model.json names is a FIFO, a device, a link to one, or too large: a FAIL, never a skip."""


def load_decoder(model: ModelIdentity | None, probe: Iterable[Sequence[int]] = ()) -> TextDecoder | DecoderUnavailable:
    """The verified decoder of the model a snapshot names, or why there is none. Each id list of `probe` (the saved rows)
    is decoded first, with and without special tokens: a decoder that fails on them is unavailable, a FAIL naming it."""
    decoder = _verified_decoder(model)
    if isinstance(decoder, TextDecoder):
        try:
            for ids in probe:
                for skip_special in (True, False):
                    decoder.decode(ids, skip_special_tokens=skip_special)
        except DecodeFailed as exc:
            return DecoderUnavailable(str(exc), hostile=True)
    return decoder


def _verified_decoder(model: ModelIdentity | None) -> TextDecoder | DecoderUnavailable:
    if model is None:
        return DecoderUnavailable("model.json is missing or invalid, so the tokenizer is unknown")
    listed = {f.path: f for f in model.files}
    entry = listed.get(TOKENIZER_FILE)
    if entry is None:
        return DecoderUnavailable(f"model.json lists no {TOKENIZER_FILE} (only a slow tokenizer?); decoding needs transformers")
    path = Path(model.resolved_path) / TOKENIZER_FILE
    try:
        data = read_model_file(path)
    except UnsafeFile as exc:
        return DecoderUnavailable(f"{path} {exc}; it is not the tokenizer model.json froze", hostile=True)
    except OSError as exc:
        return DecoderUnavailable(f"cannot read {path} ({exc.strerror or exc}); the model directory recorded in model.json is not here")
    actual = sha256_bytes(data)
    if actual != entry.sha256:
        return DecoderUnavailable(f"{path} has sha256 {actual[:12]}…, model.json froze {entry.sha256[:12]}…; the tokenizer changed since the run")
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return DecoderUnavailable("the 'tokenizers' package is not installed (pip install tokenizers)")
    try:
        tokenizer = Tokenizer.from_str(data.decode("utf-8"))  # the verified bytes, not a second open
    except Exception as exc:  # tokenizers raises its own untyped Exception subclasses on bad files
        return DecoderUnavailable(f"{path} does not load with tokenizers: {exc}")
    cleanup = _clean_up_spaces(Path(model.resolved_path), listed, tokenizer)
    if isinstance(cleanup, DecoderUnavailable):
        return cleanup
    return TextDecoder(tokenizer, cleanup, path)


def _clean_up_spaces(model_dir: Path, listed: dict, tokenizer: object) -> bool | DecoderUnavailable:
    """`clean_up_tokenization_spaces` from the (verified) tokenizer_config.json; transformers 5 defaults it to False."""
    entry = listed.get(TOKENIZER_CONFIG_FILE)
    if entry is None:
        return False
    path = model_dir / TOKENIZER_CONFIG_FILE
    try:
        data = read_model_file(path)
    except (OSError, UnsafeFile) as exc:
        return DecoderUnavailable(f"cannot read {path} ({exc.strerror if isinstance(exc, OSError) else exc})")

    if sha256_bytes(data) != entry.sha256:
        return DecoderUnavailable(f"{path} differs from the sha256 frozen in model.json; the tokenizer changed since the run")
    try:
        config = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        return DecoderUnavailable(f"{path} is not valid JSON: {exc}")
    wanted = bool(config.get("clean_up_tokenization_spaces", False))
    is_bpe = type(tokenizer.model).__name__ == "BPE"  # type: ignore[attr-defined]
    forced = bool(config.get("clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output", False))
    return wanted and (not is_bpe or forced)
