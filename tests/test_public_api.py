"""The public surface: every name in ``deploykit.__all__`` resolves to the real, typed object."""

from __future__ import annotations

import inspect

import deploykit

PUBLIC = {
    "Backend", "BackendError", "BackendUnavailableError", "BenchmarkReport", "Row", "Classification", "Classifier",
    "ConversionError", "ConversionReport", "DeployKitError", "Detection", "Detector", "DeviceUnavailableError",
    "InputError", "InvalidModelError", "ModelError", "ModelNotFoundError", "OracleError", "OracleInfo", "OutputError", "ParityError",
    "QuantizationError", "QuantizeReport", "ReportError", "ResourceError", "ServeError", "Session", "SessionInfo", "TensorSpec", "Thresholds", "UnknownBackendError",
    "UnsupportedLayerError", "UnsupportedModelError", "UsageError", "Verdict", "VerificationReport", "__version__",
    "all_backends", "backend_names", "benchmark", "convert_darknet", "convert_torch", "draw", "get_backend", "load",
    "make_inputs", "quantize", "serve", "summarize", "OptimizeReport", "optimize", "BundleError",
    "MetadataError", "Model", "compare", "predict", "export_ncnn", "BenchPlan", "VerifySettings", "ThresholdOverrides",
    "QuantizeSettings", "OptimizePlan", "TorchExportSettings", "DarknetExportSettings", "PreprocessOverrides",
}  # fmt: skip

# Each command of the CLI and the public name that does its work; None: the command is the CLI's own
# (a guided tour, listings, a fleet of machines) and says so here.
COMMANDS = {
    "convert torch": "convert_torch", "convert darknet": "convert_darknet", "compare": "compare",
    "bench": "benchmark", "quantize": "quantize", "optimize": "optimize", "predict": "predict", "serve": "serve",
    "export": "export_ncnn", "inspect": "summarize", "run": "load", "backends": "all_backends",
    "report": "BenchmarkReport", "fleet": None, "demo": None, "models": None, "platforms": None, "converters": None,
    "version": None,  # deploykit.about.about(): a description of the installation, not a model operation
}  # fmt: skip


def test_all_is_the_public_surface_and_every_name_resolves():
    assert set(deploykit.__all__) == PUBLIC
    for name in deploykit.__all__:
        assert getattr(deploykit, name) is not None, name


def test_the_public_api_mirrors_the_commands():
    import typer.main

    from deploykit.cli.main import app

    group = typer.main.get_command(app)
    commands = set()
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        sub = getattr(command, "commands", None)
        commands |= {f"{name} {s}" for s in sub} if sub and name not in COMMANDS else {name}
    assert commands == set(COMMANDS), "a new command: add its public function (or None) to COMMANDS"
    for command, name in COMMANDS.items():
        assert name is None or name in deploykit.__all__, command
    from deploykit.verify import check

    assert deploykit.compare is check.compare and check.compare.__name__ == "compare"  # defined by the command's name
    assert "verify_model" not in deploykit.__all__  # its 0.1 name: deprecated (tests/test_deprecation.py)
    assert deploykit.verify_model is check.verify_model
    from deploykit.distributed.batch import predict
    from deploykit.export import export_ncnn

    assert deploykit.predict is predict and deploykit.export_ncnn is export_ncnn
    for gone in ("BenchmarkResult", "FleetResult"):  # earlier names, removed in 0.1
        assert not hasattr(deploykit, gone) and not hasattr(deploykit.ray, gone)


def test_the_entry_points_are_the_real_functions_with_their_signatures():
    from deploykit.bench.runner import benchmark
    from deploykit.convert.darknet.convert import convert_darknet
    from deploykit.convert.torch import convert_torch
    from deploykit.distributed import fleet_benchmark, predict
    from deploykit.verify import compare

    assert deploykit.benchmark is benchmark and deploykit.compare is compare
    assert deploykit.convert_darknet is convert_darknet and deploykit.convert_torch is convert_torch
    assert deploykit.ray.predict is predict and deploykit.ray.fleet_benchmark is fleet_benchmark
    entry_points = (benchmark, convert_darknet, convert_torch, compare, deploykit.quantize.quantize, deploykit.load,
                    deploykit.Detector, deploykit.Classifier, predict, fleet_benchmark,
                    deploykit.serve.serve, deploykit.optimize.optimize)  # fmt: skip
    for function in entry_points:
        signature = inspect.signature(function)  # of a class: its __init__ without self
        assert function.__doc__ and all(
            p.annotation is not inspect.Parameter.empty for p in signature.parameters.values()
        ), function
        assert not [name for name, p in signature.parameters.items() if "Any" in str(p.annotation)], function


def test_reports_show_in_notebooks(tmp_path):
    from tests.verify.test_verify import _conv

    report = deploykit.compare(_conv(tmp_path / "c.onnx", [1, 3, 8, 8]), ["ort"])
    html = report._repr_html_()
    assert "<table" in html and "onnxruntime:cpu" in html and "pass" in html
    assert "onnx-reference" in report.verdicts[0]._repr_html_()
