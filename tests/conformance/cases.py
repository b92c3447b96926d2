"""The ONNX backend node tests as files: generated from the installed ``onnx`` at test time.

``onnx.backend.test.case.node.collect_testcases()`` builds every node case in memory (model,
inputs and expected outputs written by the ONNX authors). Workers need them as files, so each
case becomes ``<root>/<name>/model.onnx`` plus ``data.pkl`` (its data sets: inputs, expected
outputs, which may hold lists for sequences and None for empty optionals). The root is keyed by
the onnx version and marked complete only once every case is written, so a cache left by an
interrupted run or another onnx is never read.
"""

from __future__ import annotations

import os
import pickle
import shutil
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# onnx's backend runner compares with these unless a case states its own.
DEFAULT_RTOL, DEFAULT_ATOL = 1e-3, 1e-7
_COMPLETE = "complete"


@dataclass(frozen=True)
class NodeCase:
    """One node test on disk."""

    name: str
    directory: Path
    rtol: float
    atol: float

    @property
    def model_path(self) -> Path:
        return self.directory / "model.onnx"

    def data_sets(self) -> list[tuple[list[Any], list[Any]]]:
        with open(self.directory / "data.pkl", "rb") as handle:
            data: list[tuple[list[Any], list[Any]]] = pickle.load(handle)
        return data

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "directory": str(self.directory), "rtol": self.rtol, "atol": self.atol}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NodeCase:
        return cls(data["name"], Path(data["directory"]), float(data["rtol"]), float(data["atol"]))


def node_cases(cache: Path) -> list[NodeCase]:
    """Every node case of the installed onnx, written under ``cache`` once per onnx version."""
    import onnx

    root = cache / f"onnx-{onnx.__version__}"
    if not (root / _COMPLETE).exists():
        _generate(root)
    cases = []
    for line in (root / _COMPLETE).read_text().splitlines():
        name, rtol, atol = line.split("\t")
        cases.append(NodeCase(name, root / name, float(rtol), float(atol)))
    return cases


def _as_stored(value: Any, type_proto: Any) -> Any:
    """A value as the ONNX test data files hold it (``onnx.backend.test.cmd_tools`` writes them,
    the backend runner reads them back): a numpy scalar becomes a 0-d array, a ``TensorProto`` an
    array, a sequence a list of arrays, an empty optional None."""
    from onnx import TensorProto, numpy_helper

    if type_proto.HasField("sequence_type"):
        return numpy_helper.to_list(numpy_helper.from_list(value))
    if type_proto.HasField("optional_type"):
        return numpy_helper.to_optional(numpy_helper.from_optional(value))
    tensor = value if isinstance(value, TensorProto) else numpy_helper.from_array(value)
    return numpy_helper.to_array(tensor)


def write_case(
    root: Path,
    name: str,
    model: Any,
    data_sets: Sequence[tuple[Sequence[Any], Sequence[Any]]],
    rtol: float = DEFAULT_RTOL,
    atol: float = DEFAULT_ATOL,
) -> NodeCase:
    """One case on disk as the workers read it (node cases, and other tests' own graphs)."""
    import onnx

    directory = root / name
    directory.mkdir(parents=True)
    onnx.save(model, directory / "model.onnx")
    graph = model.graph
    stored = [
        (
            [_as_stored(value, info.type) for value, info in zip(inputs, graph.input, strict=False)],
            [_as_stored(value, info.type) for value, info in zip(outputs, graph.output, strict=False)],
        )
        for inputs, outputs in data_sets
    ]
    with open(directory / "data.pkl", "wb") as handle:
        pickle.dump(stored, handle)
    return NodeCase(name, directory, rtol, atol)


def _generate(root: Path) -> None:
    from onnx.backend.test.case.node import collect_testcases

    partial = root.with_name(root.name + f".partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the generators overflow casts on purpose
        cases = collect_testcases()
    lines = []
    for case in cases:
        if case.model is None or not case.data_sets:
            continue
        rtol = DEFAULT_RTOL if case.rtol is None else case.rtol
        atol = DEFAULT_ATOL if case.atol is None else case.atol
        write_case(partial, case.name, case.model, case.data_sets, rtol, atol)
        lines.append(f"{case.name}\t{rtol!r}\t{atol!r}")
    (partial / _COMPLETE).write_text("\n".join(lines) + "\n")
    shutil.rmtree(root, ignore_errors=True)
    try:
        partial.rename(root)
    except OSError:  # another process finished first: its copy is as good
        shutil.rmtree(partial, ignore_errors=True)


def case_features(case: NodeCase) -> set[str]:
    """What a case exercises at the interface: sequence/optional values, 0-d and empty tensors,
    and each element type of its inputs and outputs (the rows of the support table)."""
    import onnx

    from deploykit.tensors import spec_from_value_info

    graph = onnx.load(str(case.model_path), load_external_data=False).graph
    found: set[str] = set()
    for direction, values in (("input", graph.input), ("output", graph.output)):
        for value in values:
            try:
                spec = spec_from_value_info(value)
            except Exception:
                found.add(f"{direction}: unsupported type")
                continue
            if spec.is_sequence:
                found.add(f"sequence {direction}")
            if spec.is_optional:
                found.add(f"optional {direction}")
            if spec.shape == ():
                found.add("0-d tensor")
            found.add(f"dtype {spec.dtype.name}")
    for inputs, outputs in case.data_sets():
        if any(getattr(value, "size", 1) == 0 for value in [*inputs, *outputs]):
            found.add("empty tensor")
    return found
