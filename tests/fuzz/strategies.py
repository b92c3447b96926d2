"""Hypothesis strategies for careless and hostile CLI arguments.

Every strategy mixes valid values (so commands also succeed and write) with values at and
past their ranges, wrong types, and malformed or dangerous paths (missing, directories,
devices, /proc, names too long, outputs equal to inputs, symlinks to inputs).
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import strategies as st

NUMBER_TEXTS = st.one_of(
    st.integers(-(10**12), 10**12).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.sampled_from(["0", "1", "-1", "0.5", "1.0", "2", "nan", "inf", "-inf", "abc", "1e309", "0x10", "", " ", "1_0"]),
)
SMALL_NUMBER_TEXTS = st.one_of(
    st.sampled_from(["0", "0.25", "0.45", "1", "-0.0", "1.0001", "2", "-5", "nan", "inf", "x"]),
    st.floats(-2, 2).map(lambda v: f"{v:.3g}"),
)
INT_TEXTS = st.one_of(
    st.integers(-5, 20).map(str),
    st.sampled_from(["-1", "0", "4294967295", "4294967296", "99999999999999999999", "1.5", "abc", ""]),
)
BACKENDS = st.sampled_from(["onnxruntime", "ort", "openvino", "ov", "opencv", "cv2", "nosuch", "", "ORT"])
DEVICES = st.sampled_from(
    ["cpu", "CPU", "cuda", "cuda:1", "gpu", "GPU", "AUTO", "AUTO:GPU", "AUTO:GPU,CPU", "MULTI:GPU,CPU",
     "HETERO:CPU", "opencl", "cuda_fp16", "npu", "", ":", "cpu:x"]
)  # fmt: skip
OPTION_KEYS = st.sampled_from(
    ["threads", "inter_op_threads", "graph_optimization", "log_level", "spinning", "precision", "performance_hint",
     "streams", "cache_dir", "reshape", "shape_cache", "weights", "nosuch", ""]
)  # fmt: skip
OPTION_VALUES = st.one_of(
    NUMBER_TEXTS,
    st.sampled_from(["true", "false", "maybe", "all", "disable", "f16", "bf16", "int4", "latency", "auto", "never",
                     "/nonexistent", "/proc", "1e9"]),
)  # fmt: skip
OPTIONS = st.builds(lambda k, v: f"{k}={v}", OPTION_KEYS, OPTION_VALUES) | st.sampled_from(["novalue", "=1", "a=b=c"])
SHAPES = st.one_of(
    st.lists(st.integers(-2, 6), min_size=0, max_size=4).map(lambda dims: "x".join(map(str, dims))),
    st.sampled_from(["1x3x32x32", "2x4", "100000000000x16", "1e3x4", "x", "", "1xx4", "-1x4"]),
)


def path_choice(inputs: dict[str, Path], workdir: Path, *, output: bool) -> st.SearchStrategy[str]:
    """A path: one of the inputs, a new file, a directory, a device, /proc, a too-long name, a symlink ..."""
    link = workdir / "link-to-input"
    missing = workdir / "missing" / "x.onnx"
    kinds = [
        *(str(p) for p in inputs.values()),
        str(workdir),
        str(missing),
        "/proc/x.onnx",
        "/dev/null",
        "",
        "-",
        str(workdir / ("n" * 300)),
        str(workdir / "name with spaces é.onnx"),
        str(link),
    ]
    fresh = st.sampled_from(["out.onnx", "out.npz", "out.json", "out.png", "out.jpg", "out.xyz", "out", ".hidden"])
    if output:
        return st.one_of(fresh.map(lambda name: str(workdir / name)), st.sampled_from(kinds))
    return st.sampled_from(kinds)


def optional(strategy: st.SearchStrategy[list[str]]) -> st.SearchStrategy[list[str]]:
    """Absent three times out of four, so that whole commands often succeed (and write) too."""
    return st.sampled_from([False, False, False, True]).flatmap(lambda on: strategy if on else st.just([]))


def mostly(valid: object, others: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """The valid value three times out of four, else anything from ``others``."""
    return st.sampled_from([True, True, True, False]).flatmap(lambda ok: st.just(str(valid)) if ok else others)


def flag(name: str, values: st.SearchStrategy[str]) -> st.SearchStrategy[list[str]]:
    return optional(values.map(lambda value: [name, value]))
