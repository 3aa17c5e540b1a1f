"""`python -m adapter`: serve until SIGTERM/SIGINT, then drain and exit 0.

Logs one JSON `serving` event with the bound address once ready (so a parent can start it on port
0). Bad configuration prints the one `ConfigError` (naming every bad variable) and exits 2.
"""

from __future__ import annotations

import os

# The a2a-sdk wraps every handler, store and queue call in OpenTelemetry spans, decided when
# `a2a.utils.telemetry` is first imported. This process installs no tracer, so those no-op spans
# are pure cost (about 30% of SendMessage throughput, measured with bench/adapter_bench.py). Off
# unless the operator sets the SDK's own switch explicitly. Must run before `a2a` is imported.
os.environ.setdefault("OTEL_INSTRUMENTATION_A2A_SDK_ENABLED", "false")

import asyncio
import logging
import signal
import sys

from adapter.app import bind, make_app, start
from adapter.errors import GatewayLoadError
from adapter.settings import AdapterSettings
from runtime import logs
from runtime.addresses import format_address
from runtime.errors import ConfigError
from runtime.serving import log_serving

logger = logging.getLogger("adapter")


async def serve(settings: AdapterSettings) -> None:
    sock = bind(*settings.addr)
    host, port = sock.getsockname()[:2]
    app = await make_app(settings)
    runner = await start(app, sock, shutdown_timeout=settings.shutdown_grace + 5.0)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    log_serving(
        logger,
        addr=format_address((host, port)),
        stores="postgresql" if settings.shared_stores else "memory",
        limiter="redis" if settings.redis_url else "memory",
    )
    await stop.wait()
    logs.event(logger, "stopping", grace_seconds=settings.shutdown_grace)
    await runner.cleanup()
    logs.event(logger, "stopped")


def main() -> int:
    try:
        settings = AdapterSettings.from_env(os.environ)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    logs.configure(settings.log_level)
    try:
        asyncio.run(serve(settings))
    except (ConfigError, GatewayLoadError) as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
