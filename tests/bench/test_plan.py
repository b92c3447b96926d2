"""``BenchPlan.from_bundle``: a bundle's chosen configuration becomes a plan directly, its errors name the
plan's settings, and ``deploykit bench BUNDLE`` names the flags instead."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from deploykit.bench.plan import BUNDLE_SETTINGS, BenchPlan
from deploykit.errors import UsageError
from deploykit.optimize import OptimizePlan, optimize, read_bundle
from tests.quantize.conftest import classifier_path

__all__ = ["classifier_path"]


@pytest.fixture(scope="module")
def bundle(classifier_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real bundle of the tiny classifier: ONNX Runtime, one thread."""
    output = tmp_path_factory.mktemp("plan") / "deploy"
    plan = OptimizePlan(quantize=False, backends=["onnxruntime"], threads=[1], time_budget="30s")
    optimize(classifier_path, None, plan, output=output)
    return output


def test_a_bundle_becomes_the_plan_of_its_chosen_configuration(bundle):
    opened = read_bundle(bundle)
    manifest = opened.manifest
    base = BenchPlan(iterations=7, rounds=2, options={"extra": 1})
    plan = BenchPlan.from_bundle(opened, base)
    assert plan.backends == (manifest.spec,) and plan.batch == (manifest.batch,)
    assert plan.threads == ((manifest.threads,) if manifest.threads else None)
    assert plan.precision == (manifest.options.get("precision") or manifest.precision or None)
    expected = {k: v for k, v in manifest.options.items() if k not in ("threads", "precision")}
    assert plan.options == {"extra": 1, **expected}  # typed as the manifest has them: no text round trip
    assert (plan.iterations, plan.rounds) == (7, 2)  # the rest is the base plan's
    assert BenchPlan.from_bundle(opened) == BenchPlan.from_bundle(opened, BenchPlan())


@pytest.mark.parametrize("setting, value", [("backends", ("openvino",)), ("batch", (4,)), ("threads", (2,))])
def test_a_plan_that_would_change_the_bundles_configuration_is_refused_by_setting_name(bundle, setting, value):
    assert setting in BUNDLE_SETTINGS
    with pytest.raises(UsageError) as caught:
        BenchPlan.from_bundle(read_bundle(bundle), BenchPlan(**{setting: value}))
    assert caught.value.subject == f"plan {setting}"
    assert "a bundle is measured in the configuration it chose" in caught.value.problem
    assert "--" not in str(caught.value)  # the library speaks settings; the CLI speaks flags


def test_a_plan_option_the_bundle_sets_is_refused_by_setting_name(bundle):
    opened = read_bundle(bundle)
    options = {k: v for k, v in opened.manifest.options.items() if k not in ("threads", "precision")}
    if not options:
        pytest.skip("this bundle sets no option besides threads and precision")
    name = next(iter(options))
    with pytest.raises(UsageError, match=rf"plan options '{name}' \| the bundle's configuration sets them"):
        BenchPlan.from_bundle(opened, BenchPlan(options={name: options[name]}))
    given = CliRunner().invoke(app, ["bench", str(bundle), "-O", f"{name}=x"])
    assert given.exit_code == 2
    assert f"--option '{name}' | is given twice ({name}=x and {name}={options[name]})" in given.output


def test_bench_on_a_bundle_names_the_flags(bundle):
    runner = CliRunner()
    refused = runner.invoke(app, ["bench", str(bundle), "--batch", "4", "--precision", "f32"])
    assert refused.exit_code == 2
    assert "a bundle is benchmarked in the configuration it chose; --batch, --precision would change it" in " ".join(
        refused.output.split()
    )
    measured = runner.invoke(app, ["bench", str(bundle), "--iterations", "5", "--json"])
    assert measured.exit_code == 0, measured.output
    assert '"backend": "onnxruntime"' in measured.output


def test_bench_recheck_needs_a_bundle(classifier_path):
    result = CliRunner().invoke(app, ["bench", str(classifier_path), "--recheck"])
    assert result.exit_code == 2 and "--recheck | compares a bundle's recorded choice" in result.output


def test_a_plan_says_how_compare_verifies_what_it_measures():
    plan = BenchPlan(
        oracle="none", precision="f32,int8", shapes={"x": (1, 3, 8, 8)}, batch_axes={"x": 0}, seed=3,
        thresholds={"atol": 1e-3}, options={"threads": 2}, timeout_s=60, oracle_memory_bytes=2**30,
    )  # fmt: skip
    settings = plan.verify_settings(platforms="linux/arm64")
    for name in ("oracle", "precision", "shapes", "batch_axes", "seed", "thresholds", "options", "timeout_s"):
        assert getattr(settings, name) == getattr(plan, name), name
    assert settings.oracle_memory_bytes == 2**30 and settings.platforms == "linux/arm64"
    assert BenchPlan().verify_settings().platforms is None


@pytest.mark.parametrize(
    "settings, subject",
    [
        ({"rounds": 0}, "rounds 0"),
        ({"max_drop": 2.0}, "max_drop 2"),
        ({"warmup": -1}, "warmup -1"),
        ({"scenario": "multistream", "streams": 0}, "streams 0"),
        ({"iterations": 0}, "iterations 0"),
        ({"batch": (0,)}, "batch (0,)"),
        ({"batch": (1, 1, 2)}, "batch (1, 1, 2)"),
        ({"threads": (2, 1, 2)}, "threads (2, 1, 2)"),
    ],
)
def test_a_bad_setting_is_named_as_the_plan_names_it(settings, subject):
    with pytest.raises(UsageError) as caught:
        BenchPlan(**settings)
    assert caught.value.subject == subject and "--" not in str(caught.value)


def test_a_sweep_naming_a_size_twice_is_a_usage_error_on_the_command_line(classifier_path):
    result = CliRunner().invoke(app, ["bench", str(classifier_path), "-b", "onnxruntime", "--batch", "1,1,2"])
    assert result.exit_code == 2, result.output  # a DeployKitError, as --batch 0
    assert "batch '1,1,2' | names 1 more than once" in result.output and "--batch 1,2" in result.output
    assert "Traceback" not in result.output
