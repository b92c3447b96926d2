"""Reading a request body from plain ASGI messages: pieces into one buffer of the declared length, and
a body that disagrees with its Content-Length refused with the protocol's error."""

from __future__ import annotations

import asyncio

import pytest

from deploykit.errors import RequestError
from deploykit.serve.http_bodies import receive_body


def _receive(*pieces: bytes):
    messages = [{"type": "http.request", "body": p, "more_body": i < len(pieces) - 1} for i, p in enumerate(pieces)]

    async def receive():
        return messages.pop(0)

    return receive


def _read(declared: str | None, *pieces: bytes):
    scope = {"type": "http", "headers": []}
    return asyncio.run(receive_body(scope, _receive(*pieces), declared, 1 << 20))


def test_a_body_in_pieces_is_read_into_one_buffer_of_its_length():
    assert bytes(_read("9", b"abc", b"def", b"ghi")) == b"abcdefghi"
    assert _read("3", b"abc") == b"abc"  # one piece: taken as it is
    assert bytes(_read(None, b"ab", b"c")) == b"abc"  # chunked: no length to allocate for


def test_a_body_that_disagrees_with_its_content_length_is_refused():
    with pytest.raises(RequestError, match="runs past its Content-Length of 4 bytes"):
        _read("4", b"abc", b"de")
    with pytest.raises(RequestError, match="has 3 bytes, its Content-Length says 5"):
        _read("5", b"abc")
    with pytest.raises(RequestError, match=r"Content-Length \| is not a number"):
        _read("five", b"abc")
