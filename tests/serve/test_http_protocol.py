"""Infer bodies received into one buffer (``deploykit.serve.http_protocol``), on a real uvicorn over
loopback sockets: the app gets the whole body in one message, and everything uvicorn does for other
requests (other routes, chunked bodies, ``Expect: 100-continue``, pipelining, a client that leaves
mid-body) still works. Each case runs the same request against uvicorn's own httptools protocol too,
so the test shows what changed rather than assuming it."""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

pytest.importorskip("httptools")
import uvicorn

from deploykit.serve.http import INFER_PATH
from deploykit.serve.http_protocol import protocol_for

LIMIT = 8 << 20
BODY = bytes(range(256)) * 8192  # 2 MiB: a 416×416×3 float tensor's size, far past uvicorn's 64 KiB pause
WAIT_S = 30.0  # how long a reply may take on a loaded machine: the test waits for it, never for less


class Probe:
    """An ASGI app that records how each request's body arrived and answers with its length, digest and
    number of messages as JSON."""

    def __init__(self) -> None:
        self.disconnected = threading.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        pieces: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.disconnected.set()
                return
            pieces.append(bytes(message.get("body", b"")))
            if not message.get("more_body", False):
                break
        body = b"".join(pieces)
        reply = json.dumps(
            {"length": len(body), "sha": hashlib.sha256(body).hexdigest(), "messages": len(pieces)}
        ).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(reply)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": reply})


@contextmanager
def serving(http: Any) -> Iterator[tuple[int, Probe]]:
    """A real uvicorn on a loopback port with ``http`` as its protocol (a class, or uvicorn's name)."""
    probe = Probe()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    config = uvicorn.Config(probe, http=http, loop="asyncio", lifespan="off", log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT_S
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield sock.getsockname()[1], probe
    finally:
        server.should_exit = True
        thread.join(WAIT_S)
        sock.close()


def request(path: str, body: bytes, *extra: str, chunked: bool = False) -> bytes:
    head = [f"POST {path} HTTP/1.1", "host: 127.0.0.1", *extra]
    if chunked:
        head.append("transfer-encoding: chunked")
        half = len(body) // 2
        payload = b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in (body[:half], body[half:])) + b"0\r\n\r\n"
    else:
        head.append(f"content-length: {len(body)}")
        payload = body
    return ("\r\n".join(head) + "\r\n\r\n").encode() + payload


def read_replies(conn: socket.socket, count: int) -> list[dict[str, Any]]:
    """``count`` JSON replies off a keep-alive connection (each framed by its Content-Length)."""
    conn.settimeout(WAIT_S)
    data, replies = b"", []
    while len(replies) < count:
        end = data.find(b"\r\n\r\n")
        if end >= 0:
            head = data[:end].decode("latin-1").lower()
            length = int(head.split("content-length:")[1].split("\r\n")[0])
            if len(data) >= end + 4 + length:
                assert head.startswith("http/1.1 200"), head
                replies.append(json.loads(data[end + 4 : end + 4 + length]))
                data = data[end + 4 + length :]
                continue
        chunk = conn.recv(1 << 16)
        assert chunk, f"the server closed the connection after {len(replies)} of {count} replies"
        data += chunk
    return replies


def post(port: int, raw: bytes, replies: int = 1) -> list[dict[str, Any]]:
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as conn:
        conn.sendall(raw)
        return read_replies(conn, replies)


WHOLE = protocol_for(LIMIT, INFER_PATH)
assert WHOLE is not None, "this uvicorn lacks what the whole-body protocol needs"


def digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def test_an_infer_body_reaches_the_app_whole_in_one_message():
    for path in ("/v2/models/yolo/infer", "/v2/models/yolo/versions/3/infer"):
        with serving(WHOLE) as (port, _):
            (reply,) = post(port, request(path, BODY))
        assert reply == {"length": len(BODY), "sha": digest(BODY), "messages": 1}
    with serving("httptools") as (port, _):  # uvicorn's own protocol: the same body in pieces
        (reply,) = post(port, request("/v2/models/yolo/infer", BODY))
    assert reply["sha"] == digest(BODY) and reply["messages"] > 1


def test_other_routes_chunked_bodies_and_bodies_over_the_limit_take_uvicorns_own_path():
    over = BODY * 5  # 10 MiB > LIMIT: the app refuses it from its Content-Length (not this protocol's job)
    with serving(WHOLE) as (port, _):
        (other,) = post(port, request("/v2/repository/models/yolo/load", BODY))
        (chunked,) = post(port, request("/v2/models/yolo/infer", BODY, chunked=True))
        (large,) = post(port, request("/v2/models/yolo/infer", over))
    assert other["sha"] == chunked["sha"] == digest(BODY)
    assert large["sha"] == digest(over)
    assert other["messages"] > 1 and chunked["messages"] > 1 and large["messages"] > 1


def test_expect_100_continue_is_answered_before_the_body_is_sent():
    raw = request("/v2/models/yolo/infer", BODY, "expect: 100-continue")
    head, body = raw.split(b"\r\n\r\n", 1)
    with serving(WHOLE) as (port, _), socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as conn:
        conn.sendall(head + b"\r\n\r\n")
        interim = b""
        while b"\r\n\r\n" not in interim:  # the client sends nothing more until the server says continue
            chunk = conn.recv(1024)
            assert chunk, "the server closed the connection instead of answering 100 Continue"
            interim += chunk
        assert interim.startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        conn.sendall(body)
        (reply,) = read_replies(conn, 1)
    assert reply == {"length": len(BODY), "sha": digest(BODY), "messages": 1}


def test_pipelined_infer_requests_are_answered_in_order_each_with_its_own_body():
    second = BODY[::-1]
    with serving(WHOLE) as (port, _):
        replies = post(port, request("/v2/models/a/infer", BODY) + request("/v2/models/b/infer", second), replies=2)
    assert [r["sha"] for r in replies] == [digest(BODY), digest(second)]
    assert [r["messages"] for r in replies] == [1, 1]


def test_a_client_that_leaves_mid_body_is_a_disconnect_and_the_server_goes_on():
    raw = request("/v2/models/yolo/infer", BODY)
    with serving(WHOLE) as (port, probe):
        with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as conn:
            conn.sendall(raw[: len(raw) // 2])
        assert probe.disconnected.wait(WAIT_S), "the app never heard that the client left"
        (reply,) = post(port, raw)
    assert reply == {"length": len(BODY), "sha": digest(BODY), "messages": 1}


def _answers_over_sockets(port: int, requests: list[tuple[str, bytes, dict[str, str]]]) -> list[tuple]:
    import http.client

    answers = []
    for path, body, headers in requests:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT_S)
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
        kept = {k: v for k, v in response.getheaders() if k.lower() not in ("date", "server")}
        answers.append((response.status, sorted(kept.items()), response.read()))
        conn.close()
    return answers


def test_the_server_answers_every_infer_request_as_with_uvicorns_own_protocol(catalog_paths, monkeypatch):
    import numpy as np

    from deploykit.serve import BatchPolicy, ServedModel, Server, ServerSettings
    from deploykit.serve import server as server_module

    rng = np.random.default_rng(0)
    arrays = {name: rng.random((2, 3), dtype=np.float32) for name in ("a", "b")}
    header = json.dumps({
        "inputs": [{"name": n, "datatype": "FP32", "shape": [2, 3], "parameters": {"binary_data_size": a.nbytes}}
                   for n, a in arrays.items()],
        "outputs": [{"name": "z_sum", "parameters": {"binary_data": True}}],
    }).encode()  # fmt: skip
    binary = header + b"".join(a.tobytes() for a in arrays.values())
    length = {"Inference-Header-Content-Length": str(len(header))}
    requests = [
        ("/v2/models/multi_io/infer", binary, length),
        ("/v2/models/multi_io/versions/1/infer", binary, length),
        ("/v2/models/nope/infer", binary, length),
        ("/v2/models/multi_io/infer", binary[:-4], length),  # a tensor shorter than its header says
        ("/v2/models/multi_io/infer", b"x" * (2 << 20), {}),  # over the 1 MiB limit
        ("/v2/models/multi_io/infer", b"{not json", {}),
    ]
    answers = {}
    for http in ("auto", "httptools"):
        monkeypatch.setattr(server_module, "UVICORN_HTTP", http)
        settings = ServerSettings(http_port=0, grpc_port=None, metrics_port=None, max_request_bytes=1 << 20)
        models = [ServedModel.from_path(catalog_paths["multi_io"])]
        with Server(models, BatchPolicy(max_batch=1), settings) as running:
            assert running.wait_ready(60), [r.problem for r in running.repository.runners.values()]
            protocol = running._uvicorn.config.http
            assert (getattr(protocol, "__name__", protocol) == "WholeBodyProtocol") == (http == "auto")
            answers[http] = _answers_over_sockets(running.http_port, requests)
    assert [a[0] for a in answers["auto"]] == [200, 200, 404, 400, 413, 400]
    assert answers["auto"] == answers["httptools"]
    reply = answers["auto"][0][2]
    size = int(dict(answers["auto"][0][1])["inference-header-content-length"])
    expected = arrays["a"] + arrays["b"]
    np.testing.assert_array_equal(np.frombuffer(reply[size:], np.float32).reshape(2, 3), expected)


def test_a_declared_body_no_memory_can_hold_is_refused_with_413_and_the_server_goes_on(catalog_paths):
    from deploykit.serve import BatchPolicy, ServedModel, Server, ServerSettings

    settings = ServerSettings(http_port=0, grpc_port=None, metrics_port=None, max_request_bytes=1 << 60)
    with Server([ServedModel.from_path(catalog_paths["multi_io"])], BatchPolicy(max_batch=1), settings) as server:
        assert server.wait_ready(WAIT_S), [r.problem for r in server.repository.runners.values()]
        huge = 1 << 56  # 64 PiB: within the limit given, beyond any machine's memory; the body starts to come
        with socket.create_connection(("127.0.0.1", server.http_port), timeout=WAIT_S) as conn:
            conn.sendall(
                f"POST /v2/models/multi_io/infer HTTP/1.1\r\nhost: x\r\ncontent-length: {huge}\r\n\r\n".encode()
                + b"{" * 1000
            )
            reply = b""
            while b"}" not in reply:
                chunk = conn.recv(4096)
                assert chunk, reply
                reply += chunk
        assert reply.startswith(b"HTTP/1.1 413"), reply
        assert f"body of {huge} bytes does not fit in the server's free memory now".encode() in reply
        with socket.create_connection(("127.0.0.1", server.http_port), timeout=WAIT_S) as conn:
            conn.sendall(b"GET /v2/health/live HTTP/1.1\r\nhost: x\r\n\r\n")
            assert conn.recv(4096).startswith(b"HTTP/1.1 200")
