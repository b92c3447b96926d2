"""The screening order: one candidate of every precision class before any thread variant, the
reference first, then by expected gain (int8, then bf16/f16, then f32)."""

from __future__ import annotations

from pathlib import Path

from deploykit.bench.config import BenchConfig
from deploykit.optimize.candidates import CandidateState, screening_order
from deploykit.optimize.results import Variant

FLOAT = Variant("float", "m.onnx", "f32")
INT8 = Variant("int8-ort", "m.int8-ort.onnx", "int8")


def _state(index: int, variant: Variant, backend: str, precision: str, threads: int, options: dict) -> CandidateState:
    config = BenchConfig(backend, "cpu", threads=threads, precision=precision, options=options)
    return CandidateState(f"{backend} t{threads} {precision} {variant.name} {options}", variant, Path("m.onnx"), config,
                          index)  # fmt: skip


def test_every_precision_class_is_screened_before_any_thread_variant():
    states = []
    for variant, backend, precision, options in [
        (FLOAT, "openvino", "f32", {}), (FLOAT, "openvino", "bf16", {}), (FLOAT, "onnxruntime", "f32", {}),
        (INT8, "onnxruntime", "int8", {}), (INT8, "openvino", "int8", {"precision": "bf16"}),
        (INT8, "openvino", "int8", {"precision": "f32"}),
    ]:  # fmt: skip
        for threads in (1, 2):
            states.append(_state(len(states), variant, backend, precision, threads, options))
    ordered = screening_order(states)
    first, rest = ordered[:6], ordered[6:]
    assert all(s.representative for s in first) and not any(s.representative for s in rest)
    assert {s.precision_class for s in first} == {s.precision_class for s in states}  # every class once
    assert all(s.config.threads == 2 for s in first) and all(s.config.threads == 1 for s in rest)
    assert first[0].config.backend == "onnxruntime" and first[0].exact  # the reference: every verdict needs it
    gains = [s.config.precision for s in first[1:]]
    assert gains == ["int8", "int8", "int8", "bf16", "f32"]
    assert [s.precision_class for s in rest] == [s.precision_class for s in first]  # then thread variants alike
