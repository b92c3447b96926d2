"""Rebuild ``conv_bn_act.tflite`` and ``conv_bn_act.json`` from the catalog's ``conv_bn_act`` ONNX model.

The LiteRT tests open these committed files, so they run where no converter environment exists (CI):
the .tflite is what ``deploykit export litert`` writes for that model (onnx2tf in the ``litert``
converter environment; NHWC inside, the ONNX names in its signature), the .json its name and layout map.
Run it after changing the model or the converter's pins::

    deploykit converters add litert
    .venv/bin/python tests/assets/litert/regenerate.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import onnx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from deploykit.export_litert import export_litert  # noqa: E402
from tests.assets.catalog import conv_bn_act  # noqa: E402

if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as scratch:
        source = Path(scratch) / "conv_bn_act.onnx"
        onnx.save(conv_bn_act(), source)
        done = export_litert(source, HERE / "conv_bn_act.tflite")
    print(done.tflite, done.io, [v.status for v in done.verdicts])
