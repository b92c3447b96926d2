"""``--report`` is a folder in every command (issue 22, item 6): ``convert`` and ``models build`` write
report.json into it, checked before the work, all or nothing, never onto an input; 0.1's
``--report FILE`` still works for one release with a deprecation line."""

from __future__ import annotations

import json

from deploykit.convert.report import ConversionReport
from tests.assets.paths import REPO, require_module
from tests.fuzz.harness import copy_assets, invoke_checked


def _darknet(tiny, out, report, *extra):
    return ["convert", "darknet", tiny["cfg"], tiny["weights"], "-o", out, "--report", report, *extra]


def test_the_folder_is_made_and_holds_the_report(tiny, tmp_path):
    out, report = tmp_path / "x.onnx", tmp_path / "made" / "report"
    result = invoke_checked(_darknet(tiny, out, report), reads=[tiny["cfg"], tiny["weights"]], watch=[tmp_path])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in report.iterdir()) == ["report.json"]
    data = json.loads((report / "report.json").read_text())
    assert data["converter"] == "darknet" and data["output"] == str(out) and data["written"] is True
    assert ConversionReport.from_json(report / "report.json").passed
    assert f"report written to {report / 'report.json'}" in result.stdout and "deprecated" not in result.stderr
    again = invoke_checked(_darknet(tiny, out, report), writes=[report / "report.json"])  # an earlier report: replaced
    assert again.exit_code == 0, again.output


def test_a_folder_of_other_files_is_refused_before_the_work(tiny, tmp_path):
    out, report = tmp_path / "x.onnx", tmp_path / "bench"
    report.mkdir()
    (report / "report.json").write_text('{"schema": "a bench report"}')
    result = invoke_checked(_darknet(tiny, out, report), writes=[out, report / "report.json"], watch=[tmp_path])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"--report '{report}' | is a folder that holds other files and no conversion report" in result.stderr
    assert "Hint: pass a new folder" in result.stderr and not out.exists()


def test_a_failed_conversion_leaves_no_folder(tiny, tmp_path):
    out, report = tmp_path / "x.onnx", tmp_path / "new" / "report"
    result = invoke_checked(_darknet(tiny, out, report, "--input-size", "33x32"), writes=[out], watch=[tmp_path])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert not (tmp_path / "new").exists() and not out.exists()


def test_the_report_folder_does_not_make_the_models_missing_folder(tiny, tmp_path):
    missing = tmp_path / "missing"
    result = invoke_checked(_darknet(tiny, missing / "x.onnx", missing / "report"), watch=[tmp_path])
    assert result.exit_code == 2 and f"directory '{missing}' does not exist" in result.stderr
    assert not missing.exists()


def test_a_failed_verification_leaves_no_folder_and_an_existing_one_as_it_was(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("DEPLOYKIT_BACKENDS", "crasher=tests.assets.crashing_backend:CrashingBackend")
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # the verification worker must import the plug-in to crash in it
    out, new, empty = tmp_path / "x.onnx", tmp_path / "report", tmp_path / "empty"
    empty.mkdir()
    for report in (new, empty):
        args = _darknet(tiny, out, report, "--verify-backends", "crasher")
        result = invoke_checked(args, reads=[tiny["cfg"], tiny["weights"]], writes=[out], watch=[tmp_path])
        assert result.exit_code == 1 and "killed by signal SIGABRT" in result.output, result.output
        assert not out.exists() and "report written" not in result.stdout
    assert not new.exists() and list(empty.iterdir()) == []


def test_the_report_onto_an_input_is_refused(tiny, tmp_path):
    assets = copy_assets(tiny, tmp_path, "cfg", "weights")
    folder = tmp_path / "out"
    folder.mkdir()
    labels = folder / "report.json"  # a labels file where the report would go
    labels.write_text("person\n")
    args = _darknet(assets, tmp_path / "x.onnx", folder, "--labels", labels)
    result = invoke_checked(args, reads=[labels, *assets.values()], watch=[tmp_path])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "is the file this command reads" in result.stderr and labels.read_text() == "person\n"


def test_the_report_folder_of_convert_torch(tiny, tmp_path):
    require_module("torch", "pip install 'deploykit[torch]'", "PyTorch")
    out, report = tmp_path / "x.onnx", tmp_path / "report"
    args = ["convert", "torch", f"{tiny['factory']}:tiny_cnn", "-i", "x:1x3x8x8", "-o", out, "--report", report]
    result = invoke_checked(args, watch=[tmp_path])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in report.iterdir()) == ["report.json"]
    assert json.loads((report / "report.json").read_text())["converter"] == "torch"
