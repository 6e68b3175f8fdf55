"""Which model class and which processor a transformers checkpoint is loaded with, decided from its config
and from whether the request names media files (never from the model's name)."""

from pathlib import Path
from typing import Any

from genrun.schemas import Request
from genrun.schemas.inputs import Architecture

from ...errors import RequestError


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
        message = " ".join(str(exc).split())[:300]
        raise RequestError(f"[model] processor directory {given} cannot be loaded by {auto} ({type(exc).__name__}: {message}); "
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
