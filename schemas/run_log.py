"""`run-log.ndjson`: what libraries (and the user's own code) wrote to stdout/stderr while a snapshot executed."""

from typing import Literal

from ._base import Strict

LogStream = Literal["stdout", "stderr"]


class RunLogLine(Strict):
    """One line of output written during the run, one JSON object per line of `run-log.ndjson`."""

    t: float
    """Seconds since execution began (the clock of `progress.ndjson`); negative for lines written before it in the same
    process, e.g. while `genrun run` planned or a sweep worker loaded the model the run reuses."""
    stream: LogStream
    """Where the writer sent it."""
    source: str
    """The top-level module that wrote it (`transformers`, `diffusers`, `tqdm`, `torch`, ...; a warning or log record
    counts as written by the module that issued it), `genrun` for genrun's own note of lines it had to drop."""
    shown: bool
    """Also shown on the terminal: output of the user's own code (an entry point, a loop); a library's never is."""
    text: str
    """The line, without its newline; a progress bar's line as it finally stood (after its last carriage return)."""
