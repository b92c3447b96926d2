"""`deploykit models build --oracle` through the real CLI: the choice reaches the Darknet conversion,
and a value that cannot be used is refused before anything is built."""

from __future__ import annotations

from typer.testing import CliRunner

from deploykit.cli.main import app

runner = CliRunner()


def test_oracle_none_builds_a_darknet_recipe_and_says_no_oracle_ran(tmp_path):
    out = tmp_path / "y.onnx"
    result = runner.invoke(app, ["models", "build", "yolov2-tiny", "-o", str(out), "--random-weights",
                                 "--verify-backends", "onnxruntime", "--oracle", "none"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "no oracle asked for (oracle 'none')" in result.stdout
    assert "unverified" in result.stdout and "agree (no independent oracle)" not in result.stdout and out.is_file()


def test_an_unknown_oracle_is_refused_with_the_choices(tmp_path):
    out = tmp_path / "y.onnx"
    result = runner.invoke(app, ["models", "build", "yolov2-tiny", "-o", str(out), "--random-weights",
                                 "--verify-backends", "", "--oracle", "nosuch"])  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "oracle 'nosuch' | is not one of auto, opencv, darknet, none." in result.stderr
    assert "none: compare the backends only" in result.stderr and "Traceback" not in result.output
    assert not out.exists()


def test_a_darknet_oracle_for_a_torch_recipe_is_refused_before_torch_is_needed(tmp_path):
    out = tmp_path / "m.onnx"
    result = runner.invoke(app, ["models", "build", "mobilenet_v2", "-o", str(out), "--verify-backends", "",
                                 "--oracle", "darknet"])  # fmt: skip
    assert result.exit_code == 2, result.output
    assert (
        "recipe 'mobilenet_v2' | a Darknet oracle ('darknet') was asked for a torch recipe, "
        "expected a Darknet recipe." in result.stderr
    )
    assert "leave the Darknet oracle at auto" in result.stderr and not out.exists()


def test_the_help_names_the_oracles():
    result = runner.invoke(app, ["models", "build", "--help"])
    assert result.exit_code == 0
    assert "--oracle" in result.stdout


def test_report_is_written_after_the_build_and_never_onto_the_model(tmp_path):
    import json

    out, report = tmp_path / "y.onnx", tmp_path / "build"
    result = runner.invoke(app, ["models", "build", "yolov2-tiny", "-o", str(out), "--random-weights",
                                 "--verify-backends", "onnxruntime", "--oracle", "none", "--report", str(report)])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in report.iterdir()) == ["report.json"]
    data = json.loads((report / "report.json").read_text())
    assert data["output"] == str(out) and data["oracle"]["independent"] is False  # --oracle none
    assert any(note.startswith("weights: random") for note in data["notes"])
    again = runner.invoke(app, ["models", "build", "yolov2-tiny", "-o", str(out), "--random-weights",
                                "--verify-backends", "", "--report", str(out)])  # fmt: skip
    assert (
        again.exit_code == 2
        and f"is also the path of output '{out}'" in again.stderr
        and "Traceback" not in again.output
    )
    assert "'deploykit models build --report FILE' is deprecated" in again.stderr  # an existing file: the 0.1 form
    new = tmp_path / "new.onnx"  # the folder form onto the model's path: refused before the build
    folder = runner.invoke(app, ["models", "build", "yolov2-tiny", "-o", str(new), "--random-weights",
                                 "--verify-backends", "", "--report", str(new)])  # fmt: skip
    assert folder.exit_code == 2 and f"--report '{new}' | is also the path of output" in folder.stderr
    assert not new.exists() and "Traceback" not in folder.output
