"""Hypothesis strategies for careless and hostile CLI arguments.

Every strategy mixes valid values (so commands also succeed and write) with values at and
past their ranges, wrong types, and malformed or dangerous paths (missing, directories,
devices, /proc, names too long, outputs equal to inputs, symlinks to inputs).
"""

from __future__ import annotations

import json
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


# Model metadata (metadata_props) as a careless exporter or a hostile file writes it: deploykit's own keys
# with valid, wrong-typed, out-of-range, NaN and malformed JSON values, and Ultralytics' keys half-written.
_JSON_SCALARS = st.one_of(
    st.integers(-(10**6), 10**6), st.floats(allow_nan=False, allow_infinity=False), st.booleans(), st.none(),
    st.text(max_size=6),
)  # fmt: skip
_JSON = st.recursive(
    _JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
_SIZES = st.one_of(
    st.lists(st.integers(-5, 100_000), min_size=0, max_size=3), st.just([32, 32]), st.just([32.5, 32]), _JSON
)
_INPUT_FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "size": _SIZES,
        "channels": st.one_of(st.integers(-1, 100), _JSON),
        "channel_order": st.sampled_from(["RGB", "BGR", "XYZ", "", "rgb"]) | _JSON,
        "scale": st.one_of(st.floats(-1, 1), _JSON),
        "mean": st.lists(st.floats(-300, 300), max_size=4) | _JSON,
        "std": st.lists(st.floats(-2, 300), max_size=4) | _JSON,
        "resize": st.sampled_from(["letterbox", "stretch", "center-crop", "fill", ""]) | _JSON,
        "pad_value": st.floats(-1, 2) | _JSON,
    },
)
METADATA_VALUES = {
    "deploykit.task": st.sampled_from(["detect", "classify", "segment", "", "DETECT"]) | _JSON.map(str),
    "deploykit.input": st.one_of(
        _INPUT_FIELDS.map(lambda v: json.dumps(v)),
        st.sampled_from(['{"size": [32, NaN]}', '{"scale": Infinity}', "{size: [32", "[1, 2]", "", "null", "[" * 5000]),
    ),
    "deploykit.labels": st.one_of(
        st.lists(st.text(max_size=5), max_size=6).map(lambda v: json.dumps(v)),
        _JSON.map(lambda v: json.dumps(v)),
        st.sampled_from(["[1,2", "not json", '["\\u001b[31mred"]']),
    ),
    "imgsz": st.sampled_from(["[32, 32]", "32", "[-5, 10]", "[abc", "(32, 32)", "[10**9, 2]", "[32.5, 32]"]),
    "names": st.sampled_from(["{0: 'a', 1: 'b'}", "{0: 'a',", "['a', 'b', 'c', 'd', 'e']", "{'x': 1}", "42"]),
}
METADATA = st.fixed_dictionaries({}, optional=METADATA_VALUES)


# Special files given where a regular file (or a folder) is expected: refused by kind, never read.
SPECIAL_KINDS = st.sampled_from(["fifo", "socket", "dev-zero", "directory", "symlink-loop"])
SPECIAL_ROLES = st.sampled_from(["model", "input", "npz", "report", "labels", "cfg", "weights"])
_SUFFIX = {"model": ".onnx", "input": ".npy", "npz": ".npz", "report": "", "labels": ".names", "cfg": ".cfg",
           "weights": ".weights"}  # fmt: skip


def make_special(kind: str, role: str, directory: Path) -> Path:
    """A special file of ``kind`` named as the ``role`` expects (``x.onnx``, ``x.npy`` ...)."""
    import os
    import socket

    path = directory / f"special-{kind}{_SUFFIX[role]}"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        with socket.socket(socket.AF_UNIX) as server:  # the inode stays a socket after close
            server.bind(str(path))
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "directory":
        path.mkdir()
    else:
        path.symlink_to(path.name)  # a link to itself: ELOOP
    return path


def special_command(role: str, special: Path, assets: dict[str, Path], work: Path) -> list[str]:
    """The command that reads ``special`` in ``role``."""
    return {
        "model": ["run", special],
        "input": ["run", assets["dynamic"], "-i", f"x={special}"],
        "npz": ["compare", assets["dynamic"], "-b", "ort", "--inputs", special],
        "report": ["bench", assets["dynamic"], "-b", "ort", "--iterations", "2", "--report", special],
        "labels": ["predict", assets["classifier"], assets["image"], "--labels", special],
        "cfg": ["convert", "darknet", special, assets["weights"], "-o", work / "out.onnx"],
        "weights": ["convert", "darknet", assets["cfg"], special, "-o", work / "out.onnx"],
    }[role]


# Resource limits a careless user's shell has set (ulimit -n/-v/-f), applied with prlimit to one command;
# each with the words its message may use to name it.
RESOURCE_LIMITS = st.sampled_from(
    [
        ("--nofile=64", ("open files", "ulimit -n", "RLIMIT_NOFILE")),
        (f"--as={1536 * 2**20}", ("memory", "address space", "ulimit -v", "RLIMIT_AS", "MiB")),
        ("--fsize=2048", ("size limit", "ulimit -f", "File too large")),
    ]
)
LIMITED_COMMANDS = st.sampled_from(
    [
        ("bench", "{dynamic}", "-b", "ort", "--iterations", "2", "--report", "{work}/report"),
        ("compare", "{dynamic}", "-b", "ort", "--json"),
        ("run", "{dynamic}", "--save", "{work}/out.npz"),
        ("quantize", "{classifier}", "--fp16", "-o", "{work}/q.onnx"),
    ]
)
