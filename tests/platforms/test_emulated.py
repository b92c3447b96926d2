"""The aarch64 builds of the runtimes under real emulation (qemu-aarch64 >= 8), verified against the
host's oracle: the contract catalog, MobileNetV2 on real photos, a crash, a mixed host + arm64 report."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from typer.testing import CliRunner

from deploykit.backends.registry import backend_names, get_backend
from deploykit.cli.main import app
from deploykit.errors import UsageError
from deploykit.verify import VerifySettings, compare
from deploykit.verify.isolated import run_candidate
from tests.assets.paths import REPO

pytestmark = [pytest.mark.emulated, pytest.mark.slow]
runner = CliRunner()


def test_the_target_reports_an_aarch64_cpu_and_the_hosts_runtime_versions(arm64):
    status = arm64.status()
    assert status.state == "ready", status.detail
    assert status.cpu.startswith("cortex-a76 (aarch64: ") and "asimd" in status.cpu
    assert status.emulator.startswith("qemu-aarch64 ") and int(status.emulator.split()[1].split(".")[0]) >= 8
    host_version = get_backend("onnxruntime").version().split()[-1]  # onnxruntime-gpu 1.31.1 or onnxruntime 1.31.1
    # the CPU build, at the host's version, with what it claims on the emulated CPU
    assert status.runtimes["onnxruntime"] == f"onnxruntime {host_version} (f32)"


def test_a_worker_under_emulation_runs_the_targets_build(arm64, catalog_models):
    """The session the worker opened is the target's: the CPU package the manifest installed, one
    pass timed, the platform named."""
    path, feeds = catalog_models["conv_bn_act"]
    run = run_candidate(path, "onnxruntime", "cpu", [feeds], interpreter=arm64.interpreter())
    assert run.ok, run.error
    installed = next(p for p in arm64.manifest()["packages"] if p["backend"] == "onnxruntime")
    assert installed["distribution"] == "onnxruntime"
    assert run.info is not None and run.info["backend_version"] == f"onnxruntime {installed['version']}"
    assert run.platform == "linux/arm64" and run.seconds["load"] > 0 and len(run.seconds["run"]) == 1
    assert run.outputs[0]["y"].shape == (1, 4, 8, 8)


def test_the_contract_catalog_on_onnxruntime_aarch64_against_the_reference_oracle(arm64, catalog_models):
    def check(name: str) -> tuple[str, object]:
        path, feeds = catalog_models[name]
        return name, compare(path, ["onnxruntime"], VerifySettings(platforms="linux/arm64"), inputs=feeds)

    with ThreadPoolExecutor(max_workers=2) as pool:  # one emulated worker per CPU
        reports = list(pool.map(check, catalog_models))
    assert [name for name, _ in reports] == list(catalog_models)
    for name, report in reports:
        (verdict,) = report.verdicts
        assert verdict.candidate == "onnxruntime:cpu f32 on linux/arm64"
        assert report.oracle.name == "onnx-reference" and report.oracle.independent
        assert verdict.status == "pass", f"{name}: {verdict.describe()}"
        assert verdict.precision == "f32"


def test_mobilenet_v2_aarch64_at_each_runtimes_default_precision_on_real_photos(arm64, mobilenet_v2, photos):
    """Each runtime at the precision its aarch64 build picks by itself (OpenVINO's ARM plug-in: f16),
    judged by the rule of that precision and by top-1 agreement with the verified f32 run."""
    backends = ["onnxruntime", "openvino"]
    backends += [name for name in ("ncnn", "mnn") if name in backend_names() and get_backend(name).is_available()]
    report = compare(mobilenet_v2, backends, VerifySettings(precision=None, platforms="linux/arm64"), inputs=photos)
    rows = {v.candidate: v for v in report.verdicts}
    print()
    for verdict in report.verdicts:
        agreement = verdict.task.value if verdict.task else None
        print(f"{verdict.candidate}: {verdict.status}, precision {verdict.precision}, top-1 agreement {agreement}")
    for backend in backends:
        device = get_backend(backend).default_device
        verdict = rows[f"{get_backend(backend).name}:{device} on linux/arm64"]
        assert verdict.status == "pass", verdict.describe()
        claims = arm64.claims(get_backend(backend).name, device)
        assert claims is not None and verdict.precision in claims.precisions, "the precision the target's build ran"
        if verdict.rule != "element-wise":
            assert verdict.task is not None and verdict.task.details["reference"] == "onnx-reference"


def test_a_mixed_report_against_one_oracle_where_a_crash_under_emulation_costs_one_row(
    arm64, catalog_models, monkeypatch
):
    """host and linux/arm64 rows side by side; a runtime that aborts is an error row with its signal
    on both, and ONNX Runtime's rows survive it."""
    monkeypatch.setenv("DEPLOYKIT_BACKENDS", "crasher=tests.assets.crashing_backend:CrashingBackend")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    path, _ = catalog_models["conv_bn_act"]
    args = ["compare", str(path), "-b", "crasher", "-b", "ort", "--platform", "host,linux/arm64", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    rows = {v["candidate"]: v for v in data["verdicts"]}
    assert list(rows) == ["crasher:cpu f32", "onnxruntime:cpu f32", "crasher:cpu f32 on linux/arm64",
                          "onnxruntime:cpu f32 on linux/arm64"]  # fmt: skip
    for label in ("crasher:cpu f32", "crasher:cpu f32 on linux/arm64"):
        assert rows[label]["status"] == "error" and "killed by signal SIGABRT" in rows[label]["reason"], rows[label]
    host, target = rows["onnxruntime:cpu f32"], rows["onnxruntime:cpu f32 on linux/arm64"]
    assert host["oracle"] == target["oracle"] and host["oracle"]["independent"]
    assert host["status"] == target["status"] == "pass"
    assert any(n.startswith("linux/arm64 (emulated cortex-a76, qemu-aarch64 ") for n in data["notes"])


def test_add_again_keeps_every_step_and_finishes_a_target_missing_its_manifest(arm64):
    """Idempotent: a second add redoes nothing but the self-test. Resumable: a target whose
    manifest (written last) is gone is finished from its completed steps, not rebuilt."""
    folder = arm64.folder()
    sysroot_marker = (folder / "sysroot" / ".complete").stat().st_mtime_ns
    site_marker = (folder / "site" / ".complete").stat().st_mtime_ns
    (folder / "target.json").unlink()
    assert arm64.state() == "half-built"
    manifest = arm64.prepare()
    assert arm64.state() == "ready"
    assert (folder / "sysroot" / ".complete").stat().st_mtime_ns == sysroot_marker
    assert (folder / "site" / ".complete").stat().st_mtime_ns == site_marker
    assert manifest["seconds"]["sysroot"] < 1 and manifest["seconds"]["wheels"] < 5
    assert manifest["probe"]["machine"] == "aarch64"
    assert np.all([p["version"] for p in manifest["packages"] if p["distribution"] in ("numpy", "onnxruntime")])


def test_bench_shows_emulated_rows_apart_as_one_pass_never_ranked(arm64, catalog_models):
    path, _ = catalog_models["conv_bn_act"]
    args = ["bench", str(path), "-b", "ort", "--platform", "host,linux/arm64", "--iterations", "5", "--warmup", "1",
            "--json"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [r["config"]["label"] for r in data["rows"]] == ["onnxruntime:cpu b1"]  # only the host is timed and ranked
    assert data["recommendation"] is not None
    emulated = data["emulated"]
    (verdict,) = emulated["verdicts"]
    assert verdict["candidate"] == "onnxruntime:cpu on linux/arm64" and verdict["status"] == "pass"
    seconds = emulated["emulated_seconds"]["onnxruntime:cpu on linux/arm64"]
    assert seconds["emulated"] is True and seconds["platform"] == "linux/arm64"
    assert seconds["load"] > 0 and len(seconds["run"]) == 1


def test_convert_torch_verifies_its_output_on_the_host_and_on_onnxruntime_aarch64(arm64, tmp_path):
    """convert --platform host,linux/arm64: PyTorch on the host is the oracle of both rows, each
    row says its platform, the emulated target is named in the report's notes."""
    out, report_dir = tmp_path / "small.onnx", tmp_path / "small"
    args = ["convert", "torch", f"{REPO / 'tests/assets/torch_models.py'}:SmallCnn", "-i", "images:1x3x16x16",
            "-o", str(out), "--report", str(report_dir), "--platform", "host,linux/arm64"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads((report_dir / "report.json").read_text())
    rows = {v["candidate"]: v for v in data["verdicts"]}
    assert list(rows) == ["onnxruntime", "onnxruntime on linux/arm64"]
    assert all(v["status"] == "pass" and v["precision"] == "f32" for v in rows.values()), rows
    assert data["oracle"]["name"] == "pytorch" and data["oracle"]["independent"]
    assert any(n.startswith("linux/arm64 (emulated cortex-a76") for n in data["notes"]), data["notes"]


def test_a_precision_the_target_does_not_claim_is_refused_naming_what_the_target_runs(arm64, catalog_models):
    """ONNX Runtime has no precision setting: on the target it runs an f32 model in f32, so f16 is
    refused before anything runs, naming the platform and what its build runs there."""
    path, _ = catalog_models["conv_bn_act"]
    result = runner.invoke(app, ["compare", str(path), "-b", "ort", "--precision", "f16", "--platform", "linux/arm64"])
    assert result.exit_code == 1, result.output
    message = " ".join(result.output.split())
    assert "no backend can run the precisions asked for on linux/arm64" in message, message
    assert "onnxruntime:cpu f16: not supported on linux/arm64 (onnxruntime on cpu runs f32 there)" in message


def test_openvino_on_the_target_is_offered_what_its_aarch64_build_claims_and_reports_what_ran(arm64, catalog_models):
    """The sweep on the target is what OpenVINO's ARM plug-in claims on the emulated CPU, not what
    the host's x86 plug-in claims; each row reports the precision the session ran."""
    if not get_backend("openvino").is_available():
        pytest.skip("OpenVINO is not installed on the host")
    claims = arm64.claims("openvino", "CPU")
    assert claims is not None and claims.precisions[0] == "f32"
    path, feeds = catalog_models["conv_bn_act"]
    reduced = [p for p in ("bf16", "f16") if p in claims.precisions]
    if not reduced:  # f32 alone: both reduced precisions are refused, naming what the target runs
        with pytest.raises(UsageError, match=r"openvino:CPU bf16: not supported on linux/arm64 \(openvino on CPU runs "
                                             r"f32 there\)"):  # fmt: skip
            compare(path, ["openvino"], VerifySettings(precision="bf16,f16", platforms="linux/arm64"), inputs=feeds)
        return
    report = compare(path, ["openvino"], VerifySettings(precision="bf16,f16", platforms="linux/arm64"), inputs=feeds)
    rows = {v.candidate: v for v in report.verdicts}
    assert list(rows) == [f"openvino:CPU {p} on linux/arm64" for p in reduced]
    for label, verdict in rows.items():
        assert verdict.status == "pass", verdict.describe()
        assert verdict.precision == label.split()[1]  # the session's own report, from the target
    runs = ", ".join(claims.precisions)
    for precision in {"bf16", "f16"} - set(claims.precisions):
        assert f"openvino:CPU {precision}: not supported on linux/arm64 (openvino on CPU runs {runs} there)" in (
            report.notes
        )


def test_a_tflite_runs_on_the_targets_litert_build_as_on_the_host(arm64, catalog_models):
    """ai-edge-litert's aarch64 wheel at the host's version runs the committed .tflite (with its .json: the
    ONNX names and NCHW layout) and agrees with ONNX Runtime on the ONNX model it came from."""
    if get_backend("litert").unavailable_reason():
        pytest.skip(f"the litert runtime is not installed: {get_backend('litert').unavailable_reason()}")
    installed = next(p for p in arm64.manifest()["packages"] if p["backend"] == "litert")
    assert installed["distribution"] == "ai-edge-litert" and installed["version"] == installed["host_version"]
    path, feeds = catalog_models["conv_bn_act"]
    tflite = REPO / "tests" / "assets" / "litert" / "conv_bn_act.tflite"
    run = run_candidate(tflite, "litert", "cpu", [feeds], interpreter=arm64.interpreter())
    assert run.ok, run.error
    assert run.platform == "linux/arm64" and run.info["backend_version"] == f"ai-edge-litert {installed['version']}"
    expected = run_candidate(path, "onnxruntime", "cpu", [feeds])
    assert expected.ok, expected.error
    np.testing.assert_allclose(run.outputs[0]["y"], expected.outputs[0]["y"], atol=1e-5, rtol=0)


def test_compare_runs_mnn_under_emulation_and_litert_too_where_its_converter_is_ready(arm64, catalog_models):
    """``compare m.onnx -b mnn -b litert --platform linux/arm64``: each converter runs on the host (MNN's
    through the host's interpreter, onnx2tf in its environment), the aarch64 runtime computes, element-wise."""
    path, feeds = catalog_models["conv_bn_act"]
    backends = [name for name in ("mnn", "litert") if get_backend(name).is_available()]
    if "litert" in backends and get_backend("litert").conversion.onnx_unavailable_reason():
        backends.remove("litert")
    if not backends:
        pytest.skip("neither mnn nor litert (with its converter environment) is ready here")
    report = compare(path, backends, VerifySettings(platforms="linux/arm64"), inputs=feeds)
    rows = {v.candidate: v for v in report.verdicts}
    for name in backends:
        verdict = rows[f"{name}:cpu f32 on linux/arm64"]
        assert verdict.status == "pass" and verdict.rule == "element-wise", verdict.describe()
