"""`genrun serve`: an OpenAI-compatible HTTP endpoint where every request leaves a sealed snapshot.

`serve` loads the base request's engine once (`_served.ServedModel`), answers OpenAI's `/v1/completions`,
`/v1/chat/completions`, `/v1/models` and `/health` (`_app`), and maps each body onto `[input]`/`[generation]` strictly
(`_fields`). On SIGTERM or SIGINT it stops accepting, every request in flight seals `interrupted` with the ids it has
and is answered 503 naming its snapshot, then the engine (vLLM's engine core included) is stopped and the signal ends
the command as it ends any genrun command (exit 143 / 130).
"""

import ipaddress
import os
from pathlib import Path

from ..errors import RequestError, UsageError
from ..interrupts import RunInterrupted

API_KEY_ENV = "GENRUN_API_KEY"
DEFAULT_MAX_BODY_BYTES = 4 << 20
"""Bytes; a request body over it is answered 413 without being read further (a prompt of ~1M tokens still fits)."""
DEFAULT_THREADS = 64
"""Requests planned or running at once; more wait for a thread (their answer is only later, never refused for it)."""
INSTALL_SERVE = "pip install 'genrun[serve]' (fastapi and uvicorn; the vLLM environment already has both)"


def serve(request: Path, *, store: Path | None = None, host: str = "127.0.0.1", port: int = 8000, api_key: str | None = None,
          max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, threads: int = DEFAULT_THREADS) -> str | None:
    """Serve REQUEST's model until a signal; every answered request is a sealed snapshot in `store`. Returns the signal
    that stopped it (`SIGTERM`/`SIGINT`).

    Listening on anything but a loopback address requires an API key (`api_key`, else `$GENRUN_API_KEY`); with a key,
    every request must carry it (`Authorization: Bearer KEY`). Refused before the engine loads: a missing web stack,
    a public address without a key, a backend that does not batch."""
    api_key = api_key or os.environ.get(API_KEY_ENV) or None
    if not _is_loopback(host) and api_key is None:
        raise UsageError(f"--host {host} listens beyond this machine: give --api-key KEY (or set {API_KEY_ENV}); every "
                         "request must then carry 'Authorization: Bearer KEY'")
    try:
        import fastapi  # noqa: F401
        import uvicorn
    except ImportError as exc:
        raise RequestError(f"genrun serve needs FastAPI and uvicorn ({exc.name} is missing): {INSTALL_SERVE}") from exc

    from ._app import Settings, create_app
    from ._served import ServedModel
    from ._server import Server

    served = ServedModel(request, store)
    pool = None
    try:
        app = create_app(served, Settings(api_key, max_body_bytes, threads))
        pool = app.state.pool
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, timeout_graceful_shutdown=120,
                                lifespan="off")
        server = Server(config, served)
        try:
            server.run()
        except RunInterrupted:  # uvicorn raises the signal it caught again once it has shut down
            pass
        return server.stopped_by
    finally:
        served.interrupt("SIGTERM")  # a failure of the server itself ends the requests in flight too (a signal: already so)
        if pool is not None:
            pool.shutdown(wait=True)  # every request planned before the end is sealed before the engine stops
        served.close()


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
