"""Installing deploykit prints no deprecation warnings, and its extras mean what they say."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest
import tomllib

from tests.assets.paths import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
# setuptools' own note on editable installs of a package-dir layout (deploykit.cli lives in cli/): it is
# informational, not a deprecation; the build of a wheel prints nothing at all
EDITABLE_NOTE = re.compile(r"BuildBackendWarning: Editable installation|Please be careful with folders")


def _install(tmp_path: Path, *args: str) -> str:
    target = tmp_path / "venv"
    venv.create(target, with_pip=False, system_site_packages=False)
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    # this environment's (pinned, current) pip installs into the new venv: what a newcomer's pip shows
    result = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(target / "bin" / "python"), "install", "--no-deps", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr


def _warnings(output: str) -> list[str]:
    lines = [line for line in output.splitlines() if not line.startswith("WARNING: Location")]
    return [line for line in lines if re.search(r"deprecat|Warning|!!", line, re.I) and not EDITABLE_NOTE.search(line)]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["wheel", "editable"])
def test_pip_install_prints_no_deprecation_warning(tmp_path, mode):
    output = _install(tmp_path, *(["-e", "."] if mode == "editable" else ["."]))
    bad = _warnings(output)
    if mode == "wheel":  # package data a reader of reports needs: validation must not switch off when installed
        installed = list((tmp_path / "venv").glob("lib/python*/site-packages/deploykit/bench/report_schema.json"))
        assert installed and installed[0].read_text() == (REPO / "docs" / "report-schema.json").read_text()
    if mode == "editable":  # the editable note comes in a '!!' box of its own: only that box is allowed
        bad = [line for line in bad if line.strip() != "!!"]
    assert not bad, "\n".join(bad)


def test_detection_map_is_a_core_dependency():
    """Verification judges detectors by mAP@0.5: its implementation is not hidden in an extra."""
    core = " ".join(PYPROJECT["project"]["dependencies"])
    assert "pycocotools" in core
    import pycocotools.cocoeval  # noqa: F401  (installed with deploykit itself)


def test_the_report_plots_library_is_core_and_its_absence_is_said():
    """Every bench --report and optimize bundle writes an HTML page drawn by matplotlib: core, and a
    broken install names it instead of a traceback."""
    assert "matplotlib" in " ".join(PYPROJECT["project"]["dependencies"])
    code = (
        "import sys; sys.modules['matplotlib'] = None\n"
        "from deploykit.bench import plots\n"
        "from deploykit.errors import DeployKitError\n"
        "try:\n    plots.histogram([1], [0.0, 1.0], 'latency (ms)', 'iterations', 'h')\n"
        "except DeployKitError as exc:\n    print(exc)\n"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert completed.returncode == 0, completed.stderr
    assert "matplotlib cannot be imported" in completed.stdout and "reinstall deploykit" in completed.stdout


def test_all_means_every_optional_feature_but_the_gpu_wheel():
    extras = PYPROJECT["project"]["optional-dependencies"]
    everything = " ".join(extras["all"])
    features = set(extras) - {"all", "dev", "onnxruntime-gpu"}
    named = set(re.findall(r"deploykit\[([^\]]+)\]", everything))
    listed = {name.strip() for group in named for name in group.split(",")}
    assert features <= listed, f"[all] lacks {sorted(features - listed)}"
    assert "onnxruntime-gpu" not in everything


def test_license_is_an_spdx_string_and_packages_are_explicit():
    assert isinstance(PYPROJECT["project"]["license"], str)
    packages = set(PYPROJECT["tool"]["setuptools"]["packages"])
    data_folders = {
        f"deploykit.models.{p.name}" for p in (REPO / "models").iterdir() if p.is_dir() and p.name != "__pycache__"
    }
    assert data_folders <= packages, sorted(data_folders - packages)
    assert sys.version_info >= (3, 10)


def test_every_library_package_is_listed():
    """Explicit package discovery: a new subpackage that is not listed would be missing from the wheel."""
    packages = set(PYPROJECT["tool"]["setuptools"]["packages"])
    found = {
        "deploykit." + ".".join(p.parent.relative_to(REPO / "deploykit").parts)
        for p in (REPO / "deploykit").rglob("__init__.py")
    }
    found = {name.rstrip(".") for name in found}
    assert found <= packages, sorted(found - packages)
