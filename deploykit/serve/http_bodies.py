"""Request bodies in and replies out for the HTTP front end: through Starlette's ``Request``, or as plain
ASGI messages for the infer route (``http.V2App``).

A body is refused as soon as it is known to be larger than the limit: from its Content-Length before
reading, else while reading. The plain-ASGI reader copies a body from the server's messages once, into a
buffer of its declared length; the reply is sent as its JSON header and then each binary output's own
bytes, as memoryviews (uvicorn writes them as they are; an ASGI server that pickles its messages cannot).
"""

from __future__ import annotations

import numpy as np
from starlette.requests import ClientDisconnect, Request
from starlette.types import Receive, Scope, Send

from deploykit.errors import RequestError, RequestTooLargeError
from deploykit.serve.protocol import HEADER_LENGTH


def declared_size(declared: str | None, limit: int, *, fixed: bool = False) -> int | None:
    """The Content-Length header's size, refused when it is larger than ``limit`` (None: no header)."""
    if declared is None:
        return None
    try:
        size = int(declared)
    except ValueError:
        raise RequestError("header Content-Length | is not a number.") from None
    if size > limit:
        raise too_large(size, limit, fixed=fixed)
    return size


async def read_body(request: Request, limit: int, *, fixed: bool = False) -> bytes:
    """The body, refused as soon as it is larger than ``limit`` bytes (before reading it all); ``fixed``:
    the route's own limit for a small JSON object, not the server's --max-request-size."""
    declared_size(request.headers.get("content-length"), limit, fixed=fixed)
    chunks: list[bytes] = []
    received = 0
    async for chunk in request.stream():
        received += len(chunk)
        if received > limit:
            raise too_large(received, limit, fixed=fixed)
        chunks.append(chunk)
    return b"".join(chunks)


def too_large(size: int, limit: int, *, fixed: bool = False) -> RequestTooLargeError:
    if fixed:
        return RequestTooLargeError(
            f"request | body of {size} bytes or more exceeds this route's limit of {limit} bytes.",
            hint="this route takes a small JSON object (--max-request-size does not change its limit).",
        )
    return RequestTooLargeError(
        f"request | body of {size} bytes or more exceeds the server's limit of {limit} bytes.",
        hint="send smaller tensors, or start the server with a larger --max-request-size.",
    )


def body_buffer(size: int) -> np.ndarray:
    """An unzeroed buffer for a body of ``size`` bytes, refused with 413 when memory cannot hold it now."""
    try:
        return np.empty(size, np.uint8)
    except MemoryError:
        raise RequestTooLargeError(
            f"request | body of {size} bytes does not fit in the server's free memory now.",
            hint="send smaller tensors, or start the server with a --max-request-size that refuses such bodies.",
        ) from None


def first_headers(scope: Scope, names: tuple[str, ...]) -> dict[str, str]:
    """The first value of each of ``names`` among the request's headers (as Starlette's ``Headers.get``)."""
    found: dict[str, str] = {}
    for raw_name, raw_value in scope["headers"]:
        name = raw_name.decode("latin-1").lower()
        if name in names and name not in found:
            found[name] = raw_value.decode("latin-1")
    return found


async def receive_body(scope: Scope, receive: Receive, declared: str | None, limit: int) -> bytes | memoryview:
    """The body, read into one buffer of its declared length (a body that fits one message is not copied);
    refused before reading when the declared length is larger than ``limit``. The buffer is not zeroed
    first (``bytearray(size)`` would write every byte once more before the copy)."""
    size = declared_size(declared, limit)
    if size is None:  # chunked: no length to allocate for
        return await read_body(Request(scope, receive), limit)
    buffer: np.ndarray | None = None
    received = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunk = message.get("body", b"")
        more = message.get("more_body", False)
        if received == 0 and not more and len(chunk) == size:
            return chunk
        if received + len(chunk) > size:
            raise RequestError(f"request | body runs past its Content-Length of {size} bytes.")
        if buffer is None:
            buffer = body_buffer(size)
        buffer[received : received + len(chunk)] = np.frombuffer(chunk, np.uint8)
        received += len(chunk)
        if not more:
            break
    if received != size:
        raise RequestError(f"request | body has {received} bytes, its Content-Length says {size}.")
    return buffer.data if buffer is not None else b""


async def send_reply(send: Send, header: bytes, buffers: list[memoryview]) -> None:
    """A 200 reply: the JSON header, then each binary output's bytes as its own body message (no join)."""
    length = len(header) + sum(buffer.nbytes for buffer in buffers)
    headers = [(b"content-length", str(length).encode())]
    if buffers:
        headers += [
            (b"content-type", b"application/octet-stream"),
            (HEADER_LENGTH.lower().encode(), str(len(header)).encode()),
        ]
    else:
        headers.append((b"content-type", b"application/json"))
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    parts: list[bytes | memoryview] = [header, *buffers]
    for index, part in enumerate(parts):
        await send({"type": "http.response.body", "body": part, "more_body": index < len(parts) - 1})
