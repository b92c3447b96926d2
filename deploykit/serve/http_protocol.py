"""uvicorn's httptools protocol, with an infer request's body received straight into one buffer.

uvicorn hands a body to the app in pieces: each piece the C parser gives is appended to a
``bytearray``, reading pauses past 64 KiB until the app asks, and every ``receive()`` copies what
has gathered into a new ``bytes``. For a 2 MB tensor that is three copies of the body and a dozen
pause/resume turns of the event loop before the app copies it a fourth time into its own buffer;
with the data cold in cache the inference that follows is slower too (``benchmarks/serve.py``'s
``overhead`` measures the whole round trip against a server that does nothing).

Here a ``POST .../infer`` whose Content-Length is known and within the server's limit gets a buffer
of that size when its headers end; each piece the parser gives is copied into it once, and the app's
first ``receive()`` returns the whole body (a memoryview of the buffer) when the request has ended.
Everything else is uvicorn's own path: other routes, chunked bodies, bodies over the limit (the app
refuses those from their Content-Length before reading), pipelining, keep-alive, ``Expect:
100-continue`` and a client that leaves mid-body (``http.disconnect``, as uvicorn says it).

The protocol uses uvicorn's request cycle as it is (its ``body``, ``more_body``, ``message_event``,
``disconnected``, ``response_complete``, ``waiting_for_100_continue``, ``transport``, ``flow``).
``protocol_for`` checks that the installed uvicorn has them and otherwise returns ``None``: the server
then runs uvicorn's own protocol and says so in its log.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
from typing import Any

import numpy as np

log = logging.getLogger("deploykit.serve")

# what the body path relies on in uvicorn's RequestResponseCycle and HttpToolsProtocol
_CYCLE_ARGUMENTS = {"transport", "flow", "message_event", "expect_100_continue"}
_CYCLE_ATTRIBUTES = ("body", "more_body", "disconnected", "response_complete", "waiting_for_100_continue")
_PROTOCOL_METHODS = ("on_headers_complete", "on_body", "on_message_complete")


def protocol_for(limit: int, infer_path: re.Pattern[str]) -> type[asyncio.Protocol] | None:
    """uvicorn's httptools protocol whose infer requests (``infer_path`` matches the path) of at most
    ``limit`` bytes are received into one buffer; None when httptools or the parts of uvicorn the
    protocol uses are missing (uvicorn's own choice then serves every request)."""
    try:
        from uvicorn.protocols.http import httptools_impl
    except ImportError:  # no httptools: uvicorn runs h11
        return None
    missing = _missing(httptools_impl)
    if missing:
        log.info("HTTP bodies: uvicorn's own path (this uvicorn has no %s)", missing)
        return None

    class WholeBodyProtocol(httptools_impl.HttpToolsProtocol):
        """See the module's docstring."""

        def on_headers_complete(self) -> None:
            super().on_headers_complete()
            cycle: Any = self.cycle  # uvicorn's type says its body is a bytearray
            scope = cycle.scope
            if scope["method"] != "POST" or infer_path.fullmatch(scope["path"]) is None:
                return
            size = _declared(self.headers)
            if size is None or size > limit or size == 0:
                return
            try:
                body = _Body(size)
            except MemoryError:  # no room for it now: uvicorn's path, where the app says so
                return
            cycle.body = body  # the request cycle's body: one buffer, filled in place
            cycle.receive = _whole_receive(cycle)

        def on_body(self, body: bytes) -> None:
            target: Any = self.cycle.body
            if not isinstance(target, _Body):
                super().on_body(body)
                return
            if (self.parser.should_upgrade() and self._should_upgrade()) or self.cycle.response_complete:
                return
            target.add(body)  # no pause: the buffer was sized from the declared length, within the limit

    return WholeBodyProtocol


def _missing(module: Any) -> str:
    cycle = getattr(module, "RequestResponseCycle", None)
    protocol = getattr(module, "HttpToolsProtocol", None)
    if cycle is None or protocol is None:
        return "RequestResponseCycle or HttpToolsProtocol"
    absent = _CYCLE_ARGUMENTS - set(inspect.signature(cycle.__init__).parameters)
    try:
        source = inspect.getsource(cycle.__init__)
    except (OSError, TypeError):  # installed without sources: the signature is all there is to check
        source = None
    if source is not None:
        absent |= {name for name in _CYCLE_ATTRIBUTES if f"self.{name} =" not in source}
    absent |= {name for name in _PROTOCOL_METHODS if not callable(getattr(protocol, name, None))}
    return ", ".join(sorted(absent))


def _declared(headers: list[tuple[bytes, bytes]]) -> int | None:
    """The first Content-Length, unless the body is chunked (None: no length to allocate for)."""
    size = None
    for name, value in headers:
        lowered = name.lower()
        if lowered == b"transfer-encoding":
            return None
        if lowered == b"content-length" and size is None:
            try:
                size = int(value)
            except ValueError:
                return None
    return size


class _Body:
    """A request body of a declared size, filled in place (not zeroed first)."""

    __slots__ = ("buffer", "received")

    def __init__(self, size: int) -> None:
        self.buffer = np.empty(size, np.uint8)
        self.received = 0

    def add(self, piece: bytes) -> None:
        end = self.received + len(piece)
        if end <= self.buffer.size:  # the parser frames the body by its Content-Length: never past it
            self.buffer[self.received : end] = np.frombuffer(piece, np.uint8)
        self.received = end


def _whole_receive(cycle: Any) -> Any:
    """The cycle's ``receive`` for a body gathered into a ``_Body``: the first call waits for the
    request's end and returns the whole body; later calls are uvicorn's (they wait for the client to
    leave or the reply to be sent)."""
    original = type(cycle).receive
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if delivered:
            return await original(cycle)
        if cycle.waiting_for_100_continue and not cycle.transport.is_closing():
            cycle.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            cycle.waiting_for_100_continue = False
        while cycle.more_body and not (cycle.disconnected or cycle.response_complete):
            cycle.flow.resume_reading()  # paused only by uvicorn's pipelining: the body must come in
            await cycle.message_event.wait()
            cycle.message_event.clear()
        if cycle.disconnected or cycle.response_complete:
            return {"type": "http.disconnect"}
        delivered = True
        body: _Body = cycle.body
        cycle.body = bytearray()  # uvicorn's own type again for anything after the request
        return {"type": "http.request", "body": body.buffer.data, "more_body": False}

    return receive
