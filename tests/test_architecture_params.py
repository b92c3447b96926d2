"""Settings travel as values: parameters are counted on every function, with a stated budget.

Counted from the source (``ast``): every function and method of ``deploykit/`` and ``cli/``, private and
nested ones included; every parameter counts (positional, keyword-only, ``*args`` and ``**kwargs``),
``self``/``cls`` of a method do not. The budgets:

- **a function: at most ten** (``LIMIT``), in the library and in ``cli/`` alike. A function that needs
  more groups them into a frozen settings dataclass (``BenchPlan``, ``VerifySettings``,
  ``QuantizeSettings``, ``TorchExportSettings`` ...). ``OVER_LIMIT`` names the exceptions, each with its
  count and the reason.
- **a CLI command: at most twelve options** (``COMMAND_LIMIT``; the style guide: a command with more than
  a dozen options is several commands sharing argument groups). A command is found by asking the typer
  app which functions it runs. ``COMMANDS_OVER_LIMIT`` names the commands above it, each with its count
  and the reason.

Both lists only shrink: an entry whose function grew fails, and so does one that shrank (lower its count,
or remove it once it is within the budget).
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("deploykit", "cli")
LIMIT = 10
COMMAND_LIMIT = 12

#: Functions above ``LIMIT``: ``path:qualified name`` → (parameters, why).
OVER_LIMIT: dict[str, tuple[int, str]] = {
    "deploykit/quantize/api.py:_quantize_in": (
        20,
        "quantize()'s settings after their defaults are resolved (engine, method, budget, backends) passed "
        "loose to the body that runs in the scratch folder; to become one resolved settings value",
    ),
}

_WIDE_COMMAND = "one command with many options, to become subcommands sharing argument groups"
#: CLI commands above ``COMMAND_LIMIT``: ``path:qualified name`` → (parameters, why).
COMMANDS_OVER_LIMIT: dict[str, tuple[int, str]] = {
    "cli/bench_cmd.py:bench": (
        39,
        "five modes (model, bundle, fleet, pipeline, platforms) in one command, kept for compatibility; "
        "the command only builds the plan and dispatches to one function per mode",
    ),
    "cli/serve_cmd.py:serve": (23, _WIDE_COMMAND + " (HTTP, gRPC, batching, repository, Ray Serve)"),
    "cli/predict_cmd.py:predict": (23, _WIDE_COMMAND + " (image, stream, dataset on Ray)"),
    "cli/quantize_cmd.py:quantize": (22, _WIDE_COMMAND + " (calibration, engine, accuracy budget, speed)"),
    "cli/compare_cmd.py:compare": (21, _WIDE_COMMAND + " (inputs, oracle, thresholds, platforms)"),
    "cli/convert_cmd.py:torch_command": (20, _WIDE_COMMAND + " (source, export settings, parity gate)"),
    "cli/optimize_cmd.py:optimize": (15, _WIDE_COMMAND + " (search space, budget, evidence)"),
    "cli/convert_cmd.py:darknet_command": (14, _WIDE_COMMAND + " (cfg, weights, head, parity gate)"),
}


def _count(function: ast.FunctionDef | ast.AsyncFunctionDef, is_method: bool) -> int:
    args = function.args
    names = [*args.posonlyargs, *args.args]
    count = len(names) + len(args.kwonlyargs) + (args.vararg is not None) + (args.kwarg is not None)
    if is_method and names and names[0].arg in ("self", "cls"):
        count -= 1
    return count


def parameter_counts() -> dict[str, int]:
    """``path:qualified name`` → parameter count, for every function and method of the library and the CLI."""
    counts: dict[str, int] = {}
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            counts.update(source_counts(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix()))
    return counts


def source_counts(source: str, module: str) -> dict[str, int]:
    """The counts of one module's source text."""
    counts: dict[str, int] = {}
    _visit(ast.parse(source), f"{module}:", False, counts)
    return counts


def _visit(node: ast.AST, prefix: str, in_class: bool, counts: dict[str, int]) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            counts[f"{prefix}{child.name}"] = _count(child, in_class)
            _visit(child, f"{prefix}{child.name}.", False, counts)
        elif isinstance(child, ast.ClassDef):
            _visit(child, f"{prefix}{child.name}.", True, counts)
        else:  # under if/try/with: the same scope
            _visit(child, prefix, in_class, counts)


def command_names() -> set[str]:
    """``path:qualified name`` of every function the ``deploykit`` app runs as a command or a group's callback."""
    import typer

    from cli.main import app

    found: set[str] = set()

    def walk(group: typer.Typer) -> None:
        infos = [*group.registered_commands, group.registered_callback]
        for info in infos:
            callback = getattr(info, "callback", None)
            if callback is not None:
                path = Path(inspect.getsourcefile(callback) or "").resolve().relative_to(ROOT).as_posix()
                found.add(f"{path}:{callback.__qualname__.replace('.<locals>', '')}")
        for sub in group.registered_groups:
            if sub.typer_instance is not None:
                walk(sub.typer_instance)

    walk(app)
    return found


def _over(counts: dict[str, int], limit: int, allowed: dict[str, tuple[int, str]]) -> list[str]:
    """What breaks a budget: a function above it and not allowed, an allowed one that grew or shrank."""
    problems = [f"{name}: {n}" for name, n in sorted(counts.items()) if n > limit and name not in allowed]
    for name, (ceiling, _) in allowed.items():
        if counts.get(name) != ceiling:
            problems.append(f"{name}: {counts.get(name)}, allowed {ceiling} (update or remove the entry)")
    return problems


def test_no_function_takes_more_than_ten_parameters():
    counts = parameter_counts()
    assert "deploykit/bench/runner.py:benchmark" in counts  # the walk sees the package
    assert "deploykit/quantize/api.py:_quantize_in" in counts  # private functions count
    assert "cli/bench_cmd.py:bench_bundle" in counts  # and the CLI's
    commands = command_names()
    functions = {name: n for name, n in counts.items() if name not in commands}
    problems = _over(functions, LIMIT, OVER_LIMIT)
    assert not problems, f"functions with more than {LIMIT} parameters (group them into a settings value): {problems}"


def test_no_command_takes_more_than_a_dozen_options():
    counts = parameter_counts()
    commands = command_names()
    assert {"cli/bench_cmd.py:bench", "cli/convert_cmd.py:torch_command"} <= commands  # top level and groups
    assert commands <= set(counts), sorted(commands - set(counts))
    problems = _over({name: counts[name] for name in commands}, COMMAND_LIMIT, COMMANDS_OVER_LIMIT)
    assert not problems, f"commands with more than {COMMAND_LIMIT} options (split into subcommands): {problems}"


def test_every_allowed_function_says_why():
    for name, (count, why) in {**OVER_LIMIT, **COMMANDS_OVER_LIMIT}.items():
        assert count > (COMMAND_LIMIT if name in COMMANDS_OVER_LIMIT else LIMIT), name
        assert len(why.split()) >= 5, name


def test_the_counter_counts_every_function_and_every_kind_of_parameter():
    source = """
def public(a, /, b, *args, c, **kwargs):
    def inner(x, y): ...
def _private(a, b, c, d, e, f, g, h, i, j, k): ...
class Wide:
    def __init__(self, a, b, c, d, e, f, g, h, i, j, k): ...
    @classmethod
    def make(cls, a): ...
    def _helper(self, a, b, c, d, e, f, g, h, i, j, k): ...
class _Hidden:
    def __init__(self, a, b, c, d, e, f, g, h, i, j, k): ...
if True:
    def guarded(a): ...
"""
    counts = source_counts(source, "m")
    assert counts == {
        "m:public": 5,
        "m:public.inner": 2,
        "m:_private": 11,
        "m:Wide.__init__": 11,
        "m:Wide.make": 1,
        "m:Wide._helper": 11,
        "m:_Hidden.__init__": 11,
        "m:guarded": 1,
    }
    assert _over(counts, LIMIT, {}) == [
        f"m:{name}: 11" for name in ("Wide.__init__", "Wide._helper", "_Hidden.__init__", "_private")
    ]
    assert _over(counts, LIMIT, {"m:_private": (12, "reason")})[-1].startswith("m:_private: 11, allowed 12")


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
