"""What one case did on one side (the raw runtime or deploykit), and how outputs are judged.

A case passes when every output matches the ONNX authors' expected output as onnx's own backend
runner judges it (``Runner.assert_similar_outputs``: same shape and dtype, ``assert_allclose``
with the case's rtol/atol, strings equal), with lists for sequences and None for an empty
optional on both sides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

PASS, FAIL, ERROR, NOT_RUN = "pass", "fail", "error", "not run"


@dataclass(frozen=True)
class Outcome:
    """``pass``, ``fail`` (ran, wrong answer), ``error`` (did not run) or ``not run`` (left out of
    the backend's sweep: outside its domain or its sample, ``RawRuntime``), with the reason.

    ``error_type`` is the exception's class name (for deploykit: which ``DeployKitError``).
    """

    status: str
    detail: str = ""
    error_type: str = ""

    @property
    def passed(self) -> bool:
        return self.status == PASS

    def to_dict(self) -> dict[str, str]:
        return {"status": self.status, "detail": self.detail, "error_type": self.error_type}

    @classmethod
    def from_dict(cls, data: dict[str, str]) -> Outcome:
        return cls(data["status"], data.get("detail", ""), data.get("error_type", ""))


def mismatch(expected: list[Any], produced: list[Any], rtol: float, atol: float) -> str | None:
    """Why ``produced`` does not match ``expected`` (None when it does)."""
    from onnx.backend.test.runner import Runner

    if len(produced) != len(expected):
        return f"{len(produced)} outputs, expected {len(expected)}"
    for index, (want, got) in enumerate(zip(expected, produced, strict=True)):
        if want is None or got is None:
            if want is not got:
                return f"output {index} is {_kind(got)}, expected {_kind(want)}"
            continue
        if isinstance(want, list | tuple):
            if not isinstance(got, list | tuple):
                return f"output {index} is {_kind(got)}, expected a sequence"
            reason = mismatch(list(want), list(got), rtol, atol)
            if reason is not None:
                return f"output {index}: {reason}"
            continue
        if not isinstance(got, np.ndarray):
            return f"output {index} is {_kind(got)}, expected an array"
        try:
            Runner.assert_similar_outputs([want], [got], rtol=rtol, atol=atol)
        except (AssertionError, TypeError, ValueError) as exc:
            return f"output {index}: " + " ".join(str(exc).split())[:300]
    return None


def _kind(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, list | tuple):
        return f"a sequence of {len(value)}"
    if isinstance(value, np.ndarray):
        return f"an array {value.dtype}{value.shape}"
    return type(value).__name__
