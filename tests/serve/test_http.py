"""The HTTP app's two forms of the infer route: Starlette's route and the plain ASGI one the server uses
answer every request alike (status, headers, body, counters)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from deploykit.serve import BatchPolicy, ServedModel, Server, ServerSettings
from deploykit.serve.http import create_app

TOKEN = "s3cret"


@pytest.fixture(scope="module")
def server(catalog_paths) -> Iterator[Server]:
    """The models loaded, with no front end: the tests drive the ASGI apps themselves."""
    models = [ServedModel.from_path(catalog_paths["multi_io"])]
    settings = ServerSettings(http_port=None, grpc_port=None, metrics_port=None)
    with Server(models, BatchPolicy(max_batch=1), settings) as running:
        assert running.wait_ready(60), [r.problem for r in running.repository.runners.values()]
        yield running


def _binary_request(server: Server, outputs_binary: bool) -> tuple[bytes, dict[str, str]]:
    rng = np.random.default_rng(0)
    arrays = {name: rng.random((2, 3), dtype=np.float32) for name in ("a", "b")}
    header = {
        "inputs": [{"name": name, "datatype": "FP32", "shape": [2, 3], "parameters": {"binary_data_size": a.nbytes}}
                   for name, a in arrays.items()],
        "outputs": [{"name": name, "parameters": {"binary_data": outputs_binary}}
                    for name in server.repository.runners["multi_io"].outputs],
    }  # fmt: skip
    head = json.dumps(header).encode()
    return head + b"".join(a.tobytes() for a in arrays.values()), {"Inference-Header-Content-Length": str(len(head))}


def _answers(server: Server, raw_infer: bool, requests: list[tuple[str, bytes, dict[str, str]]]) -> list[tuple]:
    app = create_app(server.repository, token=TOKEN, max_request_bytes=1 << 20, raw_infer=raw_infer)

    async def send_all() -> list[tuple]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            answers = []
            for path, body, headers in requests:
                response = await client.post(path, content=body, headers=headers)
                answers.append((response.status_code, sorted(response.headers.items()), response.content))
            return answers

    return asyncio.run(send_all())


def test_the_asgi_infer_route_answers_as_the_starlette_route(server):
    auth = {"Authorization": f"Bearer {TOKEN}"}
    binary, binary_headers = _binary_request(server, outputs_binary=True)
    json_out, json_headers = _binary_request(server, outputs_binary=False)
    requests = [
        ("/v2/models/multi_io/infer", binary, {**auth, **binary_headers}),
        ("/v2/models/multi_io/versions/1/infer", json_out, {**auth, **json_headers}),
        ("/v2/models/multi_io/infer", binary, binary_headers),  # no token
        ("/v2/models/nope/infer", binary, {**auth, **binary_headers}),
        ("/v2/models/multi_io/versions/7/infer", binary, {**auth, **binary_headers}),
        ("/v2/models/multi_io/infer", binary, {**auth, "Inference-Header-Content-Length": "x"}),
        ("/v2/models/multi_io/infer", b"x" * (2 << 20), auth),  # over the 1 MiB limit
        ("/v2/models/multi_io/infer", b"{not json", auth),
    ]
    before = _counts(server)
    starlette = _answers(server, False, requests)
    after_starlette = _counts(server)
    raw = _answers(server, True, requests)
    assert [a[0] for a in starlette] == [200, 200, 401, 404, 404, 400, 413, 400]
    assert raw == starlette
    # successes and failures counted alike (a refused token or an unknown model names no model to count)
    assert _counts(server)[0] - after_starlette[0] == after_starlette[0] - before[0] == 2
    assert _counts(server)[1] - after_starlette[1] == after_starlette[1] - before[1] == 3
    assert b"exceeds the server's limit of 1048576 bytes" in raw[6][2]


def _counts(server: Server) -> tuple[int, int]:
    (stats,) = server.repository.statistics("multi_io")["model_stats"]
    return stats["inference_stats"]["success"]["count"], stats["inference_stats"]["fail"]["count"]
