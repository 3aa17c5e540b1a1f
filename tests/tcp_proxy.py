"""A TCP forwarder the test owns, in front of a shared service (PostgreSQL).

`stop()` refuses connections on its port and cuts every connection through it — what clients
see of a database restart or failover — without touching the shared server other tests use;
`start()` listens again on the same port; `close()` stops and gives the port back.

While stopped, the port stays bound (never listening, so a connection is refused, as by a
server that is down): a port given back could be taken by another test's proxy to the same
PostgreSQL, and the clients of this one would reach the database through it in the middle of
their outage.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._pipes: set[asyncio.Task[None]] = set()
        self._holder: socket.socket | None = None  # the port while stopped

    async def start(self) -> None:
        self._release()
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Refuse new connections (the port stays ours) and reset every open one."""
        if self._server is not None:
            self._server.close()
            self._server = None
            self._holder = socket.socket()
            self._holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._holder.bind(("127.0.0.1", self.port))
        for writer in list(self._writers):
            writer.transport.abort()
        for pipe in list(self._pipes):
            pipe.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)

    async def close(self) -> None:
        """Stop, and give the port back."""
        await self.stop()
        self._release()

    def _release(self) -> None:
        if self._holder is not None:
            self._holder.close()
            self._holder = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server = self._server
        if server is None:
            # Accepted just before `stop()`, handed over just after it: refused like the rest.
            writer.transport.abort()
            return
        self._writers.add(writer)  # from its accept on, so `stop()` cuts it too
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.transport.abort()
            return
        if self._server is not server or writer.transport.is_closing():
            # Stopped while this connection was being made: it must not outlive the outage.
            writer.transport.abort()
            up_writer.transport.abort()
            return
        self._writers.add(up_writer)
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            pipe = asyncio.get_running_loop().create_task(_pipe(source, sink))
            self._pipes.add(pipe)
            pipe.add_done_callback(self._pipes.discard)


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
    except (OSError, asyncio.CancelledError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            sink.transport.abort()
