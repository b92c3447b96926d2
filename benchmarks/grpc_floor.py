"""What Python grpcio itself costs per KServe v2 ``ModelInfer``, with no inference at all.

Each *form* is a server in its own process that answers ``inference.GRPCInferenceService/ModelInfer``
with a canned, valid ``ModelInferResponse`` of MobileNetV2's shape (one FP32 output of (1, 1000)),
bound to 127.0.0.1. The same load as ``serve_peers`` drives each in turn (``--clients`` tritonclient
gRPC clients, one (1, 3, 224, 224) float32 request each, ~600 KB), rounds interleaved across forms.
Per form it records requests/s, the server's CPU per request (its process tree's CPU time / requests)
and the clients' CPU per request (this process):

- ``sync-servicer``: ``grpc.server`` with a thread pool and tritonclient's generated servicer
  (``add_GRPCInferenceServiceServicer_to_server``): protobuf parses the request, serializes the reply;
- ``sync-raw``: ``grpc.server`` with a generic handler and no (de)serializer: bytes in, canned bytes out;
- ``sync-deploykit-read``: ``grpc.server`` with deploykit's own ModelInfer reader and reply writer
  (``grpc_service._Servicer.read_infer``: raw inputs kept as views, the rest parsed; ``_InferReply``
  joined once), answering a canned reply: deploykit's parse and reply without its model runner;
- ``aio-servicer``: ``grpc.aio`` with the generated servicer (KServe's form);
- ``aio-raw``: ``grpc.aio`` with a generic handler, bytes in, canned bytes out.

With the model (MobileNetV2 on one single-thread ONNX Runtime session, as many gRPC threads as CPUs):

- ``sync-servicer-ort``: the generated servicer, the input read from the parsed message;
- ``sync-raw-ort``: a generic handler, the input found in the raw bytes (``v2_messages.split_field``);
- ``deploykit-tuned``: ``deploykit serve`` with ``serve_peers.TUNED_OPTIONS``;
- ``kserve``: KServe's Python server as ``serve_peers`` runs it (its environment must exist): every
  row's ``ratio_to_kserve`` is its requests/s over KServe's in this run.

``in-process`` runs the model in this process with one thread, one request at a time: its CPU per
request is the model's compute, so a model row's server CPU minus ``in-process`` is its front end
(``front_end_cpu_ms_per_request``), and deploykit's minus the cheapest form is what deploykit adds over
bare grpcio.

Run: ``.venv/bin/python benchmarks/grpc_floor.py [--load-seconds 10] [--rounds 2] [--clients 8]``.
Prints JSON lines.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

FORMS = ("sync-servicer", "sync-raw", "sync-deploykit-read", "aio-servicer", "aio-raw")
# the same minimal servers running the model: what the cheapest Python server with inference reaches
MODEL_FORMS = ("sync-servicer-ort", "sync-raw-ort")
SERVICE = "inference.GRPCInferenceService"
# as deploykit's server: a pool larger than the clients, the receive limit lifted
THREADS = 32
OPTIONS = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]


def canned_reply() -> bytes:
    """A ModelInferResponse as a server of MobileNetV2 sends it: one FP32 (1, 1000) output."""
    import numpy as np
    from tritonclient.grpc import service_pb2

    reply = service_pb2.ModelInferResponse(model_name="mobilenet", model_version="1")
    reply.outputs.add(name="output", datatype="FP32", shape=[1, 1000])
    reply.raw_output_contents.append(np.zeros((1, 1000), np.float32).tobytes())
    return bytes(reply.SerializeToString())


def serve(form: str, model: str | None = None) -> None:
    """Serve ``form`` on a free loopback port, print the port, block until killed."""
    import grpc

    data = canned_reply()
    if form in MODEL_FORMS:
        _serve_model(form, str(model))
        return
    if form.startswith("aio"):
        import asyncio

        asyncio.run(_serve_aio(form, data))
        return
    from concurrent.futures import ThreadPoolExecutor

    server = grpc.server(ThreadPoolExecutor(max_workers=THREADS), options=OPTIONS)
    if form == "sync-servicer":
        from tritonclient.grpc import service_pb2, service_pb2_grpc

        reply = service_pb2.ModelInferResponse.FromString(data)

        class Servicer(service_pb2_grpc.GRPCInferenceServiceServicer):
            def ModelInfer(self, request, context):
                return reply

        service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(Servicer(), server)
    elif form == "sync-raw":
        handler = grpc.unary_unary_rpc_method_handler(lambda request, context: data)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {"ModelInfer": handler}),))
    elif form == "sync-deploykit-read":
        from deploykit.serve.grpc_service import _InferReply, _Servicer
        from deploykit.serve.v2_messages import messages

        pb = messages()
        reader = _Servicer(None, pb, None)  # type: ignore[arg-type]  (only read_infer is called)
        output = memoryview(bytes(4000))

        def infer(received, context):
            message = pb["ModelInferResponse"](model_name="mobilenet", model_version="1", id=received.message.id)
            message.outputs.add(name="output", datatype="FP32", shape=[1, 1000])
            assert received.raw and len(received.raw[0]) == 3 * 224 * 224 * 4
            return _InferReply(message, [output])

        handler = grpc.unary_unary_rpc_method_handler(
            infer, request_deserializer=reader.read_infer, response_serializer=_InferReply.serialize
        )
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {"ModelInfer": handler}),))
    else:
        raise SystemExit(f"unknown form {form!r}; expected one of {', '.join(FORMS)}")
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    server.wait_for_termination()


def _serve_model(form: str, model: str) -> None:
    """A minimal server with inference: one single-thread ONNX Runtime session, as many gRPC worker
    threads as CPUs (grpcio holds the other requests), the input's bytes as an array without a copy,
    the output's bytes in ``raw_output_contents``."""
    from concurrent.futures import ThreadPoolExecutor

    import grpc
    import numpy as np
    import onnxruntime as ort
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    input_name = session.get_inputs()[0].name
    server = grpc.server(ThreadPoolExecutor(max_workers=os.cpu_count() or 1), options=OPTIONS)

    def reply(data: bytes | memoryview) -> bytes:
        (output,) = session.run(None, {input_name: np.frombuffer(data, np.float32).reshape(1, 3, 224, 224)})
        message = service_pb2.ModelInferResponse(model_name="mobilenet", model_version="1")
        message.outputs.add(name="output", datatype="FP32", shape=list(output.shape))
        message.raw_output_contents.append(output.tobytes())
        return message

    if form == "sync-servicer-ort":

        class Servicer(service_pb2_grpc.GRPCInferenceServiceServicer):
            def ModelInfer(self, request, context):
                return reply(request.raw_input_contents[0])

        service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(Servicer(), server)
    else:
        from deploykit.serve.v2_messages import RAW_INPUT_FIELD, split_field

        def infer(request: bytes, context):
            return reply(split_field(request, RAW_INPUT_FIELD)[1][0]).SerializeToString()

        handler = grpc.unary_unary_rpc_method_handler(infer)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {"ModelInfer": handler}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    server.wait_for_termination()


async def _serve_aio(form: str, data: bytes) -> None:
    import grpc

    server = grpc.aio.server(options=OPTIONS)
    if form == "aio-servicer":
        from tritonclient.grpc import service_pb2, service_pb2_grpc

        reply = service_pb2.ModelInferResponse.FromString(data)

        class Servicer(service_pb2_grpc.GRPCInferenceServiceServicer):
            async def ModelInfer(self, request, context):
                return reply

        service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(Servicer(), server)
    elif form == "aio-raw":

        async def infer(request, context):
            return data

        handler = grpc.unary_unary_rpc_method_handler(infer)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {"ModelInfer": handler}),))
    else:
        raise SystemExit(f"unknown form {form!r}; expected one of {', '.join(FORMS)}")
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(port, flush=True)
    await server.wait_for_termination()


def start_form(form: str, model: Path) -> tuple[subprocess.Popen[str], dict[str, int]]:
    process = subprocess.Popen(
        [sys.executable, __file__, "--serve", form, str(model)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.strip():
        raise SystemExit(f"form {form} did not start (exit {process.wait()})")
    return process, {"grpc": int(line)}


def in_process_cpu_ms(model: Path, calls: int = 200) -> float:
    """The model's compute: CPU ms per request of one single-thread ONNX Runtime session here."""
    import numpy as np
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(2).random((1, 3, 224, 224), dtype=np.float32)
    name = session.get_inputs()[0].name
    for _ in range(10):
        session.run(None, {name: x})
    before = time.process_time()
    for _ in range(calls):
        session.run(None, {name: x})
    return (time.process_time() - before) * 1e3 / calls


def start(form: str, mobilenet: Path, folder: Path) -> tuple[subprocess.Popen, dict[str, int]]:
    from serve_peers import TUNED_OPTIONS, start_deploykit, start_peer

    if form == "deploykit-tuned":
        process, ports, _ = start_deploykit(mobilenet, folder, TUNED_OPTIONS)
    elif form == "kserve":
        process, ports, _ = start_peer(form, mobilenet, folder)
    else:
        process, ports = start_form(form, mobilenet)
    return process, ports


def measure(forms: list[str], mobilenet: Path, folder: Path, args: argparse.Namespace) -> dict[str, dict]:
    """Every form in turn per round (the order rotating), each under the same load: the totals per form."""
    from serve import cpu_s
    from serve_peers import load, stop, tree_cpu_s

    totals = {form: {"requests": 0, "failed": 0, "seconds": 0.0, "cpu_s": 0.0, "client_cpu_s": 0.0} for form in forms}
    for round_index in range(args.rounds):
        shift = round_index % len(forms)
        for form in forms[shift:] + forms[:shift]:
            process, ports = start(form, mobilenet, folder)
            try:
                load(ports, "grpc", True, 1.0, args.clients)  # warm-up: connections, pools, caches
                before, client_before = tree_cpu_s(process.pid, cpu_s), time.process_time()
                started = time.perf_counter()
                latencies, failed = load(ports, "grpc", True, args.load_seconds, args.clients)
                row = totals[form]
                row["seconds"] += time.perf_counter() - started
                row["cpu_s"] += tree_cpu_s(process.pid, cpu_s) - before
                row["client_cpu_s"] += time.process_time() - client_before
                row["requests"] += len(latencies)
                row["failed"] += failed
            finally:
                stop(process)
    return totals


def report(totals: dict[str, dict], compute_ms: float, args: argparse.Namespace) -> None:
    """One line per form (requests/s, CPU per request, the ratio to KServe's rate), then the summary."""
    from serve import emit

    server_ms = {}
    rates = {form: row["requests"] / row["seconds"] for form, row in totals.items()}
    for form, row in totals.items():
        requests = max(1, row["requests"])
        server_ms[form] = 1e3 * row["cpu_s"] / requests
        record = {
            "benchmark": "grpc-floor",
            "form": form,
            "clients": args.clients,
            "rounds": args.rounds,
            "seconds": round(row["seconds"], 1),
            "requests": row["requests"],
            "failed": row["failed"],
            "requests_per_s": round(rates[form], 1),
            "server_cpu_ms_per_request": round(server_ms[form], 3),
            "client_cpu_ms_per_request": round(1e3 * row["client_cpu_s"] / requests, 3),
        }
        if rates.get("kserve"):
            record["ratio_to_kserve"] = round(rates[form] / rates["kserve"], 2)
        if form not in FORMS:
            record["front_end_cpu_ms_per_request"] = round(server_ms[form] - compute_ms, 3)
        emit(record)
    floors = {form: ms for form, ms in server_ms.items() if form in FORMS}
    minimal = {form: ms - compute_ms for form, ms in server_ms.items() if form in MODEL_FORMS}
    if "deploykit-tuned" not in server_ms or not floors or not minimal:
        return
    deploykit_ms = server_ms["deploykit-tuned"] - compute_ms
    cheapest, cheapest_model = min(floors, key=floors.__getitem__), min(minimal, key=minimal.__getitem__)
    emit(
        {
            "benchmark": "grpc-floor-summary",
            "cheapest_form": cheapest,
            "floor_cpu_ms_per_request": round(floors[cheapest], 3),
            "cheapest_model_form": cheapest_model,
            "minimal_front_end_cpu_ms_per_request": round(minimal[cheapest_model], 3),
            "deploykit_front_end_cpu_ms_per_request": round(deploykit_ms, 3),
            "deploykit_over_floor_cpu_ms_per_request": round(deploykit_ms - floors[cheapest], 3),
            "deploykit_over_minimal_cpu_ms_per_request": round(deploykit_ms - minimal[cheapest_model], 3),
        }
    )


def main() -> None:
    if sys.argv[1:2] == ["--serve"]:
        serve(sys.argv[2], sys.argv[3])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--load-seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--forms", default=",".join((*FORMS, *MODEL_FORMS, "deploykit-tuned", "kserve")))
    args = parser.parse_args()

    from serve import emit

    from deploykit.recipes import build

    emit({"benchmark": "grpc-floor-machine", "cpus": os.cpu_count(), "load_1min": os.getloadavg()[0]})
    with tempfile.TemporaryDirectory() as folder:
        mobilenet = Path(folder) / "mobilenet_v2.onnx"
        build("mobilenet_v2", mobilenet, verify_backends=())
        compute = [in_process_cpu_ms(mobilenet)]
        totals = measure(args.forms.split(","), mobilenet, Path(folder), args)
        compute.append(in_process_cpu_ms(mobilenet))
    samples = [round(c, 3) for c in compute]
    emit(
        {"benchmark": "grpc-floor", "form": "in-process", "server_cpu_ms_per_request": min(samples), "samples": samples}
    )
    report(totals, min(compute), args)
    emit({"benchmark": "grpc-floor-machine-after", "load_1min": os.getloadavg()[0]})


if __name__ == "__main__":
    main()
