"""A backend plug-in that converts, as ncnn, MNN and LiteRT do, in a test's own few lines: what adding a
backend takes is its module, one registry line (here ``DEPLOYKIT_BACKENDS``) and the raw runner it declares.

Its "format" is the ONNX model re-serialised by its own converter: the graph renamed and every initializer
moved into an external data file beside it (``model.toy`` and ``model.weights``). The backend converts
through deploykit's converted-model cache and runs the converted file with ONNX Runtime's CPU provider;
its raw runner converts the same way in a scratch folder and calls ONNX Runtime as its documentation shows.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from deploykit.backends.base import Backend, OpenRequest, Session, SessionInfo
from deploykit.backends.converted import CachedConversion, converted
from deploykit.backends.options import OptionSpec
from deploykit.backends.traits import Conversion, RawRuntime, RuntimePackage, device_error
from deploykit.model import Model
from deploykit.tensors import KINDS

CONVERTER_VERSION = "toyconv 1"
MODEL_NAME = "model.toy"
WEIGHTS_NAME = "model.weights"
GRAPH_NAME = "toyconv"
CACHE_KIND = "toyconv"

BUILDS: list[Path] = []
"""The folders this process converted a model into (the cache's misses), in order."""


def toy_convert(source: Path, folder: Path) -> Path:
    """The toy converter: ``source`` with its graph renamed and its initializers in ``WEIGHTS_NAME``, written
    into ``folder`` as ``MODEL_NAME``."""
    import onnx

    model = onnx.load(str(source))
    model.graph.name = GRAPH_NAME
    target = folder / MODEL_NAME
    onnx.save_model(
        model,
        str(target),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=WEIGHTS_NAME,
        size_threshold=0,
    )
    return target


def convert(model: Model) -> CachedConversion:
    """The cache entry of ``model`` converted: found, or converted now (``BUILDS`` records it)."""
    import onnx

    def build(scratch: Path) -> dict[str, Any]:
        BUILDS.append(scratch)
        toy_convert(model.path, scratch)
        return {"graph": GRAPH_NAME}

    key = {"model_sha256": model.sha256, "converter": CONVERTER_VERSION, "onnx": onnx.__version__}
    return converted(CACHE_KIND, key, build)


def _converted_file(model: Model, options: Mapping[str, Any]) -> Path | None:
    return convert(model).path(MODEL_NAME)


def run_toyconv(model_path: Path, inputs: list[Any]) -> list[Any]:
    """The raw runner: the toy converter into a scratch folder, then ONNX Runtime's ``InferenceSession`` on
    the converted file, on one thread, as ONNX Runtime's documentation shows."""
    import onnxruntime

    with tempfile.TemporaryDirectory(prefix="raw-toyconv-") as scratch:
        target = toy_convert(model_path, Path(scratch))
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        session = onnxruntime.InferenceSession(str(target), options, providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        return list(session.run(None, dict(zip(names, inputs, strict=True))))


class ToyConvertingBackend(Backend):
    """ONNX Runtime's CPU provider on the toy converter's files."""

    name = "toyconv"
    runtime = RuntimePackage(module="onnxruntime", pip_extra="onnxruntime")
    options: ClassVar[Mapping[str, OptionSpec | str]] = {
        "threads": OptionSpec("ONNX Runtime intra-op threads (0 = its default)", "int", 0, low=0),
    }
    value_kinds = frozenset(KINDS)  # ONNX Runtime feeds and returns sequences and optionals too
    conversion = Conversion(converted_file=_converted_file)
    # a sample of the node cases keeps the plug-in's own check short: the whole set runs as onnxruntime
    raw = RawRuntime("tests.assets.toy_converting_backend:run_toyconv", {"threads": 1}, sample_every=20)

    def version(self) -> str:
        return f"{CONVERTER_VERSION} on onnxruntime {self.import_runtime().__version__}"

    def devices(self) -> list[str]:
        return ["cpu"]

    def _open(self, model: Model, request: OpenRequest) -> Session:
        import onnxruntime

        if request.device.lower() != "cpu":
            raise device_error(self.name, request.device, "the toy runs on the CPU only.", hint="use device cpu.")
        entry = convert(model)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = request.option("threads")
        runtime = onnxruntime.InferenceSession(str(entry.path(MODEL_NAME)), options, providers=["CPUExecutionProvider"])
        info = SessionInfo(
            backend=self.name,
            backend_version=self.version(),
            device_requested=request.device,
            device="cpu",
            precision=model.precision,
            providers=list(runtime.get_providers()),
            options=dict(request.options),
        )
        return ToySession(model.path, model.inputs, model.outputs, info, runtime, entry, model.metadata_props, request)


class ToySession(Session):
    """A session on the converted file; ``conversion`` is the cache entry it was opened from."""

    def __init__(
        self,
        model_path: Path,
        inputs: Any,
        outputs: Any,
        info: SessionInfo,
        runtime: Any,
        conversion: CachedConversion,
        metadata: Any = None,
        request: OpenRequest | None = None,
    ) -> None:
        super().__init__(model_path, inputs, outputs, info, metadata, request=request)
        self.runtime = runtime
        self.conversion = conversion

    def _run(self, feeds: dict[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        results = self.runtime.run(list(self.outputs), feeds)
        return dict(zip(self.outputs, results, strict=True))

    def _close(self) -> None:
        self.runtime = None
