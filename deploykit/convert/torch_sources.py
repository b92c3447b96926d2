"""Where a PyTorch model comes from: an object, ``file.py:factory``, ``package.module:factory``,
a TorchScript archive, or (opt-in) a pickled ``nn.Module``; plus state_dict loading with a
readable diff. Every failure is a ``ConversionError`` that says what to do.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import re
import sys
import warnings
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploykit.errors import ConversionError, exception_line
from deploykit.io import hash_file

_SHOWN_KEYS = 8


@dataclass
class TorchSource:
    """A loaded model and what it was loaded from."""

    module: Any
    description: str
    kind: str  # "object" | "factory" | "torchscript" | "pickle"
    files: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def sha256(self) -> str:
        digest = hashlib.sha256()
        for path in self.files:
            hash_file(digest, path)
        return digest.hexdigest() if self.files else ""


def _import_torch() -> Any:
    try:
        import torch
    except ImportError as exc:
        raise ConversionError(
            "PyTorch conversion | torch is not installed.",
            hint="pip install 'deploykit[torch]' (on a CPU-only machine, the CPU wheel from "
            "https://download.pytorch.org/whl/cpu is much smaller).",
        ) from exc
    return torch


def load_torch_source(
    source: Any,
    *,
    weights: str | Path | None = None,
    trust_pickle: bool = False,
    weights_key: str | None = None,
    ignore_keys: str | None = None,
) -> TorchSource:
    """Resolve ``source`` to an ``nn.Module`` in eval mode.

    Args:
        source: an ``nn.Module``; ``path/to/file.py:factory``; ``package.module:factory``;
            a TorchScript archive; or a pickled module file (only with ``trust_pickle``).
        weights: a state_dict or checkpoint file to load into the factory's model (strictly).
        trust_pickle: allow unpickling a whole module, which runs code from the file.
        weights_key: the checkpoint key that holds the state_dict (default: found automatically).
        ignore_keys: regular expression of state_dict keys to drop before loading.
    """
    torch = _import_torch()
    if isinstance(source, torch.nn.Module):
        loaded = TorchSource(source, type(source).__name__, "object")
    else:
        text = str(source)
        path = Path(text)
        if path.is_file() and path.suffix != ".py":
            loaded = _load_archive(torch, path, trust_pickle)
        elif ":" in text:
            loaded = _load_factory(text)
        else:
            raise ConversionError(
                f"model source '{text}' | is neither an existing model file nor MODULE:FACTORY.",
                hint="pass file.py:build_model, package.module:build_model, a TorchScript "
                ".pt archive, or a pickled module with --trust-pickle.",
            )
    if weights is not None:
        if loaded.kind == "torchscript":
            raise ConversionError(
                f"weights '{weights}' | a TorchScript archive already holds its weights.",
                hint="drop --weights, or pass the factory that builds the model.",
            )
        loaded.notes += load_state_dict(
            torch, loaded.module, Path(weights), weights_key=weights_key, ignore_keys=ignore_keys
        )
        loaded.files.append(Path(weights))
    loaded.module.eval()
    return loaded


def _load_factory(text: str) -> TorchSource:
    target, _, factory_name = text.rpartition(":")
    if target.endswith(".py"):
        path = Path(target)
        if not path.is_file():
            raise ConversionError(
                f"model factory '{text}' | file '{target}' does not exist.",
                hint="check the path of the Python file that defines the factory.",
            )
        module_name = f"deploykit_user_{hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]}"
        spec = importlib.util.spec_from_file_location(module_name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        files = [path]
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            sys.modules.pop(module_name, None)
            raise ConversionError(
                f"model factory '{text}' | importing '{target}' failed: {type(exc).__name__}: {exc}",
                hint="run 'python FILE' to see the full error; fix it, then convert again.",
            ) from exc
    else:
        try:
            module = importlib.import_module(target)
        except Exception as exc:
            raise ConversionError(
                f"model factory '{text}' | cannot import module '{target}': {type(exc).__name__}: {exc}",
                hint="check the module path and that its package is installed (or use file.py:factory).",
            ) from exc
        module_file = getattr(module, "__file__", None)
        files = [Path(module_file)] if module_file else []
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        raise ConversionError(
            f"model factory '{text}' | '{target}' has no callable '{factory_name}'.",
            hint="name a function (or class) that returns an nn.Module and takes no arguments.",
        )
    try:
        built = factory()
    except Exception as exc:
        raise ConversionError(
            f"model factory '{text}' | calling {factory_name}() raised {type(exc).__name__}: {exc}",
            hint="the factory must build the model with no arguments.",
        ) from exc
    torch = _import_torch()
    if not isinstance(built, torch.nn.Module):
        raise ConversionError(
            f"model factory '{text}' | returned {type(built).__name__}, expected a torch.nn.Module.",
            hint="return the model object from the factory.",
        )
    return TorchSource(built, text, "factory", files)


def _is_torchscript(path: Path) -> bool:
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as archive:
        return any(name.endswith(("constants.pkl", "/code/")) or "/code/" in name for name in archive.namelist())


def _check_not_cut_short(path: Path, what: str) -> None:
    """torch.save and torch.jit.save write zip archives: one that starts as a zip but has no readable
    central directory was cut short (a broken download or copy), which torch would report as a pickle."""
    with open(path, "rb") as handle:
        start = handle.read(4)
    if start == b"PK\x03\x04" and not zipfile.is_zipfile(path):
        raise ConversionError(
            f"{what} '{path}' | is a zip archive (as torch.save and torch.jit.save write) that is cut short or "
            f"damaged: its table of contents is missing ({path.stat().st_size} bytes).",
            hint="copy or download the file again; compare its size or checksum with the original.",
        )


def _load_archive(torch: Any, path: Path, trust_pickle: bool) -> TorchSource:
    _check_not_cut_short(path, "model file")
    if _is_torchscript(path):
        try:
            with warnings.catch_warnings():  # torch deprecates TorchScript; users still have archives
                warnings.simplefilter("ignore", DeprecationWarning)
                module = torch.jit.load(str(path), map_location="cpu")
        except Exception as exc:
            raise ConversionError(
                f"TorchScript archive '{path}' | cannot be loaded: {exc}",
                hint="re-save it with torch.jit.save() from the same torch version.",
            ) from exc
        return TorchSource(module, str(path), "torchscript", [path])
    try:
        content = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:
        if not trust_pickle:
            raise ConversionError(
                f"model file '{path}' | holds pickled Python objects (a whole nn.Module?), "
                "and unpickling runs code from the file.",
                hint="if you trust where the file comes from, pass --trust-pickle "
                "(trust_pickle=True); better, save a state_dict and pass FILE.py:factory --weights.",
            ) from exc
        try:
            content = torch.load(str(path), map_location="cpu", weights_only=False)
        except Exception as inner:
            raise ConversionError(
                f"model file '{path}' | cannot be unpickled: {type(inner).__name__}: {inner}",
                hint="the classes it needs must be importable; run from the project that saved it.",
            ) from inner
        if isinstance(content, torch.nn.Module):
            return TorchSource(content, str(path), "pickle", [path])
    if isinstance(content, Mapping):
        raise ConversionError(
            f"model file '{path}' | is a state_dict (weights only), not a model.",
            hint=f"pass the code that builds the model: deploykit convert torch file.py:factory --weights {path}",
        )
    raise ConversionError(
        f"model file '{path}' | holds a {type(content).__name__}, not an nn.Module.",
        hint="save the model with torch.jit.save, or its state_dict with torch.save(model.state_dict()).",
    )


# Where training scripts keep the weights inside a checkpoint, most common first.
CHECKPOINT_KEYS = ("state_dict", "model_state_dict", "model_state", "model", "net", "ema")


def _is_state_dict(torch: Any, value: Any) -> bool:
    return (
        isinstance(value, Mapping)
        and bool(value)
        and all(isinstance(k, str) for k in value)
        and all(isinstance(v, torch.Tensor) for v in value.values())
    )


def _unwrap_checkpoint(torch: Any, path: Path, content: Any, weights_key: str | None) -> tuple[Any, str | None]:
    """The state_dict inside a checkpoint, and the key it was under (None: the file is one).

    ``weights_key`` names the key (dots go deeper: ``ema.module``); otherwise the file itself,
    then ``CHECKPOINT_KEYS`` (one level of ``module``/``state_dict`` nesting under each) are tried.
    """
    if weights_key:
        value = content
        for part in weights_key.split("."):
            if not isinstance(value, Mapping) or part not in value:
                keys = ", ".join(map(str, value)) if isinstance(value, Mapping) else type(value).__name__
                raise ConversionError(
                    f"weights '{path}' | has no key '{weights_key}' (at '{part}' it has: {keys}).",
                    hint="pass --weights-key with one of the keys listed.",
                )
            value = value[part]
        return value, weights_key
    if not isinstance(content, Mapping) or _is_state_dict(torch, content):
        return content, None
    for key in CHECKPOINT_KEYS:
        value = content.get(key)
        if _is_state_dict(torch, value):
            return value, key
        if isinstance(value, Mapping):
            for inner in ("module", "state_dict"):
                if _is_state_dict(torch, value.get(inner)):
                    return value[inner], f"{key}.{inner}"
    nested = [str(k) for k, v in content.items() if isinstance(v, Mapping)]
    if nested and not any(isinstance(v, torch.Tensor) for v in content.values()):
        raise ConversionError(
            f"weights '{path}' | is a checkpoint with keys {', '.join(map(str, content))}; none of "
            f"{', '.join(CHECKPOINT_KEYS)} holds a state_dict.",
            hint=f"name the key that holds the model's weights: --weights-key {nested[0]}.",
        )
    return content, None


def load_state_dict(
    torch: Any,
    module: Any,
    path: Path,
    *,
    weights_key: str | None = None,
    ignore_keys: str | None = None,
) -> list[str]:
    """Load ``path`` strictly into ``module``; on mismatch say which keys and shapes differ.

    Args:
        weights_key: the checkpoint key holding the state_dict (default: found automatically).
        ignore_keys: a regular expression; entries of the file whose key matches it are dropped
            (extra training-only parameters such as a loss's).

    Returns:
        notes for the report: where the weights were found and which keys were ignored.
    """
    if not path.is_file():
        raise ConversionError(
            f"weights '{path}' | {'is a directory' if path.is_dir() else 'no such file'}.",
            hint="check the path of the state_dict file.",
        )
    pattern = None
    if ignore_keys:
        try:
            pattern = re.compile(ignore_keys)
        except re.error as exc:
            raise ConversionError(
                f"--ignore-keys '{ignore_keys}' | is not a regular expression: {exc}.",
                hint="e.g. --ignore-keys '^(loss|criterion)\\.'.",
            ) from exc
    if path.is_file():
        _check_not_cut_short(path, "weights")
    try:
        raw = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:
        raise ConversionError(
            f"weights '{path}' | cannot be read as a state_dict: {type(exc).__name__}: {exception_line(exc)}",
            hint="save weights with torch.save(model.state_dict(), path).",
        ) from exc
    content, key = _unwrap_checkpoint(torch, path, raw, weights_key)
    if not isinstance(content, Mapping):
        raise ConversionError(
            f"weights '{path}' | holds a {type(content).__name__}, expected a state_dict.",
            hint="save weights with torch.save(model.state_dict(), path).",
        )
    notes = [f"weights: state_dict under checkpoint key '{key}'"] if key else []
    if pattern is not None:
        ignored = sorted(k for k in content if pattern.search(str(k)))
        content = {k: v for k, v in content.items() if k not in set(ignored)}
        notes.append(
            f"weights: {len(ignored)} key(s) ignored by --ignore-keys '{ignore_keys}'"
            + (f": {', '.join(ignored)}" if ignored else "")
        )
    expected = module.state_dict()
    missing = [k for k in expected if k not in content]
    unexpected = [k for k in content if k not in expected]
    mismatched = [
        f"{k}: file {tuple(content[k].shape)} vs model {tuple(expected[k].shape)}"
        for k in expected
        if k in content and hasattr(content[k], "shape") and tuple(content[k].shape) != tuple(expected[k].shape)
    ]
    if missing or unexpected or mismatched:
        parts = []
        for label, keys in (("missing", missing), ("unexpected", unexpected), ("mismatched", mismatched)):
            if keys:
                shown = ", ".join(keys[:_SHOWN_KEYS]) + (
                    f" (+{len(keys) - _SHOWN_KEYS} more)" if len(keys) > _SHOWN_KEYS else ""
                )
                parts.append(f"{len(keys)} {label}: {shown}")
        raise ConversionError(
            f"weights '{path}' | do not fit the model ({'; '.join(parts)}).",
            hint="these weights belong to another architecture or variant; check the factory "
            "(a 'module.' prefix means they were saved from DataParallel). Extra training-only "
            "entries can be dropped with --ignore-keys REGEX; --weights-key picks a checkpoint key.",
        )
    module.load_state_dict(content, strict=True)
    return notes
