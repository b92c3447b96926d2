"""Each backend option's spec default is the value its session runs with: on the real runtimes, no mocks.

For every built-in backend whose runtime is installed and every option whose spec has a default, a session
opened without the option is compared with one opened with the default given explicitly and with one given
another value, through what the runtime shows (ONNX Runtime's ``SessionOptions``, ncnn's ``Option``,
OpenVINO's compile properties, ``session.info``): the first two must agree and the third must differ,
so the comparison can see the option at all. An option a runtime does not show is named with the reason.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx
import pytest

import deploykit
from deploykit.backends.base import Backend, Session
from deploykit.backends.options import as_spec, cpu_count
from deploykit.backends.registry import BUILTIN_BACKENDS, get_backend
from deploykit.errors import UsageError
from tests.assets.catalog import conv_bn_act, mlp_dynamic_batch
from tests.assets.paths import missing_asset

OTHER_PRECISION = object()
"""Another precision than the default that this machine runs (``Backend.precisions``), if any."""
TFLITE = Path(__file__).resolve().parents[1] / "assets" / "litert" / "conv_bn_act.tflite"


def _onnxruntime(session: Session) -> dict[str, Any]:
    options = session._session.get_session_options()
    try:
        spinning = options.get_session_config_entry("session.intra_op.allow_spinning")
    except RuntimeError:  # not set: ONNX Runtime lets idle threads spin
        spinning = None
    return {
        "intra_op_num_threads": options.intra_op_num_threads,
        "inter_op_num_threads": options.inter_op_num_threads,
        "log_severity_level": options.log_severity_level,
        "graph_optimization_level": options.graph_optimization_level,
        "allow_spinning": spinning,
    }


def _ncnn(session: Session) -> dict[str, Any]:
    opt = session._net.opt
    names = ("num_threads", "lightmode", "use_winograd_convolution", "use_winograd23_convolution")
    names += ("use_sgemm_convolution", "use_fp16_storage", "use_fp16_arithmetic", "use_bf16_storage")
    return {name: getattr(opt, name) for name in names} | {"precision": session.info.precision}


def _openvino(session: Session) -> dict[str, Any]:
    return {"config": dict(session._config), "dynamic": session._dynamic, "shape_cache": session._shape_cache}


def _opencv(session: Session) -> dict[str, Any]:
    import cv2

    return {"threads": cv2.getNumThreads(), "providers": session.info.providers}


def _from_info(session: Session) -> dict[str, Any]:
    return {"precision": session.info.precision, "providers": session.info.providers}


def _ncnn_threads() -> int:
    import ncnn

    return int(ncnn.Option().num_threads) + 1  # ncnn's own default (the big cores) differs by one


def _opencv_threads() -> int:
    import cv2

    return cv2.getNumThreads() + 1


@dataclass(frozen=True)
class Case:
    """How one backend's options are seen: the model it opens (``static``, ``dynamic``, ``tflite``), what its
    runtime shows of a session, a value other than the default for each option that shows (or a function
    that gives one here), and why each other option with a default does not show."""

    model: str
    observe: Callable[[Session], dict[str, Any]]
    other: dict[str, Any]
    unseen: dict[str, str] = field(default_factory=dict)


CASES: dict[str, Case] = {
    "onnxruntime": Case(
        "static",
        _onnxruntime,
        {"threads": 1, "inter_op_threads": 1, "log_level": 4, "graph_optimization": "basic", "spinning": False},
    ),
    "openvino": Case("dynamic", _openvino, {"threads": 1, "reshape": "never", "shape_cache": 5}),
    "opencv": Case("static", _opencv, {"threads": _opencv_threads}),
    "ncnn": Case(
        "static",
        _ncnn,
        {
            "threads": _ncnn_threads,
            "light_mode": False,
            "winograd": False,
            "sgemm": False,
            "precision": OTHER_PRECISION,
        },
    ),
    "mnn": Case(
        "static",
        _from_info,
        {"threads": lambda: cpu_count() + 1, "winograd": True, "precision": OTHER_PRECISION},
        {
            "memory": "MNN's Python binding takes its runtime config but does not read it back",
            "power": "MNN's Python binding takes its runtime config but does not read it back",
        },
    ),
    "litert": Case(
        "tflite",
        _from_info,
        {"threads": 1, "xnnpack": False},
        {"weights": "it chooses how an .onnx model is converted; a .tflite keeps its own weights"},
    ),
    "reference": Case("static", _from_info, {"precision": "f64"}),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    folder = tmp_path_factory.mktemp("option-defaults")
    paths = {"static": folder / "conv_bn_act.onnx", "dynamic": folder / "mlp_dynamic_batch.onnx", "tflite": TFLITE}
    onnx.save(conv_bn_act(), paths["static"])
    onnx.save(mlp_dynamic_batch(), paths["dynamic"])
    with pytest.MonkeyPatch.context() as patch:  # the converted-model cache of this module's own
        patch.setenv("DEPLOYKIT_CACHE_DIR", str(folder / "cache"))
        yield paths


def _backend(name: str) -> Backend:
    backend = get_backend(name)
    reason = backend.unavailable_reason()
    if reason:
        missing_asset(f"the {name} backend's runtime", reason)
    return backend


@contextlib.contextmanager
def _process_settings_kept(name: str) -> Iterator[None]:
    """OpenCV's thread count is the process's, not the session's: leave it as it was found."""
    if name != "opencv":
        yield
        return
    import cv2

    threads = cv2.getNumThreads()
    try:
        yield
    finally:
        cv2.setNumThreads(threads)


def _seen(name: str, model: Path, observe: Callable[[Session], dict[str, Any]], options: dict[str, Any]) -> dict:
    with _process_settings_kept(name), deploykit.load(model, backend=name, **options) as session:
        return observe(session)


def test_every_builtin_backend_has_a_case() -> None:
    assert sorted(CASES) == sorted(BUILTIN_BACKENDS)


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_option_default_is_what_the_session_runs_with(name: str, models: dict[str, Path]) -> None:
    backend, case = _backend(name), CASES[name]
    defaults = {key: as_spec(spec).default for key, spec in backend.options.items()}
    with_default = sorted(key for key, default in defaults.items() if default is not None)
    assert sorted([*case.other, *case.unseen]) == with_default, "each option with a default is seen or says why not"
    model = models[case.model]
    absent = _seen(name, model, case.observe, {})
    for key in case.other:
        other = case.other[key]() if callable(case.other[key]) else case.other[key]
        if other is OTHER_PRECISION:
            offered = [p for p in backend.precisions(backend.default_device) if p != defaults[key]]
            other = offered[0] if offered else None  # none here: the default is still compared
        given = _seen(name, model, case.observe, {key: defaults[key]})
        assert given == absent, f"{name}: {key}={defaults[key]!r} given runs otherwise than {key} left out"
        if other is not None:
            changed = _seen(name, model, case.observe, {key: other})
            assert changed != absent, f"{name}: {key}={other!r} is not seen, so its default proves nothing"


def test_onnxruntime_defaults_reach_its_session_options(models: dict[str, Path]) -> None:
    backend = _backend("onnxruntime")
    ort = backend.import_runtime()
    defaults = {key: as_spec(spec).default for key, spec in backend.options.items()}
    seen = _seen("onnxruntime", models["static"], _onnxruntime, {})
    levels = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED"}
    level = getattr(ort.GraphOptimizationLevel, levels.get(defaults["graph_optimization"], "ORT_ENABLE_ALL"))
    assert seen == {
        "intra_op_num_threads": defaults["threads"],
        "inter_op_num_threads": defaults["inter_op_threads"],
        "log_severity_level": defaults["log_level"],
        "graph_optimization_level": level,
        "allow_spinning": None if defaults["spinning"] else "0",
    }


def test_ncnn_defaults_reach_its_option(models: dict[str, Path]) -> None:
    backend = _backend("ncnn")
    import ncnn

    defaults = {key: as_spec(spec).default for key, spec in backend.options.items()}
    seen = _seen("ncnn", models["static"], _ncnn, {})
    assert defaults["threads"] == 0 and seen["num_threads"] == ncnn.Option().num_threads  # 0: ncnn's own count
    assert seen["lightmode"] is defaults["light_mode"]
    assert seen["use_winograd_convolution"] is seen["use_winograd23_convolution"] is defaults["winograd"]
    assert seen["use_sgemm_convolution"] is defaults["sgemm"]
    assert seen["precision"] == defaults["precision"]


def test_a_session_records_only_the_options_it_was_given(models: dict[str, Path]) -> None:
    """Reports, bundles and ``session.info`` echo what the caller gave, not the defaults filled in."""
    _backend("onnxruntime")
    with deploykit.load(models["static"], backend="onnxruntime") as session:
        assert session.info.options == {}
    with deploykit.load(models["static"], backend="onnxruntime", threads="1") as session:
        assert session.info.options == {"threads": 1}


def test_option_value_reads_a_callers_mapping_through_the_spec() -> None:
    backend = get_backend("onnxruntime")
    assert backend.option_value({}, "graph_optimization") == "all"
    assert backend.option_value({"graph_optimization": "BASIC"}, "graph_optimization") == "basic"
    with pytest.raises(UsageError) as caught:
        backend.option_value({"threads": "many"}, "threads")
    assert caught.value.message == "backend 'onnxruntime' | option threads='many' is not an integer; expected an " + (
        f"integer (0 to {4 * cpu_count()} (4 × {cpu_count()} CPUs))."
    )
    with pytest.raises(KeyError, match="backend 'onnxruntime' has no option 'thread' in its schema"):
        backend.option_value({}, "thread")
