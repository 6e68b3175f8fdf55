"""Load a request file strictly: every refusal names the table, the key, the value and the fix.

Nothing here writes anything; a refused request leaves the store untouched (exit code 2).
"""

import difflib
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from pydantic import BaseModel, ValidationError

if TYPE_CHECKING:  # the type of `ValidationError.errors()` items; pydantic_core comes with pydantic
    from pydantic_core import ErrorDetails

from genrun._safe_read import kind_of
from genrun.schemas import Request, layout

from .errors import RequestError

MAX_REQUEST_BYTES = 1 << 20  # a request is a few KiB; anything near a MiB is a mistake (a model file, a log)


class LoadedRequest(NamedTuple):
    """A validated request and the bytes it came from."""

    request: Request
    source: bytes
    """The file exactly as given."""
    format: str
    """`toml` or `json`: the extension of `request.source.<ext>`."""
    path: Path
    """Absolute path of the request file."""


def load_request(path: str | Path) -> LoadedRequest:
    """Read, decode, parse and validate a request file; raise RequestError on any problem."""
    given, path = path, Path(path).absolute()
    fmt = _format_of(path)
    source = _read_source(path)
    return LoadedRequest(parse_request(source, fmt, str(path), given=str(given)), source, fmt, path)


def request_from_model(request: Request, base_dir: Path) -> LoadedRequest:
    """A request built in Python (library API): its source is its own JSON, re-validated strictly.

    Relative paths in it resolve against `base_dir` (the caller's current directory).
    """
    source = request.model_dump_json(indent=2).encode() + b"\n"
    return LoadedRequest(parse_request(source, "json", "request"), source, "json", Path(base_dir).absolute() / "request.json")


def parse_request(source: bytes, fmt: str, where: str = "request", *, given: str | None = None) -> Request:
    """Decode (the format module's `decode_request_source`) and validate strictly, every error rewritten for people.

    A sweep file is refused in one line naming the command for it (`given`: the file as the user named it)."""
    try:
        data = layout.decode_request_source(source, fmt, where)
    except layout.RequestSourceError as exc:
        raise RequestError(str(exc)) from None
    if isinstance(data, dict) and isinstance(data.get("sweep"), dict):  # before validation: one line, not one per unknown key
        shown = given if given is not None else where
        raise RequestError(f"{where} is a sweep file (it has a top-level [sweep] table), not a request: run it with "
                           f"'genrun sweep {shown}' (or 'genrun sweep plan {shown}' to plan it only)")
    try:
        request = Request.model_validate(data)
    except ValidationError as exc:
        raise RequestError(format_validation_error(exc, where)) from None
    from .backends import refuse_generation

    try:
        refuse_generation(length_limit_problems(request.generation))
    except RequestError as exc:  # name where it came from, as a validation error does (a sweep's item and dataset line)
        raise RequestError(f"{where}: {exc}") from None
    return request


LENGTH_LIMIT_KEYS = ("max_new_tokens", "max_length")
"""The `[generation]` limits the core itself reads (the pre-flight budget): whole numbers of at least 1 for every backend."""


def length_limit_problems(generation: dict[str, Any]) -> list[str]:
    """What the request alone shows wrong about its length limits, found before any backend (or torch) is imported.

    A refusal costs a fraction of a second this way instead of the seconds a model library takes to import.
    """
    problems = []
    for key in LENGTH_LIMIT_KEYS:
        value = generation.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            problems.append(f"[generation] {key} = {value!r} must be an integer, e.g. {key} = 256")
        elif value < 1:
            problems.append(f"[generation] {key} = {value!r} must be at least 1")
    return problems


def _format_of(path: Path) -> str:
    fmt = layout.REQUEST_SOURCE_FORMATS.get(path.suffix.lower())
    if fmt is None and path.is_dir():  # `genrun run examples`: a folder, whatever its name
        toml = sorted(p.name for p in path.glob("*.toml"))[:3]
        hint = f" (it holds {', '.join(toml)}{', ...' if len(toml) == 3 else ''})" if toml else ""
        raise RequestError(f"request file {path} is a directory{hint}; give one .toml or .json request file in it")
    if fmt is None:
        raise RequestError(f"request file {path} has extension {path.suffix!r}; use a .toml or .json file")
    return fmt


def _read_source(path: Path) -> bytes:
    return read_user_file(path, "request file", MAX_REQUEST_BYTES,
                          f"requests are at most {MAX_REQUEST_BYTES:,} bytes (is this the right file? long inputs belong in files "
                          "the request points to)")


def read_user_file(path: Path, what: str, limit: int, too_large: str) -> bytes:
    """The bytes of the regular file `path` (links followed), at most `limit` of them; RequestError names `what`.

    Opened without blocking and checked on the open descriptor before a byte is read, so a FIFO (which would block
    forever), a device (`/dev/zero` never ends) or a directory is refused, and a file whose size the kernel does not
    report (`/proc/...`) is still cut at `limit`. `too_large` ends the refusal of a file over `limit` (the limit and the fix)."""
    shown = shorten(path, quoted=False, limit=MAX_SHOWN_PATH_CHARS)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise RequestError(f"{what} {shown} does not exist") from None
    except OSError as exc:
        raise RequestError(f"{what} {shown} cannot be opened ({exc.strerror}); give a readable file") from None
    with os.fdopen(fd, "rb") as file:
        mode, size = (st := os.fstat(fd)).st_mode, st.st_size
        if not stat.S_ISREG(mode):
            raise RequestError(f"{what} {shown} is {kind_of(mode)}, not a regular file; give a file")
        if size > limit:
            raise RequestError(f"{what} {shown} is {size:,} bytes; {too_large}")
        try:
            data = file.read(limit + 1)
        except OSError as exc:
            raise RequestError(f"{what} {shown} cannot be read ({exc.strerror}); give a readable file") from None
    if len(data) > limit:  # grew while read, or a size the kernel does not report
        raise RequestError(f"{what} {shown} is more than {limit:,} bytes; {too_large}")
    return data


def format_validation_error(exc: ValidationError, where: str, root: type[BaseModel] = Request) -> str:
    """One line per problem, each naming the table, the key, the value and the fix (`root`: the file's model)."""
    lines = [_describe_error(err, root) for err in exc.errors(include_url=False)]
    header = f"{where} refused ({len(lines)} problem{'s' if len(lines) > 1 else ''}):" if len(lines) > 1 else f"{where} refused:"
    return header + "".join(f"\n  - {line}" for line in lines)


def _describe_error(err: "ErrorDetails", root: type[BaseModel] = Request) -> str:
    loc = tuple(part for part in err["loc"] if not _is_union_label(part))
    if err["type"] == "extra_forbidden":
        return unknown_key_message(loc[:-1], str(loc[-1]), _fields_at(loc[:-1], root))
    table, key = table_name(loc[:-1]), loc[-1] if loc else "?"
    if len(loc) >= 2 and isinstance(key, int):  # an item of a list: `[input] audio[1]`, not `[input.audio] 1`
        table, key = table_name(loc[:-2]), table_name(loc[-2:])
    place = f"[{table}] {key}" if table else f"top-level key {key!r}"
    if err["type"] == "missing":
        return f"missing {place}; add it ({_field_doc(loc, root) or 'required'})"
    value = err.get("input")
    message = err["msg"].removeprefix("Value error, ")
    if err["type"] == "string_pattern_mismatch" and (doc := _field_doc(loc, root)):  # the field's words, not its regex
        message = f"not of the allowed form: {doc}"
    if loc and loc[-1] in ("prompt", "prompts") or err["type"].startswith("string_too_short"):
        message = f"{message} (an empty value is refused: give some text)"
    shown = f" = {shorten(value)}" if not isinstance(value, dict) else ""
    return f"{place}{shown}: {message}"


MAX_SHOWN_CHARS = 80
"""A value quoted in a refusal is cut to this many characters (a 100,000-character path is named, not printed)."""
MAX_SHOWN_PATH_CHARS = 300
"""A file's path in a refusal is cut to this many characters (real paths are shorter: shown whole)."""


def shorten(value: Any, *, quoted: bool = True, limit: int = MAX_SHOWN_CHARS) -> str:
    """`repr(value)` (or `str(value)`, not `quoted`), cut to `limit` characters with its full length said."""
    text = repr(value) if quoted else str(value)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


def _is_union_label(part: int | str) -> bool:
    """pydantic names the member of a union an error is about in `loc` (`'list of paths'`, `'tuple[str, ...]'`);
    field names never hold a space or a bracket, so those parts are labels, not keys."""
    return isinstance(part, str) and (" " in part or "[" in part)


def table_name(loc: tuple) -> str:
    """('input', 'messages', 0) -> 'input.messages[0]'; () -> ''."""
    name = ""
    for part in loc:
        name += f"[{part}]" if isinstance(part, int) else (f".{part}" if name else str(part))
    return name


def unknown_key_message(table_loc: tuple, key: str, valid: list[str]) -> str:
    """`unknown key 'max_new_token' in [generation]; did you mean 'max_new_tokens'?`"""
    table = table_name(table_loc)
    where = f"in [{table}]" if table else "at the top level"
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    if close:
        return f"unknown key {key!r} {where}; did you mean {close[0]!r}?"
    return f"unknown key {key!r} {where}; valid keys are: {', '.join(sorted(valid))}"


def _fields_at(loc: tuple, root: type[BaseModel] = Request) -> list[str]:
    """Field names of the model at `loc` inside `root` (for did-you-mean suggestions)."""
    model: type[BaseModel] = root
    for part in loc:
        if isinstance(part, int):
            continue
        inner = _inner_model(model.model_fields[part].annotation)
        if inner is None:
            return []
        model = inner
    return list(model.model_fields)


def _inner_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def _field_doc(loc: tuple, root: type[BaseModel] = Request) -> str | None:
    if not loc:
        return None
    model: type[BaseModel] | None = root
    for part in loc[:-1]:
        if isinstance(part, int) or model is None:
            continue
        model = _inner_model(model.model_fields[part].annotation)
    field = model.model_fields.get(loc[-1]) if model is not None else None
    return field.description if field is not None else None
