"""Settings travel as values: no public function of the library takes more than ten parameters.

Counted from the source (``ast``), so nothing is imported: every parameter counts (positional,
keyword-only, ``*args`` and ``**kwargs``), ``self``/``cls`` do not. A function or method is public
when neither it, nor its class, nor any module on its path starts with an underscore; a public
class's ``__init__`` counts too (its constructor is a public function by another name). A function
that needs more groups them into a frozen settings dataclass (``BenchPlan``, ``VerifySettings``,
``QuantizeSettings``, ``TorchExportSettings`` ...) instead.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "deploykit"
LIMIT = 10


def _count(function: ast.FunctionDef | ast.AsyncFunctionDef, is_method: bool) -> int:
    args = function.args
    names = [*args.posonlyargs, *args.args]
    count = len(names) + len(args.kwonlyargs) + (args.vararg is not None) + (args.kwarg is not None)
    if is_method and names and names[0].arg in ("self", "cls"):
        count -= 1
    return count


def parameter_counts() -> dict[str, int]:
    """``module:qualified name`` → parameter count, for every public function and method."""
    counts: dict[str, int] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE.parent)
        if any(part.startswith("_") and part != "__init__.py" for part in relative.parts):
            continue
        module = ".".join(relative.with_suffix("").parts).removesuffix(".__init__")
        counts.update(source_counts(path.read_text(encoding="utf-8"), module))
    return counts


def source_counts(source: str, module: str) -> dict[str, int]:
    """The counts of one module's source text."""
    counts: dict[str, int] = {}
    _visit(ast.parse(source), f"{module}:", False, counts)
    return counts


def _visit(node: ast.AST, prefix: str, in_class: bool, counts: dict[str, int]) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            if not child.name.startswith("_") or (in_class and child.name == "__init__"):
                counts[f"{prefix}{child.name}"] = _count(child, in_class)
        elif isinstance(child, ast.ClassDef) and not child.name.startswith("_"):
            _visit(child, f"{prefix}{child.name}.", True, counts)


def test_no_public_function_takes_more_than_ten_parameters():
    counts = parameter_counts()
    assert "deploykit.bench.runner:benchmark" in counts  # the walk sees the package
    assert "deploykit.vision.pipelines:Detector.__init__" in counts  # and the public constructors
    over = {name: n for name, n in sorted(counts.items(), key=lambda item: -item[1]) if n > LIMIT}
    assert not over, f"public functions with more than {LIMIT} parameters (group them into a settings value): {over}"


def test_the_counter_counts_constructors_and_every_kind_of_parameter():
    source = """
def public(a, /, b, *args, c, **kwargs): ...
def _private(a, b, c, d, e, f, g, h, i, j, k): ...
class Wide:
    def __init__(self, a, b, c, d, e, f, g, h, i, j, k): ...
    @classmethod
    def make(cls, a): ...
    def _helper(self, a, b, c, d, e, f, g, h, i, j, k): ...
class _Hidden:
    def __init__(self, a, b, c, d, e, f, g, h, i, j, k): ...
"""
    counts = source_counts(source, "m")
    assert counts == {"m:public": 5, "m:Wide.__init__": 11, "m:Wide.make": 1}
    assert [name for name, n in counts.items() if n > LIMIT] == ["m:Wide.__init__"]


def test_the_settings_values_travel_as_plain_data():
    import json

    from deploykit import BenchPlan, ThresholdOverrides, VerifySettings

    plan = BenchPlan(backends=("onnxruntime",), batch=[1, 4], threads=2, precision=("f32", "bf16"),
                     shapes={"x": (1, 3, 8, 8)}, thresholds={"atol": 1e-3}, options={"threads": 2})  # fmt: skip
    again = BenchPlan.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert again == plan and again.batch == (1, 4) and again.threads == (2,) and again.precision == "f32,bf16"
    assert again.thresholds == ThresholdOverrides(atol=1e-3) and again.shapes["x"].shape == (1, 3, 8, 8)
    settings = VerifySettings(precision="f32,int8", platforms=["host", "linux/arm64"], thresholds={"min_map": 0.5})
    assert VerifySettings.from_dict(json.loads(json.dumps(settings.to_dict()))) == settings
    assert settings.platforms == "host,linux/arm64" and settings.thresholds.of("int8").min_map == 0.5


def test_every_settings_value_reads_back_its_own_to_dict_and_refuses_unknown_keys():
    import json

    import pytest

    from deploykit import (
        DarknetExportSettings,
        OptimizePlan,
        PreprocessOverrides,
        QuantizeSettings,
        TorchExportSettings,
        UsageError,
    )
    from deploykit.distributed import Execution, PredictSettings

    values = [
        QuantizeSettings(engine="nncf", exclude=["fc"], backends=["onnxruntime"], max_drop="1%"),
        OptimizePlan(backends=["openvino"], threads=[1, 2], engines=["ort"], time_budget="90s"),
        DarknetExportSettings(input_size=(416, 416), head="decoded", opencv_threshold=0.2),
        PredictSettings(task="classify", top_k=3, backend_options={"threads": 2}),
        Execution(engine="local", batch_size=4),
        PreprocessOverrides(input_size=(320, 320), channel_order="BGR", mean=[0.5, 0.5, 0.5]),
    ]
    for value in values:
        again = type(value).from_dict(json.loads(json.dumps(value.to_dict())))
        assert again == value, type(value).__name__
        with pytest.raises(UsageError, match=rf"{type(value).__name__} \| has no setting 'bogus'"):
            type(value).from_dict({**value.to_dict(), "bogus": 1})
    export = TorchExportSettings(output_names=["y"], dynamic={"x": {0: "batch"}}, opset=18)
    assert TorchExportSettings.from_dict(json.loads(json.dumps(export.to_dict()))) == export
