"""The shape of the house, checked: no import cycles, nothing imports the package top, no backend
names and no backend module or runtime import outside the backends, and one lock between
processes (OpenCV is the image library too: its imports are not counted).

The layer order itself is import-linter's (``.importlinter``, run by ``make lint``); these checks use
grimp (the graph import-linter builds) on every import, function-level ones included.
"""

from __future__ import annotations

import ast
from pathlib import Path

import grimp
import pytest

from deploykit.backends.registry import BUILTIN_BACKENDS, all_backends, get_backend

ROOT = Path(__file__).resolve().parents[1]

# Cycles that remain, each with why; the list only shrinks: a cycle that is gone must leave it too.
ALLOWED_CYCLES: dict[frozenset[str], str] = {
    frozenset({"deploykit.backends.base", "deploykit.backends.registry"}): (
        "a refusal of a value kind names the registered backends that run it; the registry imports Backend only "
        "in an `if TYPE_CHECKING:` block (for its annotations); "
        "at run time the registry imports no backend module"
    ),
}


def _cycles(exclude_type_checking_imports: bool) -> set[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    graph = grimp.build_graph("deploykit", exclude_type_checking_imports=exclude_type_checking_imports, cache_dir=None)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in sorted(graph.modules)}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(edges[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.add(frozenset(component))
    return found


def test_no_import_cycle_runs():
    assert _cycles(exclude_type_checking_imports=True) == set()


def test_import_cycles_are_only_the_named_ones_and_the_list_shrinks():
    cycles = _cycles(exclude_type_checking_imports=False)
    new = [sorted(c) for c in cycles - set(ALLOWED_CYCLES)]
    gone = [sorted(c) for c in set(ALLOWED_CYCLES) - cycles]
    assert not new, f"new import cycles (break them, never list them): {new}"
    assert not gone, f"these cycles are gone: remove them from ALLOWED_CYCLES: {gone}"


def test_nothing_in_the_library_imports_the_package_top():
    graph = grimp.build_graph("deploykit", cache_dir=None)
    importers = sorted(graph.find_modules_that_directly_import("deploykit"))
    assert importers == [], "import from the defining submodule (deploykit.sessions.load, ...), not `deploykit`"


def _imported_names(path: Path) -> set[str]:
    """The dotted name of every module a file imports absolutely, function-level imports included."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


def _imported_modules(path: Path) -> set[str]:
    """The top-level names of every module a file imports, function-level imports included."""
    return {name.split(".")[0] for name in _imported_names(path)}


def test_every_lock_between_processes_is_io_file_lock():
    """``fcntl`` is imported by ``deploykit/io.py`` alone: the converted-model cache, converter
    environments, emulated targets and outputs all lock through ``io.file_lock``."""
    importers = [
        path.relative_to(ROOT).as_posix()
        for folder in ("deploykit", "cli")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if "fcntl" in _imported_modules(path)
    ]
    assert importers == ["deploykit/io.py"], "lock with deploykit.io.file_lock, not an flock of your own"


# Strings that spell a backend's name but do not name the backend; keyed by file, each with why.
NOT_BACKEND_NAMES: dict[tuple[str, str], str] = {
    ("deploykit/convert/darknet/oracles.py", "opencv"): "the Darknet --oracle choice (OpenCV's own importer)",
    ("deploykit/quantize/engines.py", "ort"): "the ONNX Runtime quantize engine",
    ("cli/quantize_cmd.py", "ort"): "the ONNX Runtime quantize engine",
    ("cli/export_cmd.py", "ncnn"): "the command `deploykit export ncnn`",
    ("cli/export_cmd.py", "litert"): "the command `deploykit export litert`",
    ("cli/export_cmd.py", "mnn"): "the command `deploykit export mnn`",
    ("deploykit/converters.py", "litert"): "the converter environment `deploykit converters add litert`",
    ("deploykit/quantize/evaluate.py", "reference"): "the reference model's outputs, as a label",
    ("deploykit/tasks/classify.py", "reference"): "the reference outputs, as a label",
    ("deploykit/tasks/detect.py", "reference"): "the reference outputs, as a label",
    ("deploykit/quantize/settings.py", "ort"): "the ONNX Runtime quantize engine, the default quantizer",
}


def _backend_words() -> set[str]:
    words = set()
    for name in BUILTIN_BACKENDS:
        words.add(name)
        words.update(get_backend(name).aliases)
    for backend in all_backends():
        words.update(backend.search.virtual_devices)
    return words


def _literals(path: Path) -> list[tuple[int, str]]:
    """Every string literal of a file except docstrings and record keys (``data["reference"]``, dict keys)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and body:
            if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                skipped.add(id(body[0].value))
        if isinstance(node, ast.Subscript):
            skipped.add(id(node.slice))
        if isinstance(node, ast.Dict):
            skipped.update(id(key) for key in node.keys if key is not None)
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skipped
    ]


def _names_a_backend(text: str, words: set[str]) -> bool:
    """``onnxruntime``, ``ort``, ``AUTO``, or a spec of one: ``openvino:CPU``, ``onnxruntime cpu``."""
    head = text.strip().replace(":", " ").split(" ")
    return bool(head) and head[0] in words and len(text.strip().split()) <= 2


def test_no_backend_name_literal_outside_the_backends():
    words = _backend_words()
    found, used = [], set()
    for folder in ("deploykit", "cli"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative.startswith("deploykit/backends/"):
                continue
            for line, text in _literals(path):
                if not _names_a_backend(text, words):
                    continue
                key = (relative, text.strip().split()[0].split(":")[0])
                if key in NOT_BACKEND_NAMES:
                    used.add(key)
                else:
                    found.append(f"{relative}:{line}: {text!r}")
    assert not found, (
        "backend names belong to deploykit/backends (use the registry: DEFAULT_BACKEND, REFERENCE_BACKEND, "
        "a backend's name, search.virtual_devices, oracle.label):\n" + "\n".join(found)
    )
    assert not set(NOT_BACKEND_NAMES) - used, f"no longer needed: {sorted(set(NOT_BACKEND_NAMES) - used)}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [("onnxruntime", True), ("openvino:CPU", True), ("onnxruntime cpu", True), ("AUTO", True),
     ("OpenCV ", False), ("run it on onnxruntime first", False), ("ortho", False)],
)  # fmt: skip
def test_the_backend_name_check_tells_names_from_prose(text, expected):
    assert _names_a_backend(text, _backend_words()) is expected


def test_the_library_keeps_no_formatting_exemption():
    """`# fmt: skip` hid packed statements (334 of them in deploykit/ and cli/, logic, not tables of data):
    the formatter lays out every line of the library. Tests may keep one for a table of cases."""
    exempt = [
        f"{path.relative_to(ROOT)}:{number}"
        for folder in ("deploykit", "cli")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "# fmt: skip" in line or "# fmt: off" in line
    ]
    assert not exempt, exempt


# The backends' own modules and the runtimes' packages, imported outside deploykit/backends: each with
# why. The list only shrinks: an import that is gone must leave it too.
BACKEND_IMPORTS_ELSEWHERE: dict[tuple[str, str], str] = {
    ("deploykit/export.py", "deploykit.backends.ncnn"): "export ncnn writes pnnx's .param/.bin with the ncnn layout",
    ("deploykit/export.py", "deploykit.backends.ncnn_layout"): "export ncnn records the ONNX layout of each port",
    ("deploykit/export_mnn.py", "deploykit.backends.mnn"): "export mnn is the MNN backend's carry, verified",
    ("deploykit/export_mnn.py", "deploykit.backends.mnn_convert"): "export mnn reports the converter's version",
    ("deploykit/export_litert.py", "deploykit.backends.litert"): "export litert takes the backend's weight types",
    ("deploykit/export_litert.py", "deploykit.backends.litert_convert"): "export litert converts under its timeout",
    ("deploykit/quantize/calibration.py", "onnxruntime"): "ONNX Runtime's quantizer is a quantization engine",
    ("deploykit/quantize/engines.py", "onnxruntime"): "ONNX Runtime's quantizer is a quantization engine",
    ("deploykit/quantize/engines.py", "openvino"): "NNCF's INT8 engine hands its model to OpenVINO to save",
}
_RUNTIME_PACKAGES = {"onnxruntime", "openvino", "ncnn", "pnnx", "MNN", "_tools", "ai_edge_litert"}
_SHARED_BACKEND_MODULES = {"base", "registry", "options", "values", "validation", "converted"}


def _backend_imports(path: Path) -> set[str]:
    """The backend modules (``deploykit.backends.X`` other than the shared ones) and runtime packages a
    file imports, function-level imports included."""
    found = set()
    for name in _imported_names(path):
        parts = name.split(".")
        if parts[0] in _RUNTIME_PACKAGES:
            found.add(parts[0])
        elif parts[:2] == ["deploykit", "backends"] and len(parts) > 2 and parts[2] not in _SHARED_BACKEND_MODULES:
            found.add(".".join(parts[:3]))
    return found


def test_backend_modules_and_runtimes_are_imported_only_by_the_backends():
    """Backend knowledge outside deploykit/backends shows as an import of a backend's module or its
    runtime's package, whatever strings the file holds; the registry and the base are the way in."""
    found, used = [], set()
    for folder in ("deploykit", "cli"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative.startswith("deploykit/backends/"):
                continue
            for module in sorted(_backend_imports(path)):
                if (relative, module) in BACKEND_IMPORTS_ELSEWHERE:
                    used.add((relative, module))
                else:
                    found.append(f"{relative}: imports {module}")
    assert not found, "go through deploykit.backends.registry (get_backend) and the Backend hooks:\n" + "\n".join(found)
    assert not set(BACKEND_IMPORTS_ELSEWHERE) - used, (
        f"no longer needed: {sorted(set(BACKEND_IMPORTS_ELSEWHERE) - used)}"
    )


def test_the_import_check_sees_function_level_imports(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(
        "def f():\n    from deploykit.backends.mnn import MnnBackend\n    import onnxruntime as ort\n"
        "from deploykit.backends.registry import get_backend\n"
    )
    assert _backend_imports(path) == {"deploykit.backends.mnn", "onnxruntime"}


def test_no_task_is_named_in_a_comparison_outside_the_tasks():
    """``quantize/`` (like the commands) asks the task plug-in (``task_class(name).reduced_delta``,
    its traits) instead of branching on ``task == "detect"``: a new task is one module."""
    from deploykit.tasks import TASKS

    found = []
    for path in sorted((ROOT / "deploykit" / "quantize").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare):
                named = [c.value for c in [node.left, *node.comparators] if isinstance(c, ast.Constant)]
                found += [f"{path.relative_to(ROOT)}:{node.lineno}: {name!r}" for name in named if name in TASKS]
    assert not found, "ask the task (deploykit.tasks) instead:\n" + "\n".join(found)


# What the raw runners (``deploykit/backends/raw.py``, the runtimes called as their docs show) may import of
# deploykit, each with why: nothing that deploykit's backends or sessions run, which they are compared with.
RAW_MAY_IMPORT: dict[str, str] = {
    "deploykit.converters": "onnx2tf is installed in the converter environment the user created for LiteRT",
}


def test_the_raw_runners_import_none_of_the_code_they_measure():
    """The conformance suite measures deploykit against the raw runtimes; a raw runner that called deploykit's
    backends (or their validation, options or sessions) would measure deploykit against itself."""
    graph = grimp.build_graph("deploykit", exclude_type_checking_imports=False, cache_dir=None)
    imported = graph.find_modules_directly_imported_by("deploykit.backends.raw")
    assert imported <= set(RAW_MAY_IMPORT), f"the raw runners import {sorted(imported - set(RAW_MAY_IMPORT))}"
    assert set(RAW_MAY_IMPORT) <= imported, f"no longer needed: {sorted(set(RAW_MAY_IMPORT) - imported)}"


def test_every_built_in_backend_declares_a_raw_runner_in_the_raw_module():
    """A backend's raw runner is ``Backend.raw``; the built-in ones all name functions of the raw module, which
    exist (the strings are resolved here, the runtimes are imported only when a runner is called)."""
    import importlib

    raw = importlib.import_module("deploykit.backends.raw")
    for name in BUILTIN_BACKENDS:
        declared = get_backend(name).raw
        assert declared is not None, f"backend '{name}' declares no raw runner"
        for target in filter(None, (declared.run, declared.outside)):
            module, _, function = target.partition(":")
            assert module == "deploykit.backends.raw" and callable(getattr(raw, function, None)), target
