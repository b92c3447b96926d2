"""No silent device (issue 12): OpenVINO's virtual devices name what runs, and refuse lists with
devices this machine lacks; compiled-shape cache; reports read from disk are validated."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

import deploykit
from deploykit.errors import DeviceUnavailableError, ReportError
from tests.assets.paths import require_module
from tests.fuzz.harness import invoke_checked

openvino = require_module("openvino", "pip install 'deploykit[openvino]'", "OpenVINO")
AVAILABLE = set(openvino.Core().available_devices)
needs_no_gpu = pytest.mark.skipif(
    any(d.startswith("GPU") for d in AVAILABLE), reason="this machine has an OpenVINO GPU: nothing is missing"
)


@needs_no_gpu
@pytest.mark.parametrize("device", ["MULTI:GPU,CPU", "HETERO:GPU,CPU"])
def test_multi_with_a_missing_device_is_an_error(tiny, device):
    result = invoke_checked(["run", tiny["dynamic"], "-b", "ov", "-d", device])
    assert result.exit_code == 1
    assert f"device '{device}' cannot be used: {device.split(':')[0]} lists GPU, which this machine does not offer" in (
        result.stderr
    )


@needs_no_gpu
def test_multi_fallback_is_reported(tiny):
    with deploykit.load(tiny["dynamic"], "ov", "MULTI:GPU,CPU", allow_fallback=True) as session:
        assert session.info.fallback and "MULTI lists GPU" in (session.info.fallback_reason or "")
        assert session.info.device == "MULTI:CPU"
        assert session.run({"x": np.ones((2, 4), np.float32)})["y"].shape == (2, 4)


@needs_no_gpu
def test_auto_with_only_missing_devices_says_why(tiny):
    with pytest.raises(DeviceUnavailableError, match=r"AUTO lists GPU, which this machine does not offer"):
        deploykit.load(tiny["classifier"], "ov", "AUTO:GPU")


def test_auto_reports_its_execution_devices(tiny):
    devices = "GPU,CPU" if "GPU" not in AVAILABLE else "CPU"
    with deploykit.load(tiny["classifier"], "ov", f"AUTO:{devices}") as session:
        assert session.info.providers and all(session.info.providers)
        assert not session.info.fallback, "AUTO choosing among its list is its job, not a fallback"
        assert any("CPU" in p for p in session.info.providers) or "GPU" in AVAILABLE


@pytest.mark.parametrize("cache, recompiles", [(4, True), (8, False)])
def test_shape_cache_and_recompiles(tiny, cache, recompiles):
    with deploykit.load(tiny["dynamic"], "ov", shape_cache=cache) as session:
        for _ in range(2):
            for batch in range(1, 6):
                session.run({"x": np.ones((batch, 4), np.float32)})
        assert (session.info.recompiles > 0) is recompiles
        assert session.info.to_dict()["recompiles"] == session.info.recompiles


@pytest.fixture(scope="module")
def report_path(tiny, tmp_path_factory):
    directory = tmp_path_factory.mktemp("report")
    result = invoke_checked(["bench", tiny["classifier"], "-b", "ort", "--iterations", "3", "--warmup", "1",
                             "--report", directory])  # fmt: skip
    assert result.exit_code == 0, result.output
    return directory / "report.json"


def _broken(report_path, tmp_path, change):
    data = json.loads(report_path.read_text())
    broken = copy.deepcopy(data)
    change(broken)
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(broken))
    return path


def test_report_row_with_null_latency(report_path, tmp_path):
    path = _broken(report_path, tmp_path, lambda d: d["rows"][0].update(latency=None))
    result = invoke_checked(["report", path], reads=[path])
    assert result.exit_code == 1
    assert "does not follow the report schema: rows[0].latency: expected object, got null" in result.stderr


def test_baseline_with_a_string_p50(report_path, tmp_path):
    path = _broken(report_path, tmp_path, lambda d: d["rows"][0]["latency"].update(p50_ms="fast"))
    result = invoke_checked(["report", report_path, "--baseline", path], reads=[report_path, path])
    assert result.exit_code == 1
    assert (
        f"report '{path}' | does not follow the report schema: rows[0].latency.p50_ms: expected number, got string"
        in (result.stderr)
    )


def test_valid_report_reads(report_path):
    from deploykit.bench.report import BenchmarkReport

    assert BenchmarkReport.from_json(report_path).rows
    assert invoke_checked(["report", report_path], reads=[report_path]).exit_code == 0


def test_report_missing_a_required_field(report_path, tmp_path):
    from deploykit.bench.report import BenchmarkReport

    path = _broken(report_path, tmp_path, lambda d: d.pop("rows"))
    with pytest.raises(ReportError, match=r"\(the report\): required field 'rows' is missing"):
        BenchmarkReport.from_json(path)
