"""The central interface: ``Backend`` (a stateless plug-in) and ``Session`` (a loaded model).

Backend authors write loading (``Backend._open``) and ``Session._run`` only; this
module validates feeds once, orders outputs by the graph, translates runtime
exceptions, and refuses silent device fallback. It must not import a runtime.
"""

from __future__ import annotations

import abc
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from deploykit.backends.converted import interface_file
from deploykit.backends.legacy import MADE_FUNCTIONS, OldBackendNames
from deploykit.backends.options import OptionSpec, as_spec, validate_options
from deploykit.backends.traits import (
    Conversion,
    LoadWording,
    OraclePolicy,
    RawRuntime,
    RuntimePackage,
    SearchTraits,
    last_meaningful_line,
)
from deploykit.backends.validation import FastCheck, validate_feeds
from deploykit.backends.values import kind_refusal, owned_output, sentence
from deploykit.errors import (
    BackendError,
    BackendUnavailableError,
    DeployKitError,
    InputError,
    InvalidModelError,
    PrecisionUnavailableError,
    UnsupportedModelError,
    UsageError,
    exception_line,
)
from deploykit.model import Model, as_model
from deploykit.tensors import TENSOR, TensorSpec, normalize_precision


@dataclass
class SessionInfo:
    """What actually executes a session, as reported by the runtime after loading.

    Attributes:
        backend: registered backend name (``onnxruntime``, ``openvino``, ``opencv``).
        backend_version: version of the runtime package, e.g. ``onnxruntime-gpu 1.31.1``.
        device_requested: the device the caller asked for.
        device: the device that runs the model, as the runtime reports it.
        precision: compute precision in use: ``f32``, ``f16``, ``bf16`` ...
        model_precision: the precision of the model's weights (``int8`` for a quantized model, whose
            float layers compute in ``precision``).
        precision_requested: the precision the caller asked for (the ``precision`` option), or
            None when none was asked and the runtime's default ran.
        providers: runtime-specific detail: ORT providers, OpenVINO execution
            devices, OpenCV backend/target.
        fallback: True when the session runs on another device than asked, which
            only happens when the caller passed ``allow_fallback=True``.
        fallback_reason: why the asked-for device could not be used.
        options: the backend options the session was opened with.
        recompiles: how many times the runtime compiled a shape again after evicting it from
            its cache (OpenVINO with reshape=auto; raise its ``shape_cache`` option if this grows).
    """

    backend: str
    backend_version: str
    device_requested: str
    device: str
    precision: str
    providers: list[str] = field(default_factory=list)
    fallback: bool = False
    fallback_reason: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    recompiles: int = 0
    precision_requested: str | None = None
    model_precision: str | None = None

    @property
    def precision_label(self) -> str:
        """``bf16``, or ``f16 → bf16`` when an allowed fallback ran another precision than asked, or
        ``int8 (float layers bf16)`` for an INT8 model whose float layers compute in bf16."""
        asked = self.precision_requested
        ran = f"{asked} → {self.precision}" if asked and asked != self.precision else self.precision
        if self.model_precision == "int8" and self.precision != "int8":
            return f"int8 (float layers {ran})"
        return ran

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SessionInfo:
        """The info ``to_dict`` wrote (keys this version does not know are ignored)."""
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class OpenRequest:
    """What ``Backend.open`` was asked for, checked: the backend's ``_open`` reads the device, the fallback
    and the options from it and hands it to the session it makes, which settles the precision it runs
    against it (an error, or with ``allow_fallback`` a reported fallback).

    Attributes:
        backend: the backend that opens the session (its name, value kinds and wording).
        device: the device asked for (the backend's default when none was).
        options: the backend options, validated against its schema.
        allow_fallback: run on another device or precision when the asked one cannot be used, and say so.
        precision: the precision asked for (the ``precision`` option, normalised), None for the runtime's default.
        model_precision: the precision of the model's weights as read (``int8`` for a quantized model), if known.
    """

    backend: Backend
    device: str
    options: Mapping[str, Any] = field(default_factory=dict)
    allow_fallback: bool = False
    precision: str | None = None
    model_precision: str | None = None

    def option(self, name: str) -> Any:
        """The value of backend option ``name`` for this session: as the caller gave it (validated), else
        its spec's ``default``, the one place a default is written (``deploykit backends --options``
        shows it). ``options`` stays what the caller gave: reports, bundles and ``session.info`` echo it.

        Raises:
            KeyError: ``name`` is not in the backend's schema (a backend's own mistake, never the caller's).
        """
        return self.backend.option_value(self.options, name)


class Session(abc.ABC):
    """A loaded model on one backend and device.

    Use it as a context manager or call ``close()``. ``run`` is safe to call
    from several threads at once.

    Attributes:
        inputs: input name → ``TensorSpec``, in graph order.
        outputs: output name → ``TensorSpec``, in graph order.
        info: what actually executes the model (``SessionInfo``).
        model_path: the file the session was loaded from.
        metadata: the model's ``metadata_props`` (pre-processing, labels ... written by converters).
    """

    def __init__(
        self,
        model_path: Path,
        inputs: Sequence[TensorSpec],
        outputs: Sequence[TensorSpec],
        info: SessionInfo,
        metadata: Mapping[str, str] | None = None,
        *,
        request: OpenRequest | None = None,
    ) -> None:
        """A session of a model on its backend: ``request`` is what ``Backend.open`` was asked (None for a
        session that wraps another one, which was settled when it was made).

        Raises:
            UnsupportedModelError: an input or output of a kind the backend does not run.
            PrecisionUnavailableError: the runtime computes another precision than asked, and no
                fallback was allowed.
        """
        self.model_path = model_path
        self.metadata: dict[str, str] = dict(metadata or {})
        self.inputs: dict[str, TensorSpec] = {spec.name: spec for spec in inputs}
        self.outputs: dict[str, TensorSpec] = {spec.name: spec for spec in outputs}
        self.info = info
        self._closed = False
        self._allow_fallback = False
        self._fast_checks = [FastCheck.of(spec) for spec in self.inputs.values()]
        self._request: OpenRequest | None = None
        if request is not None:
            self._take(request)

    def _take(self, request: OpenRequest) -> None:
        """Check the model's value kinds against the backend, record what was asked, and settle the precision
        (when the runtime has said it: OpenVINO settles on its first compile). Called once: when the session
        is made, or by ``Backend.open`` for a plug-in that made its session without the request."""
        if self._request is not None:
            return
        self._request = request
        refuse_unsupported_kinds(
            request.backend, self.model_path, list(self.inputs.values()), list(self.outputs.values())
        )
        info = self.info
        info.precision_requested = request.precision
        # the weights' precision as the session found it in the file (LiteRT's int8 weights), else the model's
        info.model_precision = info.model_precision or request.model_precision
        self._allow_fallback = request.allow_fallback
        if info.precision:
            self._settle_precision(info.precision)

    def _settle_precision(self, ran: str) -> None:
        """Record the precision the runtime computes in (backends that learn it late, e.g. on the first
        compile of a dynamic shape, call this again). A precision other than the one asked for is
        an error, or with ``allow_fallback`` a reported fallback (``f16 → bf16``), never a silent swap."""
        info = self.info
        info.precision = ran
        asked = info.precision_requested
        if asked is None or normalize_precision(ran) == asked:
            return
        reason = f"precision {asked} → {ran}: {info.backend} on {info.device} computes {ran}"
        if self._allow_fallback:
            if reason not in (info.fallback_reason or ""):
                info.fallback = True
                info.fallback_reason = f"{info.fallback_reason}; {reason}" if info.fallback_reason else reason
            return
        raise PrecisionUnavailableError(
            f"backend '{info.backend}' | asked for {asked} on '{info.device}', but the runtime compiled "
            f"'{self.model_path.name}' for {ran}.",
            hint=f"ask for {ran}, or pass allow_fallback=True (--allow-fallback) to accept the substitute "
            "and have it reported.",
        )

    @abc.abstractmethod
    def _run(self, feeds: dict[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        """Run validated feeds; return every graph output by name, as arrays the caller may own."""

    def _close(self) -> None:  # noqa: B027  (optional hook, empty by default)
        """Free runtime resources; called once by ``close``."""

    def run(self, feeds: Mapping[str, Any], *, cast: bool = False) -> dict[str, np.ndarray]:
        """Run the model once.

        Args:
            feeds: input name → array (or anything ``np.asarray`` takes); a list of arrays for
                a sequence input; None for an empty optional input.
            cast: also cast dtypes that lose precision (e.g. float64 → float32).
                Lossless casts (int32 → int64, float16 → float32 ...) always happen.

        Returns:
            output name → contiguous ``np.ndarray`` that the caller owns, in graph order, with the
            runtime's exact shape (a 0-d output stays 0-d) and dtype. A sequence output is a list
            of arrays, an empty optional output None.

        The model runs in this process: a runtime that crashes (a segmentation fault in its
        kernels) ends the calling process. ``deploykit run`` and ``compare`` run sessions in
        worker processes for that reason.

        Raises:
            InputError: an unknown or missing input, a wrong dtype, rank or fixed size.
            BackendError: the runtime failed while running.
        """
        if self._closed:
            raise UsageError(
                f"session for '{self.model_path.name}' | is closed.",
                hint="open a new session with deploykit.load().",
            )
        prepared = self._accept(feeds)
        if prepared is None:
            prepared = validate_feeds(self.inputs, feeds, cast=cast)
        try:
            produced = self._run(prepared)
        except (DeployKitError, MemoryError):  # out of memory is the process's to say, with its limit (workers)
            raise
        except Exception as exc:
            raise BackendError(
                f"backend '{self.info.backend}' on {self.info.device} | failed to run "
                f"'{self.model_path.name}': {sentence(self.explain(exc))}",
                hint="run 'deploykit inspect' on the model and try another backend or device.",
            ) from exc
        return {name: owned_output(spec, produced[name], self._output_error) for name, spec in self.outputs.items()}

    def explain(self, exc: BaseException) -> str:
        """The runtime's reason for a failed run, in one line (the same translation as the
        backend's ``explain`` on load; the default keeps the last line that says something)."""
        return last_meaningful_line(exc)

    def _output_error(self, spec: TensorSpec, problem: str) -> BackendError:
        return BackendError(
            f"backend '{self.info.backend}' on {self.info.device} | output '{spec.name}' of "
            f"'{self.model_path.name}' {problem} ({spec.type_text()}).",
            hint="the runtime returned no value of that type (some return nothing for an empty tensor); "
            "try another backend.",
        )

    def _accept(self, feeds: Any) -> dict[str, np.ndarray] | None:
        """The hot path: feeds that are already exactly right pass with a few comparisons.

        Anything else (a cast, a wrong name or shape) returns None and goes through
        ``validate_feeds``, which casts or raises the detailed error.
        """
        if type(feeds) is not dict or len(feeds) != len(self._fast_checks):
            return None
        symbols: dict[str, int] = {}
        for check in self._fast_checks:
            array = feeds.get(check.name)
            if type(array) is not np.ndarray or array.dtype != check.dtype:
                return None
            shape = array.shape
            if check.static_shape is not None:
                if shape != check.static_shape:
                    return None
                continue
            if len(shape) != check.rank:
                return None
            for axis, size in check.fixed_axes:
                if shape[axis] != size:
                    return None
            for axis, symbol in check.symbolic_axes:
                if symbols.setdefault(symbol, shape[axis]) != shape[axis]:
                    return None
        return feeds

    def __call__(self, *arrays: Any, cast: bool = False, **named: Any) -> dict[str, np.ndarray]:
        """Shorthand for ``run``: positional arrays fill the inputs in graph order."""
        if arrays and named:
            raise UsageError(
                "session call | mixes positional and named inputs.",
                hint="pass either arrays in input order or name=array pairs, not both.",
            )
        if arrays:
            if len(arrays) != len(self.inputs):
                raise InputError(
                    f"session call | got {len(arrays)} positional input(s), the model has "
                    f"{len(self.inputs)}: {', '.join(repr(n) for n in self.inputs)}.",
                    hint="pass one array per input, in that order, or use run({name: array}).",
                )
            return self.run(dict(zip(self.inputs, arrays, strict=True)), cast=cast)
        return self.run(named, cast=cast)

    def close(self) -> None:
        """Release the runtime's resources. Further ``run`` calls raise ``UsageError``."""
        if not self._closed:
            self._closed = True
            self._close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        inputs = ", ".join(str(s) for s in self.inputs.values())
        return (
            f"<{type(self).__name__} {self.model_path.name} on {self.info.backend}:"
            f"{self.info.device} ({self.info.precision}) inputs=[{inputs}]>"
        )


def _non_utf8_string_tensors(model: Model) -> list[str]:
    """Names of the STRING initializers and Constant values whose bytes are not UTF-8 (subgraphs too)."""
    import onnx

    from deploykit.model import walk_nodes

    proto = model.proto
    if proto is None:
        try:
            proto = onnx.load(str(model.path), load_external_data=False)
        except Exception:  # the caller says what it can without the names
            return []
    tensors = [*proto.graph.initializer]
    tensors += [a.t for node in walk_nodes(proto.graph) for a in node.attribute if a.HasField("t")]
    found = []
    for tensor in tensors:
        if tensor.data_type == onnx.TensorProto.STRING:
            try:
                for value in tensor.string_data:
                    value.decode("utf-8")
            except UnicodeDecodeError:
                found.append(tensor.name or "a Constant's value")
    return found


def _check_precision(backend: Backend, device: str, requested: str, allow_fallback: bool) -> None:
    """A precision the device does not compute natively is refused before loading, unless a
    fallback is allowed (then the runtime chooses and the session reports what ran)."""
    native = backend.precisions(device)
    if requested in native or allow_fallback:
        return
    raise PrecisionUnavailableError(
        f"{backend.wording.subject_for(backend.name)} | device '{device}' does not compute {requested} natively; "
        f"it runs {', '.join(native)} here.",
        hint=f"ask for one of {', '.join(native)} ('deploykit backends --check' shows what runs), or pass "
        "allow_fallback=True (--allow-fallback) to let the runtime choose and have the substitute reported.",
    )


def _load_error(backend: Backend, model: Model, exc: BaseException) -> DeployKitError:
    """A runtime exception while loading, as one deploykit error: an ONNX file that fails the ONNX
    checker gets the same message on every backend (``check_onnx``, on the model already read);
    anything else the runtime cannot load is an ``UnsupportedModelError`` worded by the backend's ``wording``."""
    from deploykit.model import check_onnx

    if model.proto is not None:
        try:
            check_onnx(model)
        except DeployKitError as broken:
            return broken
    if isinstance(exc, UnicodeDecodeError):  # the model's text, not the runtime's failure
        named = ", ".join(f"'{n}'" for n in _non_utf8_string_tensors(model)) or "a string tensor"
        return InvalidModelError(
            f"model '{model.path.name}' | {named} holds bytes that are not UTF-8 text ({exc.reason} at byte "
            f"{exc.start}); ONNX strings are UTF-8, so {backend.wording.subject_for(backend.name)} cannot read it.",
            hint="fix the model's string values (its initializers or Constant nodes).",
        )
    wording = backend.wording
    reason = sentence(wording.explain(exc))
    return UnsupportedModelError(
        f"{wording.subject_for(backend.name)} | cannot {wording.verb} '{model.path.name}': {reason}",
        hint=wording.hint_about(exc),
    )


class Backend(OldBackendNames, abc.ABC):
    """A runtime plug-in: stateless, cheap to construct, imports its runtime lazily.

    Subclasses set ``name``, ``aliases``, ``runtime`` (a ``RuntimePackage``) and ``options`` and implement
    ``version``, ``devices`` and ``_open``; what else a backend says about itself is one value per concern
    (``oracle``, ``search``, ``wording``, ``conversion``, ``raw``: ``deploykit.backends.traits``), set only where
    the default does not fit. The old attribute names still work, with a warning (``legacy``).
    """

    is_deploykit_backend: ClassVar[bool] = True
    """How the registry recognises a plug-in's class without importing this module (which looks backends up there)."""
    name: ClassVar[str]
    aliases: ClassVar[tuple[str, ...]] = ()
    runtime: ClassVar[RuntimePackage]
    """The package that provides the runtime: the module imported, the pip extra, the distributions."""
    default_device: ClassVar[str] = "cpu"
    oracle: ClassVar[OraclePolicy] = OraclePolicy()
    """How verification treats the backend as an oracle: independent or a candidate, its label, its blind spots."""
    search: ClassVar[SearchTraits] = SearchTraits()
    """Which default backend × device sweeps (bench, compare, optimize) take the backend, and on which devices."""
    conversion: ClassVar[Conversion] = Conversion()
    """How a backend that converts ONNX into its runtime's own format reaches bundles, caches and ``optimize``."""
    wording: ClassVar[LoadWording] = LoadWording()
    """How a failure to load a model is worded: the failing step, the hint, the runtime exceptions translated."""
    raw: ClassVar[RawRuntime | None] = None
    """How the conformance suite calls the runtime itself, to measure deploykit against it (None: the suite
    cannot measure the backend, and fails saying so)."""
    options: ClassVar[Mapping[str, OptionSpec | str]] = {}
    """Option name → ``OptionSpec`` (type, range, default, doc), validated by ``open`` before loading."""
    formats: ClassVar[tuple[str, ...]] = (".onnx",)
    """File suffixes the backend opens: ``.onnx`` and any native format of its runtime (OpenCV's
    Darknet ``.cfg``, ncnn's ``.param``), whose load errors are the runtime's, not a broken ONNX file."""
    value_kinds: ClassVar[frozenset[str]] = frozenset({TENSOR})
    """Kinds of graph inputs and outputs the backend runs (``deploykit.tensors.KINDS``): tensors by
    default; a backend whose runtime feeds and returns sequences and optionals lists them too."""

    def import_runtime(self) -> Any:
        """Import and return the runtime module, or raise ``BackendUnavailableError``."""
        import importlib

        try:
            return importlib.import_module(self.runtime.module)
        except Exception as exc:
            raise BackendUnavailableError(
                f"backend '{self.name}' | cannot import '{self.runtime.module}' "
                f"({type(exc).__name__}: {exception_line(exc)}).",
                hint=f"pip install 'deploykit[{self.runtime.pip_extra}]'.",
            ) from exc

    def unavailable_reason(self) -> str | None:
        """None when the runtime imports; otherwise why not, with the install hint."""
        try:
            self.import_runtime()
        except BackendUnavailableError as exc:
            return str(exc)
        return None

    def is_available(self) -> bool:
        return self.unavailable_reason() is None

    @abc.abstractmethod
    def version(self) -> str:
        """Runtime package and version, e.g. ``openvino 2026.4.1``."""

    @abc.abstractmethod
    def devices(self) -> list[str]:
        """Devices this machine offers to the backend, in the backend's spelling."""

    def unavailable_devices(self) -> dict[str, str]:
        """Devices the backend knows but this machine cannot use, with the reason (for ``backends``)."""
        return {}

    def precisions(self, device: str | None = None) -> list[str]:
        """Compute precisions the backend runs natively on ``device`` here (``f32`` first).

        The default is a backend that runs the model in its own precision only; a backend with
        a ``precision`` option overrides this with what the device really offers.
        """
        return ["f32"]

    def model_precision(self, own: str, device: str | None = None) -> str:
        """The precision a backend without a precision setting computes a model stored in ``own``
        (``f32``, ``f16``, ``int8`` ...) in on ``device``: by default the model's own."""
        return own

    def precision_options(self, precision: str) -> dict[str, Any]:
        """Options that make a session compute in ``precision`` (empty: the model's own)."""
        return {"precision": precision} if "precision" in self.options else {}

    def read_model(self, model: Model | str | os.PathLike[str]) -> Model:
        """The ``Model`` this backend opens: a ``Model`` as given; a path read once with ``Model.open``,
        except a file in one of the backend's native formats (``formats`` other than ``.onnx``), which is
        its runtime's to read: its ``Model`` has the interface ``conversion.recorded_interface`` finds beside it, else
        only its path, format and hash, and the session supplies the interface. A backend that can say
        the interface of its own format otherwise overrides this (OpenCV reads a Darknet ``.cfg``'s).

        Raises:
            ModelNotFoundError, InvalidModelError: as ``Model.open``.
            ModelError: ``conversion.recorded_interface`` found a file it cannot read.
        """
        native = native_formats(self)
        if isinstance(model, Model) and (model.inputs or model.format not in native):
            return model
        path = model.path if isinstance(model, Model) else Path(model)
        if path.suffix.lower() not in native:
            return as_model(path)
        recorded = self.conversion.recorded_interface(path) if path.is_file() else None
        if recorded is None:
            return model if isinstance(model, Model) else Model.native(path)
        specs_in, specs_out, metadata_props = recorded
        return Model.native(path, tuple(specs_in), tuple(specs_out), metadata_props=metadata_props)

    def model_files(self, path: Path, options: Mapping[str, Any]) -> list[Path]:
        """Every file the model at ``path`` is made of when this backend opens it with ``options``, ``path``
        first: what must travel with it to another machine (Ray's workers, a fleet's devices). By default
        the file and, for a file in a native format, the recorded interface beside it when there is one
        (``interface_file``, which ``conversion.recorded_interface`` reads). A format of several files overrides it."""
        interface = interface_file(path)
        if path.suffix.lower() in native_formats(self) and interface.is_file():
            return [path, interface]
        return [path]

    def open(
        self,
        model: Model | str | os.PathLike[str],
        device: str | None = None,
        *,
        allow_fallback: bool = False,
        **options: Any,
    ) -> Session:
        """Load a model on a device.

        Args:
            model: a ``Model`` (read once by the caller), or the path of an ``.onnx`` file or of a
                file in one of the backend's ``formats``.
            device: the backend's device name (``cpu``, ``cuda:0``, ``GPU``, ``opencl`` ...).
            allow_fallback: run on the CPU when the device cannot be used, and say
                so in ``session.info``; without it that is a ``DeviceUnavailableError``.
            **options: backend options (see ``options``).

        Raises:
            BackendUnavailableError, DeviceUnavailableError, ModelError,
            UnsupportedModelError, UsageError.
        """
        self.import_runtime()
        checked = validate_options(self.name, self.options, options)
        device = device or self.default_device
        requested = self.requested_precision(checked)
        if requested is not None:
            _check_precision(self, device, requested, allow_fallback)
        read = self.read_model(model)
        request = OpenRequest(
            self, device, checked, allow_fallback, requested, getattr(read, "precision", None) or None
        )
        try:
            session = self._open(read, request)
        except (DeployKitError, MemoryError):
            raise
        except Exception as exc:  # the runtime's own exception, translated in one place for every backend
            raise _load_error(self, read, exc) from exc
        try:
            session._take(request)  # a no-op for a session made with the request
        except DeployKitError:
            session.close()
            raise
        return session

    def requested_precision(self, options: Mapping[str, Any]) -> str | None:
        """The precision the caller asked for through the ``precision`` option (normalised), or None
        when none was given: the option's default is the runtime's own precision, not a request."""
        if "precision" not in self.options or "precision" not in options:
            return None
        value = self.option_value(options, "precision")
        return None if value is None else normalize_precision(str(value))

    @classmethod
    def option_value(cls, options: Mapping[str, Any], name: str) -> Any:
        """Option ``name`` read from ``options`` (what a caller gave): the given value checked against its
        spec, else the spec's ``default``. Backends read every option through this (or ``OpenRequest.option``),
        so the default ``deploykit backends --options`` documents is the one that runs.

        Raises:
            KeyError: ``name`` is not in the backend's schema, ``options`` (a backend's own mistake).
            UsageError: a given value its spec refuses.
        """
        if name not in cls.options:
            raise KeyError(f"backend '{cls.name}' has no option {name!r} in its schema; it has {sorted(cls.options)}")
        spec = as_spec(cls.options[name])
        if name not in options:
            return spec.default
        value = options[name]
        return value if spec.type == "any" else spec.validate(cls.name, name, value)

    @abc.abstractmethod
    def _open(self, model: Model, request: OpenRequest) -> Session:
        """Load ``model`` (its file is ``model.path``; its interface, read once, ``model.inputs`` and
        ``model.outputs``) on ``request.device`` with the options ``request.option(name)`` reads, and return
        a session made with ``request`` whose ``info`` says what runs it."""


def _running(kind: str) -> list[str]:
    """The registered backends that run values of ``kind``."""
    from deploykit.backends.registry import all_backends

    return [other.name for other in all_backends() if kind in other.value_kinds]


def native_formats(backend: Backend) -> set[str]:
    """The suffixes of the formats of its own that ``backend``'s runtime reads (``formats`` but ``.onnx``)."""
    return {suffix.lower() for suffix in backend.formats} - {".onnx"}


def refuse_unsupported_kinds(
    backend: Backend, model_path: Path, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]
) -> None:
    """Refuse, by name, a model whose inputs or outputs are of a kind ``backend`` does not run
    (``value_kinds``): every session checks it when it is made; a backend calls it before its
    runtime reads the model to refuse before the runtime tries.

    Raises:
        UnsupportedModelError: naming the value, its kind and the backends that run it.
    """
    subject = backend.wording.subject_for(backend.name)
    refusal = kind_refusal(subject, backend.name, model_path, inputs, outputs, backend.value_kinds, _running)
    if refusal is not None:
        raise refusal


MADE_FUNCTIONS["refuse_unsupported_kinds"] = refuse_unsupported_kinds
