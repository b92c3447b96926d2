"""INT8 and float16 models from float ONNX models, with their accuracy delta and speedup measured.

``quantize`` (in ``api``) is the entry point; ``calibration`` turns images into calibration and
held-out samples, ``graph`` holds the graph facts (already quantized? the YOLO head?), ``engines``
wraps ONNX Runtime, NNCF and onnxconverter-common, ``evaluate`` measures the result.
"""

from deploykit.quantize.api import QuantizeReport, parse_drop, quantize, read_metadata

__all__ = ["QuantizeReport", "parse_drop", "quantize", "read_metadata"]
