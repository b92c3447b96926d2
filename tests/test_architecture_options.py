"""Backend option defaults are written once, in each option's spec, checked from the source (``ast``).

In ``deploykit/backends/`` an option is read only through ``OpenRequest.option(name)`` or
``Backend.option_value(options, name)``, which fill in the spec's ``default``; so the default that
``deploykit backends --options`` documents is the one that runs. Refused there:

- ``.get(...)`` on an options mapping (``options``, ``request.options``, or a name bound to one of them):
  ``options.get("threads", 0)`` writes a second default, and ``options.get("threads")`` reads around the spec;
- indexing an options mapping (``options["threads"]``);
- ``option(...) or <literal>`` (a default written again after the read);
- a parameter named after an option with a default other than None (``converted(model, weights="f32")``).

``Backend.option_value`` itself, the one place that reads the mapping, is exempt. Asking whether an option
was given (``"precision" in options``) is not a read and stays allowed. Each option name read must be in the
schema of a backend defined in the same module.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Collection
from pathlib import Path

from deploykit.backends.base import Backend
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


def _literal_parameter_defaults(tree: ast.Module, option_names: Collection[str]) -> list[tuple[int, str]]:
    """Parameters named after an option that default to a value (``weights: str = "f32"``): a second default."""
    found = []
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        args = function.args
        positional = [*args.posonlyargs, *args.args]
        pairs = [*zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=True)]
        pairs += [(arg, default) for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True) if default]
        for arg, default in pairs:
            if arg.arg in option_names and not (isinstance(default, ast.Constant) and default.value is None):
                text = f"{function.name}({arg.arg}={ast.unparse(default)}) (the default belongs in the OptionSpec)"
                found.append((function.lineno, text))
    return found


def option_default_violations(source: str, relative: str, option_names: Collection[str] = ()) -> list[str]:
    """``relative:line: code (what to do)`` for each option read around the spec in one module's source;
    ``option_names``: the options whose names a parameter may not give a default."""
    tree = ast.parse(source)
    found = [(line, f"{relative}:{line}: {text}") for line, text in _literal_parameter_defaults(tree, option_names)]
    for qualified, nodes in _scopes(tree).items():
        if f"{relative}:{qualified}" in READERS:
            continue
        bound = _bound_to_options(nodes)
        for node in nodes:
            why = _violation(node, bound)
            if why is not None:
                found.append((getattr(node, "lineno", 0), f"{relative}:{node.lineno}: {ast.unparse(node)} ({why})"))
    return [text for _, text in sorted(found)]


def _backend_classes() -> list[type[Backend]]:
    classes = []
    for target in BUILTIN_BACKENDS.values():
        module, _, name = target.partition(":")
        classes.append(getattr(importlib.import_module(module), name))
    return classes


def violations_under(root: Path) -> list[str]:
    """Every option read around the spec in ``root``'s ``deploykit/backends/``."""
    option_names = {name for backend in _backend_classes() for name in backend.options}
    found: list[str] = []
    for path in sorted((root / BACKENDS).rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        found += option_default_violations(path.read_text(encoding="utf-8"), relative, option_names)
    return found


def test_backends_read_options_only_through_the_spec_defaults():
    found = violations_under(ROOT)
    assert not found, "a default lives in the option's OptionSpec, read through request.option:\n" + "\n".join(found)


def test_each_option_read_is_in_its_modules_backend_schema():
    schemas: dict[str, set[str]] = {}
    for backend in _backend_classes():
        schemas.setdefault(backend.__module__, set()).update(backend.options)
    found = []
    for module, names in schemas.items():
        path = ROOT / (module.replace(".", "/") + ".py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and _is_option_read(node):
                read = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
                found += [f"{module}:{node.lineno}: {r!r}" for r in read if r not in names]
    assert not found, "not an option of the module's backend:\n" + "\n".join(found)


def test_every_builtin_backend_option_is_a_typed_spec():
    for backend in _backend_classes():
        untyped = [name for name, spec in backend.options.items() if as_spec(spec).type == "any"]
        assert not untyped, f"{backend.name}: {untyped} need an OptionSpec (type, default, doc)"


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
        "def converted(model, weights='f32', *, threads=0, precision=None):\n"
        "    return model\n"
    )
    found = option_default_violations(source, "m.py", {"weights", "threads", "precision"})
    assert [line.split(":")[1] for line in found] == ["3", "4", "5", "6", "8", "10", "12", "13", "13"]
    assert "converted(threads=0)" in found[-2] and "converted(weights='f32')" in found[-1]


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
