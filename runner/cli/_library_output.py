"""genrun owns the terminal: transformers/diffusers/accelerate bars off, their notices routed through genrun.

Libraries draw their own tqdm bars ("Loading weights") and print notices with their own
handlers, interleaved with genrun's plan summary and live bar. For the commands that load
models, their progress bars are switched off (genrun's bar shows generation) and their log
records and Python warnings are printed by one handler, as dim `  transformers: …` lines on
stderr, or not at all with `--quiet` (errors still show). Nothing here changes what generate does.
"""

import contextlib
import importlib
import logging
import os
import sys
import warnings
from collections.abc import Iterator
from typing import Any

from rich.markup import escape

from ._output import stderr_console

LIBRARIES = ("transformers", "diffusers", "accelerate", "huggingface_hub", "py.warnings")
"""Loggers whose records genrun prints itself (`py.warnings`: Python warnings, via logging.captureWarnings)."""


class GenrunLibraryHandler(logging.Handler):
    """One dim line per library record on genrun's stderr console."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            source = record.name.split(".")[0] if record.name != "py.warnings" else "warning"
            text = record.getMessage().strip().splitlines()
            if not text:
                return
            stderr_console.print(f"  [dim]{escape(source)}: {escape(text[-1] if source == 'warning' else text[0])}[/]", soft_wrap=True)
        except Exception:  # noqa: BLE001 (logging's own contract: a handler never raises)
            self.handleError(record)


@contextlib.contextmanager
def library_output_taken_over(quiet: bool) -> Iterator[None]:
    """For one command: library bars off, their records through genrun (or only errors when quiet).

    Everything it changes (loggers, warning filters, the libraries' own handlers and bars, the
    progress-bar variable) is put back afterwards, so `main([...])` called in-process (tests, a
    user's script) leaves the process as it found it.
    """
    saved_env = os.environ.get(_BARS_ENV)
    saved_loggers = [(lg, lg.handlers[:], lg.level, lg.propagate) for lg in map(logging.getLogger, LIBRARIES)]
    library_state = _library_logging_state()
    with warnings.catch_warnings():
        os.environ[_BARS_ENV] = "1"  # read by huggingface_hub and transformers' tqdm wrapper at import
        level = logging.ERROR if quiet else logging.WARNING
        handler = GenrunLibraryHandler(level)
        for logger, *_ in saved_loggers:
            logger.handlers = [handler]
            logger.setLevel(level)
            logger.propagate = False
        logging.captureWarnings(True)
        if quiet:
            warnings.simplefilter("ignore")
        _quiet_library_default_handlers()
        try:
            yield
        finally:
            logging.captureWarnings(False)
            for logger, handlers, old_level, propagate in saved_loggers:
                logger.handlers, logger.propagate = handlers, propagate
                logger.setLevel(old_level)
            _restore_library_logging(library_state)
            if saved_env is None:
                os.environ.pop(_BARS_ENV, None)
            else:
                os.environ[_BARS_ENV] = saved_env


_BARS_ENV = "HF_HUB_DISABLE_PROGRESS_BARS"
_LIBRARY_LOGGING = ("transformers.utils.logging", "diffusers.utils.logging")


def _library_logging(module: str) -> Any:
    """transformers' logging module (imported: these commands load it anyway); diffusers' only when already imported,
    so that a transformers run never imports diffusers just to quiet it."""
    if not module.startswith("transformers.") and module.split(".")[0] not in sys.modules:
        return None
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


def _library_logging_state() -> list[tuple[Any, int, bool]]:
    """(module, verbosity, progress bars on) of each importable library logging module."""
    state = []
    for name in _LIBRARY_LOGGING:
        lib = _library_logging(name)
        if lib is not None:
            state.append((lib, lib.get_verbosity(), lib.is_progress_bar_enabled()))
    return state


def _quiet_library_default_handlers() -> None:
    """transformers/diffusers add their own stderr handler at import: remove it and their progress bars."""
    for name in _LIBRARY_LOGGING:
        lib = _library_logging(name)
        if lib is None:
            continue
        level = logging.getLogger(name.split(".")[0]).level
        lib.disable_default_handler()  # also resets the level: put ours back
        lib.disable_progress_bar()
        logging.getLogger(name.split(".")[0]).setLevel(level)


def _restore_library_logging(state: list[tuple[Any, int, bool]]) -> None:
    for lib, verbosity, bars in state:
        lib.enable_default_handler()
        lib.set_verbosity(verbosity)
        if bars:
            lib.enable_progress_bar()


def add_quiet_argument(parser) -> None:  # noqa: ANN001 (argparse.ArgumentParser)
    """`--quiet` on the commands that load models; `main` then takes over the libraries' output."""
    parser.add_argument("--quiet", "-q", action="store_true",
                        help="for scripts: no progress, summary or library notices on stderr (errors and --json still appear)")
