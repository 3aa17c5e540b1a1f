"""`--workers N`: N processes serving Check on one port, one merged metrics endpoint.

The parent spawns the workers (spawn, never fork: a forked gRPC or asyncio runtime is not safe)
and hands each the validated settings. The first worker binds the configured addresses — port 0
lets the OS choose — and reports the real ports (gRPC, and HTTP when ORRERY_A2A_AUTHZ_HTTP_ADDR
is set); the others bind the same ports with SO_REUSEPORT, so the kernel spreads incoming
connections over them. Envoy multiplexes many Checks over a few
long-lived HTTP/2 connections, which is why the server ages connections out (see `server.py`).

Diagnostics: each worker writes its metric values to a shared directory (prometheus_client
multiprocess mode) and the parent serves their merge on the diagnostics address — `/metrics`, and
`/readyz`, ready while every worker has usable keys (the merged `jwks_usable`, the minimum over
workers, is 1); the `process_*` metrics there are the parent's.

Stopping: the parent stops the workers on SIGTERM/SIGINT, also while they are still starting;
if one exits on its own it stops the rest and reports it, leaving the restart to the supervisor.
Should the parent itself be killed outright, each worker gets SIGTERM from the kernel
(`runtime.lifecycle`) and stops: a worker left behind would keep serving old keys and settings
on the shared port, next to whatever authz is started there next.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import multiprocessing
import os
import select
import shutil
import signal
import sys
import tempfile
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess

from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector

from authz.metrics import NAMESPACE
from authz.server import (
    Bound,
    RegistryDiagnostics,
    configure_logging,
    process_logger,
    run,
    start_diag,
)
from authz.settings import AuthzSettings
from runtime import logs
from runtime.addresses import format_address
from runtime.diag import DiagServer
from runtime.lifecycle import die_with_parent
from runtime.metrics import describe_process
from runtime.serving import log_serving, log_startup_failed

WORKER_START_TIMEOUT = 60.0
WORKER_STOP_TIMEOUT = 15.0
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class WorkerDied(Exception):
    def __init__(self, exitcode: int | None) -> None:
        super().__init__(f"worker exited with {exitcode}")
        self.exitcode = exitcode


def worker_main(settings: AuthzSettings, conn: Connection, parent_pid: int) -> None:
    """Entry point of one worker process (spawned; never forked from a running event loop)."""
    die_with_parent(parent_pid)
    configure_logging(settings.log_level)

    def ready(bound: Bound) -> None:
        # Logged before the parent hears of it, so `worker_serving` always precedes `serving`.
        logs.event(process_logger, "worker_serving", pid=os.getpid(), **dataclasses.asdict(bound))
        # A closed pipe means the parent stopped waiting: it is stopping this worker (SIGTERM is
        # on its way) or it died (and the kernel sends SIGTERM). Either way: not a failure.
        with contextlib.suppress(BrokenPipeError):
            conn.send(bound)

    try:
        asyncio.run(run(settings, ready, reuse_port=True, serve_diag=False))
    except OSError as exc:
        log_startup_failed(process_logger, exc)
        sys.exit(1)


class StopSignals:
    """SIGTERM and SIGINT as a file descriptor `multiprocessing.connection.wait` can wait on.

    Python writes each signal's number to a pipe (`signal.set_wakeup_fd`) before any handler
    runs, so the parent blocks on its workers and on a stop request at once: no polling, and a
    stop that comes while a worker is still starting is not held up until that worker is ready."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        for fd in (self._read, self._write):
            os.set_blocking(fd, False)

    def fileno(self) -> int:
        return self._read

    @property
    def requested(self) -> bool:
        """Whether SIGTERM or SIGINT has arrived (the pipe then holds its number)."""
        readable, _, _ = select.select([self._read], [], [], 0)
        return bool(readable)

    def __enter__(self) -> StopSignals:
        self._previous_fd = signal.set_wakeup_fd(self._write)
        # A Python-level handler, even one doing nothing, replaces the default action (exit) and
        # makes the interpreter write to the wakeup pipe.
        self._previous = {sig: signal.signal(sig, _noted) for sig in STOP_SIGNALS}
        return self

    def __exit__(self, *_: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        signal.set_wakeup_fd(self._previous_fd)
        os.close(self._read)
        os.close(self._write)


def _noted(signum: int, frame: object) -> None:
    """The signal is already in the wakeup pipe; `StopSignals.requested` reads it there."""


def run_workers(settings: AuthzSettings, count: int) -> None:
    """Start `count` workers on one port, serve their merged diagnostics, stop them on a
    signal."""
    # prometheus_client picks its multiprocess value store from this variable at import time,
    # so it must be in the environment the spawned workers start with.
    metrics_dir = tempfile.mkdtemp(prefix="orrery-authz-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    workers: list[BaseProcess] = []
    diag_server: DiagServer | None = None
    with StopSignals() as stop:
        try:
            bound = _start_workers(settings, count, stop, workers)
            if bound is None:
                return
            diag_server = _serve_merged_diagnostics(settings, metrics_dir, count, bound)
            while not stop.requested:
                dead = [w for w in workers if not w.is_alive()]
                if dead:
                    raise WorkerDied(dead[0].exitcode)
                wait([stop.fileno(), *(w.sentinel for w in workers)])
        finally:
            _stop_workers(workers)
            if diag_server is not None:
                diag_server.stop()
            shutil.rmtree(metrics_dir, ignore_errors=True)


def _start_workers(
    settings: AuthzSettings, count: int, stop: StopSignals, workers: list[BaseProcess]
) -> Bound | None:
    """Start workers one by one, adding each to `workers` as it starts (for the caller to stop);
    return the addresses they share, or None when a stop signal came first.

    They are started from this thread, the main one: their parent-death signal follows it."""
    context = multiprocessing.get_context("spawn")
    bound = None
    for index in range(count):
        receiver, sender = context.Pipe(duplex=False)
        worker = context.Process(
            target=worker_main, args=(settings, sender, os.getpid()), name=f"authz-worker-{index}"
        )
        worker.start()
        sender.close()  # the worker has its own copy; ours would hide the worker's exit
        workers.append(worker)
        bound = _await_ready(worker, receiver, stop)
        if bound is None:
            return None
        if index == 0:  # the first worker resolved port 0; the others join its ports
            settings = dataclasses.replace(
                settings,
                addr=(settings.addr[0], _port(bound.grpc)),
                http_addr=(
                    None
                    if settings.http_addr is None or bound.http is None
                    else (settings.http_addr[0], _port(bound.http))
                ),
            )
    return bound


def _port(address: str) -> int:
    return int(address.rpartition(":")[2])


def _await_ready(worker: BaseProcess, receiver: Connection, stop: StopSignals) -> Bound | None:
    """The addresses `worker` serves on, or None when a stop signal came first."""
    ready = wait([receiver, worker.sentinel, stop.fileno()], timeout=WORKER_START_TIMEOUT)
    if stop.requested:
        return None
    if receiver in ready:
        try:
            bound: Bound = receiver.recv()
        except EOFError:  # it closed the pipe without a word: it is exiting
            pass
        else:
            return bound
    worker.join(1.0)
    raise WorkerDied(worker.exitcode)


def _serve_merged_diagnostics(
    settings: AuthzSettings, metrics_dir: str, count: int, bound: Bound
) -> DiagServer:
    registry = CollectorRegistry()
    # prometheus-client leaves this constructor unannotated
    MultiProcessCollector(registry, path=metrics_dir)  # type: ignore[no-untyped-call]
    describe_process(registry)
    diagnostics = RegistryDiagnostics(registry, lambda: _all_keys_usable(registry))
    server = start_diag(settings.diag_addr, diagnostics)
    log_serving(
        process_logger,
        workers=count,
        grpc=bound.grpc,
        diag=format_address((settings.diag_addr[0], server.port)),
        http=bound.http,
    )
    return server


def _all_keys_usable(registry: CollectorRegistry) -> bool:
    """The workers' merged `jwks_usable` (their minimum) is 1; absent counts as not usable."""
    return registry.get_sample_value(f"{NAMESPACE}_jwks_usable") == 1


def _stop_workers(workers: list[BaseProcess]) -> None:
    for worker in workers:
        if worker.is_alive():
            worker.terminate()  # SIGTERM: each worker stops gracefully
    for worker in workers:
        worker.join(WORKER_STOP_TIMEOUT)
        if worker.is_alive():
            worker.kill()
            worker.join()
