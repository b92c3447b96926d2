"""Every documented 0.1 call still works, with one ``DeprecationWarning`` that names its replacement
and points at the caller's line; the new call gives the same result."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import onnx
import pytest

import deploykit
from deploykit.deprecation import MovedKeywords, fold_keywords
from deploykit.verify import ThresholdOverrides
from tests.assets.tiny import build_all


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_all(tmp_path_factory.mktemp("tiny"))


def _one_warning(caught: list[warnings.WarningMessage]) -> str:
    deprecations = [w for w in caught if issubclass(w.category, DeprecationWarning) and "deprecated" in str(w.message)]
    assert len(deprecations) == 1, [str(w.message) for w in caught]
    assert deprecations[0].filename == __file__, "the warning points at the caller's line"
    return str(deprecations[0].message)


def test_benchmark_0_1_keywords_and_positional_backends(tiny):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = deploykit.benchmark(tiny["dynamic"], backends=["ort"], iterations=3, warmup=1, isolate=False)
    message = _one_warning(caught)
    assert "benchmark(backends=, iterations=, warmup=, isolate=) is deprecated and goes in the next release" in message
    assert "pass plan=BenchPlan(backends=..., iterations=..., warmup=..., isolate=...)" in message
    new = deploykit.benchmark(tiny["dynamic"], deploykit.BenchPlan(backends=("ort",), iterations=3, warmup=1,
                                                                   isolate=False))  # fmt: skip
    assert [r.config.backend for r in old.rows] == [r.config.backend for r in new.rows] == ["onnxruntime"]
    assert old.settings.to_dict() == new.settings.to_dict()
    with warnings.catch_warnings(record=True) as caught:  # 0.1's second positional: the backends
        warnings.simplefilter("always")
        positional = deploykit.benchmark(tiny["dynamic"], ["ort"], iterations=3, warmup=1, isolate=False)
    assert "pass plan=BenchPlan(backends=..., iterations=..." in _one_warning(caught)
    assert positional.settings.to_dict() == new.settings.to_dict()


def test_compare_takes_verify_models_0_1_keywords(tiny):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = deploykit.compare(tiny["dynamic"], ["ort"], precision="f32", thresholds={"atol": 1e-5}, isolate=False)
    message = _one_warning(caught)
    assert "compare(precision=, thresholds=, isolate=) is deprecated" in message
    assert "pass settings=VerifySettings(precision=..., thresholds=..., isolate=...)" in message
    settings = deploykit.VerifySettings(precision="f32", thresholds=ThresholdOverrides(atol=1e-5), isolate=False)
    new = deploykit.compare(tiny["dynamic"], ["ort"], settings)
    assert [(v.candidate, v.status) for v in old.verdicts] == [(v.candidate, v.status) for v in new.verdicts]
    assert [v.thresholds.atol for v in old.verdicts] == [v.thresholds.atol for v in new.verdicts] == [1e-5]


def test_verify_model_the_0_1_name_of_compare(tiny):
    """The documented 0.1 call: ``verify_model(model, backends, precision=..., inputs=...)``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = deploykit.verify_model(tiny["dynamic"], ["ort"], precision="f32", inputs=tiny["npz"], isolate=False)
    message = _one_warning(caught)
    assert "verify_model(precision=, isolate=) is deprecated and goes in the next release; call compare and " in message
    assert "settings=VerifySettings(precision=..., isolate=...)" in message
    new = deploykit.compare(tiny["dynamic"], ["ort"], deploykit.VerifySettings(isolate=False), inputs=tiny["npz"])
    assert [(v.candidate, v.status) for v in old.verdicts] == [(v.candidate, v.status) for v in new.verdicts]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        deploykit.verify_model(tiny["dynamic"], ["ort"], inputs=tiny["npz"])
    assert "verify_model() is deprecated and goes in the next release; call compare." in _one_warning(caught)


def test_convert_darknet_0_1_keywords(tiny, tmp_path):
    old_path, new_path = tmp_path / "old.onnx", tmp_path / "new.onnx"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = deploykit.convert_darknet(tiny["cfg"], tiny["weights"], output=old_path, head="decoded", opset=14,
                                        oracle="none", atol=1e-4, seed=3)  # fmt: skip
    message = _one_warning(caught)
    assert "convert_darknet(head=, opset=, oracle=, atol=, seed=) is deprecated" in message
    assert "export=DarknetExportSettings(head=..., opset=...)" in message
    assert "checks=VerifySettings(oracle=..., seed=...)" in message
    assert "checks=VerifySettings(thresholds=ThresholdOverrides(atol=...))" in message
    checks = deploykit.VerifySettings(oracle="none", seed=3, thresholds=ThresholdOverrides(atol=1e-4))
    new = deploykit.convert_darknet(tiny["cfg"], tiny["weights"], new_path,
                                    deploykit.DarknetExportSettings(head="decoded", opset=14), checks)  # fmt: skip
    assert old.written and new.written and old.opset == new.opset == 14
    assert onnx.load(old_path).graph == onnx.load(new_path).graph


def test_an_unknown_keyword_is_the_type_error_python_gives(tiny):
    with pytest.raises(TypeError, match="benchmark\\(\\) got an unexpected keyword argument 'iteration'"):
        deploykit.benchmark(tiny["dynamic"], iteration=3)
    with pytest.raises(TypeError, match="compare\\(\\) got an unexpected keyword argument 'oracles'"):
        deploykit.compare(tiny["dynamic"], ["ort"], oracles="none")
    with pytest.raises(TypeError, match="convert_darknet\\(\\) got an unexpected keyword argument 'heads'"):
        deploykit.convert_darknet(tiny["cfg"], tiny["weights"], heads="raw")


def test_an_old_value_is_checked_as_the_settings_constructor_checks_it(tiny):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(deploykit.UsageError, match="scenario 'fast' \\| is not one of"):
            deploykit.benchmark(tiny["dynamic"], scenario="fast")


@dataclass(frozen=True)
class _Inner:
    a: int = 0


@dataclass(frozen=True)
class _Outer:
    b: tuple[str, ...] = ()
    inner: _Inner = _Inner()


def test_fold_keywords_converts_nests_and_leaves_a_call_without_old_keywords_alone():
    moves = (MovedKeywords("outer", ("b",), convert={"b": tuple}), MovedKeywords("outer", ("a",), nested="inner"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        folded = fold_keywords("f", {"b": ["x"], "a": 2}, {"outer": _Outer()}, moves)
    assert folded["outer"] == _Outer(b=("x",), inner=_Inner(a=2))
    assert str(caught[0].message) == (
        "f(b=, a=) is deprecated and goes in the next release; pass outer=_Outer(b=...) and "
        "outer=_Outer(inner=_Inner(a=...))."
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert fold_keywords("f", {}, {"outer": _Outer()}, moves) == {"outer": _Outer()}
