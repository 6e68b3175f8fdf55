"""Snapshot format versions: which genrun wrote each, and the in-memory migration of older artifacts.

Old snapshots stay readable forever and are never rewritten: every versioned artifact model
migrates an older file's JSON in memory, step by step, up to `FORMAT_VERSION`, before
validating it. A file from a newer genrun is refused with `NewerFormat`, never guessed at.
"""

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, ClassVar

from pydantic import model_validator

from ._base import Strict

FORMAT_VERSION = 3
"""The snapshot format this genrun writes (and the newest it reads)."""

FORMAT_HISTORY: Mapping[int, str] = MappingProxyType({
    1: "genrun 0.1.0: first release",
    2: "genrun 0.2.0: `generation-stop.json` evidence typed per stop reason; `schema_version` in the progress `start` event",
    3: "genrun 0.3.0: `backend.json` (frozen at plan time) declares the backend's evidence; a `generation-stop.json` record is "
       "the same for every backend, its family's facts (token ids and limits, diffusion steps) moved into `evidence`",
})
"""Format -> the genrun release that first wrote it, and what changed."""

Migration = Callable[[dict[str, Any]], dict[str, Any]]
"""JSON of format N -> JSON of format N + 1 (a new dict; the input is not changed)."""


class NewerFormat(Exception):
    """An artifact written by a newer genrun than this one (not a ValueError: pydantic lets it through unwrapped)."""

    def __init__(self, artifact: str, version: int, written_by: str | None = None) -> None:
        self.artifact, self.version, self.written_by = artifact, version, written_by
        super().__init__(newer_format_message(version, written_by))


def newer_format_message(version: int, written_by: str | None) -> str:
    """'written by genrun X (format N); this genrun reads up to M: upgrade'."""
    writer = f"genrun {written_by}" if written_by else "a newer genrun"
    return f"written by {writer} (format {version}); this genrun reads up to {FORMAT_VERSION}: upgrade"


class Versioned(Strict):
    """Base of every artifact file model: carries `schema_version` and migrates older formats on load.

    `MIGRATIONS[n]` turns format-`n` JSON into format `n + 1`; a step that is absent changed
    nothing in this artifact. After migration `schema_version` is the current format.
    """

    MIGRATIONS: ClassVar[Mapping[int, Migration]] = MappingProxyType({})

    schema_version: int = FORMAT_VERSION
    """Snapshot format the file was written in (readers migrate older formats in memory)."""

    @model_validator(mode="before")
    @classmethod
    def _migrate(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("schema_version"), int):
            return data  # shape errors are reported by validation itself
        version = data["schema_version"]
        if version > FORMAT_VERSION:
            written_by = data.get("genrun_version")
            raise NewerFormat(cls.__name__, version, written_by if isinstance(written_by, str) else None)
        if version < 1:
            raise ValueError(f"schema_version {version} is not a genrun format (formats start at 1)")
        while version < FORMAT_VERSION:
            step = cls.MIGRATIONS.get(version)
            data = step(data) if step is not None else dict(data)
            version += 1
            data["schema_version"] = version
        return data


def recorded_genrun_version(environment: object) -> str | None:
    """`genrun_version` of `environment.json` given as parsed plain JSON (its own format may be newer than ours)."""
    version = environment.get("genrun_version") if isinstance(environment, dict) else None
    return version if isinstance(version, str) else None
