"""Fleet benchmark on a real multi-node Ray cluster simulated on this machine (two nodes, two devices)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import onnx
import psutil
import pytest
from typer.testing import CliRunner

from deploykit.bench.plan import BenchPlan
from deploykit.bench.report import BenchmarkReport
from deploykit.cli.main import app
from deploykit.distributed import fleet_benchmark, fleet_views
from deploykit.distributed.fleet import device_name
from deploykit.errors import UsageError
from tests.assets.catalog import CATALOG

PLAN = BenchPlan(backends=("onnxruntime",), warmup=2)


@pytest.fixture(scope="module")
def cluster(ray_module):
    """Head node 'alpha' and worker node 'beta', one CPU each; this process is connected to it."""
    from ray.cluster_utils import Cluster

    from deploykit.distributed.cluster import loopback_only

    with loopback_only():
        cluster = Cluster(
            initialize_head=True,
            head_node_args={"num_cpus": 1, "resources": {"deploykit-device:alpha": 1}, "include_dashboard": False},
        )
        beta = cluster.add_node(num_cpus=1, resources={"deploykit-device:beta": 1})
    try:
        with loopback_only():  # Ray would turn the loopback address into the machine's network address
            ray_module.init(address=cluster.address, log_to_driver=False)
        cluster.wait_for_nodes()
        yield cluster, beta
    finally:
        ray_module.shutdown()
        cluster.shutdown()


@pytest.fixture(scope="module")
def small_model(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("fleet") / "conv_bn_act.onnx"
    onnx.save(next(e for e in CATALOG if e.name == "conv_bn_act").build(), path)
    return str(path)


@pytest.mark.slow
def test_bench_fleet_merges_both_devices(cluster, small_model, tmp_path):
    result = CliRunner().invoke(app, ["bench", small_model, "--fleet", "auto", "-b", "onnxruntime", "--iterations",
                                      "20", "--warmup", "2", "--report", str(tmp_path / "fleet")])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "recommended on alpha: deploykit.load(" in result.output
    assert "recommended on beta: deploykit.load(" in result.output
    fleet = json.loads((tmp_path / "fleet" / "fleet.json").read_text())
    assert [(d["name"], d["status"]) for d in fleet["devices"]] == [("alpha", "ok"), ("beta", "ok")]
    nodes = {d["name"]: d["node"] for d in fleet["devices"]}
    assert nodes["alpha"] != nodes["beta"]  # each bench ran on its own node
    for name in ("alpha", "beta"):
        report = BenchmarkReport.from_json(tmp_path / "fleet" / name / "report.json")  # the ordinary bench schema
        assert report.model.path == small_model
        assert report.rows[0].status == "ok" and report.device["cpu"]["logical_cores"]
    page = (tmp_path / "fleet" / "fleet.html").read_text()
    assert "configuration × device" in page and page.count('<section class="device">') == 2
    assert 'aria-label="headline per configuration and device"' in page and "p50_ms (ms)" in page  # axis, unit
    table = (tmp_path / "fleet" / "fleet.md").read_text()
    assert "| configuration | alpha | beta |" in table and "**alpha**" in table and "**beta**" in table


def _bench_worker_on(node) -> psutil.Process | None:
    """The Ray worker running the fleet task on ``node`` (a descendant of that node's raylet)."""
    raylet = psutil.Process(node.all_processes["raylet"][0].process.pid)
    for process in raylet.children(recursive=True):
        try:
            if "_bench_on_device" in " ".join(process.cmdline()) or "_bench_on_device" in process.name():
                return process
        except psutil.NoSuchProcess:
            continue
    return None


@pytest.mark.slow
def test_a_device_that_dies_mid_run_is_a_failed_column(cluster, small_model):
    _, beta = cluster
    outcome = {}
    plan = PLAN.replace(duration_s=1.5)  # long enough to be caught running
    thread = threading.Thread(target=lambda: outcome.update(result=fleet_benchmark(small_model, plan=plan)))
    thread.start()
    worker, deadline = None, time.monotonic() + 60
    while worker is None and time.monotonic() < deadline and thread.is_alive():
        worker = _bench_worker_on(beta)
        time.sleep(0.05)
    assert worker is not None, "the fleet task never started on beta"
    for process in [*worker.children(recursive=True), worker]:  # the worker and the bench's subprocess
        process.send_signal(signal.SIGKILL)
    thread.join(120)
    result = outcome["result"]
    by_name = {d.name: d for d in result.devices}
    assert by_name["alpha"].status == "ok" and by_name["alpha"].report.rows[0].status == "ok"
    assert by_name["beta"].status == "failed" and by_name["beta"].report is None
    assert "Worker" in by_name["beta"].error or "died" in by_name["beta"].error, by_name["beta"].error
    matrix = fleet_views.matrix(result)
    assert matrix[0]["beta"].startswith("failed: ") and "ms" in matrix[0]["alpha"]
    assert result.recommendations()["beta"] is None and result.recommendations()["alpha"] is not None


def test_fleet_devices_lists_the_device_nodes(cluster):
    result = CliRunner().invoke(app, ["fleet", "devices", "--json"])
    assert result.exit_code == 0, result.output
    nodes = json.loads(result.output)
    assert sorted(nodes) == ["alpha", "beta"] and nodes["alpha"] != nodes["beta"]


def test_unknown_device_and_timeout_are_failed_columns(cluster, small_model):
    result = fleet_benchmark(small_model, plan=PLAN, devices=["alpha", "gamma"], device_timeout_s=0.2)
    by_name = {d.name: d for d in result.devices}
    assert "no alive node carries resource 'deploykit-device:gamma' (known: alpha, beta)" in by_name["gamma"].error
    assert by_name["alpha"].error == "did not finish within 0.2 s"


def test_fleet_usage_errors(small_model, tmp_path):
    (tmp_path / "taken").write_text("x")
    result = CliRunner().invoke(app, ["bench", small_model, "--fleet", "auto", "--report", str(tmp_path / "taken")])
    assert result.exit_code == 2 and f"--report '{tmp_path / 'taken'}' | is a file, expected a folder" in result.output
    with pytest.raises(UsageError, match=r"device timeout -1 s \| must be positive"):
        fleet_benchmark(small_model, device_timeout_s=-1)
    result = CliRunner().invoke(app, ["bench", small_model, "--fleet", "auto", "--inputs", small_model])
    assert result.exit_code == 2 and "--inputs | is not sent to fleet nodes" in result.output
    with pytest.raises(UsageError, match=r"BenchPlan \| has no setting 'inputs'"):
        BenchPlan.from_dict({**PLAN.to_dict(), "inputs": "x.npz"})  # what a fleet ships holds no input arrays


def test_a_cluster_that_cannot_be_reached_is_a_clear_error(ray_module):
    # a fresh process: this one is connected to the test cluster, which every call would reuse
    completed = subprocess.run([sys.executable, "-m", "deploykit.cli.main", "fleet", "devices", "--address", "http://x"],
                               capture_output=True, text=True, timeout=120, env={**os.environ, "RAY_ADDRESS": ""})  # fmt: skip
    # what is no Ray address is refused as a usage error before any connection (a dead address that
    # is one: tests/distributed/test_cluster_connect.py)
    assert completed.returncode == 2, completed.stderr
    assert "Invalid value for '--address': 'http://x': is not a Ray address" in completed.stderr
    assert "Traceback" not in completed.stderr


def test_fleet_join_names_the_device_from_its_fingerprint():
    fingerprint = {"hostname": "nuc-01", "cpu": {"model": "Intel(R) Core(TM) i5-1135G7 @ 2.40GHz"}, "gpus": []}
    assert device_name(fingerprint) == "nuc-01-intel-core-i5-1135g7"
    jetson = {"hostname": "orin", "cpu": {"model": "ARMv8 Processor rev 1 (v8l)"}, "gpus": [{"name": "Orin (nvgpu)"}]}
    assert device_name(jetson) == "orin-orin-nvgpu"
    result = CliRunner().invoke(app, ["fleet", "join", "--address", "head:6379", "--name", "jetson-orin", "--dry-run"])
    assert result.exit_code == 0
    assert "start --address head:6379 --resources '{\"deploykit-device:jetson-orin\": 1}'" in result.output
    result = CliRunner().invoke(app, ["fleet", "join", "--address", "head:6379", "--name", "a b", "--dry-run"])
    assert result.exit_code == 2 and "device name 'a b' | must be non-empty, without spaces" in result.output
