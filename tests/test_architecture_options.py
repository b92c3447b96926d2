"""Backend option defaults are written once, in each option's spec, checked from the source (``ast``).

In ``deploykit/backends/`` an option is read only through ``OpenRequest.option(name)`` or
``Backend.option_value(options, name)``, which fill in the spec's ``default``; so the default that
``deploykit backends --options`` documents is the one that runs. Refused there:

- ``.get(...)`` on an options mapping (``options``, ``request.options``, or a name bound to one of them):
  ``options.get("threads", 0)`` writes a second default, and ``options.get("threads")`` reads around the spec;
- indexing an options mapping (``options["threads"]``);
- ``option(...) or <literal>`` (a default written again after the read).

``Backend.option_value`` itself, the one place that reads the mapping, is exempt. Asking whether an option
was given (``"precision" in options``) is not a read and stays allowed. Each option name read must be in the
schema of a backend defined in the same module.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from deploykit.backends.options import as_spec
from deploykit.backends.registry import BUILTIN_BACKENDS

ROOT = Path(__file__).resolve().parents[1]
BACKENDS = Path("deploykit") / "backends"
#: ``path:qualified name`` of the functions that read the mapping itself: the one way.
READERS = {"deploykit/backends/base.py:Backend.option_value"}
_READ_CALLS = ("option", "option_value")


def _is_options(node: ast.expr, bound: set[str]) -> bool:
    """An options mapping: ``options``, ``anything.options``, or a name bound to one of them."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and node.args:
        return _is_options(node.args[0], bound)
    if isinstance(node, ast.Name):
        return node.id == "options" or node.id in bound
    return isinstance(node, ast.Attribute) and node.attr == "options"


def _bound_to_options(nodes: list[ast.AST]) -> set[str]:
    """Names a scope binds to an options mapping (``opts = dict(request.options)``, tuple unpacking too)."""
    bound: set[str] = set()
    for node in nodes:
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            pairs = (
                zip(target.elts, node.value.elts, strict=False)
                if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
                else [(target, node.value)]
            )
            bound |= {t.id for t, v in pairs if isinstance(t, ast.Name) and _is_options(v, bound)}
    return bound


def _is_option_read(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _READ_CALLS


def _scopes(tree: ast.Module) -> dict[str, list[ast.AST]]:
    """The nodes of each function by its qualified name (a nested function's are its own, a class body's
    its enclosing scope's), and the module's own under ``<module>``."""
    scopes: dict[str, list[ast.AST]] = {"<module>": []}

    def visit(node: ast.AST, prefix: str, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                scopes[prefix + child.name] = []
                visit(child, f"{prefix}{child.name}.", prefix + child.name)
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.", scope)
            else:
                scopes[scope].append(child)
                visit(child, prefix, scope)

    visit(tree, "", "<module>")
    return scopes


def _violation(node: ast.AST, bound: set[str]) -> str | None:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return "read it with request.option / option_value" if _is_options(node.func.value, bound) else None
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
        return "read it with request.option / option_value" if _is_options(node.value, bound) else None
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) and _is_option_read(node.values[0]):
        literal = any(isinstance(value, ast.Constant) for value in node.values[1:])
        return "the default belongs in the OptionSpec" if literal else None
    return None


def option_default_violations(source: str, relative: str) -> list[str]:
    """``relative:line: code (what to do)`` for each option read around the spec in one module's source."""
    found = []
    for qualified, nodes in _scopes(ast.parse(source)).items():
        if f"{relative}:{qualified}" in READERS:
            continue
        bound = _bound_to_options(nodes)
        for node in nodes:
            why = _violation(node, bound)
            if why is not None:
                found.append((getattr(node, "lineno", 0), f"{relative}:{node.lineno}: {ast.unparse(node)} ({why})"))
    return [text for _, text in sorted(found)]


def violations_under(root: Path) -> list[str]:
    """Every option read around the spec in ``root``'s ``deploykit/backends/``."""
    found: list[str] = []
    for path in sorted((root / BACKENDS).rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        found += option_default_violations(path.read_text(encoding="utf-8"), relative)
    return found


def test_backends_read_options_only_through_the_spec_defaults():
    found = violations_under(ROOT)
    assert not found, "a default lives in the option's OptionSpec, read through request.option:\n" + "\n".join(found)


def test_each_option_read_is_in_its_modules_backend_schema():
    schemas: dict[str, set[str]] = {}
    for target in BUILTIN_BACKENDS.values():
        module, _, name = target.partition(":")
        backend = getattr(importlib.import_module(module), name)
        schemas.setdefault(module, set()).update(backend.options)
    found = []
    for module, names in schemas.items():
        path = ROOT / (module.replace(".", "/") + ".py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if _is_option_read(node) and isinstance(node, ast.Call):
                read = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
                found += [f"{module}:{node.lineno}: {r!r}" for r in read if r not in names]
    assert not found, "not an option of the module's backend:\n" + "\n".join(found)


def test_every_builtin_backend_option_has_a_spec_with_its_default():
    for target in BUILTIN_BACKENDS.values():
        module, _, name = target.partition(":")
        backend = getattr(importlib.import_module(module), name)
        assert all(as_spec(spec).type != "any" for spec in backend.options.values()), f"{name}: a typed OptionSpec"


def test_the_check_refuses_each_way_around_the_spec():
    source = (
        "def _open(self, model, request):\n"
        "    options = dict(request.options)\n"
        "    a = options.get('threads', 0)\n"
        "    b = request.options.get('winograd')\n"
        "    c = options['threads']\n"
        "    d = request.option('threads') or 0\n"
        "    opts = dict(request.options)\n"
        "    e = opts.get('spinning', True)\n"
        "    device, kept = request.device, request.options\n"
        "    f = kept['sgemm']\n"
        "def helper(model, options):\n"
        "    return str(options.get('weights', 'f32'))\n"
    )
    found = option_default_violations(source, "m.py")
    assert [line.split(":")[1] for line in found] == ["3", "4", "5", "6", "8", "10", "12"]


def test_the_check_lets_the_one_way_through():
    source = (
        "class Backend:\n"
        "    @classmethod\n"
        "    def option_value(cls, options, name):\n"
        "        return options[name] if name in options else cls.options[name].default\n"
        "def _open(self, model, request):\n"
        "    threads = request.option('threads') or cpu_count()\n"
        "    given = 'precision' in request.options\n"
        "    echoed = dict(request.options)\n"
        "    session_options = make()\n"
        "    session_options.intra_op_num_threads = request.option('threads')\n"
        "    return LiteRtBackend.option_value(request.options, 'weights')\n"
    )
    assert option_default_violations(source, "deploykit/backends/base.py") == []
