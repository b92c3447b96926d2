"""The oracle's worker runs within a memory limit, and running out is said, never an OOM kill."""

from __future__ import annotations

import json
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from typer.testing import CliRunner

from deploykit.cli.main import app
from deploykit.errors import UsageError
from deploykit.verify import VerifySettings
from deploykit.verify.check import run_oracle
from deploykit.verify.limits import default_memory_bytes, format_size, parse_size

runner = CliRunner()


def _dilated_conv(path, size: int, channels: int):
    """A dilated 3x3 convolution from one channel to ``channels``: its output alone is size² × channels × 4 bytes."""
    weight = np.random.default_rng(0).normal(0, 0.1, (channels, 1, 3, 3)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], dilations=[4, 4], pads=[4, 4, 4, 4], name="aspp_conv")
    graph = helper.make_graph(
        [node], "aspp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, size, size])],
        [helper.make_tensor("w", TensorProto.FLOAT, weight.shape, weight.ravel())],
    )  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


def test_the_oracle_runs_out_of_its_memory_limit_quickly_and_says_where(tmp_path):
    model = _dilated_conv(tmp_path / "aspp.onnx", 2048, 256)  # a 4 GiB output against a 1 GiB limit
    x = np.random.default_rng(1).standard_normal((1, 1, 2048, 2048)).astype(np.float32)
    started = time.monotonic()
    info, references = run_oracle(model, "auto", [{"x": x}], memory_bytes=1 << 30, timeout_s=300)
    assert references is None and info.name == "onnx-reference"
    assert info.detail == "oracle onnx-reference ran out of its 1 GiB memory limit on node 'aspp_conv' (Conv)."
    assert time.monotonic() - started < 120  # refused at the allocation, not after swapping


def test_compare_rows_are_unverified_with_the_oracle_limit_as_their_reason(tmp_path):
    small = _dilated_conv(tmp_path / "small.onnx", 16, 4)
    ok = runner.invoke(app, ["compare", str(small), "-b", "ort", "--oracle-memory", "512MiB", "--json"])
    assert ok.exit_code == 0 and json.loads(ok.stdout)["verdicts"][0]["status"] == "pass", ok.output
    model = _dilated_conv(tmp_path / "aspp.onnx", 1024, 64)  # 256 MiB output: ORT's is fine, the oracle's not
    result = runner.invoke(app, ["compare", str(model), "-b", "ort", "--oracle-memory", "512MiB", "--json"])
    assert result.exit_code == 0, result.output
    verdict = json.loads(result.stdout)["verdicts"][0]
    assert verdict["status"] == "unverified"
    assert verdict["reason"].startswith(
        "oracle onnx-reference ran out of its 512 MiB memory limit on node 'aspp_conv' (Conv); no independent oracle"
    )


@pytest.mark.parametrize(("text", "size"), [("4GiB", 4 << 30), ("512MiB", 512 << 20), ("4G", 4 << 30),
                                            ("1.5GB", 3 << 29), ("1048576", 1 << 20), ("64 kib", 64 << 10)])  # fmt: skip
def test_sizes_read_as_everywhere(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "lots", "4iB", "-1GiB", "0", "4 GiBs"])
def test_a_size_that_is_no_size_is_a_usage_error(text):
    with pytest.raises(UsageError, match=r"--oracle-memory '.*' \| (is not a size|must be more than 0 bytes)"):
        parse_size(text)


def test_the_cli_refuses_a_bad_size_before_running(tmp_path):
    model = _dilated_conv(tmp_path / "m.onnx", 8, 2)
    result = runner.invoke(app, ["compare", str(model), "-b", "ort", "--oracle-memory", "lots"])
    assert result.exit_code == 2
    assert "--oracle-memory 'lots' | is not a size" in result.output and "Traceback" not in result.output


def test_the_default_limit_is_sized_from_available_memory():
    limit = default_memory_bytes()
    assert limit is None or limit >= 2 << 30
    assert format_size(4 << 30) == "4 GiB" and format_size(512 << 20) == "512 MiB"
    assert VerifySettings(oracle_memory_bytes=1 << 30).to_dict()["oracle_memory_bytes"] == 1 << 30


def test_bench_plans_carry_the_oracle_limit_to_fleet_nodes():
    from deploykit.bench.plan import BenchPlan

    plan = BenchPlan(oracle_memory_bytes=1 << 30)
    assert BenchPlan.from_dict(plan.to_dict()).oracle_memory_bytes == 1 << 30
