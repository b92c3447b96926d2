"""One ONNX → LiteRT conversion with onnx2tf, run by the ``litert`` converter environment's Python.

It imports only the standard library, numpy and onnx2tf (deploykit is not installed there): the
job comes as JSON on stdin, the answer is one ``DEPLOYKIT-RESULT`` line, an error crosses as
deploykit's error data (``DeployKitError.to_dict``), as with deploykit's other workers.

onnx2tf reads the calibration sample ``calibration_image_sample_data_20x128x128x3_float32.npy``
from the working directory and downloads it when it is missing: the job writes a seeded one
there first, so nothing is fetched (the environment's proxies point at a closed port besides).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
import traceback
from pathlib import Path
from typing import Any

RESULT_PREFIX = "DEPLOYKIT-RESULT "
SAMPLE_NAME = "calibration_image_sample_data_20x128x128x3_float32.npy"
WRITTEN = {"f32": "float32", "f16": "float16", "int8": "dynamic_range_quant"}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def send(result: dict[str, Any]) -> None:
    stream = sys.__stdout__ or sys.stdout
    stream.write(RESULT_PREFIX + json.dumps(result) + "\n")
    stream.flush()


def failure(problem: str, hint: str) -> dict[str, Any]:
    return {
        "status": "error",
        "error_data": {
            "type": "UnsupportedModelError",
            "subject": "backend 'litert'",
            "problem": problem,
            "hint": hint,
        },
    }


def write_sample(directory: Path) -> None:
    """onnx2tf's sample images (20 × 128 × 128 × 3 in [0, 1]), seeded: it checks ops on them, and
    only full-integer quantization (not done here) would calibrate on them."""
    import numpy as np

    rng = np.random.default_rng(0)
    np.save(directory / SAMPLE_NAME, rng.random((20, 128, 128, 3), dtype=np.float32))


def reason(log: Path, exc: BaseException | None) -> str:
    """onnx2tf's own last words (it prints its errors, then exits), else the exception's last line."""
    lines = []
    if log.is_file():
        text = _ANSI.sub("", log.read_text(errors="replace"))
        lines = [line.strip() for line in text.splitlines() if "ERROR" in line or "Error" in line]
    if lines:
        return " / ".join(lines[-3:])
    if exc is not None and not isinstance(exc, SystemExit):
        return traceback.format_exception_only(type(exc), exc)[-1].strip()
    return "onnx2tf stopped without saying why"


def convert(job: dict[str, Any]) -> dict[str, Any]:
    import onnx2tf

    out = Path(job["output"])
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    os.chdir(work)
    write_sample(work)
    model = Path(job["model"])
    # a copy, never a link: onnx2tf writes the model back to its input path when it fixes input shapes
    source = work / "model.onnx"
    shutil.copyfile(model, source)
    log = out / "onnx2tf.log"
    shapes = [f"{name}:{','.join(str(d) for d in shape)}" for name, shape in job["shapes"].items()]
    caught: BaseException | None = None
    with open(log, "w") as stream, contextlib.redirect_stdout(stream):
        try:
            onnx2tf.convert(
                input_onnx_file_path=str(source),
                output_folder_path=str(work / "saved_model"),
                output_signaturedefs=True,
                copy_onnx_input_output_names_to_tflite=True,
                output_dynamic_range_quantized_tflite=job["weights"] == "int8",
                overwrite_input_shape=shapes or None,
                verbosity="error",
            )
        except BaseException as exc:  # onnx2tf ends with sys.exit(1) after printing its error
            caught = exc
    written = work / "saved_model" / f"model_{WRITTEN[job['weights']]}.tflite"
    if not written.is_file():
        return failure(
            f"onnx2tf could not convert '{model.name}': {reason(log, caught)}.",
            "try another backend, or 'deploykit inspect' the model for ops onnx2tf lacks.",
        )
    shutil.copyfile(written, out / "model.tflite")
    shutil.rmtree(work, ignore_errors=True)
    import onnx2tf as module

    return {"status": "ok", "onnx2tf": getattr(module, "__version__", "")}


def main() -> None:
    job = json.loads(sys.stdin.read())
    with contextlib.redirect_stdout(sys.stderr):
        result = convert(job)
    send(result)


if __name__ == "__main__":
    main()
