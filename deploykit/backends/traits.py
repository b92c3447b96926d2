"""What a backend declares about itself besides opening models, one small frozen value per concern:
how verification treats it as an oracle (``OraclePolicy``), which default sweeps include it
(``SearchTraits``), how its load failures are worded (``LoadWording``), which package provides its
runtime (``RuntimePackage``), how it converts ONNX into its runtime's own format (``Conversion``) and how
the conformance suite calls its runtime directly (``RawRuntime``);
with the wording the values share (a runtime's reason as one line, an unusable device). A ``Backend``
subclass sets one attribute per concern (``oracle = OraclePolicy(independent=True)``); the fields it
leaves out keep their defaults.

Nothing here imports a runtime or the registry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploykit.backends.converted import Carried
from deploykit.errors import BackendError, DeviceUnavailableError
from deploykit.tensors import TensorSpec

if TYPE_CHECKING:
    from deploykit.model import Model

Interface = tuple[list[TensorSpec], list[TensorSpec], dict[str, str]]
"""The ONNX inputs, outputs and metadata recorded beside a file in a runtime's own format."""

DEFAULT_LOAD_HINT = "try another backend, or 'deploykit inspect' the model for unusual ops."


def last_meaningful_line(exc: BaseException) -> str:
    """The last line of an exception's text that has a letter or digit (where most runtimes put
    the reason; a lone ``)`` or ``;`` closing the message is no reason), or the exception's type."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if any(c.isalnum() for c in line)]
    return lines[-1] if lines else type(exc).__name__


def device_error(backend: str, device: str, reason: str, hint: str) -> DeviceUnavailableError:
    """The error for a device that the backend knows but cannot use here, with why and what to do."""
    return DeviceUnavailableError(f"backend '{backend}' | device '{device}' cannot be used: {reason}", hint=hint)


@dataclass(frozen=True)
class OraclePolicy:
    """How the verification subsystem treats the backend when it checks another one.

    Attributes:
        independent: True when the backend shares no code with the runtimes it may check (its outputs are
            then an independent oracle's, not another candidate's).
        label: how a verification names it as the oracle: a fixed name (``onnx-reference``), a function of
            the device, or empty for ``<name>:<device>``.
        blind_spot: why the backend must not judge a model as an oracle (a construct it is known to compute
            wrongly; the verification then says ``unverified`` with the reason), None when there is none;
            no function: it has none.
    """

    independent: bool = False
    label: str | Callable[[str], str] = ""
    blind_spot: Callable[[Model], str | None] | None = None

    def label_for(self, backend: str, device: str) -> str:
        """The oracle's name in a verification of ``backend`` on ``device`` (``onnxruntime:cpu``)."""
        if callable(self.label):
            return self.label(device)
        return self.label or f"{backend}:{device}"

    def blind_spot_in(self, model: Model) -> str | None:
        """Why the backend must not judge ``model``, or None."""
        return None if self.blind_spot is None else self.blind_spot(model)


@dataclass(frozen=True)
class SearchTraits:
    """Which of the backend's devices the default backend × device sweeps (bench, compare, optimize) take.

    Attributes:
        default_candidate: False keeps the backend out of the default sweeps.
        searched_when_ready: True for a backend left out of the default sweeps only because opening an
            ``.onnx`` model needs something the user creates (``Conversion.onnx_unavailable_reason``: LiteRT's converter
            environment): ``optimize`` searches it once that is ready and says why not otherwise, and
            emulated targets install its runtime.
        virtual_devices: device names that choose among the real devices (OpenVINO's ``AUTO``): a sweep over
            every device leaves them out, since the devices they choose among are listed themselves.
    """

    default_candidate: bool = True
    searched_when_ready: bool = False
    virtual_devices: tuple[str, ...] = ()

    def swept_devices(self, devices: Iterable[str]) -> list[str]:
        """``devices`` without the virtual ones (compared case-insensitively)."""
        virtual = {name.upper() for name in self.virtual_devices}
        return [device for device in devices if device.upper() not in virtual]


@dataclass(frozen=True)
class LoadWording:
    """How a failure to load a model on the backend is worded.

    Attributes:
        verb: how the message names the failing step: ``cannot load`` (ORT), ``cannot read`` (OpenVINO) ...
        hint: the hint of a model the runtime cannot load.
        explain: the runtime's reason in one line: the backend's translation table for its exceptions (the
            default keeps the last line that says something, where most runtimes put the reason).
        hint_for: a hint that fits a particular exception better than ``hint`` (None: ``hint`` fits).
        subject: how messages name the backend, when ``backend '<name>'`` says too little: a function of
            nothing (OpenCV's names its version), called only when a message is worded.
    """

    verb: str = "load"
    hint: str = DEFAULT_LOAD_HINT
    explain: Callable[[BaseException], str] = last_meaningful_line
    hint_for: Callable[[BaseException], str | None] | None = None
    subject: Callable[[], str] | None = None

    def subject_for(self, backend: str) -> str:
        """How messages name ``backend``: ``backend 'openvino'``, or what ``subject`` says."""
        return self.subject() if self.subject is not None else f"backend '{backend}'"

    def hint_about(self, exc: BaseException) -> str:
        """The hint for a load that failed with ``exc``."""
        return (self.hint_for(exc) if self.hint_for is not None else None) or self.hint


@dataclass(frozen=True)
class RuntimePackage:
    """The package that provides the backend's runtime.

    Attributes:
        module: the module the backend imports (lazily, when it is first used).
        pip_extra: deploykit's extra that installs it (the install hint: ``pip install 'deploykit[extra]'``).
        distributions: the package names that provide it (for the device fingerprint); default: ``module``.
        cpu_distribution: the package of the runtime's CPU-only build, which emulated targets
            (``deploykit.platforms``) install; default: the package installed here.
        emulated_environment: the variables a worker of the backend needs when it runs under emulation on
            another architecture: a host program it calls, for instance, since the target's build of that
            program cannot be started without the kernel's binfmt set up. Called only when the runtime imports.
        build_info: build details of the imported runtime worth recording in a report (providers, CPU
            features). Called only when the runtime imports.
    """

    module: str
    pip_extra: str
    distributions: tuple[str, ...] = ()
    cpu_distribution: str | None = None
    emulated_environment: Callable[[], dict[str, str]] = dict
    build_info: Callable[[], dict[str, Any]] = dict

    def packages(self) -> tuple[str, ...]:
        """The distributions to look for: ``distributions``, or the module's name when none is listed."""
        return self.distributions or (self.module,)


def _runs_onnx_itself(*_: Any) -> None:
    return None


@dataclass(frozen=True)
class Conversion:
    """How a backend that converts ONNX into its runtime's own format (MNN, LiteRT) reaches every place the
    others are; the default is a backend that runs the ``.onnx`` file itself. Each hook is a function of
    its arguments alone (backends are stateless).

    Attributes:
        converted_file: ``(model, options)`` → the file in the runtime's format that the backend runs for the
            ``.onnx`` ``model`` with ``options``, converted now (into the converted-model cache) when it is
            not there yet; None for a model the runtime reads itself. Raises ``BackendUnavailableError``
            when the converter is not installed, ``UnsupportedModelError`` when it cannot take the model.
        carry: ``(model, options, folder, stem)`` → the converted file and what opens it with the ONNX
            interface (the ``.json`` beside it) written into ``folder`` as ``stem.*``, for a bundle that must
            open where nothing converts; None when nothing needs carrying.
        recorded_interface: ``(path)`` → the ONNX inputs, outputs and metadata recorded beside a native file
            by deploykit's export of it, None when nothing is recorded; read without loading the runtime.
            Raises ``ModelError`` when a recorded interface is there but cannot be read.
        onnx_unavailable_reason: ``()`` → why the backend cannot open ``.onnx`` models here although its
            runtime imports (a converter environment the user has not created yet), with the hint that fixes
            it; None when it can.
        weights: reduced-precision files the converter makes from a float ``.onnx`` model, by the precision
            they are judged at (``int8``, ``f16``), with the options that open them (LiteRT's ``weights``):
            ``optimize`` searches each as a model variant of this backend alone.
    """

    converted_file: Callable[[Model, Mapping[str, Any]], Path | None] = _runs_onnx_itself
    carry: Callable[[Model, Mapping[str, Any], Path, str], Carried | None] = _runs_onnx_itself
    recorded_interface: Callable[[Path], Interface | None] = _runs_onnx_itself
    onnx_unavailable_reason: Callable[[], str | None] = _runs_onnx_itself
    weights: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class RawRuntime:
    """How the conformance suite calls the backend's runtime directly, the way the runtime's own
    documentation shows, to measure deploykit against it; and the options that configure deploykit alike.
    The functions are ``module:function`` strings, imported only when the suite calls them, so reading a
    backend class imports no runtime; a runner calls its runtime's API alone, never deploykit's backends.

    Attributes:
        run: ``module:function`` of ``(model_path, inputs) -> outputs``: the inputs in graph-input order,
            the outputs in graph-output order exactly as the runtime hands them back.
        options: the deploykit options that configure the backend as ``run`` configures the runtime
            (one thread, f32 settings).
        outside: ``module:function`` of ``(model_path) -> str | None``: why a model is outside the runtime's
            domain in the suite (None inside), for a runtime that converts every model first; None: no domain.
        sample_every: the suite keeps every k-th case inside the domain, by sorted name (a converter that
            takes seconds a case).
        without_converter: environment variables that make the backend's converter unavailable: a case
            outside the domain still goes through deploykit with them, so what it refuses up front is checked.
    """

    run: str
    options: Mapping[str, Any] = field(default_factory=dict)
    outside: str | None = None
    sample_every: int = 1
    without_converter: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for target in filter(None, (self.run, self.outside)):
            module, colon, function = target.partition(":")
            if not (colon and module and function.isidentifier()):
                raise BackendError(
                    f"raw runner '{target}' | is not a 'module:function' import string.",
                    hint="name the function as 'package.module:run_name', as RawRuntime's run and outside take it.",
                )

    def runner(self) -> Callable[[Path, list[Any]], list[Any]]:
        """The ``run`` function, imported."""
        function: Callable[[Path, list[Any]], list[Any]] = _imported(self.run)
        return function

    def outside_reason(self, model_path: Path) -> str | None:
        """Why ``model_path`` is outside the runtime's domain (``outside``), or None."""
        return None if self.outside is None else _imported(self.outside)(model_path)


def _imported(target: str) -> Any:
    """The object a ``module:name`` string names."""
    import importlib

    module_name, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module_name), attribute)
