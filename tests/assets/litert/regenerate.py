"""Rebuild ``conv_bn_act.tflite``/``.json`` and ``mlp_dynamic_batch.tflite``/``.json`` from the catalog's models.

The LiteRT tests open these committed files, so they run where no converter environment exists (CI):
each .tflite is what ``deploykit export litert`` writes for its model (onnx2tf in the ``litert``
converter environment; NHWC inside, the ONNX names in its signature; a dynamic batch converted at 1),
the .json its name, layout and batch map.
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
from tests.assets.catalog import conv_bn_act, mlp_dynamic_batch  # noqa: E402

if __name__ == "__main__":
    for factory in (conv_bn_act, mlp_dynamic_batch):
        with tempfile.TemporaryDirectory() as scratch:
            source = Path(scratch) / f"{factory.__name__}.onnx"
            onnx.save(factory(), source)
            done = export_litert(source, HERE / f"{factory.__name__}.tflite")
        print(done.tflite, done.io, [v.status for v in done.verdicts])
