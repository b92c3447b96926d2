"""``deploykit.about`` and ``deploykit version``: this installation as one value, a table and JSON."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from importlib import metadata

import pytest
from typer.testing import CliRunner

from deploykit._version import __version__
from deploykit.about import (
    CPU_FEATURES,
    ENVIRONMENT_PROVIDERS,
    ManagedEnvironment,
    about,
    cpu_features,
    managed_environments,
)
from deploykit.backends.registry import all_backends, backend_names
from deploykit.cli.main import app

runner = CliRunner()


def test_every_registered_backend_is_a_row_with_what_the_backend_itself_says():
    report = about()
    assert report.deploykit == __version__
    assert report.python == ".".join(str(part) for part in sys.version_info[:3])
    assert [row.backend for row in report.runtimes] == backend_names()
    for backend, row in zip(all_backends(), report.runtimes, strict=True):
        reason = backend.unavailable_reason()
        assert row.available == (reason is None), row
        if row.available:
            assert row.version == backend.version() and row.reason is None
        else:
            assert row.version is None and row.reason == reason
        for name, number in row.distributions.items():  # from the package metadata, as pip sees it
            assert metadata.version(name) == number


def test_a_tool_that_is_not_installed_says_which_extra_installs_it():
    for tool in about().tools:
        try:
            assert tool.version == metadata.version(tool.name)
        except metadata.PackageNotFoundError:
            assert tool.version is None


def test_cpu_features_are_read_per_architecture_from_cpuinfo():
    x86 = "processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu sse avx2 avx512f avx512_bf16 amx_tile\n"
    model, features = cpu_features(x86, "x86_64")
    assert model == "Some CPU"
    assert list(features) == list(CPU_FEATURES["x86_64"])
    assert {name for name, has in features.items() if has} == {"avx2", "avx512f", "avx512_bf16", "amx_tile"}
    arm = "processor\t: 0\nFeatures\t: fp asimd asimdhp asimddp i8mm bf16\nCPU part\t: 0xd40\n"
    _, features = cpu_features(arm, "aarch64")
    assert {name for name, has in features.items() if has} == {"asimd", "asimdhp", "asimddp", "i8mm", "bf16"}
    assert features["sve"] is False
    assert cpu_features("", "x86_64")[1] == {}  # unreadable: no claims either way


def test_this_machines_flags_match_proc_cpuinfo():
    with open("/proc/cpuinfo") as handle:
        flags = set(
            next(line for line in handle if line.lower().startswith(("flags", "features"))).split(":")[1].split()
        )
    for name, has in about().cpu_features.items():
        assert has == (name in flags), name


def test_a_ready_converter_environment_is_reported_and_a_missing_one_is_not(monkeypatch, tmp_path):
    """The ``litert`` environment (``deploykit converters add litert``) is listed once it is ready."""
    from deploykit.converters import get_environment

    monkeypatch.setenv("DEPLOYKIT_CACHE_DIR", str(tmp_path))
    assert "deploykit.about:converter_environments" in ENVIRONMENT_PROVIDERS
    assert about().environments == ()
    environment = get_environment("litert")
    (environment.bin).mkdir(parents=True)
    (environment.python).symlink_to(sys.executable)
    ready = {"pins_sha256": environment.pins_sha256(), "packages": {"onnx2tf": "1.0"}, "created": "2026-12-05"}
    (environment.directory / "ready.json").write_text(json.dumps(ready))
    (found,) = about().environments
    assert found.to_dict() == {"name": "litert", "path": str(environment.directory), "versions": {"onnx2tf": "1.0"}}
    (environment.directory / "ready.json").write_text(json.dumps({**ready, "pins_sha256": "0" * 64}))
    assert about().environments == ()  # stale: built from other pins


def test_managed_environments_come_from_the_providers_table(monkeypatch):
    module = types.ModuleType("deploykit_test_environments")
    module.found = lambda: [ManagedEnvironment("toy", "/tmp/toy-env", {"toy-converter": "1.2"})]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    (environment,) = managed_environments((f"{module.__name__}:found",))
    assert environment.to_dict() == {"name": "toy", "path": "/tmp/toy-env", "versions": {"toy-converter": "1.2"}}


def test_version_json_is_the_report():
    result = runner.invoke(app, ["version", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["deploykit"] == __version__
    assert [row["backend"] for row in data["runtimes"]] == backend_names()
    assert {"python", "platform", "architecture", "cpu_features", "tools", "environments"} <= set(data)


def test_version_table_names_every_runtime_and_its_status(monkeypatch, tmp_path):
    monkeypatch.setenv("DEPLOYKIT_CACHE_DIR", str(tmp_path))  # no converter environment created there
    result = runner.invoke(app, ["version"])
    assert result.exit_code == 0, result.output
    assert f"deploykit {__version__}" in result.stdout
    for row in about().runtimes:
        assert row.backend in result.stdout
    assert "managed converter environments: none" in result.stdout


@pytest.mark.parametrize("args", [["version"], ["version", "--json"]])
def test_version_loads_no_model_and_starts_no_process(args):
    """The command only imports runtimes: no worker process, no model file opened (checked from outside)."""
    code = (
        "import sys, subprocess, multiprocessing\n"
        "started = []\n"
        "real = subprocess.Popen.__init__\n"
        "def spy(self, *a, **k):\n"
        "    started.append(a)\n"
        "    return real(self, *a, **k)\n"
        "subprocess.Popen.__init__ = spy\n"
        "from typer.testing import CliRunner\n"
        "from deploykit.cli.main import app\n"
        f"result = CliRunner().invoke(app, {args!r})\n"
        "assert result.exit_code == 0, result.output\n"
        "assert not started, started\n"
        "assert not multiprocessing.active_children()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
