"""The screening order: one candidate of every precision class before any thread variant, one of
every precision a backend offers (``Backend.precisions``) before a second INT8 variant, the
reference first, then by expected gain (int8, then bf16/f16, then f32); and which backends a default
search takes (LiteRT only once its converter environment is ready)."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploykit.backends.registry import get_backend
from deploykit.bench.config import BenchConfig
from deploykit.cache import cache_dir
from deploykit.optimize.candidates import CandidateState, expand, screening_order, search_specs
from deploykit.optimize.results import Variant
from deploykit.verify.check import default_backend_specs

CACHE = cache_dir()  # read at import: the package's fixture points DEPLOYKIT_CACHE_DIR at a folder of its own

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
    assert gains == ["int8", "int8", "bf16", "f32", "int8"]  # a second INT8 class of openvino after its others
    assert [s.precision_class for s in rest] == [s.precision_class for s in first]  # then thread variants alike


def test_every_precision_a_backend_offers_comes_before_a_second_int8_variant():
    """Two INT8 variants and FP16 on ONNX Runtime and OpenVINO: every precision each backend offers
    here (``Backend.precisions``, and int8) has its first look before any second variant or
    float-layer precision of a precision already looked at, so many INT8 classes cannot use up the
    time a bf16/f16 class needs."""
    variants = [
        (FLOAT, Path("m.onnx")),
        (INT8, Path("m.int8-ort.onnx")),
        (Variant("int8-nncf", "m.int8-nncf.onnx", "int8"), Path("m.int8-nncf.onnx")),
        (Variant("fp16", "m.fp16.onnx", "f16"), Path("m.fp16.onnx")),
    ]
    specs = ["onnxruntime", "openvino:CPU"]
    states, _ = expand(variants, specs, scenario="singlestream", threads=[1, 2], batches=[1])
    offered = {
        (name, device, precision)
        for name, device in (("onnxruntime", "cpu"), ("openvino", "CPU"))
        for precision in [*get_backend(name).precisions(device), "int8"]
    }
    representatives = [s for s in states if s.representative]
    firsts = [s for s in representatives if s.first_of_precision]
    assert {(s.config.backend, s.config.device, s.config.precision) for s in firsts} == offered
    assert representatives[: len(firsts)] == firsts  # every offered precision before a second look at one
    assert states[: len(representatives)] == representatives  # every class before any thread variant
    assert firsts[0].exact and firsts[0].config.backend == "onnxruntime"


def test_litert_without_its_converter_environment_is_listed_as_not_searched_with_the_command(tmp_path, monkeypatch):
    """A default search never creates the converter environment: LiteRT is left out, and said so with
    the reason and the command that readies it; named backends are searched as given."""
    if get_backend("litert").unavailable_reason():
        pytest.skip(f"the litert runtime is not installed: {get_backend('litert').unavailable_reason()}")
    monkeypatch.setenv("DEPLOYKIT_CACHE_DIR", str(tmp_path))
    specs, notes = search_specs(None)
    assert not any(spec.startswith("litert") for spec in specs)
    (note,) = [n for n in notes if n.startswith("litert")]
    assert note.startswith("litert: not searched (converter environment 'litert' | converting ONNX to LiteRT")
    assert "deploykit converters add litert" in note
    assert not (tmp_path / "converters" / "litert").exists()
    assert search_specs(["litert", "onnxruntime"]) == (["litert", "onnxruntime"], [])


@pytest.mark.converter
def test_litert_with_its_converter_environment_is_a_default_candidate(monkeypatch):
    monkeypatch.setenv("DEPLOYKIT_CACHE_DIR", str(CACHE))
    backend = get_backend("litert")
    if backend.unavailable_reason() or backend.conversion.onnx_unavailable_reason():
        pytest.skip(f"no litert converter environment: {backend.conversion.onnx_unavailable_reason()}")
    specs, notes = search_specs(None)
    assert "litert:cpu" in specs and not [n for n in notes if n.startswith("litert")]
    assert default_backend_specs() == [s for s in specs if s != "litert:cpu"]  # compare/bench sweeps unchanged
