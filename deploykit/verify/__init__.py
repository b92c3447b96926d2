"""The one place that says pass or fail: oracles, isolated runs, metrics per precision, verdicts.

- ``compare``: an ONNX file on backends × precisions against onnx's reference evaluator
  (``deploykit compare``, recipes, ``predict --check``);
- ``gate``: a converter's output against the source framework's outputs (``convert``);
- ``Verdict`` / ``VerificationReport``: what every command prints and stores;
- ``VerifySettings`` / ``ThresholdOverrides``: what a verification is asked to do, as values;
- ``Thresholds``: element-wise tolerances for f32/f64, cosine/SNR and task metrics for
  bf16/f16/int8.

This package imports no ``bench`` or CLI module.
"""

from deploykit.tasks.base import TaskResult
from deploykit.verify.check import compare, gate, run_oracle
from deploykit.verify.metrics import DEFAULT_THRESHOLDS, OutputMetrics, Thresholds, thresholds_for
from deploykit.verify.settings import ThresholdOverrides, VerifySettings
from deploykit.verify.verdict import OracleInfo, Verdict, VerificationReport

__all__ = [
    "DEFAULT_THRESHOLDS",
    "OracleInfo",
    "OutputMetrics",
    "TaskResult",
    "ThresholdOverrides",
    "Thresholds",
    "Verdict",
    "VerificationReport",
    "VerifySettings",
    "compare",
    "gate",
    "run_oracle",
    "thresholds_for",
]
