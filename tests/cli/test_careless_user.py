"""Findings of a careless-user sweep: each mistake gets one clear message (exit 1 or 2, no traceback).

- a converter output that is not named ``.onnx`` (OpenCV read ``x.cfg`` back as Darknet);
- a verification error row wrapped into the converter's error (two hints, "..", a wrong hint);
- ``deploykit ... | head -1`` (a broken pipe on stdout);
- ``deploykit models list``;
- a model whose IR version the installed ONNX Runtime is too old for;
- an input this user may not read;
- an empty device (``--device ''``, ``-b ort:``), once the backend's default device in silence;
- ``-b BACKEND:DEVICE`` in run, predict and serve, called an unregistered backend;
- a file name with brackets, read as terminal markup (``model[v2].onnx`` printed as ``model.onnx``);
- ``predict`` rows written onto the input photo, called "the input folder".
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.assets.paths import require_module
from tests.fuzz.harness import invoke_checked, usage_said

REPO = Path(__file__).resolve().parents[2]
TORCH_MODELS = REPO / "tests" / "assets" / "torch_models.py"


def _deploykit() -> list[str]:
    """The installed ``deploykit`` script beside this interpreter (a real process, real pipes)."""
    script = Path(sys.executable).parent / "deploykit"
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-c", "from deploykit.cli.main import main; main()"]


# --- 1. converter outputs must be named .onnx -------------------------------------------------


@pytest.mark.parametrize("name", ["x.cfg", "x.txt", "y.weights", "model"])
def test_convert_darknet_refuses_an_output_not_named_onnx(tiny, tmp_path, name):
    out = tmp_path / name
    args = ["convert", "darknet", tiny["cfg"], tiny["weights"], "-o", out, "--verify-backends", "onnxruntime,opencv"]
    result = invoke_checked(args, reads=[tiny["cfg"], tiny["weights"]], writes=[out], watch=[tmp_path])
    assert result.exit_code == 2, result.output
    assert f"error: output '{out}' | is not an .onnx file name, expected NAME.onnx." in result.stderr
    assert f"e.g. {out.with_name(out.stem + '.onnx')}." in result.stderr
    assert result.stderr.count("Hint:") == 1 and not out.exists()


def test_convert_torch_refuses_an_output_not_named_onnx(tiny, tmp_path):
    require_module("torch", "pip install 'deploykit[torch]'", "PyTorch")
    out = tmp_path / "x.txt"
    args = ["convert", "torch", f"{tiny['factory']}:tiny_cnn", "-i", "x:1x3x8x8", "-o", out]
    result = invoke_checked(args, writes=[out], watch=[tmp_path])
    assert result.exit_code == 2, result.output
    assert f"output '{out}' | is not an .onnx file name, expected NAME.onnx." in result.stderr
    assert not out.exists()


def test_models_build_refuses_an_output_not_named_onnx_before_building(tmp_path):
    out = tmp_path / "something.cfg"
    args = ["models", "build", "yolov3-tiny", "--random-weights", "-o", out, "--verify-backends", "onnxruntime,opencv"]
    result = invoke_checked(args, writes=[out], watch=[tmp_path])
    assert result.exit_code == 2, result.output
    assert f"output '{out}' | is not an .onnx file name, expected NAME.onnx." in result.stderr
    assert "verification failed" not in result.stderr and not list(tmp_path.iterdir())


def test_an_onnx_suffix_in_capitals_is_an_onnx_name(tiny, tmp_path):
    out = tmp_path / "X.ONNX"
    args = ["convert", "darknet", tiny["cfg"], tiny["weights"], "-o", out, "--verify-backends", "onnxruntime"]
    result = invoke_checked(args, reads=[tiny["cfg"], tiny["weights"]], watch=[tmp_path])
    assert result.exit_code == 0, result.output
    assert out.is_file()


# --- 1b. a verification error row inside the converter's error -------------------------------


def _plug_in(monkeypatch: pytest.MonkeyPatch, entry: str) -> None:
    monkeypatch.setenv("DEPLOYKIT_BACKENDS", entry)
    # The verification runs each backend in a worker process, which must import the plug-in too
    # (without this it fails on "No module named 'tests'" instead of doing what the test wants).
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))


def test_a_backend_that_cannot_run_the_model_gets_its_own_hint_once(tiny, tmp_path, monkeypatch):
    """An ERROR row compared no numbers: no "converter bug" hint, one "Hint:", no "..", and the
    backend's own hint passed on."""
    _plug_in(monkeypatch, "raiser=tests.assets.crashing_backend:RaisingBackend")
    out = tmp_path / "x.onnx"
    args = ["convert", "darknet", tiny["cfg"], tiny["weights"], "-o", out, "--verify-backends", "onnxruntime,raiser"]
    result = invoke_checked(args, reads=[tiny["cfg"], tiny["weights"]], writes=[out], watch=[tmp_path])
    assert result.exit_code == 1, result.output
    error = next(line for line in result.stderr.splitlines() if line.startswith("error:"))
    assert "verification failed: raiser" in error and "op Foo is not implemented" in error
    assert error.count("Hint:") == 1 and ".." not in error, error
    hint = error.split("Hint:", 1)[1]
    assert (
        "nothing was written. raiser" in hint and "could not run the converted model, so nothing was compared" in hint
    )
    assert "its hint: try another backend" in hint and "leave it out of --verify-backends" in hint
    assert "Please report this" not in error and not out.exists()


def test_a_crashed_backend_gets_the_error_row_hint_without_an_inner_hint(tiny, tmp_path, monkeypatch):
    _plug_in(monkeypatch, "crasher=tests.assets.crashing_backend:CrashingBackend")
    out = tmp_path / "x.onnx"
    args = ["convert", "darknet", tiny["cfg"], tiny["weights"], "-o", out, "--verify-backends", "crasher"]
    result = invoke_checked(args, reads=[tiny["cfg"], tiny["weights"]], writes=[out], watch=[tmp_path])
    assert result.exit_code == 1, result.output
    error = next(line for line in result.stderr.splitlines() if line.startswith("error:"))
    assert error.count("Hint:") == 1 and ".." not in error, error
    assert "could not run the converted model, so nothing was compared. If you do not deploy on crasher" in error
    assert "Please report this" not in error


def test_a_numeric_disagreement_keeps_the_converter_advice(tmp_path):
    require_module("torch", "pip install 'deploykit[torch]'", "PyTorch")
    from deploykit.convert.torch import convert_torch
    from deploykit.errors import ParityError

    with pytest.raises(ParityError) as caught:
        convert_torch(f"{TORCH_MODELS}:noisy_model", output=tmp_path / "n.onnx", inputs=["x:2x5"])
    text = str(caught.value)
    assert text.count("Hint:") == 1 and ".." not in text, text
    assert caught.value.hint is not None and caught.value.hint.startswith("nothing was written. Try --exporter")


# --- 2. a reader that stops early ------------------------------------------------------------


def test_help_into_head_is_quiet():
    shell = f"{' '.join(_deploykit())} bench --help | head -1"
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert len(done.stdout.splitlines()) == 1


@pytest.mark.parametrize("args", [["bench", "--help"], ["--help"], ["models", "list", "--json"]])
def test_a_closed_stdout_ends_quietly_with_141(args):
    """The reader is gone before the first write (deterministic, unlike the race with head)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([*_deploykit(), *args], stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert done.stderr == "", done.stderr
    assert done.returncode == 141  # 128 + SIGPIPE, as a tool killed by SIGPIPE reports it


# --- 3. models list ---------------------------------------------------------------------------


def test_models_list_is_the_bare_models_command():
    bare = invoke_checked(["models", "--json"])
    listed = invoke_checked(["models", "list", "--json"])
    group_flag = invoke_checked(["models", "--json", "list"])
    assert bare.exit_code == listed.exit_code == group_flag.exit_code == 0, listed.output
    names = [row["name"] for row in json.loads(listed.stdout)]
    assert "yolov3-tiny" in names
    assert json.loads(listed.stdout) == json.loads(bare.stdout) == json.loads(group_flag.stdout)
    assert "yolov3-tiny" in invoke_checked(["models", "list"]).stdout


# --- 4. an IR version too new for ONNX Runtime -----------------------------------------------


def _relu_model(ir_version: int) -> object:
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = ir_version
    return model


def _newest_ir_version_ort_loads(tmp_path: Path) -> int:
    """Asked of ONNX Runtime itself, not read from deploykit: the highest IR version it loads."""
    import onnx
    import onnxruntime as ort

    for version in range(onnx.IR_VERSION + 1, 2, -1):
        path = tmp_path / f"probe-{version}.onnx"
        onnx.save(_relu_model(version), path)
        try:
            ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        except Exception:  # ORT's own exception types: any refusal means "not this one"
            continue
        return version
    pytest.fail("onnxruntime loads no IR version at all")


def test_an_ir_version_too_new_for_onnxruntime_says_how_to_resave(tmp_path):
    import onnx

    newest = _newest_ir_version_ort_loads(tmp_path)
    model = _relu_model(newest + 1)  # IR 14 with onnx 1.23's default and ORT 1.31 (newest 13)
    path = tmp_path / "new-ir.onnx"
    onnx.save(model, path)
    result = invoke_checked(["run", path, "-b", "onnxruntime"], reads=[path])
    assert result.exit_code == 1, result.output
    assert (
        f"backend 'onnxruntime' | cannot load 'new-ir.onnx': Unsupported model IR version: {newest + 1}, "
        f"max supported IR version: {newest}." in result.stderr
    )
    assert (
        f"Hint: re-save it with ir_version ≤ {newest} (onnx.save after model.ir_version = {newest}), "
        "or upgrade onnxruntime." in result.stderr
    )
    assert "model.cc" not in result.stderr  # ORT's source location is left out
    # Following the hint works.
    model.ir_version = newest  # type: ignore[attr-defined]
    onnx.save(model, path)
    fixed = invoke_checked(["run", path, "-b", "onnxruntime", "-i", "x=random:2"], reads=[path])
    assert fixed.exit_code == 0, fixed.output


# --- an input this user may not read ------------------------------------------------------------

SETPRIV = shutil.which("setpriv")
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
# Root reads any file: the command runs without the capabilities that bypass file permissions.
WITHOUT_OVERRIDE = ["--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-dac_override,-dac_read_search"]


@pytest.mark.skipif(IS_ROOT and SETPRIV is None, reason="root reads any file, and setpriv is missing")
@pytest.mark.parametrize(
    "command, locked, subject",
    [
        (["run", "{classifier}"], "classifier", "model"),
        (["inspect", "{classifier}"], "classifier", "model"),
        (["bench", "{classifier}", "-b", "onnxruntime", "-n", "5"], "classifier", "model"),
        (["predict", "{classifier}", "{image}"], "classifier", "model"),
        (["convert", "darknet", "{cfg}", "{weights}", "-o", "x.onnx"], "cfg", "cfg"),
        (["convert", "darknet", "{cfg}", "{weights}", "-o", "x.onnx"], "weights", "weights"),
    ],
    ids=["run", "inspect", "bench", "predict", "darknet-cfg", "darknet-weights"],
)
def test_an_input_this_user_may_not_read_is_named_as_such(tiny, tmp_path, command, locked, subject):
    """Not a backend crash with a worker's traceback, not "cannot be parsed as ONNX", not a bare
    "Permission denied": the file, that this user may not read it, and what to do."""
    files = {name: tmp_path / path.name for name, path in tiny.items() if path.is_file()}
    for name, path in files.items():
        shutil.copy(tiny[name], path)
    files[locked].chmod(0)
    args = [part.format(**files) for part in command]
    prefix = [str(SETPRIV), *WITHOUT_OVERRIDE] if IS_ROOT else []
    env = {**os.environ, "DEPLOYKIT_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run(
        [*prefix, *_deploykit(), *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    said = f"deploykit {' '.join(args)}: exit {done.returncode}\n{done.stderr}"
    assert done.returncode == 1, said
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines[0].startswith(f"error: {subject} '{files[locked]}' | cannot be read by this user"), said
    assert "Traceback" not in done.stderr and "crashed" not in done.stderr, said


# --- an empty device is no device -------------------------------------------------------------


@pytest.mark.parametrize("command", [["run", "{classifier}"], ["predict", "{classifier}", "{image}"]])
@pytest.mark.parametrize("device", ["", " "])
def test_an_empty_device_is_a_usage_error(tiny, command, device):
    """``--device ''`` (an unset variable in a script) ran on the backend's CPU and said nothing."""
    args = [part.format(**tiny) for part in command]
    result = invoke_checked([*args, "--device", device], reads=[tiny["classifier"]])
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '--device' / '-d': {device!r} names no device" in usage_said(result.output)


@pytest.mark.parametrize("command", [["compare", "{classifier}"], ["bench", "{classifier}", "-n", "5"]])
def test_a_backend_spec_with_a_colon_and_no_device_is_refused(tiny, command):
    """``-b ort:`` ran on the backend's default device and said nothing."""
    args = [part.format(**tiny) for part in command]
    result = invoke_checked([*args, "-b", "onnxruntime:"], reads=[tiny["classifier"]])
    assert result.exit_code == 2, result.output
    assert "error: backend 'onnxruntime:' | names no device after ':'; expected BACKEND or BACKEND:DEVICE." in (
        result.stderr
    )


# --- -b BACKEND:DEVICE means one thing in every command -----------------------------------------


@pytest.mark.parametrize("command", [["run", "{classifier}"], ["predict", "{classifier}", "{image}"]])
def test_a_backend_spec_with_its_device_runs_there(tiny, command):
    """bench and compare read ``-b onnxruntime:cpu``; run and predict said "is not registered"."""
    args = [part.format(**tiny) for part in command]
    result = invoke_checked([*args, "-b", "onnxruntime:cpu"], reads=[tiny["classifier"]])
    assert result.exit_code == 0, result.output
    assert "is not registered" not in result.output


@pytest.mark.parametrize("command", [["run", "{classifier}"], ["predict", "{classifier}", "{image}"]])
def test_a_device_named_both_ways_must_be_the_same(tiny, command):
    args = [part.format(**tiny) for part in command]
    result = invoke_checked([*args, "-b", "onnxruntime:cpu", "--device", "cuda"], reads=[tiny["classifier"]])
    assert result.exit_code == 2, result.output
    assert "error: backend 'onnxruntime:cpu' | names device 'cpu', and --device names 'cuda'." in result.stderr


# --- a file name is printed as it is ------------------------------------------------------------


@pytest.mark.parametrize(
    "command, said",
    [
        (["run", "{model}"], "model[v2].onnx on onnxruntime cpu"),
        (["bench", "{model}", "-b", "onnxruntime", "-n", "5"], "/model[v2].onnx', backend='onnxruntime'"),
        (["compare", "{model}", "-b", "onnxruntime"], "model[v2].onnx against"),
        (["predict", "{model}", "{image}"], "top 5 for image[v2].jpg"),
        (
            ["optimize", "{model}", "--no-quantize", "-b", "onnxruntime", "--time-budget", "5s", "-o", "{bundle}"],
            "[v2]/bundle[v2]') or deploykit predict",
        ),
    ],
    ids=["run", "bench", "compare", "predict", "optimize"],
)
def test_a_file_name_with_brackets_is_printed_as_it_is(tiny, tmp_path, command, said):
    """Brackets are rich's markup: ``model[v2].onnx`` was printed as ``model.onnx``, and bench recommended
    ``deploykit.load('model.onnx', ...)``, another file."""
    folder = tmp_path / "[v2]"
    folder.mkdir()
    model, image, bundle = folder / "model[v2].onnx", folder / "image[v2].jpg", folder / "bundle[v2]"
    shutil.copy(tiny["classifier"], model)
    shutil.copy(tiny["image"], image)
    args = [part.format(model=model, image=image, bundle=bundle) for part in command]
    result = invoke_checked(args, reads=[model, image])
    assert result.exit_code == 0, result.output
    assert said in result.stdout, result.stdout


def test_predict_rows_onto_the_input_image_name_it_a_file(tiny, tmp_path):
    """``predict model photo.jpg -o photo.jpg`` said "is the input folder" of a photo."""
    image = tmp_path / "photo.jpg"
    shutil.copy(tiny["image"], image)
    result = invoke_checked(["predict", tiny["classifier"], image, "-o", image], reads=[image])
    assert result.exit_code == 2, result.output
    assert f"error: --output '{image}' | is the input file; expected a folder for the result rows." in result.stderr
