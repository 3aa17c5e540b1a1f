"""`--workers N`: N processes serving Check on one port, one merged metrics endpoint.

The parent spawns the workers (spawn, never fork: a forked gRPC or asyncio runtime is not safe)
and hands each the validated settings. The first worker binds the configured address — port 0
lets the OS choose — and reports the real port; the others bind the same port with SO_REUSEPORT,
so the kernel spreads incoming connections over them. Envoy multiplexes many Checks over a few
long-lived HTTP/2 connections, which is why the server ages connections out (see `server.py`).

Metrics: each worker writes its values to a shared directory (prometheus_client multiprocess
mode) and the parent serves their sum on the metrics address. The parent stops the workers on
SIGTERM/SIGINT; if one exits on its own it stops the rest and reports it, leaving the restart
to the supervisor.
"""

from __future__ import annotations

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
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess

from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector

from authz.server import Bound, MetricsServer, configure_logging, process_logger, run
from authz.settings import AuthzSettings
from runtime import logs
from runtime.addresses import format_address
from runtime.serving import log_serving

WORKER_START_TIMEOUT = 60.0
WORKER_STOP_TIMEOUT = 15.0


class WorkerDied(Exception):
    def __init__(self, exitcode: int | None) -> None:
        super().__init__(f"worker exited with {exitcode}")
        self.exitcode = exitcode


def worker_main(settings: AuthzSettings, conn: Connection) -> None:
    """Entry point of one worker process (spawned; never forked from a running event loop)."""
    configure_logging(settings.log_level)

    def ready(bound: Bound) -> None:
        # Logged before the parent hears of it, so `worker_serving` always precedes `serving`.
        logs.event(process_logger, "worker_serving", pid=os.getpid(), **dataclasses.asdict(bound))
        conn.send(bound.grpc)

    try:
        asyncio.run(run(settings, ready, reuse_port=True, serve_metrics=False))
    except OSError as exc:
        logs.event(process_logger, "startup_failed", logging.ERROR, error=str(exc))
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
    metrics_server: MetricsServer | None = None
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
        metrics_server = _serve_merged_metrics(settings, metrics_dir, count, address)
        while not stopping.is_set():
            dead = [w for w in workers if not w.is_alive()]
            if dead:
                raise WorkerDied(dead[0].exitcode)
            wait([w.sentinel for w in workers], timeout=0.5)
    finally:
        _stop_workers(workers)
        if metrics_server is not None:
            metrics_server.stop()
        shutil.rmtree(metrics_dir, ignore_errors=True)


def _await_ready(worker: BaseProcess, receiver: Connection) -> str:
    ready = wait([receiver, worker.sentinel], timeout=WORKER_START_TIMEOUT)
    if receiver in ready:
        address: str = receiver.recv()
        return address
    worker.join(1.0)
    raise WorkerDied(worker.exitcode)


def _serve_merged_metrics(
    settings: AuthzSettings, metrics_dir: str, count: int, grpc_address: str
) -> MetricsServer:
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=metrics_dir)  # type: ignore[no-untyped-call]
    server = MetricsServer.start(settings.metrics_addr, registry)
    log_serving(
        process_logger,
        workers=count,
        grpc=grpc_address,
        metrics=format_address((settings.metrics_addr[0], server.server_port)),
    )
    return server


def _stop_workers(workers: list[BaseProcess]) -> None:
    for worker in workers:
        if worker.is_alive():
            worker.terminate()  # SIGTERM: each worker stops gracefully
    for worker in workers:
        worker.join(WORKER_STOP_TIMEOUT)
        if worker.is_alive():
            worker.kill()
            worker.join()
