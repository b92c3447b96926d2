"""Screening's choices that do not depend on the clock: a candidate whose sibling (same model file,
backend, device and precision, float layers as exact or more) did not run is not screened again,
and says whose failure it repeats; another model file, or a sibling with more exact float layers,
still runs; and a failed first look at a backend's precision hands it to another model file next."""

from __future__ import annotations

import time
from pathlib import Path

from deploykit.bench.config import BenchConfig
from deploykit.model import read_interface
from deploykit.optimize.candidates import CandidateState
from deploykit.optimize.results import Variant
from deploykit.optimize.rounds import Search

ORT_INT8 = Variant("int8-ort", "m.int8-ort.onnx", "int8")
NNCF_INT8 = Variant("int8-nncf", "m.int8-nncf.onnx", "int8")
FAILURE = "did not run: backend 'ncnn' | cannot run 'm.int8-ort.onnx': ncnn has no layer for operators pnnx.Expression"


def _state(variant: Variant, layers: str, threads: int) -> CandidateState:
    config = BenchConfig("ncnn", "cpu", threads=threads, precision="int8", options={"precision": layers})
    label = f"ncnn:cpu t{threads} int8 {variant.name} (float layers {layers})"
    return CandidateState(label, variant, Path(variant.file), config, 0)


def _search(model: Path, folder: Path) -> Search:
    """A search over ``model`` with a minute to go, whose states a test sets by hand."""
    return Search(
        model,
        read_interface(model),
        folder,
        scenario="singlestream",
        max_drop=0.01,
        deadline=time.perf_counter() + 60,
        timeout_s=60,
        progress=None,
    )


def test_a_sibling_of_a_candidate_that_did_not_run_is_not_screened_again(classifier_path, tmp_path):
    search = _search(classifier_path, tmp_path)
    failed = _state(ORT_INT8, "f32", 2)
    failed.stopped = FAILURE
    bf16_layers, fewer_threads, other_file = (
        _state(ORT_INT8, "bf16", 2),
        _state(ORT_INT8, "f32", 1),
        _state(NNCF_INT8, "f32", 2),
    )
    search.states = [failed, bf16_layers, fewer_threads, other_file]
    for sibling in (bf16_layers, fewer_threads):
        assert search._did_not_run_before(sibling) == f"not screened: {failed.label} {FAILURE}"
    assert search._did_not_run_before(other_file) is None

    failed_bf16 = _state(NNCF_INT8, "bf16", 2)
    failed_bf16.stopped = FAILURE
    more_exact = _state(NNCF_INT8, "f32", 1)
    search.states = [failed_bf16, more_exact]
    assert search._did_not_run_before(more_exact) is None  # bf16 float layers failing says nothing of f32's


def test_a_first_look_that_fails_hands_its_precision_to_another_model_file_next(classifier_path, tmp_path):
    """The first look at ncnn's INT8 did not run: the next candidate screened is ncnn's INT8 of the
    other model file (promoted before the other precisions' second looks), not a float-layer sibling
    of the file that failed."""
    search = _search(classifier_path, tmp_path)
    failed, same_file, other_file = _state(ORT_INT8, "f32", 2), _state(ORT_INT8, "bf16", 2), _state(NNCF_INT8, "f32", 2)
    bf16 = BenchConfig("ncnn", "cpu", threads=2, precision="bf16")
    between = CandidateState("ncnn:cpu t2 bf16 float", Variant("float", "m.onnx", "f32"), Path("m.onnx"), bf16, 0)
    for state in (failed, between, same_file, other_file):
        state.representative = True
    failed.first_of_precision = between.first_of_precision = True
    failed.stopped = FAILURE
    search.states = [failed, between, same_file, other_file]
    search._promote_next_of_precision(0)
    assert search.states == [failed, other_file, between, same_file]
    assert other_file.first_of_precision and not same_file.first_of_precision
