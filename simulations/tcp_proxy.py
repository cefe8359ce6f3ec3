"""A TCP proxy that can stop forwarding and resume: a network cut between a client and a server.

``with CuttableProxy(upstream_port) as proxy:`` listens on ``proxy.port`` (loopback) and
forwards every connection to ``127.0.0.1:upstream_port``. ``proxy.cut()`` stops forwarding:
bytes already sent wait in the sockets' buffers (the proxy stops reading them), new
connections are accepted and left waiting; nothing is closed, as on a link whose packets are
dropped. ``proxy.resume()`` forwards again, so a cut shorter than the peers' timeouts is lived
through without an error, the way TCP retransmits across a short outage. A connection whose
other side closes is closed too, so a server that stops is seen as stopped.

The proxy runs an asyncio loop in a thread of its own; ``cut`` and ``resume`` may be called
from any thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from types import TracebackType


class CuttableProxy:
    """Forwards ``127.0.0.1:port`` to ``upstream_host:upstream_port`` until :meth:`cut`."""

    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1") -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._open: asyncio.Event | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="tcp-proxy",
                                        daemon=True)

    def start(self) -> int:
        """Listen on a free loopback port; return it."""
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(10)
        return self.port

    async def _listen(self) -> None:
        self._open = asyncio.Event()
        self._open.set()
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _serve(self, client_r: asyncio.StreamReader,
                     client_w: asyncio.StreamWriter) -> None:
        assert self._open is not None
        await self._open.wait()  # a connection made during a cut waits, unanswered
        try:
            server_r, server_w = await asyncio.open_connection(*self.upstream)
        except OSError:  # the server is down: the client sees its connection closed
            client_w.close()
            return
        await asyncio.gather(self._pump(client_r, server_w), self._pump(server_r, client_w))

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._open is not None
        try:
            while True:
                await self._open.wait()
                data = await reader.read(65536)
                if not data:
                    break
                await self._open.wait()  # read before the cut, held until it ends
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    def cut(self) -> None:
        """Stop forwarding (nothing is closed)."""
        assert self._open is not None
        self._loop.call_soon_threadsafe(self._open.clear)

    def resume(self) -> None:
        """Forward again, what was held first."""
        assert self._open is not None
        self._loop.call_soon_threadsafe(self._open.set)

    def stop(self) -> None:
        if not self._thread.is_alive():
            return

        async def shut() -> None:
            assert self._server is not None and self._open is not None
            self._open.set()
            self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(shut(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> CuttableProxy:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
