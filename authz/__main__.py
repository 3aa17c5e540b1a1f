"""`python -m authz [--workers N]` — serve Check until SIGTERM/SIGINT, then exit 0.

Exit codes: 0 after a clean stop, 2 for bad configuration (one message naming every bad
variable), 1 when the service cannot run (address in use, a worker died).

Once listening it logs one `serving` event with the real addresses (port 0 picks free ports):
`{"event": "serving", "grpc": "127.0.0.1:PORT", "metrics": "127.0.0.1:PORT", "workers": N, …}`.

With `--workers N` (N > 1) the parent starts N worker processes that share the gRPC port
(SO_REUSEPORT; the first worker picks the port, the others join it) and serves the metrics of
all of them itself (prometheus_client multiprocess mode). Each worker has its own key store and
token cache. The in-process rate limiter cannot be shared between processes, so N > 1 requires
`ORRERY_A2A_REDIS_URL`. If any worker exits unexpectedly the parent stops the others and exits 1,
leaving the restart to the supervisor (Kubernetes, systemd, compose).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess

from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector

from authz import logs
from authz.errors import ConfigError
from authz.server import Bound, MetricsServer, format_address, serve
from authz.settings import AuthzSettings

WORKER_START_TIMEOUT = 60.0
WORKER_STOP_TIMEOUT = 15.0

logger = logging.getLogger("authz")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m authz", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--workers", type=int, default=1, help="processes sharing the gRPC port (default 1)"
    )
    args = parser.parse_args(argv)
    try:
        settings = load_settings(os.environ, args.workers)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    logs.configure(settings.log_level)
    try:
        if args.workers == 1:
            asyncio.run(run_single(settings))
        else:
            run_workers(settings, args.workers)
    except OSError as exc:
        logs.event(logger, "startup_failed", logging.ERROR, error=str(exc))
        return 1
    except WorkerDied as exc:
        logs.event(logger, "worker_died", logging.ERROR, exitcode=exc.exitcode)
        return 1
    logs.event(logger, "stopped")
    return 0


def load_settings(env: Mapping[str, str], workers: int) -> AuthzSettings:
    """Settings plus the `--workers` rule, reported together as one `ConfigError`."""
    problems: list[str] = []
    settings: AuthzSettings | None = None
    try:
        settings = AuthzSettings.from_env(env)
    except ConfigError as exc:
        problems = list(exc.problems)
    if workers < 1:
        problems.append("--workers: must be at least 1")
    elif workers > 1 and not env.get("ORRERY_A2A_REDIS_URL", "").strip():
        problems.append(
            "ORRERY_A2A_REDIS_URL: required with --workers > 1 "
            "(each worker would otherwise enforce its own rate limit)"
        )
    if problems or settings is None:
        raise ConfigError(problems)
    return settings


def _stop_on_signals(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)


async def run_single(settings: AuthzSettings) -> None:
    stop = asyncio.Event()
    _stop_on_signals(asyncio.get_running_loop(), stop)

    def ready(bound: Bound) -> None:
        logs.event(logger, "serving", workers=1, pid=os.getpid(), **dataclasses.asdict(bound))

    await serve(settings, stop, ready)


class WorkerDied(Exception):
    def __init__(self, exitcode: int | None) -> None:
        super().__init__(f"worker exited with {exitcode}")
        self.exitcode = exitcode


def worker_main(settings: AuthzSettings, conn: Connection) -> None:
    """Entry point of one worker process (spawned; never forked from a running event loop)."""
    logs.configure(settings.log_level)

    async def run() -> None:
        stop = asyncio.Event()
        _stop_on_signals(asyncio.get_running_loop(), stop)

        def ready(bound: Bound) -> None:
            conn.send(bound.grpc)
            logs.event(logger, "worker_serving", pid=os.getpid(), **dataclasses.asdict(bound))

        await serve(settings, stop, ready, reuse_port=True, serve_metrics=False)

    try:
        asyncio.run(run())
    except OSError as exc:
        logs.event(logger, "startup_failed", logging.ERROR, error=str(exc))
        sys.exit(1)


def run_workers(settings: AuthzSettings, count: int) -> None:
    """Start `count` workers on one port, serve their merged metrics, stop them on a signal."""
    # prometheus_client picks its multiprocess value store from this variable at import time,
    # so it must be in the environment the spawned workers start with.
    metrics_dir = tempfile.mkdtemp(prefix="orrery-authz-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.set())
    context = multiprocessing.get_context("spawn")
    workers: list[BaseProcess] = []
    try:
        for index in range(count):
            receiver, sender = context.Pipe(duplex=False)
            worker = context.Process(
                target=worker_main, args=(settings, sender), name=f"authz-worker-{index}"
            )
            worker.start()
            workers.append(worker)
            address = _await_ready(worker, receiver)
            if index == 0:  # the first worker resolved port 0; the others join its port
                port = address.rpartition(":")[2]
                settings = dataclasses.replace(settings, addr=(settings.addr[0], int(port)))
        _serve_merged_metrics(settings, metrics_dir, count, address)
        while not stopping.is_set():
            dead = [w for w in workers if not w.is_alive()]
            if dead and not stopping.is_set():
                raise WorkerDied(dead[0].exitcode)
            wait([w.sentinel for w in workers], timeout=0.5)
    finally:
        _stop_workers(workers)
        shutil.rmtree(metrics_dir, ignore_errors=True)


def _await_ready(worker: BaseProcess, receiver: Connection) -> str:
    ready = wait([receiver, worker.sentinel], timeout=WORKER_START_TIMEOUT)
    if receiver in ready:
        address: str = receiver.recv()
        return address
    raise WorkerDied(worker.exitcode)


def _serve_merged_metrics(
    settings: AuthzSettings, metrics_dir: str, count: int, grpc_address: str
) -> None:
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=metrics_dir)  # type: ignore[no-untyped-call]
    server = MetricsServer.start(settings.metrics_addr, registry)
    logs.event(
        logger,
        "serving",
        workers=count,
        pid=os.getpid(),
        grpc=grpc_address,
        metrics=format_address(settings.metrics_addr[0], server.server_port),
    )


def _stop_workers(workers: list[BaseProcess]) -> None:
    for worker in workers:
        if worker.is_alive():
            worker.terminate()  # SIGTERM: each worker stops gracefully
    for worker in workers:
        worker.join(WORKER_STOP_TIMEOUT)
        if worker.is_alive():
            worker.kill()
            worker.join()


if __name__ == "__main__":
    sys.exit(main())
