"""The PyTorch side of ``convert torch``: load the user's model, run it on the example inputs (the
oracle), export it and write the candidate ONNX — everything that runs the user's code.

For a source named by a path (``file.py:factory``, ``package.module:factory``, an archive) this runs in
a worker process (``python -m deploykit.convert.torch_stage``, the protocol of ``deploykit.workers``):
a factory that hangs, segfaults, calls ``sys.exit`` or ``os._exit``, or changes the working directory
costs the conversion a clear error naming it, never the command. The parent then verifies the
candidate on the backends and commits it (``convert.torch``).
"""

from __future__ import annotations

import inspect
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.convert.specs import InputSpec, check_dynamic_axis, parse_input_spec
from deploykit.convert.torch_export import PROTOBUF_LIMIT_BYTES, export_model, finish_model, save_model, stamp_model
from deploykit.convert.torch_sources import TorchSource, load_torch_source
from deploykit.errors import ConversionError, DeployKitError


@dataclass(frozen=True)
class TorchExportSettings:
    """How to export: everything ``convert_torch`` passes to the PyTorch side, as one value that also
    travels to a worker as JSON (input specs as ``spec_dict`` fields). A caller gives it to
    ``convert_torch`` as ``export=``; ``inputs`` and ``weights`` are filled in there from its own
    arguments."""

    inputs: tuple[Mapping[str, Any], ...] = ()
    input_names: tuple[str, ...] | None = None
    output_names: tuple[str, ...] | None = None
    dynamic: Mapping[str, Mapping[int, str]] = field(default_factory=dict)
    opset: int = 17
    exporter: str = "auto"
    simplify: bool = False
    weights: str | None = None
    trust_pickle: bool = False
    seed: int = 0
    weights_key: str | None = None
    ignore_keys: str | None = None

    def __post_init__(self) -> None:  # a caller's lists become the tuples a frozen value holds
        for key in ("input_names", "output_names"):
            value = getattr(self, key)
            object.__setattr__(self, key, (value,) if isinstance(value, str) else tuple(value) if value else value)
        object.__setattr__(self, "inputs", tuple(self.inputs or ()))
        object.__setattr__(self, "dynamic", {k: dict(v) for k, v in (self.dynamic or {}).items()})

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["dynamic"] = {name: {str(a): label for a, label in axes.items()} for name, axes in self.dynamic.items()}
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TorchExportSettings:
        values = dict(data)
        values["dynamic"] = {n: {int(a): lab for a, lab in axes.items()} for n, axes in values["dynamic"].items()}
        for key in ("inputs", "input_names", "output_names"):
            values[key] = tuple(values[key]) if values[key] is not None else None
        values["inputs"] = values["inputs"] or ()
        return cls(**values)


def spec_dict(spec: InputSpec | str) -> dict[str, Any]:
    """An input spec (or its ``NAME:SHAPE[:DTYPE[:LOW..HIGH]]`` text) as JSON-ready fields."""
    parsed = parse_input_spec(spec) if isinstance(spec, str) else spec
    return {
        "name": parsed.name,
        "shape": [int(d) for d in parsed.shape],
        "dtype": parsed.dtype.name,
        "low": int(parsed.low),
        "high": int(parsed.high),
    }


def spec_from_dict(data: Mapping[str, Any]) -> InputSpec:
    return InputSpec(str(data["name"]), tuple(data["shape"]), np.dtype(data["dtype"]), data["low"], data["high"])


@dataclass
class PyTorchStage:
    """What the PyTorch side hands the verification: the candidate file, the inputs and PyTorch's outputs."""

    candidate: Path
    external: bool
    cases: list[dict[str, np.ndarray]]
    references: list[dict[str, np.ndarray]]
    description: str
    notes: list[str]
    exporter: str
    precision: str
    reference_seconds: float
    export_seconds: float
    torch_version: str

    def to_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in asdict(self).items() if k not in ("cases", "references")}
        data["candidate"] = str(self.candidate)
        return data


def pytorch_stage(
    model: Any,
    example_inputs: Sequence[Any] | None,
    settings: TorchExportSettings,
    scratch: Path,
    output_name: str,
    log_path: Path,
    description: str | None = None,
) -> PyTorchStage:
    """Load ``model``, run it on the examples (the references), export and save ``scratch/output_name``.
    ``description`` names the source in the report and the model's metadata (default: as loaded)."""
    import torch

    source = load_torch_source(
        model,
        weights=settings.weights,
        trust_pickle=settings.trust_pickle,
        weights_key=settings.weights_key,
        ignore_keys=settings.ignore_keys,
    )
    if description is not None:
        source.description = description
    given = [spec_from_dict(s) for s in settings.inputs]
    specs, examples = _examples(source, example_inputs, given or None, settings.input_names, settings.seed)
    dynamic = {k: dict(v) for k, v in settings.dynamic.items()}
    by_name = {s.name: s for s in specs}
    for name, axes in dynamic.items():
        for axis in axes:
            check_dynamic_axis(name, axis, by_name)

    # the inputs every candidate sees are copied before forward() runs: a forward() that writes into
    # its input tensor must not change what the oracle and the exported graph are judged on
    cases = [dict(zip(by_name, (e.detach().clone().numpy() for e in examples), strict=True))]
    reference_start = time.perf_counter()
    with torch.no_grad():
        reference = _flatten_outputs(_call(source, [e.clone() for e in examples]))
    names: list[str] = list(
        settings.output_names or (["output"] if len(reference) == 1 else [f"output_{i}" for i in range(len(reference))])
    )
    if len(names) != len(reference):
        raise ConversionError(
            f"output names | {len(names)} given ({', '.join(names)}), the model returns {len(reference)} tensors.",
            hint="give one name per returned tensor, in order.",
        )
    if dynamic:
        cases.append(_second_case(specs, dynamic, settings.seed))
    references = [dict(zip(names, reference, strict=True))]
    with torch.no_grad():
        for case in cases[1:]:
            tensors = [torch.from_numpy(case[s.name].copy()) for s in specs]
            references.append(dict(zip(names, _flatten_outputs(_call(source, tensors)), strict=True)))
    reference_seconds = time.perf_counter() - reference_start

    param_bytes = sum(t.numel() * t.element_size() for t in source.module.state_dict().values())
    external = param_bytes >= PROTOBUF_LIMIT_BYTES
    notes: list[str] = list(source.notes)
    if external:
        notes.append(f"weights are {param_bytes / 2**30:.2f} GiB, over protobuf's 2 GiB: stored as external data")
    start = time.perf_counter()
    exported, used = export_model(
        source,
        examples,
        specs,
        names,
        dynamic,
        settings.opset,
        settings.exporter,
        scratch,
        notes,
        log_path=log_path,
    )
    model_proto = finish_model(exported, specs, dynamic, settings.opset, notes, settings.simplify)
    stamp_model(model_proto, source, specs, names, dynamic, settings.opset, used, settings.simplify)
    export_seconds = time.perf_counter() - start
    candidate = Path(scratch) / output_name
    save_model(model_proto, candidate, external)
    return PyTorchStage(
        candidate,
        external,
        cases,
        references,
        source.description,
        notes,
        used,
        _precision(specs),
        reference_seconds,
        export_seconds,
        torch.__version__,
    )


def _check_example_spec(spec: InputSpec) -> None:
    """Random example data must fit in memory and, for integers, in the dtype."""
    from deploykit.inputs import check_allocation

    check_allocation(spec.name, spec.shape, spec.dtype)
    if spec.dtype.kind in "iu":
        info = np.iinfo(spec.dtype)
        if not (info.min <= spec.low < spec.high <= int(info.max) + 1):
            raise ConversionError(
                f"input '{spec.name}' | the value range {spec.low}..{spec.high} does not fit {spec.dtype.name} "
                f"({info.min} to {info.max}).",
                hint="give a range inside the dtype, e.g. ids:1x16:int64:0..30000.",
            )


def _precision(specs: Sequence[InputSpec]) -> str:
    return "f16" if any(s.dtype == np.float16 for s in specs) else "f32"


def _forward_parameters(module: Any) -> tuple[list[str], int, int | None]:
    """forward's positional parameter names, how many are required, and the maximum (None: *args)."""
    try:
        signature = inspect.signature(module.forward)
    except (TypeError, ValueError):
        return [], 0, None
    names: list[str] = []
    required = maximum = 0
    for parameter in signature.parameters.values():
        if parameter.kind == parameter.VAR_POSITIONAL:
            return names, required, None
        if parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD):
            names.append(parameter.name)
            maximum += 1
            required += parameter.default is parameter.empty
    return names, required, maximum


def _examples(
    source: TorchSource,
    example_inputs: Sequence[Any] | None,
    inputs: Sequence[InputSpec | str] | None,
    input_names: Sequence[str] | None,
    seed: int,
) -> tuple[list[InputSpec], list[Any]]:
    import torch

    forward_names, required, maximum = _forward_parameters(source.module)
    if example_inputs is not None and inputs:
        raise ConversionError(
            "inputs | both example_inputs and input specs were given.",
            hint="give either example tensors or NAME:SHAPE specs.",
        )
    if example_inputs is None and not inputs:
        raise ConversionError(
            "inputs | no example inputs or input specs were given.",
            hint="pass --input NAME:SHAPE[:DTYPE] for each forward() argument, e.g. --input images:1x3x224x224.",
        )
    if example_inputs is not None:
        if isinstance(example_inputs, (torch.Tensor, np.ndarray)):
            example_inputs = (example_inputs,)
        tensors = [torch.as_tensor(np.asarray(x)) if not isinstance(x, torch.Tensor) else x for x in example_inputs]
        count = len(tensors)
        names = list(input_names or forward_names[:count] or [f"input_{i}" for i in range(count)])
        if len(names) < count:
            names += [f"input_{i}" for i in range(len(names), count)]
        specs = [
            InputSpec(n, tuple(t.shape), np.dtype(str(t.dtype).removeprefix("torch.")))
            for n, t in zip(names, tensors, strict=True)
        ]
    else:
        specs = [parse_input_spec(s) if isinstance(s, str) else s for s in inputs or ()]
        if input_names:
            raise ConversionError(
                "inputs | input_names given alongside named specs.",
                hint="specs already carry names (NAME:SHAPE); drop input_names.",
            )
        for spec in specs:
            _check_example_spec(spec)
        rng = np.random.default_rng(seed)
        tensors = [torch.from_numpy(s.example(rng)) for s in specs]
    count = len(specs)
    if count < required or (maximum is not None and count > maximum):
        expected = (
            f"{required}" if maximum == required else f"{required} to {maximum if maximum is not None else 'any'}"
        )
        raise ConversionError(
            f"inputs | {count} given ({', '.join(s.name for s in specs)}), but "
            f"{type(source.module).__name__}.forward takes {expected} "
            f"({', '.join(forward_names) or 'unknown names'}).",
            hint="give one --input per forward() argument, in order.",
        )
    if len({s.name for s in specs}) != count:
        raise ConversionError(
            f"inputs | names repeat: {', '.join(s.name for s in specs)}.",
            hint="give every input its own name.",
        )
    return specs, tensors


def _call(source: TorchSource, tensors: Sequence[Any]) -> Any:
    try:
        return source.module(*tensors)
    except Exception as exc:
        raise ConversionError(
            f"PyTorch model '{source.description}' | forward() failed on the example inputs: "
            f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}",
            hint="check the input shapes and dtypes (--input NAME:SHAPE:DTYPE) against what forward() expects.",
        ) from exc


def _flatten_outputs(value: Any) -> list[np.ndarray]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value.detach().cpu().numpy()]
    if isinstance(value, Mapping):
        return [a for v in value.values() for a in _flatten_outputs(v)]
    if isinstance(value, (list, tuple)):
        return [a for v in value for a in _flatten_outputs(v)]
    raise ConversionError(
        f"PyTorch model outputs | a {type(value).__name__} is not a tensor.",
        hint="forward() must return tensors (or tuples/lists/dicts of tensors) to export to ONNX.",
    )


def _second_case(
    specs: Sequence[InputSpec], dynamic: Mapping[str, Mapping[int, str]], seed: int
) -> dict[str, np.ndarray]:
    """Inputs whose dynamic axes have other sizes than the examples: label → doubled size."""
    sizes: dict[str, int] = {}
    for spec in specs:
        for axis, label in dynamic.get(spec.name, {}).items():
            sizes.setdefault(label, spec.shape[axis] * 2)
    rng = np.random.default_rng(seed + 1)
    case = {}
    for spec in specs:
        shape = [
            sizes[dynamic[spec.name][a]] if a in dynamic.get(spec.name, {}) else d for a, d in enumerate(spec.shape)
        ]
        case[spec.name] = spec.example(rng, shape)
    return case


def main() -> int:
    """Worker entry: a job ``{model, examples, settings, scratch, output_name, log_path, sys_path}`` on
    stdin; the stage's fields as the result line, its cases and references as ``.npz`` files in scratch.
    Whatever the user's code starts and leaves running is ended with the stage."""
    global _results
    job = json.loads(sys.stdin.read())
    sys.path.extend(p for p in job.get("sys_path", []) if p not in sys.path)  # the caller's packages, after ours
    # The result line has standard output to itself: what the user's code prints goes to stderr, so 50 MB
    # printed without a newline cannot swallow the line (the caller shows stderr's tail on a failure).
    sys.stdout.flush()
    _results = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    _adopt_orphans()
    code = 1
    try:
        code = _run_job(job)
    finally:
        _end_descendants()
        _results.flush()
        sys.stdout.flush()
        sys.stderr.flush()
    # The answer is given: a thread the user's code left running (not a daemon) must not hold the worker
    # until the time limit, as the interpreter's shutdown would wait for it.
    os._exit(code)


_results: Any = sys.stdout


def _say(result: dict[str, Any]) -> None:
    """The result line, on the stdout this worker kept for it (the user's prints go to stderr)."""
    from deploykit.workers import send_result

    send_result(result, _results)


def _adopt_orphans() -> None:
    """Make this worker the subreaper of what the user's code starts (Linux): a daemon that leaves the
    process group with setsid is re-parented here instead of to init, so ``_end_descendants`` finds it."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def _end_descendants() -> None:
    try:
        import psutil
    except ImportError:
        return
    for child in psutil.Process().children(recursive=True):
        try:
            child.kill()
        except psutil.Error:
            continue


def _run_job(job: dict[str, Any]) -> int:
    from deploykit.io import FULL_ERRNOS, full_disk_error
    from deploykit.workers import error_result, read_arrays, write_arrays

    examples = None
    if job.get("examples"):
        examples = list(read_arrays(job["examples"]).values())
    scratch = Path(job["scratch"])
    try:
        stage = pytorch_stage(
            job["model"],
            examples,
            TorchExportSettings.from_dict(job["settings"]),
            scratch,
            job["output_name"],
            Path(job["log_path"]),
            job.get("description"),
        )
    except DeployKitError as exc:
        _say(error_result(exc))
        return 0
    except OSError as exc:
        if exc.errno not in FULL_ERRNOS:
            raise
        full = full_disk_error([scratch.parent / job["output_name"]], exc)
        _say(error_result(full))
        return 0
    except SystemExit as exc:  # the user's code called sys.exit(): no model, and say so
        code = exc.code if isinstance(exc.code, int) or exc.code is None else 1
        reason = f"the model's code called sys.exit({exc.code!r})"
        _say({"status": "exit", "error": reason, "code": code})
        return 0
    except KeyboardInterrupt:  # this worker has its own session: no terminal's Ctrl-C reaches it, the code raised it
        reason = "the model's code raised KeyboardInterrupt"
        _say({"status": "exit", "error": reason, "code": 1})
        return 0
    for index, (case, reference) in enumerate(zip(stage.cases, stage.references, strict=True)):
        write_arrays(scratch / f"case-{index}.npz", case)
        write_arrays(scratch / f"reference-{index}.npz", reference)
    _say({"status": "ok", "stage": stage.to_dict(), "count": len(stage.cases)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
