"""genrun owns the terminal: transformers/diffusers/accelerate bars off, their notices routed through genrun.

Libraries draw their own tqdm bars ("Loading weights") and print notices with their own
handlers, interleaved with genrun's plan summary and live bar. For the commands that load
models, their progress bars are switched off (genrun's bar shows generation) and their log
records and Python warnings are printed by one handler, as dim `  transformers: …` lines on
stderr, or not at all with `--quiet` (errors still show). Nothing here changes what generate does.
"""

import logging
import os
import warnings

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


def take_over_library_output(quiet: bool) -> None:
    """Before any model library is imported by the command: bars off, records through genrun (or only errors when quiet)."""
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"  # read by huggingface_hub and transformers' tqdm wrapper at import
    level = logging.ERROR if quiet else logging.WARNING
    handler = GenrunLibraryHandler(level)
    for name in LIBRARIES:
        logger = logging.getLogger(name)
        logger.handlers = [handler]
        logger.setLevel(level)
        logger.propagate = False
    logging.captureWarnings(True)
    if quiet:
        warnings.simplefilter("ignore")
    _quiet_transformers_default_handler()


def _quiet_transformers_default_handler() -> None:
    """transformers/diffusers add their own stderr handler at import: import their logging module now and remove it."""
    for module in ("transformers.utils.logging", "diffusers.utils.logging"):
        try:
            lib_logging = __import__(module, fromlist=["disable_default_handler"])
        except ImportError:
            continue
        level = logging.getLogger(module.split(".")[0]).level
        lib_logging.disable_default_handler()  # also resets the level: put ours back
        lib_logging.disable_progress_bar()
        logging.getLogger(module.split(".")[0]).setLevel(level)


def add_quiet_argument(parser) -> None:  # noqa: ANN001 (argparse.ArgumentParser)
    """`--quiet` on the commands that load models; `main` then takes over the libraries' output."""
    parser.add_argument("--quiet", "-q", action="store_true",
                        help="for scripts: no progress, summary or library notices on stderr (errors and --json still appear)")
