"""Nothing deploykit runs calls home: every socket connection and host lookup of its commands and their
workers is audited (a ``sys.addaudithook`` installed through ``sitecustomize`` in every Python process
they start), and anything that is not loopback is refused before a packet is sent and recorded."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import onnx
import pytest

from tests.quantize.conftest import conv_classifier
from tests.serve.conftest import start_command

REPO = Path(__file__).resolve().parents[1]
DEPLOYKIT = Path(sys.executable).parent / "deploykit"

# Runs in every Python process of the command: refuses and records any connection or lookup that
# would leave the machine. AF_UNIX sockets (Ray's) and loopback are what a local command may use.
_AUDIT = textwrap.dedent(
    """
    import ipaddress, os, socket, sys

    _LOG = os.environ["DEPLOYKIT_TEST_NETWORK_LOG"]
    _LOCAL_NAMES = {None, "", "localhost", "localhost.localdomain", b"localhost"}


    def _local(host):
        if host in _LOCAL_NAMES:
            return True
        try:
            address = ipaddress.ip_address(host.decode() if isinstance(host, bytes) else host)
        except ValueError:
            return False
        mapped = getattr(address, "ipv4_mapped", None)
        return (mapped or address).is_loopback or (mapped or address).is_unspecified


    def _refuse(what):
        with open(_LOG, "a") as log:
            log.write(f"{os.getpid()} {' '.join(sys.argv[:3])}: {what}\\n")
        raise PermissionError(f"network audit: {what} refused")


    def _hook(event, args):
        if event == "socket.connect":
            sock, address = args
            if sock.family in (socket.AF_INET, socket.AF_INET6) and not _local(address[0]):
                _refuse(f"connect {address!r}")
        elif event == "socket.getaddrinfo" and not _local(args[0]):
            _refuse(f"getaddrinfo {args[0]!r}")


    sys.addaudithook(_hook)
    """
)


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], Path]:
    folder = tmp_path_factory.mktemp("audit")
    (folder / "sitecustomize.py").write_text(_AUDIT)
    log = folder / "network.log"
    python_path = os.pathsep.join([str(folder), str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env = {**os.environ, "PYTHONPATH": python_path, "DEPLOYKIT_TEST_NETWORK_LOG": str(log)}
    for name in ("NNCF_CI", "NNCF_DEV"):  # deploykit must be quiet without the libraries' CI switches
        env.pop(name, None)
    return env, log


def _run(env: dict[str, str], *args: object, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(DEPLOYKIT), *map(str, args)], env=env, capture_output=True, text=True,
                          timeout=timeout_s, cwd=REPO)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_the_audit_refuses_and_records_a_connection_that_would_leave_the_machine(audited) -> None:
    env, log = audited
    code = "import socket; socket.create_connection(('192.0.2.1', 9), timeout=1)"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "network audit" in done.stderr
    assert "192.0.2.1" in log.read_text()
    log.unlink()


@pytest.mark.slow
def test_convert_compare_bench_quantize_optimize_and_serve_connect_nowhere(audited, tmp_path) -> None:
    from tests.assets.paths import darknet_image
    from tests.quantize.conftest import DARKNET_PHOTOS

    env, log = audited
    classifier = tmp_path / "classifier.onnx"
    onnx.save(conv_classifier(), classifier)
    photos = tmp_path / "photos"
    photos.mkdir()
    for name in DARKNET_PHOTOS:
        shutil.copy(darknet_image(name), photos / name)
    converted = tmp_path / "small_cnn.onnx"
    _run(env, "convert", "torch", "tests/assets/torch_models.py:small_cnn", "-i", "images:1x3x32x32",
         "-o", converted)  # fmt: skip
    _run(env, "compare", converted, "-b", "onnxruntime", "-b", "openvino")
    _run(env, "bench", converted, "-b", "openvino", "-n", "5", "--warmup", "1")
    _run(env, "quantize", classifier, "-o", tmp_path / "int8.onnx", "--quantizer", "nncf", "--calibrate", photos)
    _run(env, "optimize", classifier, "--images", photos, "-o", tmp_path / "deploy", "-b", "openvino",
         "--threads", "1", "--quantizer", "nncf", "--time-budget", "40s")  # fmt: skip
    # returns once the server says it is ready
    server = start_command(str(converted), "-b", "openvino", "--grpc-port", "none", "--metrics-port", "none",
                           env=env, endpoints=("http",), timeout_s=300)  # fmt: skip
    server.process.send_signal(signal.SIGTERM)
    server.finish(120)
    assert not log.exists(), f"connections that would have left the machine:\n{log.read_text()}"


def test_onnx_runtime_keeps_no_telemetry_session_or_event_store(tmp_path) -> None:
    """ONNX Runtime's own telemetry (a C++ client: the audit hook above cannot see it) writes a session file
    into the temporary directory and queues events in a store under the home folder for its collector;
    its switch, ORT_DISABLE_TELEMETRY, is on in deploykit's processes unless the user set it."""
    home, scratch = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    scratch.mkdir()
    model = tmp_path / "m.onnx"
    onnx.save(conv_classifier(), model)
    env = {**os.environ, "HOME": str(home), "TMPDIR": str(scratch), "DEPLOYKIT_CACHE_DIR": str(tmp_path / "cache")}
    for name in ("ORT_DISABLE_TELEMETRY", "XDG_CACHE_HOME"):
        env.pop(name, None)
    command = [str(DEPLOYKIT), "run", str(model), "-b", "onnxruntime"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(path.name for path in scratch.iterdir()) == []
    assert not (home / ".cache" / "Microsoft").exists(), sorted(home.rglob("*"))
