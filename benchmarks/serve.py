"""What ``deploykit serve`` costs over calling the session in-process, on loopback, within one run.

The server runs as the real command in its own process; the clients (tritonclient HTTP and gRPC) run
here. Prints JSON lines:

- ``startup``: seconds from starting the command to ``/v2/health/ready`` (imports included), and the
  server's own figure from binding its ports to every model ready (after imports);
- ``overhead``: YOLOv4-tiny at batch 1, calls interleaved across in-process ``Session.run``, HTTP
  binary, HTTP JSON and gRPC; p50/p90/p99 of each, the p50 difference to in-process (target +1.5 ms),
  the median of the paired differences (each transport's call minus the in-process call next to it:
  robust on a loaded machine), and the server's and this process's CPU milliseconds per call (which
  contention inflates far less than wall time). The same for ``yolo-shaped``, a graph with
  YOLOv4-tiny's input and output sizes and almost no compute: the whole round trip is the server's
  and the transport's cost. ``http-binary-uvicorn-bodies`` is the same call to a second server that
  runs uvicorn's own httptools protocol (what the server used before it received infer bodies into one
  buffer, ``deploykit.serve.http_protocol``): the before/after of that change, interleaved in one run.
  ``http-binary-stdlib`` sends the same binary request from ``http.client``: the server's and the
  transport's share without tritonclient's client-side work, whose CPU per call
  (``client_cpu_ms_per_call``) is on every call's path;
  ``http-binary-floor`` and ``grpc-floor`` send tritonclient's requests to a process that answers a canned
  response without reading the request (raw asyncio for HTTP, grpcio's own server for gRPC): the floor
  that no server on these transports can go below; ``http-shm`` and ``grpc-shm`` use the system
  shared-memory extension (the input written into a registered region on every call, the output read
  from another). ``client_malloc`` records ``MALLOC_MMAP_THRESHOLD_`` of this (client) process: glibc's
  default, or what a run under ``MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=268435456`` set;
- ``throughput``: MobileNetV2, 8 concurrent gRPC clients (plain, then with shared memory) with dynamic
  batching against the best
  in-process offline throughput (batch 1 or 8, measured before and after the load, the better kept)
  of the same backend in the same run (target 0.9×); failed requests, p99, the mean batch formed,
  and the server's memory before, during and after;
- ``ray-throughput``: the same MobileNetV2 load over HTTP (binary) against the local server and against
  ``--engine ray --replicas 2`` on a local Ray, in alternating periods of one run: served samples/s of
  each, the ratio to the local server, failures and p50/p99.

- ``peers`` (``--peers``, or ``--parts peers``): deploykit (defaults, tuned, and on Ray Serve over HTTP)
  beside Seldon MLServer and KServe's Python server under the same tritonclient load, each peer in a
  virtual environment the script creates (``serve_peers``): throughput, p50/p99, server CPU per request
  (the whole process tree: Ray's too) and start-up, by transport.

Run: ``.venv/bin/python benchmarks/serve.py [--load-seconds 60] [--rounds 5] [--calls 20]
[--parts startup,overhead,throughput,ray-throughput,peers] [--replicas 2] [--peers]``.
"""

from __future__ import annotations

import argparse
import http.client as http_client
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import deploykit  # noqa: E402
from deploykit.bench.stats import latency_stats  # noqa: E402
from deploykit.recipes import build  # noqa: E402


def emit(record: dict) -> None:
    print(json.dumps(record), flush=True)


# the server as it was before infer bodies were received into one buffer: uvicorn's own httptools protocol
BASELINE_UVICORN = ("httptools", "uvloop")
BASELINE_MODE = "http-binary-uvicorn-bodies"


def start_server(
    models: list[str], *extra: str, uvicorn: tuple[str, str] | None = None
) -> tuple[subprocess.Popen[str], dict[str, int], float, float]:
    """The command on free ports; (process, ports, seconds to ready from launch, server's own start-up seconds).

    ``uvicorn`` (http, loop) replaces the server's choice of uvicorn implementations, to compare in one run.
    """
    started = time.perf_counter()
    launch = ["-m", "deploykit.cli.main"]
    if uvicorn is not None:
        launch = ["-c", "import sys, deploykit.serve.server as s, deploykit.cli.main as m; "
                  f"s.UVICORN_HTTP, s.UVICORN_LOOP = {uvicorn!r}; sys.argv[0] = 'deploykit'; m.main()"]  # fmt: skip
    command = [sys.executable, *launch, "serve", *models, "--http-port", "0", "--grpc-port", "0",
               "--metrics-port", "0", *extra]  # fmt: skip
    process = subprocess.Popen(command, cwd=REPO, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    assert process.stderr is not None
    ports: dict[str, int] = {}
    own = float("nan")
    for line in process.stderr:
        if line.startswith("listening:"):
            ports = {k: int(v) for k, v in re.findall(r"(\w+)=127\.0\.0\.1:(\d+)", line)}
        match = re.match(r"ready: \d+ model\(s\) in ([0-9.]+) s", line)
        if match:
            own = float(match.group(1))
            break
        if line.startswith(("error:", "not ready:")):
            raise SystemExit(f"server failed: {line.strip()}")
    import httpx

    while httpx.get(f"http://127.0.0.1:{ports['http']}/v2/health/ready").status_code != 200:
        time.sleep(0.01)
    ready_s = time.perf_counter() - started
    threading.Thread(target=lambda: [None for _ in process.stderr], daemon=True).start()  # type: ignore[union-attr]
    return process, ports, ready_s, own


def stop_server(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=60)


def cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def yolo_shaped(path: Path) -> Path:
    """(1, 3, 416, 416) → (1, 2535, 85) by a flatten, a slice and a reshape: the payload without the compute."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    constants = {"flat": [1, -1], "start": [0], "end": [2535 * 85], "axes": [1], "shape": [1, 2535, 85]}
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["images", "flat"], ["f"]),
         helper.make_node("Slice", ["f", "start", "end", "axes"], ["s"]),
         helper.make_node("Reshape", ["s", "shape"], ["detections"])],
        "yolo_shaped",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 416, 416])],
        [helper.make_tensor_value_info("detections", TensorProto.FLOAT, [1, 2535, 85])],
        [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in constants.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def floor_server(response: bytes, grpc_response: bytes) -> subprocess.Popen[str]:
    """A server in its own process that answers every HTTP request with ``response`` (a whole HTTP
    response) and every gRPC ModelInfer with ``grpc_response`` (a serialized ModelInferResponse), reading
    neither request: what tritonclient, loopback and grpcio's own server cost with no inference server
    at all. Its ports are ``.port`` (HTTP) and ``.grpc_port``."""
    paths = []
    for data in (response, grpc_response):
        with tempfile.NamedTemporaryFile(delete=False, suffix=".bin") as handle:
            handle.write(data)
        paths.append(handle.name)
    process = subprocess.Popen([sys.executable, __file__, "--floor-server", *paths], stdout=subprocess.PIPE,
                               text=True)  # fmt: skip
    assert process.stdout is not None
    ports = process.stdout.readline().split()
    process.port, process.grpc_port = int(ports[0]), int(ports[1])  # type: ignore[attr-defined]
    for path in paths:
        os.unlink(path)
    return process


def canned_grpc_response(output: np.ndarray, name: str) -> bytes:
    from tritonclient.grpc import service_pb2

    reply = service_pb2.ModelInferResponse(model_name="yolo", model_version="1")
    reply.outputs.add(name=name, datatype="FP32", shape=list(output.shape))
    reply.raw_output_contents.append(output.tobytes())
    return reply.SerializeToString()


def run_floor_server(path: str, grpc_path: str) -> None:
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    import grpc

    grpc_response = Path(grpc_path).read_bytes()
    grpc_server = grpc.server(ThreadPoolExecutor(max_workers=4), options=[("grpc.max_receive_message_length", -1)])
    handler = grpc.unary_unary_rpc_method_handler(lambda request, context: grpc_response)  # bytes in, bytes out
    grpc_server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("inference.GRPCInferenceService", {"ModelInfer": handler}),)
    )
    grpc_port = grpc_server.add_insecure_port("127.0.0.1:0")
    grpc_server.start()

    try:
        import uvloop

        loop = uvloop.new_event_loop()
    except ImportError:
        loop = asyncio.new_event_loop()
    response = Path(path).read_bytes()

    class Canned(asyncio.Protocol):
        """Keeps the header bytes only; counts the body off without storing it."""

        def connection_made(self, transport):
            self.transport, self.head, self.left = transport, b"", None

        def data_received(self, data):
            while data:
                if self.left is None:
                    self.head += data
                    end = self.head.find(b"\r\n\r\n")
                    if end < 0:
                        return
                    length = int(re.search(rb"\r\ncontent-length:\s*(\d+)", self.head[:end].lower()).group(1))
                    data, self.head, self.left = self.head[end + 4 :], b"", length
                taken = min(self.left, len(data))
                self.left -= taken
                data = data[taken:]
                if self.left == 0:
                    self.left = None
                    self.transport.write(response)

    server = loop.run_until_complete(loop.create_server(Canned, "127.0.0.1", 0))
    print(server.sockets[0].getsockname()[1], grpc_port, flush=True)
    loop.run_forever()


def canned_response(output: np.ndarray, name: str) -> bytes:
    header = json.dumps({"model_name": "yolo", "model_version": "1", "outputs": [
        {"name": name, "datatype": "FP32", "shape": list(output.shape),
         "parameters": {"binary_data_size": output.nbytes}}]}).encode()  # fmt: skip
    body = header + output.tobytes()
    return (b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\n"
            + f"inference-header-content-length: {len(header)}\r\ncontent-length: {len(body)}\r\n\r\n".encode()
            + body)  # fmt: skip


def overhead(model: Path, label: str, rounds: int, calls: int) -> None:
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    process, ports, _, _ = start_server([f"yolo={model}"])
    baseline, baseline_ports, _, _ = start_server([f"yolo={model}"], "--grpc-port", "none", uvicorn=BASELINE_UVICORN)
    try:
        x = np.random.default_rng(0).random((1, 3, 416, 416), dtype=np.float32)
        http = httpclient.InferenceServerClient(f"127.0.0.1:{ports['http']}")
        http_baseline = httpclient.InferenceServerClient(f"127.0.0.1:{baseline_ports['http']}")
        grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{ports['grpc']}")
        session = deploykit.load(model)
        ((out_name, out_value),) = session.run({"images": x}).items()
        floor = floor_server(canned_response(out_value, out_name), canned_grpc_response(out_value, out_name))
        http_floor = httpclient.InferenceServerClient(f"127.0.0.1:{floor.port}")
        grpc_floor = grpcclient.InferenceServerClient(f"127.0.0.1:{floor.grpc_port}")
        shm_calls, shm_cleanup = shared_memory_calls(x, out_name, out_value, http, grpc, httpclient, grpcclient)

        def http_call(binary: bool, client=http):
            def call() -> None:
                tensor = httpclient.InferInput("images", [1, 3, 416, 416], "FP32")
                tensor.set_data_from_numpy(x, binary_data=binary)
                client.infer("yolo", [tensor], outputs=[httpclient.InferRequestedOutput("detections", binary)])

            return call

        def grpc_call(client=grpc) -> None:
            tensor = grpcclient.InferInput("images", [1, 3, 416, 416], "FP32")
            tensor.set_data_from_numpy(x)
            client.infer("yolo", [tensor])

        # the same binary-data request from the standard library's http.client: what the server and the
        # transport cost once tritonclient's own client-side work (its CPU is on every call's path) is gone
        raw_header = json.dumps(
            {
                "inputs": [
                    {
                        "name": "images",
                        "shape": [1, 3, 416, 416],
                        "datatype": "FP32",
                        "parameters": {"binary_data_size": x.nbytes},
                    }
                ],
                "outputs": [{"name": "detections", "parameters": {"binary_data": True}}],
            }
        ).encode()
        raw_body = raw_header + x.tobytes()
        raw = http_client.HTTPConnection("127.0.0.1", ports["http"])

        def raw_call() -> None:
            raw.request(
                "POST",
                "/v2/models/yolo/infer",
                body=raw_body,
                headers={"Inference-Header-Content-Length": str(len(raw_header))},
            )
            response = raw.getresponse()
            content = response.read()
            length = int(response.headers["Inference-Header-Content-Length"])
            np.frombuffer(memoryview(content)[length:], np.float32)

        modes = {"in-process": lambda: session.run({"images": x}), "http-binary": http_call(True),
                 "grpc": grpc_call, "http-json": http_call(False),
                 BASELINE_MODE: http_call(True, http_baseline), "http-binary-stdlib": raw_call,
                 "http-binary-floor": http_call(True, http_floor),
                 "grpc-floor": lambda: grpc_call(grpc_floor), **shm_calls}  # fmt: skip
        servers = {mode: baseline if mode == BASELINE_MODE else floor if mode.endswith("floor") else process
                   for mode in modes}  # fmt: skip
        samples: dict[str, list[int]] = {mode: [] for mode in modes}
        for call in modes.values():  # warm-up
            for _ in range(3):
                call()
        order = list(modes)
        rng = np.random.default_rng(3)
        for _ in range(rounds * calls):  # every mode once per step, in a fresh order: drift hits all alike
            rng.shuffle(order)
            for mode in order:
                start = time.perf_counter_ns()
                modes[mode]()
                samples[mode].append(time.perf_counter_ns() - start)
        cpu = {}  # CPU per call, which a loaded machine inflates far less than wall time: server's and client's
        for mode, call in modes.items():
            server_before, client_before = cpu_s(servers[mode].pid), time.process_time()
            for _ in range(calls):
                call()
            cpu[mode] = ((cpu_s(servers[mode].pid) - server_before) * 1e3 / calls,
                         (time.process_time() - client_before) * 1e3 / calls)  # fmt: skip
        stats = {mode: latency_stats(values) for mode, values in samples.items()}
        base = stats["in-process"].p50_ms
        uvicorn_choice = uvicorn_implementations()
        for mode, value in stats.items():
            paired = np.median(np.subtract(samples[mode], samples["in-process"])) / 1e6
            emit({"benchmark": "overhead", "model": label, "batch": 1, "mode": mode, "count": value.count,
                  "p50_ms": round(value.p50_ms, 3), "p90_ms": round(value.p90_ms, 3), "p99_ms": round(value.p99_ms, 3),
                  "cov": round(value.cov, 3), "p50_over_in_process_ms": round(value.p50_ms - base, 3),
                  "paired_median_over_in_process_ms": round(float(paired), 3),
                  "server_cpu_ms_per_call": round(cpu[mode][0], 2), "client_cpu_ms_per_call": round(cpu[mode][1], 2),
                  "uvicorn": "/".join(BASELINE_UVICORN) if mode == BASELINE_MODE else uvicorn_choice,
                  "target_ms": 1.5 if mode in ("http-binary", "grpc") else None,
                  "client_malloc": os.environ.get("MALLOC_MMAP_THRESHOLD_", "glibc default")})  # fmt: skip
        # the target: overhead over in-process (served p50 minus in-process p50) at most the floor
        # (tritonclient against a server that does nothing) plus 1.0 ms, both from this run; the verdict
        # comes from a bootstrap interval of that difference, not from its point estimate
        for mode, floor_mode in (("http-binary", "http-binary-floor"), ("grpc", "grpc-floor")):
            over = stats[mode].p50_ms - base
            floor_ms = stats[floor_mode].p50_ms
            low, high = over_floor_interval(samples[mode], samples["in-process"], samples[floor_mode])
            verdict = "met" if high <= 1.0 else "not met" if low > 1.0 else "undecided (the interval holds 1.0)"
            emit({"benchmark": "overhead-target", "model": label, "mode": mode, "overhead_ms": round(over, 3),
                  "floor_ms": round(floor_ms, 3), "over_floor_ms": round(over - floor_ms, 3),
                  "over_floor_ms_95ci": [round(low, 3), round(high, 3)],
                  "served_minus_floor_ms": round(stats[mode].p50_ms - floor_ms, 3), "target_over_floor_ms": 1.0,
                  "verdict": verdict, "calls": stats[mode].count})  # fmt: skip
        session.close()
        shm_cleanup()
        floor.kill()
    finally:
        stop_server(process)
        stop_server(baseline)


def over_floor_interval(served: list[int], in_process: list[int], floor: list[int], draws: int = 2000) -> tuple:
    """95 % bootstrap interval (ms) of p50(served) − p50(in-process) − p50(floor), each resampled on its own."""
    rng = np.random.default_rng(7)

    def medians(values: list[int]) -> np.ndarray:
        array = np.asarray(values, np.float64) / 1e6
        return np.median(rng.choice(array, (draws, array.size)), axis=1)

    differences = medians(served) - medians(in_process) - medians(floor)
    return float(np.percentile(differences, 2.5)), float(np.percentile(differences, 97.5))


def shared_memory_calls(x, out_name, out_value, http, grpc, httpclient, grpcclient):
    """``http-shm`` and ``grpc-shm``: the input written into a registered region on every call (a new
    frame each time) and the output read from another, as a client on the same machine would."""
    import tritonclient.utils.shared_memory as shm

    key = f"dk-bench-{os.getpid()}"
    handles = {"in": shm.create_shared_memory_region("in", f"/{key}-in", x.nbytes),
               "out": shm.create_shared_memory_region("out", f"/{key}-out", out_value.nbytes)}  # fmt: skip
    # registered once over HTTP: the gRPC front end of the same server sees the same regions
    http.register_system_shared_memory("in", f"/{key}-in", x.nbytes)
    http.register_system_shared_memory("out", f"/{key}-out", out_value.nbytes)

    def call(client, module):
        def run() -> None:
            shm.set_shared_memory_region(handles["in"], [x])
            tensor = module.InferInput("images", list(x.shape), "FP32")
            tensor.set_shared_memory("in", x.nbytes)
            output = module.InferRequestedOutput(out_name)
            output.set_shared_memory("out", out_value.nbytes)
            client.infer("yolo", [tensor], outputs=[output])
            shm.get_contents_as_numpy(handles["out"], np.float32, list(out_value.shape))

        return run

    def cleanup() -> None:
        http.unregister_system_shared_memory()
        for handle in handles.values():
            shm.destroy_shared_memory_region(handle)

    return {"http-shm": call(http, httpclient), "grpc-shm": call(grpc, grpcclient)}, cleanup


def uvicorn_implementations() -> str:
    """What uvicorn's "auto" picks here: httptools and uvloop where installed."""
    import importlib.util

    http = "httptools+whole-body-infer" if importlib.util.find_spec("httptools") else "h11"
    return f"{http}/{'uvloop' if importlib.util.find_spec('uvloop') else 'asyncio'}"


def _run_until(session, x: np.ndarray, stop_at: float, done: list[int], index: int) -> None:
    while time.perf_counter() < stop_at:
        session.run({"images": x})
        done[index] += len(x)


def offline_throughput(model: Path, seconds: float) -> tuple[float, str]:
    """The best in-process throughput (samples/s) and how it was reached: one session (the runtime's
    default threads) at batch 1 or 8, or two single-thread sessions side by side at batch 1 (what
    ``--instances 2 -O threads=1`` serves)."""
    best = (0.0, "")
    for sessions, threads, batch in ((1, 0, 1), (1, 0, 8), (2, 1, 1)):
        opened = [deploykit.load(model, threads=threads) for _ in range(sessions)]
        x = np.random.default_rng(1).random((batch, 3, 224, 224), dtype=np.float32)
        done = [0] * sessions
        for session in opened:
            session.run({"images": x})
        stop_at = time.perf_counter() + seconds / 3
        started = time.perf_counter()
        workers = [threading.Thread(target=_run_until, args=(opened[i], x, stop_at, done, i)) for i in range(sessions)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        rate = sum(done) / (time.perf_counter() - started)
        for session in opened:
            session.close()
        label = f"batch {batch}" if sessions == 1 else f"{sessions} sessions × {threads} thread, batch {batch}"
        best = max(best, (rate, label))
    return best


def throughput(mobilenet: Path, seconds: float, clients: int, transport: str = "grpc",
               serving: tuple[str, ...] = ("--max-batch", "8", "--max-queue-delay", "2ms")) -> None:  # fmt: skip
    import httpx
    import tritonclient.grpc as grpcclient
    from prometheus_client.parser import text_string_to_metric_families

    offline_sps, offline_batch = offline_throughput(mobilenet, min(seconds, 15.0))
    process, ports, _, _ = start_server([f"mobilenet={mobilenet}"], *serving)
    try:
        x = np.random.default_rng(2).random((1, 3, 224, 224), dtype=np.float32)
        latencies: list[int] = []
        failures: list[str] = []
        lock = threading.Lock()
        rss_before = rss_mib(process.pid)
        stop_at = time.perf_counter() + seconds

        def client(index: int) -> None:
            grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{ports['grpc']}")
            if transport == "grpc-shm":  # each client its own input and output regions
                import tritonclient.utils.shared_memory as shm

                key = f"dk-bench-{os.getpid()}-{index}"
                handles = [shm.create_shared_memory_region(f"in{index}", f"/{key}-in", x.nbytes),
                           shm.create_shared_memory_region(f"out{index}", f"/{key}-out", 4000)]  # fmt: skip
                grpc.register_system_shared_memory(f"in{index}", f"/{key}-in", x.nbytes)
                grpc.register_system_shared_memory(f"out{index}", f"/{key}-out", 4000)
            while time.perf_counter() < stop_at:
                tensor = grpcclient.InferInput("images", [1, 3, 224, 224], "FP32")
                outputs = None
                if transport == "grpc-shm":
                    shm.set_shared_memory_region(handles[0], [x])
                    tensor.set_shared_memory(f"in{index}", x.nbytes)
                    outputs = [grpcclient.InferRequestedOutput(output_name)]
                    outputs[0].set_shared_memory(f"out{index}", 4000)
                else:
                    tensor.set_data_from_numpy(x)
                start = time.perf_counter_ns()
                try:
                    grpc.infer("mobilenet", [tensor], outputs=outputs, client_timeout=30)
                    if transport == "grpc-shm":
                        shm.get_contents_as_numpy(handles[1], np.float32, [1, 1000])
                except Exception as exc:
                    with lock:
                        failures.append(f"{type(exc).__name__}: {exc}")
                    continue
                with lock:
                    latencies.append(time.perf_counter_ns() - start)
            if transport == "grpc-shm":
                for name in (f"in{index}", f"out{index}"):
                    grpc.unregister_system_shared_memory(name)
                for handle in handles:
                    shm.destroy_shared_memory_region(handle)

        with deploykit.load(mobilenet) as session:
            output_name = next(iter(session.outputs))
        start = time.perf_counter()
        threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
        for thread in threads:
            thread.start()
        rss_samples = []  # the server's memory every tenth of the run: growth shows as a rising series
        while any(thread.is_alive() for thread in threads):
            time.sleep(seconds / 10)
            rss_samples.append(round(rss_mib(process.pid), 1))
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - start
        rss_after = rss_mib(process.pid)
        after_sps, after_batch = offline_throughput(mobilenet, min(seconds, 15.0))  # the machine may have changed
        if after_sps > offline_sps:
            offline_sps, offline_batch = after_sps, after_batch
        text = httpx.get(f"http://127.0.0.1:{ports['metrics']}/metrics").text
        batches = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "deploykit_inference_batch_size_sum":
                    batches["rows"] = sample.value
                if sample.name == "deploykit_inference_batch_size_count":
                    batches["passes"] = sample.value
        stats = latency_stats(latencies)
        served_sps = len(latencies) / elapsed
        emit({"benchmark": "throughput", "model": "mobilenet_v2", "transport": transport, "serve": " ".join(serving),
              "clients": clients,
              "seconds": round(elapsed, 1),
              "requests": len(latencies), "failed": len(failures), "served_sps": round(served_sps, 2),
              "offline_sps": round(offline_sps, 2), "offline_config": offline_batch,
              "ratio": round(served_sps / offline_sps, 3), "target_ratio": 0.9,
              "mean_batch": round(batches.get("rows", 0) / max(1.0, batches.get("passes", 1)), 2),
              "p50_ms": round(stats.p50_ms, 2), "p99_ms": round(stats.p99_ms, 2),
              "rss_mib_before": round(rss_before, 1), "rss_mib_after": round(rss_after, 1),
              "rss_mib_during": rss_samples,
              "first_failure": failures[0] if failures else None})  # fmt: skip
    finally:
        stop_server(process)


def http_load(port: int, x: np.ndarray, seconds: float, clients: int) -> tuple[list[int], list[str], float]:
    """``clients`` tritonclient HTTP (binary) loops on MobileNetV2 for ``seconds``: latencies, failures, elapsed."""
    import tritonclient.http as httpclient

    latencies: list[int] = []
    failures: list[str] = []
    lock = threading.Lock()
    stop_at = time.perf_counter() + seconds

    def client() -> None:
        http = httpclient.InferenceServerClient(f"127.0.0.1:{port}", network_timeout=60)
        while time.perf_counter() < stop_at:
            tensor = httpclient.InferInput("images", list(x.shape), "FP32")
            tensor.set_data_from_numpy(x)
            start = time.perf_counter_ns()
            try:
                http.infer("mobilenet", [tensor])
            except Exception as exc:
                with lock:
                    failures.append(f"{type(exc).__name__}: {exc}")
                continue
            with lock:
                latencies.append(time.perf_counter_ns() - start)

    start = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies, failures, time.perf_counter() - start


def ray_throughput(mobilenet: Path, seconds: float, clients: int, replicas: int) -> None:
    """The local server against ``--engine ray --replicas N`` on a local Ray, HTTP clients on MobileNetV2,
    in alternating periods of one run (each engine gets two periods of ``seconds / 2``)."""
    from deploykit.serve import BatchPolicy, RaySettings, ServedModel, ServerSettings
    from deploykit.serve.server import create_server

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    process, ports, _, _ = start_server([f"mobilenet={mobilenet}"], "--max-batch", "8", "--max-queue-delay", "2ms")
    ray_server = create_server(
        [ServedModel.from_path(mobilenet, name="mobilenet")],
        BatchPolicy(max_batch=8, max_queue_delay_ms=2),
        ServerSettings(http_port=0, grpc_port=None, metrics_port=None),
        engine="ray",
        ray=RaySettings(replicas=replicas, replica_cpus=0.5),
    )
    try:
        ray_server.start()
        x = np.random.default_rng(2).random((1, 3, 224, 224), dtype=np.float32)
        results: dict[str, list] = {"local": [[], [], 0.0], "ray": [[], [], 0.0]}
        for engine in ("local", "ray", "ray", "local"):
            port = ports["http"] if engine == "local" else ray_server.http_port
            latencies, failures, elapsed = http_load(port, x, seconds / 2, clients)
            results[engine][0] += latencies
            results[engine][1] += failures
            results[engine][2] += elapsed
        served = {engine: len(r[0]) / r[2] for engine, r in results.items()}
        for engine, (latencies, failures, elapsed) in results.items():
            stats = latency_stats(latencies)
            emit({"benchmark": "ray-throughput", "model": "mobilenet_v2", "engine": engine,
                  "replicas": replicas if engine == "ray" else 1, "clients": clients, "protocol": "http-binary",
                  "seconds": round(elapsed, 1), "requests": len(latencies), "failed": len(failures),
                  "served_sps": round(served[engine], 2), "ratio_to_local": round(served[engine] / served["local"], 3),
                  "p50_ms": round(stats.p50_ms, 2), "p99_ms": round(stats.p99_ms, 2),
                  "first_failure": failures[0] if failures else None})  # fmt: skip
    finally:
        ray_server.stop()
        stop_server(process)


def startup(mobilenet: Path, yolo: Path) -> None:
    process, _, ready_s, own_s = start_server([f"mobilenet={mobilenet}", f"yolo={yolo}"])
    stop_server(process)
    emit({"benchmark": "startup", "models": 2, "launch_to_ready_s": round(ready_s, 2),
          "server_start_to_ready_s": own_s, "target_s": 3.0})  # fmt: skip


def main() -> None:
    if sys.argv[1:2] == ["--floor-server"]:
        run_floor_server(sys.argv[2], sys.argv[3])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--load-seconds", type=float, default=20.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--replicas", type=int, default=2, help="ray-throughput: replicas of the Ray Serve deployment")
    parser.add_argument("--parts", default="startup,overhead,throughput,ray-throughput",
                        help="which measurements, comma-separated")  # fmt: skip
    parser.add_argument("--peers", action="store_true", help="only the peers: MLServer and KServe beside deploykit")
    args = parser.parse_args()
    parts = {"peers"} if args.peers else set(args.parts.split(","))
    with tempfile.TemporaryDirectory() as folder:
        mobilenet, yolo = Path(folder) / "mobilenet_v2.onnx", Path(folder) / "yolov4-tiny.onnx"
        build("mobilenet_v2", mobilenet, verify_backends=())
        if parts - {"peers", "throughput", "ray-throughput"}:
            build("yolov4-tiny", yolo, verify_backends=())
        backend = deploykit.get_backend("onnxruntime").version()
        emit({"benchmark": "machine", "cpus": os.cpu_count(), "load_1min": os.getloadavg()[0], "backend": backend})
        if "startup" in parts:
            startup(mobilenet, yolo)
        if "overhead" in parts:
            overhead(yolo_shaped(Path(folder) / "yolo_shaped.onnx"), "yolo-shaped", args.rounds, args.calls)
            overhead(yolo, "yolov4-tiny", args.rounds, args.calls)
        if "throughput" in parts:
            for transport in ("grpc", "grpc-shm"):
                throughput(mobilenet, args.load_seconds, args.clients, transport)
            # this CPU gains nothing from batching MobileNetV2 (offline batch 8 is no faster than batch 1):
            # two single-thread sessions taking requests as they come
            throughput(mobilenet, args.load_seconds, args.clients, "grpc-shm",
                       ("--instances", "2", "-O", "threads=1", "--max-batch", "1"))  # fmt: skip
        if "ray-throughput" in parts:
            ray_throughput(mobilenet, args.load_seconds, args.clients, args.replicas)
        if "peers" in parts:
            from serve_peers import peers

            peers(mobilenet, args.load_seconds, args.clients, args.rounds, emit, cpu_s)


if __name__ == "__main__":
    main()
