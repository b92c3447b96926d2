"""A change to the HTTP server, judged by the server's CPU per infer call: this checkout against a candidate.

Two ``deploykit serve`` processes run side by side on the ``yolo-shaped`` model (2 MB in, 860 KB out,
almost no compute; built by ``benchmarks/serve.py``): ``current`` from this checkout and ``candidate``
from another one (``--candidate DIR``, e.g. ``git archive BRANCH | tar -x -C DIR``), both on this
checkout's virtual environment. Optionally (``--floor``) a third process answers tritonclient's request
with a canned reply without reading it (``serve.py``'s floor). Blocks of sequential tritonclient HTTP
binary calls alternate between the servers (in a fresh order each round); each block records the server
process's CPU time (user + system, from ``/proc``) per call, which a loaded machine inflates far less
than wall time. Prints JSON lines: the machine's load, one line per block, a summary per server (median,
min and max over its blocks) and the per-round differences candidate − current with their median and a
95 % bootstrap interval of it.

Run: ``.venv/bin/python benchmarks/http_path.py --candidate DIR [--rounds 8] [--calls 300] [--floor]``.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from serve import REPO, canned_grpc_response, canned_response, cpu_s, emit, floor_server, yolo_shaped

# the server refuses to start unless deploykit comes from the checkout it is meant to measure
CHECK_AND_SERVE = """import sys, pathlib, deploykit, deploykit.cli.main as main
where = pathlib.Path(deploykit.__file__).resolve().parents[1]
if where != pathlib.Path(sys.argv[1]).resolve():
    sys.exit(f"error: deploykit imported from {where}, not {sys.argv[1]}")
sys.argv[:2] = ["deploykit"]
main.main()
"""


def revision(checkout: Path) -> str:
    done = subprocess.run(["git", "-C", str(checkout), "describe", "--always", "--dirty"], capture_output=True,
                          text=True)  # fmt: skip
    return done.stdout.strip() or "not a git checkout"


def start(model: Path, checkout: Path) -> tuple[subprocess.Popen[str], int]:
    """``deploykit serve`` (HTTP only) from ``checkout``'s sources; (process, HTTP port) once ready."""
    command = [sys.executable, "-c", CHECK_AND_SERVE, str(checkout), "serve", f"yolo={model}", "--http-port", "0",
               "--grpc-port", "none", "--metrics-port", "none"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    process = subprocess.Popen(command, cwd=checkout, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                               text=True)  # fmt: skip
    assert process.stderr is not None
    port = 0
    for line in process.stderr:
        found = re.search(r"http=127\.0\.0\.1:(\d+)", line)
        if found:
            port = int(found.group(1))
        if line.startswith("ready:"):
            break
        if line.startswith(("error:", "not ready:")):
            raise SystemExit(f"server failed: {line.strip()}")
    threading.Thread(target=lambda: [None for _ in process.stderr], daemon=True).start()  # type: ignore[union-attr]
    return process, port


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidate", type=Path, required=True, help="a checkout of deploykit to compare")
    parser.add_argument("--rounds", type=int, default=8, help="blocks per server")
    parser.add_argument("--calls", type=int, default=300, help="sequential calls per block")
    parser.add_argument("--floor", action="store_true", help="also measure serve.py's floor server")
    args = parser.parse_args()
    import tritonclient.http as httpclient

    import deploykit

    emit({"benchmark": "http-path-machine", "cpus": os.cpu_count(), "load_1min": os.getloadavg()[0],
          "loadavg": Path("/proc/loadavg").read_text().strip(), "current": revision(REPO),
          "candidate": f"{args.candidate} {revision(args.candidate)}"})  # fmt: skip
    folder = Path(tempfile.mkdtemp(prefix="http-path-"))
    model = yolo_shaped(folder / "yolo_shaped.onnx")
    x = np.random.default_rng(0).random((1, 3, 416, 416), dtype=np.float32)
    expected = deploykit.load(model).run({"images": x})["detections"]
    servers = {"current": start(model, REPO), "candidate": start(model, args.candidate)}
    if args.floor:
        floor = floor_server(canned_response(expected, "detections"), canned_grpc_response(expected, "detections"))
        servers["floor"] = (floor, floor.port)  # type: ignore[attr-defined]
    try:
        clients = {form: httpclient.InferenceServerClient(f"127.0.0.1:{port}") for form, (_, port) in servers.items()}

        def call(form: str) -> np.ndarray:
            tensor = httpclient.InferInput("images", [1, 3, 416, 416], "FP32")
            tensor.set_data_from_numpy(x, binary_data=True)
            wanted = [httpclient.InferRequestedOutput("detections", binary_data=True)]
            return clients[form].infer("yolo", [tensor], outputs=wanted).as_numpy("detections")

        for form in servers:  # warm-up, and the answer checked once per server
            for _ in range(20):
                answer = call(form)
            if not np.array_equal(answer, expected):
                raise SystemExit(f"{form}: the answer differs from the in-process session's")
        samples: dict[str, list[float]] = {form: [] for form in servers}
        order = list(servers)
        rng = np.random.default_rng(7)
        for round_index in range(args.rounds):
            rng.shuffle(order)
            for form in order:
                pid = servers[form][0].pid
                server_before, client_before, wall_before = cpu_s(pid), time.process_time(), time.perf_counter()
                for _ in range(args.calls):
                    call(form)
                server_ms = (cpu_s(pid) - server_before) * 1e3 / args.calls
                samples[form].append(server_ms)
                emit({"benchmark": "http-path-block", "round": round_index, "server": form, "calls": args.calls,
                      "server_cpu_ms_per_call": round(server_ms, 3),
                      "client_cpu_ms_per_call": round((time.process_time() - client_before) * 1e3 / args.calls, 3),
                      "wall_ms_per_call": round((time.perf_counter() - wall_before) * 1e3 / args.calls, 3),
                      "load_1min": os.getloadavg()[0]})  # fmt: skip
        report(samples, args)
    finally:
        for process, _ in servers.values():
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)


def report(samples: dict[str, list[float]], args: argparse.Namespace) -> None:
    for form, values in samples.items():
        emit({"benchmark": "http-path", "server": form, "blocks": len(values), "calls_per_block": args.calls,
              "server_cpu_ms_per_call_median": round(statistics.median(values), 3),
              "min": round(min(values), 3), "max": round(max(values), 3)})  # fmt: skip
    differences = np.array([new - old for new, old in zip(samples["candidate"], samples["current"], strict=True)])
    # a 95 % bootstrap interval of the median paired difference: "cheaper" only when it excludes zero
    resampled = np.median(np.random.default_rng(0).choice(differences, (20000, len(differences))), axis=1)
    low, high = np.percentile(resampled, [2.5, 97.5])
    emit({"benchmark": "http-path-summary",
          "candidate_minus_current_ms_per_call_median": round(float(np.median(differences)), 3),
          "interval_95": [round(float(low), 3), round(float(high), 3)],
          "per_round": [round(float(d), 3) for d in differences],
          "rounds_candidate_cheaper": int((differences < 0).sum()), "rounds": len(differences),
          "cpu_tick_ms_per_call": round(1e3 / os.sysconf("SC_CLK_TCK") / args.calls, 4),
          "load_1min_after": os.getloadavg()[0]})  # fmt: skip


if __name__ == "__main__":
    main()
