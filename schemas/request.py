"""The request a user writes (TOML or JSON), validated strictly: no key is ever dropped silently.

`[generation]` keys are checked against transformers' `GenerationConfig` (or, for diffusers,
the pipeline's call signature) by the runner at plan time; this module cannot import either,
so the table is typed as plain JSON values here and what the runner accepted is frozen.
"""

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Discriminator, Field, StrictBool, Tag, field_validator, model_validator

from ._base import FiniteFloat, PathText, Strict
from .inputs import MediaKind

BackendName = Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z_][\w.-]*$")]
"""A backend's entry-point name; which ones exist is checked against the installed backends at plan time."""
DType = Literal["auto", "float32", "float16", "bfloat16"]
UnitName = Literal["token", "frame"]  # the `Unit`s a request may name; `step` is the diffusers backend's own

OneOrMorePaths = Annotated[
    Annotated[PathText, Tag("one path")] | Annotated[tuple[PathText, ...], Tag("list of paths")],
    Discriminator(lambda value: "one path" if isinstance(value, str) else "list of paths"),
]
"""A string (one file) or a list of them; only the shape given is validated, so an error names that shape's problem."""

_CALLABLE_PATTERN = r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$"


class ModelSpec(Strict):
    """`[model]`: which weights, how to load them and where to run them."""

    path: PathText
    """Local directory, or a hub id resolved from the local Hugging Face cache only (offline)."""
    revision: str | None = None
    """Hub revision (branch, tag or commit) when `path` is a hub id; `None` means `main`."""
    backend: BackendName = "transformers"
    """A backend installed in the `genrun.backends` entry-point group: `transformers` for causal LMs and
    `diffusers` for diffusion pipelines come with genrun."""
    dtype: DType = "auto"
    """Weight dtype; `auto` keeps what the checkpoint declares."""
    device: str = Field(default="auto", pattern=r"^(auto|cpu|cuda|cuda:\d+)$")
    """`auto` (CUDA when available, else CPU), `cpu`, `cuda` or `cuda:N`."""
    trust_remote_code: bool = Field(default=False, strict=True)
    """Allow the checkpoint's own Python code (it is hashed into `code.json`)."""
    loader: str | None = Field(default=None, pattern=_CALLABLE_PATTERN)
    """`module:function` called as `fn(path, dtype, device, **loader_kwargs)` -> `(model, tokenizer_or_processor)`."""
    loader_kwargs: dict[str, Any] = {}
    """Keyword arguments for `loader`."""
    processor: PathText | None = None
    """Directory (relative to the request file) the processor / tokenizer is loaded from instead of the checkpoint's own
    (`AutoProcessor` for media requests, else `AutoTokenizer`); `None` uses the checkpoint's. Its files are hashed into
    `model.json` and copied into the snapshot's `processor/` at plan time; execution loads that frozen copy."""


class ChatMessage(Strict):
    """One chat turn, rendered with the tokenizer's chat template."""

    role: Literal["system", "user", "assistant", "tool"]
    """Who speaks."""
    content: str = Field(min_length=1)
    """What is said; must not be empty."""


class InputSpec(Strict):
    """`[input]`: at most one of `prompt`, `prompts` (a batch) or `messages`, optionally with media files.

    Causal LMs need exactly one (checked at plan time); an unconditional diffusion pipeline takes none.
    `audio` / `images` name files (relative to the request file), one batch row each; they are
    validated and frozen into the snapshot's `inputs/` at plan time.
    """

    # `copy` would shadow BaseModel.copy: the field is `copy_files`, read and written as `copy`.
    model_config = ConfigDict(**Strict.model_config, validate_by_name=True, validate_by_alias=True, serialize_by_alias=True)

    prompt: str | None = Field(default=None, min_length=1)
    """A single prompt."""
    prompts: tuple[str, ...] | None = Field(default=None, min_length=1)
    """A batch of prompts (left-padded together for causal LMs)."""
    messages: tuple[ChatMessage, ...] | None = Field(default=None, min_length=1)
    """A conversation rendered with the chat template."""
    audio: OneOrMorePaths | None = Field(default=None, min_length=1)
    """Audio file(s) (WAV, FLAC, OGG, ... anything libsndfile decodes): one batch row each; a single string is one row."""
    images: OneOrMorePaths | None = Field(default=None, min_length=1)
    """Image file(s) (anything Pillow opens): one batch row each; a single string is one row."""
    copy_files: bool = Field(default=True, alias="copy", strict=True)
    """`copy` in the request: copy media files into the snapshot (`inputs/`); `false` freezes only path, size and sha256 (for inputs too
    large to copy) and `execute` re-hashes the file before use, refusing a changed one."""
    processor_kwargs: dict[str, Any] = {}
    """Keyword arguments for the processor / tokenizer call, e.g. `{truncation = false, padding = "longest"}`
    (Whisper's long-form path) or `{truncation = true, max_length = 512}`; what they drop is recorded."""

    def audio_files(self) -> tuple[str, ...]:
        """`audio` as rows (a single string is one row; kept as written so request.json round-trips)."""
        return (self.audio,) if isinstance(self.audio, str) else self.audio or ()

    def image_files(self) -> tuple[str, ...]:
        """`images` as rows."""
        return (self.images,) if isinstance(self.images, str) else self.images or ()

    @field_validator("prompts")
    @classmethod
    def _no_empty_prompt_in_batch(cls, prompts: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if prompts is not None:
            for i, p in enumerate(prompts):
                if not p:
                    raise ValueError(f"prompts[{i}] is empty; give every prompt some text")
        return prompts

    @model_validator(mode="after")
    def _at_most_one_input(self) -> "InputSpec":
        given = [k for k in ("prompt", "prompts", "messages") if getattr(self, k) is not None]
        if len(given) > 1:
            found = " and ".join(repr(g) for g in given)
            raise ValueError(f"give exactly one of 'prompt', 'prompts' or 'messages' (found {found})")
        return self

    def is_empty(self) -> bool:
        """No prompt and no media at all (unconditional generation)."""
        return self.prompt is None and self.prompts is None and self.messages is None and not self.media_files()

    def has_text(self) -> bool:
        """A prompt, a batch of prompts or a conversation is given."""
        return self.prompt is not None or self.prompts is not None or self.messages is not None

    def media_files(self) -> tuple[tuple[MediaKind, int, str], ...]:
        """`(kind, row, path)` for every media file, audio first: kind is `audio` or `image`."""
        audio: tuple[tuple[MediaKind, int, str], ...] = tuple(("audio", i, p) for i, p in enumerate(self.audio_files()))
        images: tuple[tuple[MediaKind, int, str], ...] = tuple(("image", i, p) for i, p in enumerate(self.image_files()))
        return audio + images

    def texts(self) -> tuple[str, ...] | None:
        """The prompts as a batch, or `None` when the input is a conversation."""
        if self.prompt is not None:
            return (self.prompt,)
        return self.prompts


class EntrypointSpec(Strict):
    """`[entrypoint]`: user code that calls `model.generate()` itself."""

    callable: str = Field(pattern=_CALLABLE_PATTERN)
    """`module:function`, called as `fn(model, tokenizer_or_processor, inputs, generation, **kwargs)`."""
    kwargs: dict[str, Any] = {}
    """Extra keyword arguments passed to the callable."""


class ProgressSpec(Strict):
    """`[progress]`: how often a `progress` record is appended."""

    every_units: int = Field(default=256, ge=1, strict=True)
    """A record every this many generated units (tokens, frames or steps)."""
    every_seconds: float = Field(default=30.0, gt=0, strict=True, allow_inf_nan=False)
    """...or every this many seconds, whichever comes first."""


class BudgetSpec(Strict):
    """`[budget]`: optional domain hints for the pre-flight estimate."""

    input_seconds: FiniteFloat | None = Field(default=None, gt=0)
    """Duration of the input media (e.g. audio to transcribe), in seconds."""
    units_per_input_second: FiniteFloat | None = Field(default=None, gt=0)
    """Observed output density: units produced per second of input."""
    conservative_units_per_input_second: FiniteFloat | None = Field(default=None, gt=0)
    """A pessimistic density used for the conservative estimate."""
    rows_per_request: int = Field(default=1, ge=1, strict=True)
    """Decoded rows per prompt besides return sequences, e.g. 2 for classifier-free guidance pairs."""
    memory_margin_fraction: float = Field(default=0.10, ge=0, lt=1, strict=True, allow_inf_nan=False)
    """Fraction of device memory kept free as a safety margin in the memory pre-flight."""


class UnitsSpec(Strict):
    """`[units]`: what one unit of progress is, and how long the output should be."""

    name: UnitName = "token"
    """`token`, or `frame` for media models that emit frames at a fixed rate."""
    per_second: FiniteFloat | None = Field(default=None, gt=0)
    """Frames per second of output: required for `frame` unless the backend reads the rate from the model (MusicGen's
    audio codec), and then it must agree with it."""
    requested_seconds: FiniteFloat | None = Field(default=None, gt=0)
    """Requested output duration; produced duration is compared against it."""
    tokens_per_frame: int = Field(default=1, ge=1, strict=True)
    """Generated tokens that make one frame."""


class PolicySpec(Strict):
    """`[policy]`: what must be true before the run may start."""

    require_approval: StrictBool | Literal["any"] = False
    """Refuse to execute without an `approve` sign-off for the current plan digest: `true` needs a signature
    that verifies against the allowed-signers file; `"any"` also accepts an unsigned approval."""


class DeterminismSpec(Strict):
    """`[determinism]`: how strictly the run must be reproducible."""

    strict: bool = Field(default=False, strict=True)
    """Turn on `torch.use_deterministic_algorithms(True)` for the run (and cuBLAS' workspace setting on CUDA);
    an operation without a deterministic implementation then fails the run instead of varying silently."""


class Request(Strict):
    """A whole request file, every default explicit once normalised."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    """Short run name; part of the snapshot id: 1 to 64 letters, digits, `.`, `_` or `-`, the first a letter or digit."""
    seed: int = Field(default=0, ge=0, strict=True)
    """Seed for torch's generators."""
    model: ModelSpec
    """Which model to run."""
    input: InputSpec = InputSpec()
    """What to feed it."""
    generation: dict[str, Any] = {}
    """Overrides of the generation config (transformers) or pipeline call arguments (diffusers)."""
    entrypoint: EntrypointSpec | None = None
    """User code that calls generate itself; `None` runs generate directly."""
    progress: ProgressSpec = ProgressSpec()
    """Progress record cadence."""
    budget: BudgetSpec = BudgetSpec()
    """Pre-flight hints."""
    units: UnitsSpec = UnitsSpec()
    """Unit of progress and requested duration."""
    policy: PolicySpec = PolicySpec()
    """Run preconditions."""
    determinism: DeterminismSpec | None = None
    """Reproducibility settings; `None` (no table) runs with torch's defaults."""
    backend_tables: dict[str, dict[str, Any]] = {}
    """Tables the chosen backend owns (e.g. `[engine]`, `[loop]`), keyed by table name, validated by that backend at plan
    time. In a request file they are written as top-level tables; a table no backend declares is refused."""

    @model_validator(mode="before")
    @classmethod
    def _collect_backend_tables(cls, data: Any) -> Any:
        """Top-level tables that are not genrun's own go to `backend_tables` (the backend refuses what it does not own).

        Only tables move: an unknown top-level key with a plain value stays an unknown key (a typo, refused as such)."""
        if not isinstance(data, dict):
            return data
        own = set(cls.model_fields) | {f.alias for f in cls.model_fields.values() if f.alias}
        tables = {key: value for key, value in data.items() if key not in own and isinstance(value, dict)}
        if not tables:
            return data
        rest = {key: value for key, value in data.items() if key not in tables}
        given = rest.get("backend_tables")
        merged = {**given, **tables} if isinstance(given, dict) else tables
        return {**rest, "backend_tables": merged}
