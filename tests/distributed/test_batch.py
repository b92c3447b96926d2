"""Batch inference on real Ray Data: a real YOLOv8n over ≥ 200 real photos, against the local engine;
an actor killed mid-run is restarted and its batch retried."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import onnx
import psutil
import pytest
from typer.testing import CliRunner

from deploykit.cli.main import app
from deploykit.distributed import Execution, PredictSettings, predict
from deploykit.distributed.store import ResultStore
from deploykit.errors import BackendUnavailableError, InputError, ResourceError, UsageError
from tests.assets.catalog import mlp_dynamic_batch
from tests.distributed.conftest import BROKEN

# nudenet's classes are rare in these photos: a low threshold gives every image something to compare
OPTIONS = {"conf": 0.05}


def _rows(folder) -> dict[str, dict]:
    """path → row, without what differs between runs (timings, which process did it)."""
    rows = {}
    for row in ResultStore(folder).rows():
        assert row["path"] not in rows, f"two rows for {row['path']}"
        rows[row["path"]] = {k: v for k, v in row.items() if k not in ("timing_ms", "worker")}
    return rows


def _kill_a_busy_actor(ray) -> int | None:
    """SIGKILL a batch-inference actor of this Ray while it runs a batch (Ray titles it ``...).submit``);
    its pid, or None when none ran a batch within 60 s."""
    raylet = psutil.Process(ray._private.worker._global_node.all_processes["raylet"][0].process.pid)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for process in raylet.children(recursive=True):
            try:
                if "_RayPredictActor)).submit" in " ".join(process.cmdline()):
                    process.send_signal(signal.SIGKILL)
                    return process.pid
            except psutil.NoSuchProcess:
                continue
        time.sleep(0.005)
    return None


@pytest.mark.slow
def test_ray_engine_gives_the_local_rows_resumes_and_reports_broken_images(local_ray, detector, photo_folder, tmp_path):
    images = sorted(p for p in photo_folder.iterdir())
    assert len(images) >= 200

    local = predict(
        detector, photo_folder, tmp_path / "local", PredictSettings(pipeline_options=OPTIONS), Execution(engine="local")
    )
    expected = _rows(tmp_path / "local")
    local_pid = os.getpid()
    assert local.processed == len(images) == len(expected) and local.errors == len(BROKEN)
    assert sum(len(r["results"]) for r in expected.values()) > len(images) // 2  # detections to compare
    errors = {p.split("/")[-1]: r["error"] for p, r in expected.items() if r["status"] == "error"}
    assert set(errors) == set(BROKEN)
    assert "is empty (0 bytes)" in errors["empty.png"]
    assert "is not an image OpenCV can read" in errors["broken.jpg"]
    assert "truncated" in errors["truncated.jpg"]

    # A run that was cut short: the Ray run must do exactly the rows that are missing ...
    resumed = tmp_path / "ray"
    resumed.mkdir()
    lines = next((tmp_path / "local").glob("part-*.jsonl")).read_text().splitlines()
    (resumed / "part-earlier.jsonl").write_text("\n".join(lines[:120]) + "\n" + lines[120][:40])  # a torn last line
    shutil.copy(tmp_path / "local" / "run.json", resumed / "run.json")  # the same model and settings made them
    # ... and one of its actors is killed while it runs a batch: Ray restarts it and retries that batch.
    # The kill comes from a thread of its own, started when the run starts: Ray Data runs ahead of the
    # rows this process has written, so waiting for a written batch could find every batch already done.
    progress, killed = [], []
    killer = threading.Thread(target=lambda: killed.append(_kill_a_busy_actor(local_ray)), daemon=True)

    def start_the_killer(done: int, total: int) -> None:
        progress.append((done, total))
        if not killer.is_alive() and not killed:
            killer.start()

    summary = predict(
        detector,
        photo_folder,
        resumed,
        PredictSettings(pipeline_options=OPTIONS),
        Execution(engine="ray", actors=2, cpus_per_actor=1),
        progress=start_the_killer,
    )
    killer.join(timeout=60)
    assert killed and killed[0] is not None, "no batch-inference actor was running a batch"
    assert (summary.skipped, summary.processed, summary.actors) == (120, len(images) - 120, 2)
    assert progress[0] == (0, len(images) - 120) and progress[-1] == (len(images) - 120, len(images) - 120)
    assert _rows(resumed) == expected  # same detections, same error rows, one row per image: nothing lost or doubled
    new_rows = [r for r in ResultStore(resumed).rows() if r["worker"]["pid"] != local_pid]
    assert {r["worker"]["threads"] for r in new_rows} == {1}  # the backend got the actor's one CPU as its threads
    assert summary.actor_crashes == 1  # from Ray's actor table: the one kill
    assert killed[0] not in {r["worker"]["pid"] for r in new_rows if r["worker"]["restarted"]}

    again = predict(
        detector, photo_folder, resumed, PredictSettings(pipeline_options=OPTIONS), Execution(engine="ray", actors=2)
    )
    assert (again.skipped, again.processed) == (len(images), 0)


def test_predict_cli_runs_a_folder_on_ray(local_ray, detector, photo_folder, tmp_path):
    folder = tmp_path / "some"
    folder.mkdir()
    for image in sorted(photo_folder.glob("dog_*.jpg"))[:6]:
        shutil.copy(image, folder)
    shutil.copy(photo_folder / "broken.jpg", folder)
    result = CliRunner().invoke(app, ["predict", str(detector), str(folder), "--engine", "ray", "--actors", "1",
                                      "--out", str(tmp_path / "out"), "--conf", "0.05"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "7 rows written" in result.output and "(1 with an error, 0 of 7 inputs done before" in result.output
    rows = [
        json.loads(line) for part in (tmp_path / "out").glob("part-*.jsonl") for line in part.read_text().splitlines()
    ]
    assert sorted(r["path"].split("/")[-1] for r in rows) == sorted(p.name for p in folder.iterdir())
    assert {r["backend"] for r in rows} == {"onnxruntime"}
    again = CliRunner().invoke(
        app,
        ["predict", str(detector), str(folder), "--engine", "ray", "--out", str(tmp_path / "out"), "--conf", "0.05"],
    )
    assert (
        again.exit_code == 0 and f"nothing to do: all 7 inputs already have a row in {tmp_path / 'out'}" in again.output
    )


def test_missing_ray_names_the_extra(monkeypatch, detector, photo_folder, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    with pytest.raises(
        BackendUnavailableError, match=r"ray \| cannot be imported .*Hint: pip install 'deploykit\[ray\]'"
    ):
        predict(detector, photo_folder, tmp_path / "out", execution=Execution(engine="ray"))
    result = CliRunner().invoke(app, ["predict", str(detector), str(photo_folder), "--engine", "ray", "--out",
                                      str(tmp_path / "out")])  # fmt: skip
    assert result.exit_code == 1
    assert "error: ray | cannot be imported" in result.output and "deploykit[ray]" in result.output
    result = CliRunner().invoke(app, ["bench", str(detector), "--fleet", "auto"])
    assert result.exit_code == 1 and "deploykit[ray]" in result.output


def test_usage_errors_name_the_problem(detector, photo_folder, tmp_path):
    with pytest.raises(UsageError, match=r"engine 'spark' \| is not local or ray"):
        predict(detector, photo_folder, tmp_path / "out", execution=Execution(engine="spark"))
    with pytest.raises(UsageError, match=r"is the input folder"):
        predict(detector, photo_folder, photo_folder, execution=Execution(engine="local"))
    with pytest.raises(UsageError, match=r"must be positive"):
        predict(detector, photo_folder, tmp_path / "out", execution=Execution(engine="local", actors=0))
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match=r"inputs .* \| holds no input file \(\.jpg"):
        predict(detector, tmp_path / "empty", tmp_path / "out", execution=Execution(engine="local"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match=r"is a file, expected a folder"):
        predict(detector, photo_folder, tmp_path / "file", execution=Execution(engine="local"))
    for engine in ("local", "ray"):  # the model cannot be a classifier: said before any row, nothing written
        with pytest.raises(UsageError, match=r"model .320n.onnx. \| output output0: .* is not a classification layout"):
            predict(
                detector,
                photo_folder,
                tmp_path / engine / "out",
                PredictSettings(task="classify"),
                Execution(engine=engine),
            )
        assert not (tmp_path / engine).exists()
    result = CliRunner().invoke(app, ["predict", str(detector), str(photo_folder), "--engine", "ray"])
    assert result.exit_code == 2 and "--engine ray | needs --output FOLDER" in result.output


@pytest.mark.parametrize("engine", ["local", "ray"])
def test_an_unreadable_input_is_an_error_row(local_ray, engine, detector, photo_folder, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copy(photo_folder / "dog_00.jpg", folder)
    (folder / "gone.jpg").symlink_to(tmp_path / "deleted.jpg")  # listed, but nothing to read
    summary = predict(detector, folder, tmp_path / "out", execution=Execution(engine=engine, actors=1))
    rows = {Path(r["path"]).name: r for r in ResultStore(tmp_path / "out").rows()}
    assert (summary.processed, summary.errors, rows["dog_00.jpg"]["status"]) == (2, 1, "ok")
    assert rows["gone.jpg"]["error"].startswith(f"input '{folder / 'gone.jpg'}' | cannot be read: [Errno 2]")


def test_a_uri_argument_keeps_its_scheme():
    from deploykit.cli.fleet_cmd import source_text

    assert source_text(Path("s3://bucket/frames/")) == "s3://bucket/frames"
    assert source_text(Path("/data/frames")) == "/data/frames"


def test_tensor_task_runs_npy_files_on_ray_against_the_reference_evaluator(local_ray, tmp_path):
    from onnx.reference import ReferenceEvaluator

    model = tmp_path / "mlp.onnx"
    onnx.save(mlp_dynamic_batch(), model)
    folder = tmp_path / "arrays"
    folder.mkdir()
    rng = np.random.default_rng(0)
    inputs = {}
    for index in range(10):
        x = rng.uniform(-1, 1, (8,) if index % 2 else (3, 8)).astype(np.float32)  # (8,) gets the batch axis
        np.save(folder / f"x{index:02d}.npy", x)
        inputs[f"x{index:02d}.npy"] = x if x.ndim == 2 else x[None]
    inputs["named.npz"] = rng.uniform(-1, 1, (2, 8)).astype(np.float32)
    np.savez(folder / "named.npz", x=inputs["named.npz"])
    (folder / "bad.npy").write_bytes(b"not numpy")
    np.save(folder / "wrong.npy", np.zeros((2, 5), np.float32))

    summary = predict(
        model, folder, tmp_path / "out", PredictSettings(task="tensor"), Execution(engine="ray", actors=2)
    )
    assert (summary.processed, summary.errors) == (13, 2)
    rows = {Path(r["path"]).name: r for r in ResultStore(tmp_path / "out").rows()}
    reference = ReferenceEvaluator(onnx.load(model))  # an independent implementation of the graph
    for name, x in inputs.items():
        (expected,) = reference.run(None, {"x": x})
        got = rows[name]["results"]["y"]
        assert rows[name]["status"] == "ok" and got["shape"] == list(expected.shape) and got["dtype"] == "float32"
        np.testing.assert_allclose(np.array(got["data"], np.float32), expected, rtol=1e-5, atol=1e-6)
    assert "array file" in rows["bad.npy"]["error"] and "is not a .npy or .npz numpy file" in rows["bad.npy"]["error"]
    assert rows["wrong.npy"]["status"] == "error" and "'x'" in rows["wrong.npy"]["error"]


def test_a_resume_never_keeps_rows_another_model_or_other_settings_made(detector, photo_folder, tmp_path):
    """predict B into A's folder used to "resume" and keep A's rows as B's (issue #21)."""
    folder = tmp_path / "few"
    folder.mkdir()
    for image in sorted(photo_folder.glob("dog_*.jpg"))[:2]:
        shutil.copy(image, folder)
    out = tmp_path / "rows"
    predict(detector, folder, out, PredictSettings(pipeline_options=OPTIONS), Execution(engine="local"))
    other = tmp_path / "other.onnx"
    model = onnx.load(detector)
    entry = model.metadata_props.add()
    entry.key, entry.value = "note", "another model"
    onnx.save(model, other)
    with pytest.raises(
        UsageError, match=r"holds the rows of another run \(model_sha256: '[0-9a-f]{64}' there, '[0-9a-f]{64}' now"
    ):
        predict(other, folder, out, PredictSettings(pipeline_options=OPTIONS), Execution(engine="local"))
    with pytest.raises(UsageError, match=r"holds the rows of another run \(top_k: 5 there, 3 now\)"):
        predict(detector, folder, out, PredictSettings(pipeline_options=OPTIONS, top_k=3), Execution(engine="local"))
    again = predict(detector, folder, out, PredictSettings(pipeline_options=OPTIONS), Execution(engine="local"))
    assert (again.skipped, again.processed) == (2, 0)  # the same run resumes


def test_rows_without_a_record_of_their_run_are_not_resumed(detector, photo_folder, tmp_path):
    out = tmp_path / "rows"
    out.mkdir()
    (out / "part-old.jsonl").write_text('{"path": "x.jpg", "status": "ok"}\n')
    with pytest.raises(
        UsageError, match=r"holds result rows but no run.json saying which model and settings made them"
    ):
        predict(detector, photo_folder, out, PredictSettings(pipeline_options=OPTIONS), Execution(engine="local"))


def test_two_runs_at_once_on_one_folder_are_refused(detector, photo_folder, tmp_path):
    """The second run would write every row again (12 rows for 6 images): it is refused, by name."""
    out = tmp_path / "rows"
    holder = (  # what a first run holds while it writes, in its own process
        "import sys; from deploykit.distributed.store import ResultStore\n"
        "with ResultStore(sys.argv[1]).exclusive():\n    print('held', flush=True); sys.stdin.read()"
    )
    first = subprocess.Popen([sys.executable, "-c", holder, str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert first.stdout is not None and first.stdout.readline().strip() == b"held"
        with pytest.raises(
            ResourceError, match=rf"another deploykit run \(process {first.pid}\) is writing this folder"
        ):
            predict(detector, photo_folder, out, PredictSettings(pipeline_options=OPTIONS), Execution(engine="local"))
    finally:
        first.communicate(timeout=30)
    assert not out.exists()


def test_an_exported_mnn_model_runs_on_ray_with_its_interface_file(local_ray, detector, photo_folder, tmp_path):
    """An exported .mnn (and a bundle that chose MNN or LiteRT) reads the ONNX model's names, input size and
    labels from the .json beside it: the actors were sent the .mnn alone and died at start ("has a dynamic
    input size and no size in its metadata"), though the local probe had opened it."""
    from deploykit.backends.registry import get_backend
    from deploykit.export_mnn import export_mnn
    from tests.assets.paths import missing_asset

    if get_backend("mnn").unavailable_reason():
        missing_asset("the mnn backend's runtime", get_backend("mnn").unavailable_reason() or "")
    export_mnn(detector, tmp_path / "m.mnn")
    photos = tmp_path / "photos"
    photos.mkdir()
    for photo in sorted(p for p in photo_folder.iterdir() if p.name not in BROKEN)[:4]:
        shutil.copy(photo, photos)
    settings = PredictSettings(backend="mnn", pipeline_options=OPTIONS)
    local = predict(tmp_path / "m.mnn", photos, tmp_path / "local", settings, Execution(engine="local"))
    on_ray = predict(tmp_path / "m.mnn", photos, tmp_path / "ray", settings, Execution(engine="ray", actors=1))
    assert local.processed == on_ray.processed == 4 and local.errors == on_ray.errors == 0
    local_rows, ray_rows = _rows(tmp_path / "local"), _rows(tmp_path / "ray")
    assert local_rows.keys() == ray_rows.keys()
    for path, row in local_rows.items():
        assert [r["label"] for r in ray_rows[path]["results"]] == [r["label"] for r in row["results"]], path


def test_the_files_that_travel_are_the_ones_the_backend_reads(tmp_path):
    """One rule for ".json beside a native file": the file the MNN backend reads the interface from is
    the one that travels with the model; beside an .onnx it is not the model's and stays."""
    from deploykit.backends.converted import interface_file
    from deploykit.backends.registry import get_backend
    from deploykit.distributed.batch import model_files
    from deploykit.errors import ModelError

    native, onnx_file = tmp_path / "m.mnn", tmp_path / "n.onnx"
    for path in (native, onnx_file):
        path.write_bytes(b"model")
        interface_file(path).write_text("not json")
    assert list(model_files(native, "mnn")) == ["m.mnn", "m.json"]
    assert list(model_files(native)) == ["m.mnn", "m.json"]  # no backend named: the backends that read .mnn
    assert list(model_files(onnx_file, "onnxruntime")) == ["n.onnx"]
    param = tmp_path / "p.param"
    for path in (param, param.with_suffix(".bin"), interface_file(param)):
        path.write_bytes(b"ncnn")
    assert list(model_files(param, "ncnn")) == ["p.param", "p.bin", "p.json"]
    with pytest.raises(ModelError, match=r"its interface file m\.json cannot be read"):
        get_backend("mnn").conversion.recorded_interface(native)


def test_a_darknet_cfg_travels_to_ray_with_its_weights(local_ray, tmp_path):
    """A .cfg's weights are part of its file set (OpenCV's ``weights`` option names them): they travel with
    it, and on the node the option names the copy beside the .cfg's, not the driver's path."""
    from deploykit.distributed.batch import model_files, model_on_this_node, options_naming_files, options_on_this_node
    from tests.backends.test_errors import _tiny_darknet

    (tmp_path / "model").mkdir()
    (tmp_path / "trained").mkdir()
    cfg, blob, _, _ = _tiny_darknet(tmp_path / "model")
    weights = blob.rename(tmp_path / "trained" / blob.name)  # the weights live apart from the .cfg
    options = {"weights": str(weights), "threads": 1}
    files = model_files(cfg, "opencv", options)
    assert sorted(files) == ["tiny.cfg", "tiny.weights"]
    named = options_naming_files(options, files, cfg)
    assert named == {"weights": "tiny.weights"}

    def on_node(model: list, named: dict) -> tuple[str, dict, bytes]:
        here = model_on_this_node(local_ray.get(model[0]), cfg.name)
        there = options_on_this_node(options, named, here)
        return str(here), there, Path(there["weights"]).read_bytes()

    here, there, data = local_ray.get(local_ray.remote(on_node).remote([local_ray.put(files)], named))
    assert Path(there["weights"]) == Path(here).parent / "tiny.weights" and there["threads"] == 1
    assert Path(here).read_bytes() == cfg.read_bytes() and data == weights.read_bytes()


def test_two_model_files_of_one_name_cannot_travel_together(tmp_path):
    from deploykit.distributed.batch import model_files

    (tmp_path / "a").mkdir()
    cfg = tmp_path / "a" / "yolo.cfg"
    cfg.write_text("[net]\n")
    said = r"model 'yolo\.cfg' \| its files travel to the workers into one folder, and yolo\.cfg names two of them"
    with pytest.raises(UsageError, match=said):
        model_files(cfg, "opencv", {"weights": str(tmp_path / "yolo.cfg")})
