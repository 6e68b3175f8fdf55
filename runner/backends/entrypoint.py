"""User code named by the request: `[entrypoint] callable` and `[model] loader` (`module:function`).

Modules are looked up first in the directories planning searched (the request file's directory,
recorded as `code.json` `entrypoint.root`), then on `sys.path`. Those directories are on
`sys.path` only while the run imports and calls user code.

The entry point's return value is saved as `outputs/entrypoint-result.json`: orjson for plain
values (numpy arrays included); tensors become nested lists; any other object becomes its
`str()` (so a return value never fails the run, and the file says what was returned). A `str`
return value is also saved verbatim as `outputs/entrypoint-result.txt`.
"""

import contextlib
import importlib
import inspect
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

from genrun.schemas.rendering import array_or

from .._io import write_bytes_atomic
from ..errors import RequestError

RESULT_JSON = "entrypoint-result.json"
RESULT_TEXT = "entrypoint-result.txt"


@contextlib.contextmanager
def user_import_paths(paths: Sequence[Path]) -> Iterator[None]:
    """Put `paths` at the front of `sys.path` for the block (the entries are removed afterwards)."""
    added = [str(p) for p in paths if str(p) not in sys.path]
    sys.path[:0] = added
    try:
        yield
    finally:
        for entry in added:
            with contextlib.suppress(ValueError):
                sys.path.remove(entry)


def resolve_callable(reference: str, field: str) -> Callable[..., Any]:
    """Import `module` and return `function` from `module:function`; errors name the request field.

    What user code may be (an entry point, a `[model] loader`, a loop and its budget): a Python function (`def`)
    defined in the module named, which is not part of Python's standard library. So `os:system` or `sys:exit` (built
    in), a class, an object with `__call__`, or a function the module only imported from elsewhere are refused: the
    module named is the code `code.json` hashes, and it must be the code that runs.
    """
    module_name, _, function_name = reference.partition(":")
    fix = "name a function defined with def in your own module, e.g. 'my_module:generate'"
    if module_name.partition(".")[0] in sys.stdlib_module_names:
        raise RequestError(f"{field} {reference!r}: {module_name!r} is part of Python's standard library, not user code; {fix}")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or module_name == exc.name or module_name.startswith(f"{exc.name}."):  # the module named itself
            raise RequestError(f"{field} {reference!r}: cannot import module {module_name!r} ({exc}); check the module name and its location") from exc
        raise RequestError(f"{field} {reference!r}: module {module_name!r} imports {exc.name!r}, which is not installed here; "
                           f"install it: {pip_line_for(exc.name)}") from exc
    except ImportError as exc:
        raise RequestError(f"{field} {reference!r}: cannot import module {module_name!r} ({exc}); check the module name and its location") from exc
    function = getattr(module, function_name, None)
    if function is None:
        raise RequestError(f"{field} {reference!r}: module {module_name!r} has no callable {function_name!r}; check the function name")
    if not inspect.isfunction(function):
        raise RequestError(f"{field} {reference!r} is {type(function).__name__} {function!r:.60}, not a function; {fix}")
    if function.__module__ != module.__name__:
        raise RequestError(f"{field} {reference!r}: {function_name!r} is defined in {function.__module__!r}, not in {module_name!r} "
                           f"(which imports it); name the module that defines it: '{function.__module__}:{function.__qualname__}'")
    return function


DISTRIBUTIONS = {
    "numpy": "numpy", "onnxruntime": "onnxruntime", "MNN": "MNN", "tokenizers": "tokenizers", "torch": "torch",
    "transformers": "transformers", "safetensors": "safetensors", "PIL": "pillow", "cv2": "opencv-python", "yaml": "PyYAML",
    "sklearn": "scikit-learn", "scipy": "scipy", "soundfile": "soundfile", "librosa": "librosa", "tensorrt": "tensorrt",
    "openvino": "openvino", "llama_cpp": "llama-cpp-python", "ctranslate2": "ctranslate2", "mlx": "mlx",
}
"""Top-level import name -> the distribution `pip install` installs it from, where the two are not simply the same
(and the engines genrun's own examples use)."""


def pip_line_for(import_name: str) -> str:
    """`pip install onnxruntime` for a missing module `onnxruntime.capi`; a guess, said as one, for names not known here."""
    top = import_name.partition(".")[0]
    if top in DISTRIBUTIONS:
        return f"pip install {DISTRIBUTIONS[top]}"
    return f"pip install {top} (the distribution that provides {top!r}, when its name differs)"


_fallback = array_or(str)
"""orjson's `default`: tensors to lists, everything else to `str()`."""


def save_entrypoint_result(outputs_dir: Path, value: Any) -> tuple[str, ...]:
    """Write the return value under `outputs/`; returns the file names written."""
    data = orjson.dumps(value, default=_fallback, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
    write_bytes_atomic(outputs_dir / RESULT_JSON, data + b"\n")
    written = [RESULT_JSON]
    if isinstance(value, str):
        write_bytes_atomic(outputs_dir / RESULT_TEXT, value.encode())
        written.append(RESULT_TEXT)
    return tuple(written)
