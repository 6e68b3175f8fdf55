"""Which model class and which processor a transformers checkpoint is loaded with, decided from its config
and from whether the request names media files (never from the model's name); and the plan-time refusals of a
checkpoint whose config or tokenizer transformers cannot use, naming the file instead of a library traceback."""

import os
import stat
from pathlib import Path
from typing import Any

from genrun.backends import Architecture, PlanContext, Request, RequestError

from ._checkpoint_config import checkpoint_config, checkpoint_tokenizer
from ._prompts import encode_input

MAX_CONFIG_BYTES = 16 << 20
"""A checkpoint's `config.json` is a few KB; a larger one is not a config (a weights file renamed, a sparse file)."""
_CHECKPOINT_FIX = "give the directory a transformers model was saved to (the one holding config.json), or name another [model] backend"


def require_checkpoint_config(context: PlanContext, request: Request, model_dir: Path) -> Any:
    """The checkpoint's `config.json`, read by transformers: checked first, before anything walks or hashes the directory
    (`[model] path = "/"` or `"~"` is refused at once instead of hashing every file under it)."""
    config_file = require_config_file(request, model_dir)
    try:
        return checkpoint_config(context, model_dir, request.model.trust_remote_code)
    except Exception as exc:  # whatever transformers raises for a config it cannot use: the directory is the user's input
        raise RequestError(f"[model] path {request.model.path!r}: transformers cannot use {config_file} "
                           f"({_cause(exc)}); {_CHECKPOINT_FIX}") from None


def require_config_file(request: Request, model_dir: Path) -> Path:
    """`model_dir/config.json` when it is a regular file of a config's size, else RequestError naming the directory; reads
    nothing and imports no transformers, so a wrong `[model] path` is refused at once."""
    config_file = model_dir / "config.json"
    try:
        st: os.stat_result | None = config_file.stat()
    except OSError:
        st = None
    if st is None or not stat.S_ISREG(st.st_mode):
        found = "holds no config.json" if st is None else f"holds a config.json that is {_kind_of(st.st_mode)}"
        raise RequestError(f"[model] path {request.model.path!r} is the directory {model_dir}, which {found}; {_CHECKPOINT_FIX}")
    if st.st_size > MAX_CONFIG_BYTES:
        raise RequestError(f"[model] path {request.model.path!r}: {config_file} is {st.st_size:,} bytes, more than a config "
                           f"({MAX_CONFIG_BYTES:,} at most); {_CHECKPOINT_FIX}")
    return config_file


def plan_tokenizer(context: PlanContext, request: Request, tokenizer_dir: Path) -> Any:
    """The tokenizer the plan encodes the prompt with (`checkpoint_tokenizer`); a directory it cannot load from is refused,
    naming it."""
    try:
        return checkpoint_tokenizer(context, tokenizer_dir, request.model.trust_remote_code)
    except BaseException as exc:
        if not _library_failure(exc):
            raise
        raise RequestError(f"the tokenizer in {tokenizer_dir} cannot be loaded ({_cause(exc)}); {_TOKENIZER_FIX}") from None


def encode_for_plan(tokenizer: Any, request: Request, tokenizer_dir: Path) -> Any:
    """`encode_input` at plan time; a tokenizer that fails on the prompt (e.g. `tokenizer.json` names an unk token its
    vocabulary lacks, and the prompt holds an unknown word) is refused naming the file, never a raw tokenizers error."""
    try:
        return encode_input(tokenizer, request.input)
    except RequestError:
        raise
    except BaseException as exc:
        if not _library_failure(exc):
            raise
        tokenizer_file = tokenizer_dir / "tokenizer.json"
        named = tokenizer_file if tokenizer_file.is_file() else tokenizer_dir
        raise RequestError(f"[input] cannot be tokenised: the tokenizer of {named} fails on it ({_cause(exc)}); "
                           f"{_TOKENIZER_FIX}") from None


_TOKENIZER_FIX = ("repair or re-save the tokenizer (tokenizer.save_pretrained(dir)), or name a working one with "
                  "[model] processor")


def _library_failure(exc: BaseException) -> bool:
    """An error a library raised on the user's files: any `Exception`, and the Rust tokenizers' panic (a `BaseException`)."""
    return isinstance(exc, Exception) or type(exc).__name__ == "PanicException"


def _cause(exc: BaseException) -> str:
    """`Type: message`, on one line and at most 300 characters."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"


def architecture(config: Any) -> Architecture:
    """`encoder_decoder` (Whisper, T5, BART: `max_length` counts decoder tokens) or `decoder_only`."""
    return "encoder_decoder" if getattr(config, "is_encoder_decoder", False) else "decoder_only"


def model_auto_class(config: Any, request: Request) -> Any:
    """The first transformers auto class, in an order that suits the input, whose mapping has this config."""
    import transformers

    audio, images = request.input.audio is not None, request.input.images is not None
    if architecture(config) == "encoder_decoder":
        order: tuple[str, ...] = ("AutoModelForSpeechSeq2Seq", "AutoModelForSeq2SeqLM") if audio else ("AutoModelForSeq2SeqLM", "AutoModelForSpeechSeq2Seq")
    elif audio or images:
        order = ("AutoModelForMultimodalLM", "AutoModelForImageTextToText", "AutoModelForSeq2SeqLM", "AutoModelForCausalLM")
    else:
        order = ("AutoModelForCausalLM",)
    for name in order:
        auto = getattr(transformers, name, None)
        if auto is not None and type(config) in auto._model_mapping:
            return auto
    kind = "audio" if audio else "images" if images else "text"
    raise RequestError(f"[model] path: {type(config).__name__} has no generating model class for {kind} input in transformers "
                       f"(looked in {', '.join(order)}); give a [model] loader = 'module:function' that loads it")


def uses_processor(request: Request) -> bool:
    """Media inputs go through the checkpoint's `AutoProcessor`; text alone through `AutoTokenizer`."""
    return bool(request.input.media_files())


def load_processor(request: Request, directory: Path) -> Any:
    """`AutoProcessor` for media requests, else `AutoTokenizer`, from `directory` (offline): the checkpoint, or the
    `[model] processor` directory (its frozen copy at execution)."""
    from transformers import AutoProcessor, AutoTokenizer

    options = {"trust_remote_code": request.model.trust_remote_code, "local_files_only": True}
    auto = AutoProcessor if uses_processor(request) else AutoTokenizer
    return auto.from_pretrained(str(directory), **options)


def processor_source(request: Request, model_dir: Path) -> Path:
    """Where the plan loads the processor from: `[model] processor` (made absolute by the plan), else the checkpoint."""
    return Path(request.model.processor) if request.model.processor is not None else model_dir


def validate_processor_override(request: Request) -> None:
    """`[model] processor` (already resolved to an absolute directory by the plan) must load with the auto class execution
    uses, and cannot replace what a `[model] loader` returns."""
    given = request.model.processor
    if given is None:
        return
    if request.model.loader is not None:
        raise RequestError("[model] processor cannot be combined with [model] loader: the loader returns its own processor; "
                           "remove one of them")
    auto = "AutoProcessor" if uses_processor(request) else "AutoTokenizer"
    try:
        load_processor(request, Path(given))
    except Exception as exc:  # whatever transformers raises for a directory it cannot load: the user's input is wrong
        raise RequestError(f"[model] processor directory {given} cannot be loaded by {auto} ({_cause(exc)}); "
                           "give the directory a processor was saved to (processor.save_pretrained(dir))") from None


def tokenizer_of(processor: Any) -> Any:
    """The tokenizer inside a processor (or the tokenizer itself)."""
    return getattr(processor, "tokenizer", None) or processor


def validate_media_request(request: Request) -> None:
    """Refuse at plan time what the transformers backend cannot prepare: media for an entry point (it gets paths, not
    frozen files), and images with audio in one request."""
    if not request.input.media_files():
        return
    if request.entrypoint is not None:
        raise RequestError("[input] audio/images cannot be combined with [entrypoint]: genrun prepares media inputs itself; "
                           "remove [entrypoint] (the processor runs without user code) or pass the paths in [entrypoint] kwargs")
    if request.input.audio and request.input.images:
        raise RequestError("[input] gives both 'audio' and 'images'; give one kind of media per request")
    rows = len(request.input.audio_files() or request.input.image_files())
    prompts = request.input.prompts
    if prompts is not None and len(prompts) != rows:
        raise RequestError(f"[input] prompts has {len(prompts)} entries but {rows} media file(s) were given; "
                           "give one prompt per file, or a single 'prompt' for all rows")


def _kind_of(mode: int) -> str:
    """`a FIFO`, `a directory`, ... for what stands where a regular file was expected (`stat` follows links)."""
    kinds = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISDIR, "a directory"))
    return next((name for test, name in kinds if test(mode)), "not a regular file")
