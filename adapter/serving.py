"""The adapter process's serving loop: bind, serve until SIGTERM/SIGINT, then leave the rotation,
drain and stop (`python -m adapter`, which imports this only to serve, so `check` stays light)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

from adapter.app import PROBES, LoopDiagnostics, bind, make_app, start
from adapter.settings import AdapterSettings
from runtime import logs
from runtime.addresses import format_address
from runtime.diag import DiagServer, Heartbeat
from runtime.serving import cannot_listen, log_serving

logger = logging.getLogger("adapter")


async def serve(settings: AdapterSettings) -> None:
    try:
        sock = bind(*settings.addr)
    except OSError as exc:
        raise cannot_listen("ORRERY_A2A_ADAPTER_ADDR", settings.addr, exc) from None
    host, port = sock.getsockname()[:2]
    app = await make_app(settings)
    runner = await start(app, sock, shutdown_timeout=settings.shutdown_grace + 5.0)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    heartbeat = Heartbeat()
    beating = asyncio.create_task(heartbeat.run())
    diag = None
    extra = {}
    try:
        if settings.diag_addr is not None:
            diagnostics = LoopDiagnostics(app[PROBES], loop)
            try:
                diag = DiagServer.start(settings.diag_addr, diagnostics, heartbeat)
            except OSError as exc:
                raise cannot_listen(
                    "ORRERY_A2A_ADAPTER_DIAG_ADDR", settings.diag_addr, exc
                ) from None
            extra["diag"] = format_address((settings.diag_addr[0], diag.port))
        log_serving(
            logger,
            addr=format_address((host, port)),
            stores="postgresql" if settings.shared_stores else "memory",
            limiter="redis" if settings.redis_url else "memory",
            **extra,
        )
        await stop.wait()
        # Out of the rotation first: /readyz fails from now on, while requests are still served
        # for the drain delay; only then does the socket close and the streams' grace begin.
        app[PROBES].stopping = True
        logs.event(
            logger,
            "stopping",
            grace_seconds=settings.shutdown_grace,
            drain_delay_seconds=settings.drain_delay,
        )
        await asyncio.sleep(settings.drain_delay)
    finally:
        await runner.cleanup()  # drains streams; the diagnostics answer "not ready" meanwhile
        beating.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beating
        if diag is not None:
            await asyncio.to_thread(diag.stop)
    logs.event(logger, "stopped")
