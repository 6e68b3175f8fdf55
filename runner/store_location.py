"""Where the store is: `--store`, `$GENRUN_STORE` or `./snapshots`, and what to say when it is not there.

Imports nothing of genrun's snapshot code: `genrun ls` locates its store without loading the models a run needs.
"""

import os
from pathlib import Path
from typing import NamedTuple

from .errors import StoreError, UsageError

DEFAULT_STORE = Path("snapshots")
STORE_ENV = "GENRUN_STORE"


class StoreLocation(NamedTuple):
    """Where the store is, and which setting said so (for messages: the user sees where genrun looked)."""

    path: Path
    origin: str
    """`--store`, `$GENRUN_STORE`, or the default (neither set)."""


def locate_store(store: str | Path | None) -> StoreLocation:
    """`--store` wins, then `$GENRUN_STORE`, then `./snapshots`; one that exists but is not a directory is refused
    (`UsageError`, exit 2) for every command alike, before anything is read or written."""
    if store is not None:
        location = StoreLocation(Path(store), "--store")
    elif os.environ.get(STORE_ENV):
        location = StoreLocation(Path(os.environ[STORE_ENV]), f"${STORE_ENV}")
    else:
        location = StoreLocation(DEFAULT_STORE, f"the default: neither --store nor ${STORE_ENV} is set")
    if location.path.exists() and not location.path.is_dir():
        raise UsageError(f"store {location.path} ({location.origin}) is a file, not a directory; "
                         f"pass --store DIR or set {STORE_ENV} to the folder that holds the snapshots")
    return location


def resolve_store(store: str | Path | None) -> Path:
    """The store's directory (`locate_store`)."""
    return locate_store(store).path


def missing_store(location: StoreLocation) -> str | None:
    """`store X does not exist yet (...)` when it does not; `None` when it does. Reading commands say it instead of
    listing an empty store as if it were one (a mistyped --store would otherwise look like a store with nothing in it)."""
    if location.path.is_dir():
        return None
    return (f"store {location.path} does not exist yet ({location.origin}); the first 'genrun run' or 'genrun plan' with it "
            f"creates it. Another store: --store DIR or {STORE_ENV}")


def existing_store(store: str | Path | None) -> Path:
    """The store's directory for a command that needs one to exist (`index --rebuild`, the store page): `StoreError`
    (exit 1) with `missing_store`'s sentence when it does not."""
    location = locate_store(store)
    if (absent := missing_store(location)) is not None:
        raise StoreError(absent)
    return location.path
