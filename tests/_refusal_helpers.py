"""A store that must stay exactly as it was: what a refused request or sweep is checked against."""

from pathlib import Path


def store_with_a_bystander(tmp_path: Path) -> tuple[Path, list[tuple[str, bytes]]]:
    """A store that already holds something, and its content: a refusal must leave both exactly as they were."""
    store = tmp_path / "store"
    (store / "earlier").mkdir(parents=True)
    (store / "earlier" / "note.txt").write_text("kept")
    return store, store_content(store)


def store_content(store: Path) -> list[tuple[str, bytes]]:
    """Every path under `store` with the bytes of each file."""
    return sorted((str(p.relative_to(store)), p.read_bytes() if p.is_file() else b"") for p in store.rglob("*"))
