"""A plug-in backend written against Backend's old attribute names (before its concerns moved into
``deploykit.backends.traits``) keeps working for one minor release, with one ``DeprecationWarning`` that
names the replacement and points at the plug-in's class statement; the built-in backends use none of them."""

from __future__ import annotations

import subprocess
import sys
import warnings
from dataclasses import replace
from typing import Any, ClassVar

import pytest

from deploykit.backends.base import Backend, OpenRequest, Session
from deploykit.backends.registry import get_backend
from deploykit.backends.traits import DEFAULT_LOAD_HINT, OraclePolicy, RuntimePackage
from deploykit.errors import BackendUnavailableError, PrecisionUnavailableError, UnsupportedModelError
from deploykit.model import Model
from tests.assets.tiny import build_all


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_all(tmp_path_factory.mktemp("tiny"))


def _deprecations(caught: list[warnings.WarningMessage]) -> list[warnings.WarningMessage]:
    return [w for w in caught if issubclass(w.category, DeprecationWarning) and "next release" in str(w.message)]


def _old_style_backend() -> type[Backend]:
    class OldStyle(Backend):
        name = "old-style"
        pip_extra = "old-extra"
        module = "onnxruntime"
        independent_oracle = True
        default_candidate = False
        load_verb = "parse"
        load_hint = "ask the old plug-in's author."
        converted_weights: ClassVar[dict[str, dict[str, Any]]] = {"int8": {"weights": "int8"}}

        def build_info(self) -> dict[str, Any]:
            return {"built": "by hand"}

        def oracle_blind_spot(self, model: Model) -> str | None:
            return f"{model.path.name} is beyond it"

        def explain(self, exc: BaseException) -> str:
            return "the old plug-in says no"

        def version(self) -> str:
            return "old 1"

        def devices(self) -> list[str]:
            return ["cpu"]

        def _open(self, model: Model, request: OpenRequest) -> Session:
            if model.path.stem == "broken":
                raise RuntimeError("a runtime's long story\nthat nobody reads")
            session = get_backend("onnxruntime").open(model, request.device)
            session.info.backend = self.name
            return session

    return OldStyle


def test_a_plugin_with_the_old_names_warns_once_naming_the_replacements():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old_style = _old_style_backend()
    deprecations = _deprecations(caught)
    assert len(deprecations) == 1, [str(w.message) for w in caught]
    message = str(deprecations[0].message)
    assert deprecations[0].filename == __file__, "the warning points at the plug-in's class statement"
    assert message.startswith(
        "Backend independent_oracle, oracle_blind_spot, default_candidate, load_verb, load_hint, explain, module, "
        "pip_extra, build_info, converted_weights (set by tests.backends.test_legacy_names._old_style_backend.<locals>.OldStyle) is deprecated"
    )
    assert "set oracle = OraclePolicy(independent=..., blind_spot=...)" in message
    assert "search = SearchTraits(default_candidate=...)" in message
    assert "wording = LoadWording(verb=..., hint=..., explain=...)" in message
    assert "runtime = RuntimePackage(module=..., pip_extra=..., build_info=...)" in message
    assert "conversion = Conversion(weights=...)" in message
    assert old_style.oracle.independent is True
    assert old_style.search.default_candidate is False
    assert old_style.runtime.pip_extra == "old-extra"
    assert old_style.runtime.build_info() == {"built": "by hand"}
    assert old_style.conversion.weights == {"int8": {"weights": "int8"}}


def test_a_plugin_with_the_old_names_works_as_before(tiny, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        backend = _old_style_backend()()
    with backend.open(tiny["dynamic"]) as session:
        assert session.info.backend == "old-style"
    assert backend.oracle.blind_spot_in(Model.open(tiny["dynamic"])) == f"{tiny['dynamic'].name} is beyond it"
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(tiny["dynamic"].read_bytes())
    with pytest.raises(UnsupportedModelError) as raised:
        backend.open(broken)
    assert str(raised.value) == (
        "backend 'old-style' | cannot parse 'broken.onnx': the old plug-in says no. Hint: ask the old plug-in's author."
    )


def test_reading_an_old_name_warns_and_answers_from_the_value():
    backend = get_backend("reference")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        independent = backend.independent_oracle
        hint = get_backend("onnxruntime").load_hint
    assert independent is True
    assert hint == DEFAULT_LOAD_HINT
    messages = [str(w.message) for w in _deprecations(caught)]
    assert messages == [
        "Backend.independent_oracle is deprecated and goes in the next release; read oracle.independent.",
        "Backend.load_hint is deprecated and goes in the next release; read wording.hint.",
    ]
    with pytest.warns(DeprecationWarning, match=r"call deploykit\.backends\.traits\.device_error"):
        refused = backend._device_error("gpu", "the evaluator runs on the CPU only.", "use device cpu.")
    assert str(refused) == (
        "backend 'reference' | device 'gpu' cannot be used: the evaluator runs on the CPU only. Hint: use device cpu."
    )
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        backend.no_such_name  # noqa: B018


def test_an_old_plugin_without_its_runtime_names_its_old_extra():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)

        class Missing(Backend):
            name = "missing"
            pip_extra = "missing-extra"
            module = "deploykit_no_such_runtime"

            def version(self) -> str:
                return "0"

            def devices(self) -> list[str]:
                return ["cpu"]

            def _open(self, model: Model, request: OpenRequest) -> Session:
                raise AssertionError("never opened")

    with pytest.raises(BackendUnavailableError) as raised:
        Missing().import_runtime()
    assert "pip install 'deploykit[missing-extra]'" in str(raised.value)


def test_a_new_style_plugin_warns_nothing():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")

        class NewStyle(Backend):
            name = "new-style"
            oracle = OraclePolicy(independent=True)

            def version(self) -> str:
                return "0"

            def devices(self) -> list[str]:
                return ["cpu"]

            def _open(self, model: Model, request: OpenRequest) -> Session:
                raise AssertionError("never opened")

    assert _deprecations(caught) == []
    assert NewStyle().oracle.label_for("new-style", "cpu") == "new-style:cpu"


def test_the_builtin_backends_use_no_old_name(tmp_path):
    """Imported fresh, in their own process: a class statement warns only when its module is first imported."""
    script = (
        "import warnings\n"
        "warnings.simplefilter('always')\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    from deploykit.backends.registry import BUILTIN_BACKENDS, get_backend\n"
        "    for name in BUILTIN_BACKENDS:\n"
        "        backend = get_backend(name)\n"
        "        backend.oracle, backend.search, backend.wording, backend.runtime, backend.conversion\n"
        "        backend.is_available()\n"
        "print([str(w.message) for w in caught if 'next release' in str(w.message)])\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True)
    assert done.stdout.strip() == "[]", done.stdout


def test_the_methods_that_became_values_or_functions_still_answer_with_a_warning(tiny):
    """``subject`` moved into ``wording.subject`` and ``refuse_unsupported_kinds`` became a module function."""
    backend = get_backend("opencv")
    with pytest.warns(DeprecationWarning, match=r"Backend\.subject is deprecated .*read wording\.subject"):
        subject = backend.subject()
    assert subject == backend.wording.subject_for("opencv") and subject.startswith("backend 'opencv' (")
    model = Model.open(tiny["dynamic"])
    with pytest.warns(DeprecationWarning, match=r"call deploykit\.backends\.base\.refuse_unsupported_kinds"):
        assert get_backend("onnxruntime").refuse_unsupported_kinds(model.path, model.inputs, model.outputs) is None


def test_a_plugin_that_names_itself_with_the_old_method_keeps_its_name(tiny):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")

        class Named(Backend):
            name = "named"
            runtime = RuntimePackage(module="onnxruntime", pip_extra="onnxruntime")

            def subject(self) -> str:
                return "backend 'named' (built by hand)"

            def version(self) -> str:
                return "0"

            def devices(self) -> list[str]:
                return ["cpu"]

            def _open(self, model: Model, request: OpenRequest) -> Session:
                raise RuntimeError("the runtime says no")

    assert "set wording = LoadWording(subject=...)" in str(_deprecations(caught)[0].message)
    assert Named.wording.subject_for("named") == "backend 'named' (built by hand)"
    with pytest.raises(UnsupportedModelError, match=r"^backend 'named' \(built by hand\) \| cannot load"):
        Named().open(tiny["dynamic"])


def test_an_open_with_the_old_arguments_is_adapted_and_its_session_settled(tiny):
    """``_open(model, device, allow_fallback, options)`` still runs, with a warning when the class is made; the
    session it makes without the request is settled by ``Backend.open`` as before."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")

        class OldOpen(Backend):
            name = "old-open"
            runtime = RuntimePackage(module="onnxruntime", pip_extra="onnxruntime")
            options: ClassVar[dict[str, Any]] = {"precision": "compute precision"}

            def version(self) -> str:
                return "0"

            def devices(self) -> list[str]:
                return ["cpu"]

            def precisions(self, device: str | None = None) -> list[str]:
                return ["f32", "f16"]

            def _open(self, model: Model, device: str, allow_fallback: bool, options: dict[str, Any]) -> Session:
                inner = get_backend("onnxruntime").open(model, device)
                return type(inner)(model.path, model.inputs, model.outputs, replace(inner.info), inner._session)

    messages = [str(w.message) for w in _deprecations(caught)]
    assert len(messages) == 1 and messages[0].startswith("Backend._open(model, device, allow_fallback, options)")
    assert "define _open(model, request: OpenRequest)" in messages[0]
    with OldOpen().open(tiny["dynamic"], precision="f32") as session:
        assert session.info.precision_requested == "f32"
    with pytest.raises(PrecisionUnavailableError, match=r"asked for f16 on 'cpu', but the runtime compiled"):
        OldOpen().open(tiny["dynamic"], precision="f16")
    with OldOpen().open(tiny["dynamic"], precision="f16", allow_fallback=True) as session:
        assert session.info.fallback and session.info.precision_label == "f16 → f32"
