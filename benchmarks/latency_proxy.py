"""A TCP proxy that delays every chunk by a fixed time in each direction.

`python -m benchmarks.latency_proxy PORT TARGET_HOST TARGET_PORT DELAY_MS` prints "ready"
once listening. The concurrency workload puts it between the savers and a local PostgreSQL
to stand for a database across a network: each round trip then costs 2 x DELAY_MS more, as
it would against a managed database in another availability zone. It runs as its own
process so its work does not land on the benchmark's event loop.
"""

from __future__ import annotations

import asyncio
import sys
import time


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """Forward chunks in order, each no earlier than `delay` after it arrived."""
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def read() -> None:
        while chunk := await reader.read(65536):
            queue.put_nowait((time.monotonic() + delay, chunk))
        queue.put_nowait((0.0, b""))

    async def write() -> None:
        while True:
            due, chunk = await queue.get()
            if not chunk:
                break
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(chunk)
            await writer.drain()
        writer.close()

    await asyncio.gather(read(), write(), return_exceptions=True)


async def serve(port: int, host: str, target_port: int, delay_ms: float) -> None:
    delay = delay_ms / 1000

    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(host, target_port)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(
            _pump(client_r, server_w, delay),
            _pump(server_r, client_w, delay),
            return_exceptions=True,
        )

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])))
