"""``deploykit serve`` beside its Python peers under the same tritonclient load (``serve.py --peers``).

The peers are Seldon MLServer and KServe's Python model server, each in a virtual environment this
script creates (under deploykit's cache, ``bench-peers/NAME``), each with the minimal ONNX Runtime
adapter its documentation describes (one ``InferenceSession`` with ONNX Runtime's default threads, as
deploykit's default; the same onnxruntime version as this environment), bound to 127.0.0.1. One server
runs at a time; rounds go through the servers in turn. Per server and transport it records throughput
with N clients (MobileNetV2, batch 1), p50 and p99 under that load, CPU per request of the server's
process tree, CPU per request of the clients (this process), and seconds from launch to ready.
MLServer's HTTP has no binary tensor extension, so its HTTP rows send JSON tensors (tritonclient's
``binary_data=False``); the others get binary tensors. deploykit runs three times: with its defaults, as
``deploykit-tuned`` with one single-thread session per CPU and no batching (``TUNED_OPTIONS``), and as
``deploykit-ray`` on Ray Serve with one such replica per CPU (``RAY_OPTIONS``; HTTP only, Ray's whole
process tree — GCS, raylet, controller, proxy, replicas — counted as the server's CPU).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

PEERS = {"mlserver": ["mlserver==1.7.1"], "kserve": ["kserve==0.21.0"]}
# deploykit configured for throughput on a CPU: one single-thread session per core taking requests as
# they come (no intra-op threads to wake or spin, no batch to assemble); a second deploykit row
TUNED = "deploykit-tuned"
TUNED_OPTIONS = ("--instances", str(os.cpu_count() or 1), "-O", "threads=1", "--max-batch", "1")
# deploykit on Ray Serve (``--engine ray``, a local Ray it starts and stops), as tuned: one replica of one
# single-thread session per core. Ray Serve's proxy speaks HTTP only, so this row has no gRPC.
RAY = "deploykit-ray"
RAY_OPTIONS = ("--engine", "ray", "--replicas", str(os.cpu_count() or 1), "-O", "threads=1", "--max-batch", "1")
MODEL = "mobilenet"

# The adapters, as the peers' documentation writes a custom runtime / model: load a session, run it.
MLSERVER_RUNTIME = """
import onnxruntime as ort
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse


class OnnxModel(MLModel):
    async def load(self) -> bool:
        self.session = ort.InferenceSession(self.settings.parameters.uri, providers=["CPUExecutionProvider"])
        self.output_names = [o.name for o in self.session.get_outputs()]
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        feeds = {i.name: NumpyCodec.decode_input(i) for i in payload.inputs}
        results = self.session.run(self.output_names, feeds)
        outputs = [NumpyCodec.encode_output(n, r) for n, r in zip(self.output_names, results)]
        return InferenceResponse(model_name=self.name, outputs=outputs)
"""

KSERVE_SERVER = """
import sys
import uuid

import grpc
import onnxruntime as ort
import uvicorn
from kserve import InferOutput, InferRequest, InferResponse, Model, ModelServer

# KServe binds every address; the benchmark stays on loopback
_config = uvicorn.Config.__init__
uvicorn.Config.__init__ = lambda self, *a, **k: _config(self, *a, **{**k, "host": "127.0.0.1"})
_add = grpc.aio._server.Server.add_insecure_port
grpc.aio._server.Server.add_insecure_port = lambda self, address: _add(self, "127.0.0.1:" + address.rsplit(":", 1)[1])


class OnnxModel(Model):
    def __init__(self, name: str, path: str) -> None:
        super().__init__(name)
        self.session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.ready = True

    def predict(self, payload: InferRequest, headers=None) -> InferResponse:
        feeds = {i.name: i.as_numpy() for i in payload.inputs}
        results = self.session.run(self.output_names, feeds)
        outputs = [InferOutput(name=n, shape=list(r.shape), datatype="FP32", data=r) for n, r in
                   zip(self.output_names, results)]
        return InferResponse(model_name=self.name, infer_outputs=outputs, response_id=payload.id or str(uuid.uuid4()))


if __name__ == "__main__":
    path, http_port, grpc_port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    ModelServer(http_port=http_port, grpc_port=grpc_port, workers=1).start([OnnxModel("mobilenet", path)])
"""


def peer_python(name: str) -> Path:
    """The serving peer's virtual environment with this environment's onnxruntime: its python."""
    return peer_environment(name, PEERS[name])


def peer_environment(name: str, packages: list[str]) -> Path:
    """A peer's virtual environment under deploykit's cache (``bench-peers/NAME``), created and
    installed once (``packages`` plus this environment's onnxruntime version), then reused: its python.
    """
    import onnxruntime

    from deploykit.cache import cache_dir

    folder = cache_dir() / "bench-peers" / name
    spec = [*packages, f"onnxruntime=={onnxruntime.__version__}"]
    marker = folder / "installed.json"
    if not marker.is_file() or json.loads(marker.read_text()) != spec:
        subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
        subprocess.run([str(folder / "bin" / "pip"), "install", "-q", *spec], check=True)
        marker.write_text(json.dumps(spec))
    return folder / "bin" / "python"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_peer(name: str, model: Path, folder: Path) -> tuple[subprocess.Popen[bytes], dict[str, int], float]:
    """A peer on free loopback ports: (process, ports, seconds from launch to the model ready)."""
    python = peer_python(name)
    ports = {"http": free_port(), "grpc": free_port()}
    started = time.perf_counter()
    if name == "mlserver":
        (folder / "runtime.py").write_text(MLSERVER_RUNTIME)
        (folder / "settings.json").write_text(json.dumps(
            {"host": "127.0.0.1", "http_port": ports["http"], "grpc_port": ports["grpc"], "metrics_port": free_port(),
             "metrics_endpoint": None, "parallel_workers": 0}))  # fmt: skip
        (folder / "model-settings.json").write_text(json.dumps(
            {"name": MODEL, "implementation": "runtime.OnnxModel", "parameters": {"uri": str(model)}}))  # fmt: skip
        command = [str(python.parent / "mlserver"), "start", str(folder)]
    else:
        (folder / "kserve_server.py").write_text(KSERVE_SERVER)
        command = [str(python), str(folder / "kserve_server.py"), str(model), str(ports["http"]), str(ports["grpc"])]
    process = subprocess.Popen(command, cwd=folder, stdout=subprocess.DEVNULL, stderr=open(folder / "log.txt", "wb"),
                               start_new_session=True)  # fmt: skip
    wait_ready(process, ports["http"], folder / "log.txt")
    return process, ports, time.perf_counter() - started


def wait_ready(process: subprocess.Popen, port: int, log: Path, timeout_s: float = 300) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"peer exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v2/models/{MODEL}/ready", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise SystemExit(f"peer not ready within {timeout_s} s:\n{log.read_text()[-3000:]}")


def tree_cpu_s(pid: int, cpu_s: Callable[[int], float]) -> float:
    """CPU seconds of a process and every process below it (MLServer runs its model in a worker)."""
    total, pending = 0.0, [pid]
    while pending:
        current = pending.pop()
        try:
            total += cpu_s(current)
            for task in Path(f"/proc/{current}/task").iterdir():
                pending += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


def load(ports: dict[str, int], transport: str, binary: bool, seconds: float, clients: int) -> tuple[list[int], int]:
    """``clients`` tritonclient loops of MobileNetV2 at batch 1: latencies (ns) and failures."""
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    x = np.random.default_rng(2).random((1, 3, 224, 224), dtype=np.float32)
    latencies: list[int] = []
    failed = [0]
    first_failure: list[str] = []
    lock = threading.Lock()
    stop_at = time.perf_counter() + seconds

    def client() -> None:
        if transport == "http":
            module, server = httpclient, httpclient.InferenceServerClient(f"127.0.0.1:{ports['http']}",
                                                                          network_timeout=60)  # fmt: skip
        else:
            module, server = grpcclient, grpcclient.InferenceServerClient(f"127.0.0.1:{ports['grpc']}")
        while time.perf_counter() < stop_at:
            tensor = module.InferInput("images", [1, 3, 224, 224], "FP32")
            if transport == "http":
                tensor.set_data_from_numpy(x, binary_data=binary)
                wanted = [module.InferRequestedOutput("output", binary_data=binary)]
            else:
                tensor.set_data_from_numpy(x)
                wanted = [module.InferRequestedOutput("output")]
            start = time.perf_counter_ns()
            try:
                answer = server.infer(MODEL, [tensor], outputs=wanted)
                assert answer.as_numpy("output").shape == (1, 1000)
            except Exception as exc:
                with lock:
                    failed[0] += 1
                    first_failure[:1] = first_failure[:1] or [f"{type(exc).__name__}: {str(exc)[:300]}"]
                continue
            with lock:
                latencies.append(time.perf_counter_ns() - start)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if first_failure:
        print(f"first failure ({transport}): {first_failure[0]}", file=sys.stderr)
    return latencies, failed[0]


def stop(process: subprocess.Popen) -> None:
    """SIGTERM to the server's process group (a peer's workers too), SIGKILL if it lingers."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    except ProcessLookupError:
        pass


def peers(mobilenet: Path, seconds: float, clients: int, rounds: int, emit: Callable[[dict], None],
          cpu_s: Callable[[int], float]) -> None:  # fmt: skip
    """The rounds: every server in turn (the order rotating), each transport's load on it, then the rows."""
    from deploykit.bench.stats import latency_stats

    servers = ["deploykit", TUNED, RAY, *PEERS]
    totals: dict[tuple[str, str], dict] = {}
    startups: dict[str, list[float]] = {s: [] for s in servers}
    for round_index in range(rounds):
        shift = round_index % len(servers)
        for server in servers[shift:] + servers[:shift]:
            with tempfile.TemporaryDirectory() as folder:
                if server in ("deploykit", TUNED, RAY):
                    options = {TUNED: TUNED_OPTIONS, RAY: RAY_OPTIONS}.get(server, ())
                    process, ports, ready_s = start_deploykit(mobilenet, Path(folder), options)
                else:
                    process, ports, ready_s = start_peer(server, mobilenet, Path(folder))
                startups[server].append(ready_s)
                try:
                    for transport in ("http",) if server == RAY else ("http", "grpc"):
                        binary = not (server == "mlserver" and transport == "http")
                        before, client_before = tree_cpu_s(process.pid, cpu_s), time.process_time()
                        started = time.perf_counter()
                        latencies, failed = load(ports, transport, binary, seconds, clients)
                        elapsed = time.perf_counter() - started
                        used = tree_cpu_s(process.pid, cpu_s) - before
                        row = totals.setdefault((server, transport), {"latencies": [], "failed": 0, "seconds": 0.0,
                                                                      "cpu_s": 0.0, "client_cpu_s": 0.0,
                                                                      "binary": binary})  # fmt: skip
                        row["client_cpu_s"] += time.process_time() - client_before
                        row["latencies"] += latencies
                        row["failed"] += failed
                        row["seconds"] += elapsed
                        row["cpu_s"] += used
                finally:
                    stop(process)
    rates = {key: len(row["latencies"]) / row["seconds"] for key, row in totals.items()}
    for (server, transport), row in totals.items():
        best_peer = max(rates[(peer, transport)] for peer in PEERS)
        options = {TUNED: TUNED_OPTIONS, RAY: RAY_OPTIONS}.get(server)
        stats = latency_stats(row["latencies"])
        requests = len(row["latencies"])
        emit({"benchmark": "peers", "server": server, "transport": transport,
              "tensors": "binary" if row["binary"] else "json", "clients": clients, "rounds": rounds,
              "seconds": round(row["seconds"], 1), "requests": requests, "failed": row["failed"],
              "samples_per_s": round(rates[(server, transport)], 2),
              "ratio_to_best_peer": round(rates[(server, transport)] / best_peer, 2),
              "p50_ms": round(stats.p50_ms, 2), "p99_ms": round(stats.p99_ms, 2),
              "server_cpu_ms_per_request": round(1000 * row["cpu_s"] / max(1, requests), 2),
              "client_cpu_ms_per_request": round(1000 * row["client_cpu_s"] / max(1, requests), 2),
              "options": " ".join(options) if options else "defaults",
              "startup_s_median": round(float(np.median(startups[server])), 2)})  # fmt: skip
    emit({"benchmark": "peers-machine-after", "load_1min": os.getloadavg()[0]})


def start_deploykit(mobilenet: Path, folder: Path, options: tuple[str, ...] = ()
                    ) -> tuple[subprocess.Popen[bytes], dict[str, int], float]:  # fmt: skip
    """``deploykit serve`` with its defaults (batches of up to 8 rows, 2 ms), as the peers are run with
    theirs, or with ``options`` added (with ``--engine ray``, no gRPC or metrics port)."""
    ports = {"http": free_port(), "grpc": free_port()}
    local = () if "ray" in options else ("--grpc-port", str(ports["grpc"]), "--metrics-port", "none")
    command = [sys.executable, "-m", "deploykit.cli.main", "serve", f"{MODEL}={mobilenet}", "--http-port",
               str(ports["http"]), *local, *options]  # fmt: skip
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=Path(__file__).resolve().parents[1], stdout=subprocess.DEVNULL,
                               stderr=open(folder / "log.txt", "wb"), start_new_session=True)  # fmt: skip
    wait_ready(process, ports["http"], folder / "log.txt")
    return process, ports, time.perf_counter() - started
