"""uvicorn's server, told of a signal first (imported only once FastAPI and uvicorn are known to be installed)."""

import signal
import socket
import sys
from types import FrameType

import uvicorn

from ._served import ServedModel


class Server(uvicorn.Server):
    """On SIGTERM/SIGINT the served model refuses new requests and interrupts those in flight, so uvicorn's graceful
    shutdown (which waits for open requests) ends as soon as each is sealed `interrupted`."""

    def __init__(self, config: uvicorn.Config, served: ServedModel) -> None:
        super().__init__(config)
        self.served = served
        self.stopped_by: str | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.stopped_by = self.stopped_by or signal.Signals(sig).name
        self.served.interrupt(self.stopped_by)
        super().handle_exit(sig, frame)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:  # the line a supervisor (or a test) waits for: requests are answered from now on
            config = self.config
            print(f"genrun serve: {self.served.model_id} on http://{config.host}:{config.port} (store {self.served.store})",
                  file=sys.stderr, flush=True)
