"""What a command's SNAPSHOT argument names: a run snapshot or a sweep, typed as a path, an id or a unique id prefix.

Every command resolves the argument first and only then asks whether it is a sweep, so a sweep
given by the id `genrun ls` shows is treated exactly like the same sweep given by its path.
"""

import shlex
from pathlib import Path
from typing import NoReturn

from ._output import shown_path


def resolve_target(ref: str | Path, store: str | Path | None) -> tuple[Path, bool]:
    """(directory, is it a sweep) for what the user typed."""
    from genrun.analysis.sweep import is_sweep_dir
    from genrun.runner.store import find_snapshot

    path = find_snapshot(ref, store)
    return path, is_sweep_dir(path)


def refuse_sweep(path: Path, command: str, instead: str) -> NoReturn:
    """A command that works on one run snapshot, given a sweep: say so and what to run instead (exit 1, nothing written)."""
    from genrun.runner.errors import SnapshotError

    raise SnapshotError(f"{path} is a sweep, not a run snapshot: 'genrun {command}' works on one run at a time. {instead}")


def list_items_command(sweep: Path) -> str:
    """The command that lists a sweep's item ids: `genrun ls --sweep` in the store that holds it (`verify` shows only
    the items needing attention)."""
    return f"genrun ls --store {shlex.quote(str(shown_path(sweep.parent)))} --sweep {sweep.name}"
