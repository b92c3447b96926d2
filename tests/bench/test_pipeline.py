"""``bench --pipeline`` honours every option plain ``bench`` honours: precision, threads, batch,
oracle, device and backend options; one test each, on real runtimes. Expectations come from
``Backend.precisions`` and the sessions' reports."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from cli.main import app
from deploykit.backends.registry import get_backend
from deploykit.bench.pipeline import benchmark_pipeline
from deploykit.bench.plan import BenchPlan
from deploykit.errors import UsageError
from tests.quantize.conftest import classifier_path, photos

__all__ = ["classifier_path", "photos"]

FAST = {"warmup": 1, "iterations": 3, "isolate": False}


def _bench(classifier_path, photos, **settings):
    return benchmark_pipeline(classifier_path, "classify", photos, plan=BenchPlan(**{**FAST, **settings}))


def test_precision_f32_runs_f32_on_a_backend_whose_default_is_reduced(classifier_path, photos):
    """--precision f32 measures f32 even where the device's default is bf16; every precision the
    device claims natively runs as asked."""
    native = get_backend("openvino").precisions("CPU")
    report = _bench(classifier_path, photos, backends=("openvino:CPU",), precision=",".join(native))
    assert [r.session.precision for r in report.rows if r.ok] == native
    assert all(r.session.precision_requested == r.config.precision for r in report.rows)
    f32 = _bench(classifier_path, photos, backends=("openvino:CPU",), precision="f32")
    assert [r.session.precision for r in f32.rows] == ["f32"] and f32.rows[0].config.precision == "f32"


def test_threads_sweep(classifier_path, photos):
    report = _bench(classifier_path, photos, backends=("onnxruntime",), threads=(1, 2))
    assert [r.config.threads for r in report.rows] == [1, 2]
    assert [r.session.options.get("threads") for r in report.rows] == [1, 2]


def test_a_batch_other_than_one_is_refused(classifier_path, photos):
    with pytest.raises(UsageError, match=r"--batch 4 \| a pipeline times one image per call"):
        _bench(classifier_path, photos, backends=("onnxruntime",), batch=4)


def test_a_named_oracle_is_the_reference_and_none_judges_nothing(classifier_path, photos):
    report = _bench(classifier_path, photos, backends=("onnxruntime", "openvino:CPU"), oracle="onnxruntime",
                    precision="f32")  # fmt: skip
    assert all(r.verdict is not None and r.verdict.oracle.name == "onnxruntime" for r in report.rows)
    assert all(r.verdict.agreement is True for r in report.rows)  # f32 on both: the same classes
    bare = _bench(classifier_path, photos, backends=("onnxruntime",), oracle="none")
    assert all(r.verdict is None for r in bare.rows)


def test_the_device_of_the_backend_spec_is_the_device_that_runs(classifier_path, photos):
    report = _bench(classifier_path, photos, backends=("onnxruntime:cpu",))
    assert report.rows[0].config.device == "cpu" and report.rows[0].session.device_requested == "cpu"


def test_backend_options_reach_the_session(classifier_path, photos):
    report = _bench(classifier_path, photos, backends=("onnxruntime",), options={"graph_optimization": "basic"})
    assert report.rows[0].session.options.get("graph_optimization") == "basic"


def test_the_cli_passes_every_option(classifier_path, photos):
    result = CliRunner().invoke(
        app,
        ["bench", str(classifier_path), "--pipeline", "classify", "--images", str(photos), "-b", "openvino:CPU",
         "--precision", "f32", "--threads", "1", "-O", "performance_hint=latency", "--oracle", "auto",
         "--iterations", "3", "--warmup", "1", "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    import json

    row = json.loads(result.stdout)["rows"][0]
    assert row["session"]["precision"] == "f32" and row["config"]["threads"] == 1
    assert row["session"]["options"]["performance_hint"] == "latency"
    result = CliRunner().invoke(
        app, ["bench", str(classifier_path), "--pipeline", "classify", "--images", str(photos), "--batch", "2"]
    )
    assert result.exit_code == 2 and "a pipeline times one image per call" in result.output


def test_allow_failures_lets_a_pipeline_bench_with_a_failed_backend_exit_0(classifier_path, photos, monkeypatch):
    """As every bench: a configuration that fails is a row and exit 1, or exit 0 with a note under --allow-failures."""
    monkeypatch.setenv("DEPLOYKIT_BACKENDS", "raiser=tests.assets.crashing_backend:RaisingBackend")
    args = [
        "bench",
        str(classifier_path),
        "--pipeline",
        "classify",
        "--images",
        str(photos),
        "-b",
        "onnxruntime",
        "-b",
        "raiser",
        "--iterations",
        "3",
        "--warmup",
        "1",
    ]
    failed = CliRunner().invoke(app, args)
    assert failed.exit_code == 1, failed.output
    assert "error: 1 configuration(s) failed or did not verify" in failed.output
    allowed = CliRunner().invoke(app, [*args, "--allow-failures"])
    assert allowed.exit_code == 0, allowed.output
    assert "1 configuration(s) failed or did not verify (exit 0 because of --allow-failures)" in allowed.output
