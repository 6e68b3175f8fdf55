"""vLLM's engine-core processes, found through /proc: vLLM titles them `VLLM::EngineCore` (the kernel's `comm` keeps the
first 15 characters)."""

from pathlib import Path


def is_engine_core(pid: int) -> bool:
    """Whether `pid` is an engine core (`False` when it is gone)."""
    try:
        return (Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"VLLM::EngineCore")
                or Path(f"/proc/{pid}/comm").read_text().startswith("VLLM::EngineCor"))
    except OSError:
        return False


def descendants(pid: int) -> list[int]:
    """Every descendant of `pid`."""
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        for task in Path(f"/proc/{parent}/task").iterdir():
            for child in (task / "children").read_text().split():
                found.append(int(child))
                frontier.append(int(child))
    return found


def engine_core_under(pid: int) -> int | None:
    """The engine core among `pid`'s descendants, if one runs."""
    return next((child for child in descendants(pid) if is_engine_core(child)), None)


def engine_cores() -> set[int]:
    """Every engine core running now, whoever its parent (one whose parent died included)."""
    return {int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit() and is_engine_core(int(entry.name))}


def process_states(pids: set[int]) -> dict[int, str]:
    """Each of `pids`'s state letter (`R`, `S`, `Z` for a zombie: dead, never reaped), for an assertion's message."""
    states = {}
    for pid in pids:
        try:
            states[pid] = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            states[pid] = "gone"
    return states
