"""What the driver needs from an executor: slots that run one item at a time and report or die."""

from typing import NamedTuple, Protocol

from .worker import ItemReport


class Finished(NamedTuple):
    """A slot's item ended (whatever its status)."""

    slot: int
    report: ItemReport


class Died(NamedTuple):
    """A slot's worker or actor died while it held an item (SIGKILL, OOM, node lost)."""

    slot: int
    message: str


class WorkerPool(Protocol):
    """A fixed number of slots; the driver keeps at most one item per slot."""

    slots: int

    def names(self) -> list[str]:
        """Worker names per slot (`local-0`, `ray-1`), for the attempt log."""
        ...

    def submit(self, slot: int, snapshot: str) -> None:
        """Hand an item snapshot to an idle slot."""
        ...

    def wait(self, timeout: float) -> list[Finished | Died]:
        """Items that ended and workers that died since the last call (empty after `timeout` seconds)."""
        ...

    def replace(self, slot: int) -> None:
        """Start a fresh worker in a slot whose worker died (it loads the model again)."""
        ...

    def interrupt(self, slot: int) -> None:
        """Ask the slot's running item to stop (it ends as `interrupted`), best effort."""
        ...

    def close(self) -> None:
        """Stop every worker."""
        ...
