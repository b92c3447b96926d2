"""A full disk leaves nothing half-written and names the output and the space left (issue #21).

The test mounts a 16 KiB tmpfs (root, as CI runs); where mounting is not allowed it is a missing
asset (a failure under ``make test``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess

import pytest
from typer.testing import CliRunner

from deploykit.cli.main import app
from tests.fuzz.harness import invoke_checked

runner = CliRunner()


def test_a_bench_report_on_a_full_disk_leaves_nothing(catalog_paths, full_disk):
    report = full_disk / "report"
    result = runner.invoke(app, ["bench", str(catalog_paths["conv_bn_act"]), "-b", "ort", "--iterations", "3",
                                 "--report", str(report)])  # fmt: skip
    assert result.exit_code == 1
    assert (
        f"output {report / 'report.json'}" in result.stderr
        and "could not be written: the disk is full" in result.stderr
    )
    assert "free in" in result.stderr and "nothing was left there" in result.stderr
    assert list(full_disk.iterdir()) == []  # no report.csv/json/md, no temporary file, no folder


def _fill(folder):
    filler = folder / "filler"
    descriptor = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(descriptor, b"\0" * 512)
    except OSError:
        pass
    finally:
        os.close(descriptor)
    return filler


def test_a_model_written_onto_a_full_disk_leaves_nothing(catalog_paths, full_disk):
    filler = _fill(full_disk)  # the small model would fit in 16 KiB: leave no room at all
    output = full_disk / "fp16.onnx"
    result = runner.invoke(app, ["quantize", str(catalog_paths["conv_bn_act"]), "--fp16", "-o", str(output)])
    assert result.exit_code == 1, result.output
    assert f"output {output} | could not be written: the disk is full" in result.stderr
    assert list(full_disk.iterdir()) == [filler]


@pytest.mark.parametrize("converter", ["darknet", "torch"])
def test_a_conversion_onto_a_full_disk_names_the_output(tiny, full_disk, converter):
    """Issue 21 sweep: 'OSError | No space left on device.' with no path, or blamed on the exporters."""
    filler = _fill(full_disk)
    output = full_disk / "m.onnx"
    source = [tiny["cfg"], tiny["weights"]] if converter == "darknet" else [f"{tiny['factory']}:tiny_cnn"]
    extra = [] if converter == "darknet" else ["-i", "x:1x3x8x8"]
    result = runner.invoke(app, ["convert", converter, *map(str, source), "-o", str(output), *extra])
    assert result.exit_code == 1, result.output
    assert f"output {output} | could not be written: the disk is full" in " ".join(result.stderr.split())
    assert "exporter" not in result.stderr and list(full_disk.iterdir()) == [filler]


def test_a_file_size_limit_in_the_worker_is_said_not_blamed_on_the_runtime(tiny, tmp_path):
    """Issue 21 sweep: under ulimit -f the worker could not write its outputs back; the message blamed ONNX Runtime."""
    import sys

    code = "import sys; from deploykit.cli.main import main; sys.argv[0] = 'deploykit'; main()"
    command = f"ulimit -f 8; exec '{sys.executable}' -c \"{code}\" run '{tiny['dynamic']}' -i x=random:100000x4"
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    shown = " ".join(done.stderr.split())
    assert "worker | ran the model, but could not hand its outputs back: File too large" in shown
    assert "report it to the runtime" not in shown and "Traceback" not in shown


def test_predict_rows_on_a_full_disk_keep_whole_rows_and_resume(tiny, full_disk, tmp_path):
    """Issue 21 sweep: a part file was cut mid-row and '.run.json.*.tmp' was left; now the part ends at its last
    whole row, the message says how many rows are kept, and the same command resumes after them."""
    import json
    import tempfile
    from pathlib import Path

    # the run file beside the parts lists every input: photos under a short path of their own keep its size
    # the same however long pytest's tmp_path is (a worker's is longer), so the 16 KiB hold it and some rows
    photos = Path(tempfile.mkdtemp(prefix="dk-"))
    try:
        for index in range(80):  # ~300 bytes a row: more than 16 KiB
            (photos / f"i{index:02d}.jpg").write_bytes(tiny["image"].read_bytes())
        rows = full_disk / "rows"
        result = runner.invoke(app, ["predict", str(tiny["classifier"]), str(photos), "--out", str(rows)])
        assert result.exit_code == 1, result.output
        shown = " ".join(result.stderr.split())
        assert (
            f"output {rows} | could not be written: the disk is full" in shown and "whole rows written before" in shown
        )
        kept = [json.loads(line) for part in rows.glob("part-*.jsonl") for line in part.read_text().splitlines()]
        assert 0 < len(kept) < 80 and not list(rows.glob(".*.tmp"))  # every line is a whole row
        subprocess.run(["mount", "-o", "remount,size=64k", str(full_disk)], check=True)
        again = runner.invoke(app, ["predict", str(tiny["classifier"]), str(photos), "--out", str(rows)])
        assert again.exit_code == 0, again.output
        assert f"{len(kept)} of 80 inputs done before" in again.output
    finally:
        shutil.rmtree(photos, ignore_errors=True)


def test_predict_onto_a_disk_already_full_leaves_no_empty_folder(tiny, full_disk, tmp_path):
    """Sweep 21c: the first write (run.json) failed, the message said 'nothing was left there', and the
    empty output folder stayed."""
    (full_disk / "fill").write_bytes(b"\0" * 12288)
    with contextlib.suppress(OSError):  # top the tmpfs up to the last byte
        with open(full_disk / "fill2", "wb") as handle:
            handle.write(b"\0" * 16384)
    rows = full_disk / "rows"
    result = runner.invoke(app, ["predict", str(tiny["classifier"]), str(tiny["image"]), "-o", str(rows)])
    assert result.exit_code == 1, result.output
    assert "could not be written: the disk is full" in " ".join(result.stderr.split())
    assert not rows.exists()


def test_quantize_onto_an_almost_full_disk_says_no_space(tiny, full_disk, tmp_path):
    """ONNX Runtime's quantizer, out of room half-way, reported the model it read back half-written ("Failed to
    find proper ai.onnx domain"): the disk is named instead (``quantize.engines.raise_if_out_of_room``)."""
    photos = tmp_path / "photos"
    photos.mkdir()
    for index in range(12):
        shutil.copy(tiny["image"], photos / f"p{index}.jpg")
    (full_disk / "filler").write_bytes(b"\0" * 11 * 1024)  # about 4 KiB left: the quantized model does not fit
    output = full_disk / "q.onnx"
    result = invoke_checked(["quantize", tiny["classifier"], "--calibrate", photos, "-o", output], writes=[output])
    assert result.exit_code == 1, result.output
    said = " ".join(result.stderr.split())
    assert f"output {output} | could not be written: the disk is full" in said, said
    assert "ai.onnx domain" not in said


def test_predict_json_lines_on_a_full_disk_keep_whole_lines_and_resume(tiny, full_disk, tmp_path):
    """-o FILE.jsonl: the line that did not fit is taken back, the message says how many frames are kept, and
    the same command, with room again, runs only the others."""
    import json

    photos = tmp_path / "photos"
    photos.mkdir()
    for index in range(80):  # ~300 bytes a line: more than 16 KiB
        (photos / f"i{index:02d}.jpg").write_bytes(tiny["image"].read_bytes())
    out = full_disk / "rows.jsonl"
    result = runner.invoke(app, ["predict", str(tiny["classifier"]), str(photos), "-o", str(out)])
    assert result.exit_code == 1, result.output
    header, *kept = [json.loads(line) for line in out.read_text().splitlines()]  # every line whole
    shown = " ".join(result.stderr.split())
    assert f"--output '{out}' | the disk is full" in shown and f"the {len(kept)} frames before are kept whole" in shown
    assert 0 < len(kept) < 80 and header["deploykit"] == "predict"
    subprocess.run(["mount", "-o", "remount,size=64k", str(full_disk)], check=True)
    again = runner.invoke(app, ["predict", str(tiny["classifier"]), str(photos), "-o", str(out)])
    assert again.exit_code == 0, again.output
    assert f"{len(kept)} frames already there are not run again" in " ".join(again.stderr.split())
    names = [json.loads(line)["name"] for line in out.read_text().splitlines()[1:]]
    assert names == [f"i{index:02d}.jpg" for index in range(80)]
