"""Benchmarks over the catalog on the real backends: schema, ordering, isolation, parity, baselines."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import shutil
import subprocess
import sys

import jsonschema
import numpy as np
import pytest
from typer.testing import CliRunner

import deploykit
from deploykit.bench import judging
from deploykit.bench.html import render_html
from deploykit.bench.report import BenchmarkReport
from deploykit.bench.report_files import write_report
from deploykit.cli.main import app
from deploykit.errors import BackendError, InputError, ReportError, UnknownBackendError, UsageError
from tests.assets.paths import REPO, missing_asset
from tests.fuzz.harness import usage_said

SCHEMA = json.loads((REPO / "docs" / "report-schema.json").read_text())
ALL = ["onnxruntime", "openvino:CPU", "opencv"]


def _write_html(report: BenchmarkReport, path) -> None:
    path.write_text(render_html([report]))


def _check_numbers(result: BenchmarkReport) -> None:
    jsonschema.validate(result.to_dict(), SCHEMA)
    for row in result.rows:
        assert row.status == "ok", row.error
        stats = row.latency
        assert stats is not None
        assert 0 < stats.min_ms <= stats.p50_ms <= stats.p90_ms <= stats.p95_ms
        assert stats.p95_ms <= stats.p99_ms <= stats.p999_ms <= stats.max_ms
        assert row.load_ms > 0 and row.first_inference_ms > 0
        assert row.throughput_sps > 0 and row.peak_rss_bytes > 0


@pytest.fixture(scope="module")
def isolated_result(catalog_paths):
    return deploykit.benchmark(
        catalog_paths["mlp_dynamic_batch"], deploykit.BenchPlan(backends=ALL, batch=[1, 3], warmup=2, iterations=20)
    )


def test_isolated_bench_on_every_backend(isolated_result):
    result = isolated_result
    _check_numbers(result)
    assert len(result.rows) == 6
    assert {r.session.backend for r in result.rows} == {"onnxruntime", "openvino", "opencv"}
    for row in result.rows:
        assert row.verdict.status == "pass", row.verdict
        assert (row.verdict.oracle.name, row.verdict.oracle.independent) == ("onnx-reference", True)
    assert result.settings.isolated is True
    assert result.recommendation.label in {r.label for r in result.rows}
    assert result.device["cpu"]["logical_cores"] >= 1
    rss = {r.label: r.peak_rss_bytes for r in result.rows}
    assert len(set(rss.values())) > 1, "each isolated worker reports its own peak RSS"


def test_report_files(isolated_result, tmp_path):
    paths = write_report(isolated_result, tmp_path / "out")
    assert [p.name for p in paths] == ["report.json", "report.csv", "report.md", "report.html"]
    jsonschema.validate(json.loads(paths[0].read_text()), SCHEMA)
    csv_lines = paths[1].read_text().splitlines()
    assert csv_lines[0].startswith("label,backend,device,precision,batch") and len(csv_lines) == 7
    markdown = paths[2].read_text()
    assert "| configuration |" in markdown and "**Recommendation**" in markdown
    page = paths[3].read_text()
    assert page.count("<svg") >= 3 and "<script" not in page


def test_the_report_is_typed_and_reads_back_the_same(isolated_result, tmp_path):
    """Rows, verdicts, sessions and latency are objects; to_dict is the schema; JSON reads back equal."""
    from deploykit.backends.base import SessionInfo
    from deploykit.bench.stats import LatencyStats

    row = isolated_result.rows[0]
    assert isinstance(row, deploykit.Row) and isinstance(row.session, SessionInfo)
    assert isinstance(row.latency, LatencyStats) and isinstance(row.verdict, deploykit.Verdict)
    assert row.label == row.config.label() and row.precision == row.session.precision
    data = isolated_result.to_dict()
    jsonschema.validate(data, SCHEMA)
    assert data["rows"][0]["verdict"]["oracle"]["name"] == "onnx-reference"
    isolated_result.to_json(tmp_path / "report.json")
    again = BenchmarkReport.from_json(tmp_path / "report.json")
    assert again == BenchmarkReport.from_dict(json.loads(json.dumps(data)))
    assert json.loads(json.dumps(again.to_dict())) == json.loads(json.dumps(data))
    assert judging.best(again).label == judging.best(isolated_result).label
    assert again.recommendation == isolated_result.recommendation


def test_in_process_multistream_and_offline(catalog_paths):
    multi = deploykit.benchmark(
        catalog_paths["conv_bn_act"],
        deploykit.BenchPlan(
            backends=["ort"], scenario="multistream", streams=3, iterations=10, warmup=1, isolate=False
        ),
    )
    _check_numbers(multi)
    assert multi.rows[0].latency.count == 30 and multi.rows[0].config.streams == 3
    offline = deploykit.benchmark(
        catalog_paths["mlp_dynamic_batch"],
        deploykit.BenchPlan(
            backends=["ort", "opencv"],
            scenario="offline",
            batch=16,
            iterations=5,
            warmup=1,
            isolate=False,
            cost_per_hour=0.35,
        ),
    )
    _check_numbers(offline)
    assert offline.headline == "throughput_sps"
    assert all(r.cost_per_million > 0 for r in offline.rows)
    assert offline.recommendation.headline == "throughput_sps"


def test_duration_mode(catalog_paths):
    result = deploykit.benchmark(
        catalog_paths["multi_io"], deploykit.BenchPlan(backends=["ort"], duration_s=0.2, warmup=0, isolate=False)
    )
    assert result.rows[0].wall_s >= 0.2 and result.rows[0].latency.count > 10


def test_inputs_file(catalog_paths, tmp_path):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)  # not constant: a constant reference proves nothing
    np.savez(tmp_path / "in.npz", a=a, b=a * 2)
    result = deploykit.benchmark(
        catalog_paths["multi_io"],
        deploykit.BenchPlan(backends=["ort", "opencv"], iterations=3, warmup=0, isolate=False),
        inputs=tmp_path / "in.npz",
    )
    assert result.settings.inputs == "file" and all(r.verdict.status == "pass" for r in result.rows)
    np.savez(tmp_path / "bad.npz", a=a)
    with pytest.raises(InputError, match=r"inputs \| have a; the model's inputs are a, b \(missing b\)"):
        deploykit.benchmark(
            catalog_paths["multi_io"], deploykit.BenchPlan(backends=["ort"], isolate=False), inputs=tmp_path / "bad.npz"
        )


def test_isolation_survives_a_crashing_backend(catalog_paths, monkeypatch):
    monkeypatch.setenv("DEPLOYKIT_BACKENDS", "crasher=tests.assets.crashing_backend:CrashingBackend")
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    result = deploykit.benchmark(
        catalog_paths["conv_bn_act"], deploykit.BenchPlan(backends=["crasher", "ort"], iterations=5, warmup=0)
    )
    crashed, survived = result.rows
    assert crashed.status == "failed"
    assert "killed by signal SIGABRT" in crashed.error
    assert survived.status == "ok" and survived.verdict.status == "pass"
    assert crashed.verdict is None
    jsonschema.validate(result.to_dict(), SCHEMA)


def test_failed_backend_is_a_row_not_a_crash(catalog_paths):
    result = deploykit.benchmark(
        catalog_paths["conv_bn_act"],
        deploykit.BenchPlan(backends=["opencv:cuda", "ort"], iterations=3, warmup=0, isolate=False),
    )
    assert result.rows[0].status == "failed" and "device 'cuda' cannot be used" in result.rows[0].error
    assert result.rows[1].status == "ok"


@pytest.mark.parametrize(
    ("kwargs", "error", "pattern"),
    [
        ({"backends": ["tensorflow"]}, UnknownBackendError, r"backend 'tensorflow' \| is not registered"),
        ({"iterations": 0}, UsageError, r"iterations 0 \| at least 1 timed iteration is needed"),
        (
            {"scenario": "burst"},
            UsageError,
            r"scenario 'burst' \| is not one of singlestream, offline, multistream",
        ),
        (
            {"batch": 4},
            UsageError,
            r"batch 4 \| input 'x' of 'conv_bn_act.onnx' has a fixed batch of 1.*--dynamic x:0=batch",
        ),
    ],
)
def test_bad_bench_arguments(catalog_paths, kwargs, error, pattern):
    args = {"backends": ["ort"], "iterations": 2, "isolate": False, **kwargs}
    with pytest.raises(error, match=pattern):
        deploykit.benchmark(catalog_paths["conv_bn_act"], deploykit.BenchPlan(**args))


def _constructed(result: BenchmarkReport, factor: float, passed: bool = True) -> BenchmarkReport:
    data = copy.deepcopy(result.to_dict())
    for row in data["rows"]:
        for key in ("p50_ms", "p99_ms"):
            row["latency"][key] *= factor
        if row["verdict"]:
            row["verdict"]["status"] = "pass" if passed else "fail"
    return BenchmarkReport.from_dict(data)


def test_baseline_regressions(isolated_result, tmp_path):
    baseline = isolated_result
    assert judging.regressions(_constructed(baseline, 1.05), baseline) == []
    slower = judging.regressions(_constructed(baseline, 1.5), baseline)
    assert len(slower) == 12 and "p50_ms" in slower[0] and "(+50%)" in slower[0]
    flipped = judging.regressions(_constructed(baseline, 1.0, passed=False), baseline)
    assert all("verdict pass → fail" in f for f in flipped) and len(flipped) == 6
    baseline.to_json(tmp_path / "old.json")
    _constructed(baseline, 1.5).to_json(tmp_path / "new.json")
    runner = CliRunner()
    result = runner.invoke(app, ["report", str(tmp_path / "new.json"), "--baseline", str(tmp_path / "old.json")])
    assert result.exit_code == 1 and "regression" in result.stdout
    result = runner.invoke(app, ["report", str(tmp_path / "old.json"), "--baseline", str(tmp_path / "old.json")])
    assert result.exit_code == 0 and "no regression beyond 10%" in result.stdout


def test_report_errors(isolated_result, tmp_path):
    newer = isolated_result.to_dict()
    newer["schema_version"] = 99
    (tmp_path / "newer.json").write_text(json.dumps(newer))
    with pytest.raises(ReportError, match=r"has schema version 99, this deploykit reads up to 1.*upgrade deploykit"):
        BenchmarkReport.from_json(tmp_path / "newer.json")
    (tmp_path / "junk.json").write_text("{not json")
    with pytest.raises(ReportError, match=r"is not JSON"):
        BenchmarkReport.from_json(tmp_path / "junk.json")
    other = copy.deepcopy(isolated_result)
    for row in other.rows:
        row.config = dataclasses.replace(row.config, backend="something", batch=9)
    with pytest.raises(ReportError, match=r"shares no configuration with this report"):
        judging.regressions(isolated_result, other)


def test_merge_two_devices(isolated_result, tmp_path):
    isolated_result.to_json(tmp_path / "a.json")
    other = isolated_result.to_dict()
    other["device"]["hostname"] = "jetson-orin"
    (tmp_path / "b.json").write_text(json.dumps(other))
    result = CliRunner().invoke(
        app,
        [
            "report",
            "merge",
            str(tmp_path / "a.json"),
            str(tmp_path / "b.json"),
            "-o",
            str(tmp_path / "fleet.html"),
        ],
    )
    assert result.exit_code == 0, result.output
    page = (tmp_path / "fleet.html").read_text()
    assert page.count('class="device"') == 2 and "jetson-orin" in page


def test_cli_bench_and_compare(catalog_paths, tmp_path):
    runner = CliRunner()
    result = runner.invoke(
        app,
        [
            "bench",
            str(catalog_paths["multi_io"]),
            "-b",
            "ort",
            "-b",
            "opencv",
            "--iterations",
            "5",
            "--warmup",
            "1",
            "--report",
            str(tmp_path / "r"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "recommended: deploykit.load(" in result.stdout
    jsonschema.validate(json.loads((tmp_path / "r" / "report.json").read_text()), SCHEMA)
    result = runner.invoke(
        app,
        [
            "compare",
            str(catalog_paths["conv_bn_act"]),
            "-b",
            "ort",
            "-b",
            "openvino",
            "-b",
            "opencv",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["passed"] and data["oracle"]["name"] == "onnx-reference" and data["oracle"]["independent"]
    assert [v["status"] for v in data["verdicts"]] == ["pass", "pass", "pass"]
    result = runner.invoke(app, ["bench", str(catalog_paths["multi_io"]), "--iterations", "0"])
    assert result.exit_code == 2 and "Invalid value for '--iterations' / '-n': '0'" in usage_said(result.output)
    result = runner.invoke(app, ["bench", str(catalog_paths["multi_io"]), "--duration", "soon"])
    assert result.exit_code == 2 and "Invalid value for '--duration': 'soon'" in usage_said(result.output)


def test_compare_detects_a_mismatch(catalog_paths):
    """With atol/rtol at zero, OpenVINO's reordered sums on a conv net must show up as a failure."""
    import onnx

    from tests.assets.samples import tiny_classifier

    onnx.save(tiny_classifier(size=64), catalog_paths["conv_bn_act"].parent / "classifier64.onnx")
    report = deploykit.compare(
        catalog_paths["conv_bn_act"].parent / "classifier64.onnx",
        ["ort", "openvino"],
        deploykit.VerifySettings(thresholds={"atol": 0.0, "rtol": 0.0}),
    )
    mismatch = report.verdicts[1]
    assert not report.passed and mismatch.status == "fail"
    assert mismatch.reason.startswith("output 'probabilities' | max abs error")
    assert report.exit_code() == 1


def _console_messages(stderr: str) -> list[str]:
    """What pages logged to the JavaScript console (errors included), from chromium's --enable-logging output:
    ``[pid:tid:time:INFO:CONSOLE:12] "message", source: ...`` (older builds write ``CONSOLE(12)``)."""
    return re.findall(r":CONSOLE(?::\d+|\(\d+\))\] (.*)", stderr)


@pytest.mark.slow
def test_html_report_renders_in_chromium(isolated_result, tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        missing_asset("chromium", "apt-get install chromium; `make system-deps` does")
    page = tmp_path / "report.html"
    _write_html(isolated_result, page)
    broken = tmp_path / "broken.html"
    broken.write_text("<html><body><script>console.error('deliberate'); notDefined();</script></body></html>")
    command = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--enable-logging=stderr",
        "--v=0",
        "--dump-dom",
        page.as_uri(),
    ]
    # the check must see console output at all: a page that logs an error and throws
    control = subprocess.run([*command[:-1], broken.as_uri()], capture_output=True, text=True, timeout=120)
    logged = " ".join(_console_messages(control.stderr))
    assert "deliberate" in logged and "Uncaught ReferenceError" in logged, control.stderr[-2000:]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert _console_messages(completed.stderr) == [] and "Uncaught" not in completed.stderr
    dom = completed.stdout
    assert dom.count("<svg") >= 3 and "p50 / p99 latency" in dom and "Recommendation" in dom
    screenshot = tmp_path / "shot.png"
    subprocess.run(
        [*command[:-2], f"--screenshot={screenshot}", "--window-size=1400,1800", page.as_uri()],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert screenshot.stat().st_size > 10_000


def _demo_like(result: BenchmarkReport) -> BenchmarkReport:
    """The demo's crowded case: twelve configurations (three backends × four precisions), latencies
    within a few percent of each other, small accuracy deltas; the rows are the real run's, relabelled."""
    report = copy.deepcopy(result)
    template = [r for r in report.rows if r.config.batch == 1]
    rows = []
    for b, backend in enumerate(("onnxruntime", "openvino", "opencv")):
        for p, (precision, delta) in enumerate((("f32", 0.0), ("bf16", 0.002), ("f16", 0.001), ("int8", 0.012))):
            row = copy.deepcopy(template[(b + p) % len(template)])
            row.config = dataclasses.replace(row.config, backend=backend, precision=precision)
            factor = 1.0 + 0.02 * b + 0.01 * p - 0.1 * (p == 3)
            latency = row.latency
            row.latency = dataclasses.replace(latency, p50_ms=latency.p50_ms * factor, p90_ms=latency.p90_ms * factor,
                                              p99_ms=latency.p99_ms * factor)  # fmt: skip
            row.accuracy_delta = delta + 0.0005 * b
            rows.append(row)
    report.rows = rows
    return report


@pytest.mark.slow
def test_report_plots_have_axes_and_labels_that_do_not_overlap(isolated_result, tmp_path):
    """matplotlib draws the plots; Chromium lays them out. Every plot has labelled axes with units, and
    no two of a plot's texts (tick labels, axis labels, the Pareto points' numbers) cover each other."""
    from tests.assets.browser import overlapping, plot_layout, screenshot

    control = tmp_path / "control.html"  # the measurement sees an overlap where there is one
    control.write_text('<html><body><svg class="plot" aria-label="c" width="200" height="50">'
                       '<text x="10" y="20">p50 latency</text><text x="14" y="22">p99</text></svg></body></html>')  # fmt: skip
    assert overlapping(plot_layout(control, tmp_path)[0]["texts"]) == [("p50 latency", "p99")]
    report = _demo_like(isolated_result)
    page = tmp_path / "report.html"
    _write_html(report, page)
    plots = plot_layout(page, tmp_path)
    labels = [p["label"] for p in plots]
    assert "p50 and p99 latency per configuration" in labels and any(
        lb.startswith("latency distribution") for lb in labels
    )
    pareto = next(p for p in plots if p["label"] == "accuracy delta against f32 (%) against p50 latency (ms)")
    texts = [t["text"] for t in pareto["texts"]]
    assert {"p50 latency (ms)", "accuracy delta against f32 (%)"} <= set(texts)
    assert {str(n) for n in range(1, 13)} <= set(texts)  # every point numbered
    for plot in plots:
        assert overlapping(plot["texts"]) == [], plot["label"]
        axis_texts = {t["text"] for t in plot["texts"]}
        assert any("(ms)" in t or "(samples/s)" in t for t in axis_texts), plot["label"]  # an axis with its unit
    keyed = page.read_text()
    assert all(f"<td>{row.label}</td>" in keyed for row in report.rows)  # the key table names every point
    shot = screenshot(page, tmp_path / "report.png", tmp_path)
    assert shot.stat().st_size > 10_000


def test_worker_module_runs_standalone():
    completed = subprocess.run([sys.executable, "-c", "import deploykit.bench.worker"], capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr


def test_accuracy_budget_picks_the_fastest_within_it(isolated_result):
    """--max-drop: the recommendation honours the measured accuracy delta; the Pareto front lists the trade-off."""
    report = copy.deepcopy(isolated_result)
    rows = report.rows = [r for r in report.rows if r.config.batch == 1][:3]
    from deploykit.bench.rows import Block

    rng = np.random.default_rng(3)
    for row, (p50, delta) in zip(rows, [(1.0, 0.05), (2.0, 0.004), (3.0, 0.0)], strict=True):
        row.latency, row.accuracy_delta = dataclasses.replace(row.latency, p50_ms=p50), delta
        # five interleaved rounds of three blocks: the rule's evidence, so separated medians decide
        row.blocks = [Block(float(v), p50, 1e3 / p50) for v in rng.normal(p50, 0.02, 15)]
        row.rounds = [(3, 30)] * 5
    labels = [r.label for r in rows]
    assert [r.label for r in judging.pareto_front(report)] == labels
    for budget, chosen in ((None, 0), (0.1, 0), (0.01, 1), (0.0, 2)):
        report.settings.max_drop = budget
        assert judging.best(report) is rows[chosen], budget
        if budget:
            assert f"within the accuracy budget of {budget:.1%}" in judging.recommend(report).why
    rows[2].accuracy_delta = None  # unknown delta: never picked under a budget
    report.settings.max_drop = 0.0
    assert judging.best(report) is None
    result = CliRunner().invoke(app, ["bench", "x.onnx", "--max-drop", "150%"])
    assert result.exit_code in (1, 2) and "--max-drop" in result.output


def test_regressions_are_what_got_worse(isolated_result, tmp_path):
    """A better verdict or a fixed failure is no regression; a configuration that vanished is one;
    another model file is said, as a note."""
    failing = _constructed(isolated_result, 1.0, passed=False)
    assert judging.regressions(isolated_result, failing) == []  # fail → pass: an improvement
    fewer = copy.deepcopy(isolated_result)
    gone = fewer.rows.pop()
    assert judging.regressions(fewer, isolated_result) == [f"{gone.label}: in the baseline, missing from this report"]
    assert judging.differences(isolated_result, fewer) == [f"{gone.label}: new, not in the baseline"]
    other = copy.deepcopy(isolated_result)
    other.model.sha256 = "0" * 64
    assert judging.differences(isolated_result, other)[0].startswith("the baseline benchmarked another model file")
    broken = copy.deepcopy(isolated_result)
    broken.rows[0] = deploykit.Row.from_failure(
        broken.rows[0].config, BackendError("OpenVINO | could not compile.", hint="x")
    )
    assert judging.regressions(broken, isolated_result) == [
        f"{broken.rows[0].label}: status ok → failed (could not compile)"
    ]


def test_typed_rows_read_as_users_expect(isolated_result):
    row = isolated_result.rows[0]
    assert repr(row).startswith(f"Row({row.label!r}, ok, ") and "p50" in repr(row) and len(repr(row)) < 150
    assert repr(isolated_result).startswith("BenchmarkReport('mlp_dynamic_batch.onnx', 6 rows, 6 ok")
    with pytest.raises(UsageError, match=r"latency 'p50' \| is not a latency statistic, expected one of .*p50_ms"):
        row.latency_ms("p50")
    failed = deploykit.Row.from_failure(row.config, "no such device")
    with pytest.raises(UsageError, match=r"has no latency: it failed \(no such device\)"):
        failed.latency_ms("p50_ms")
    assert not hasattr(isolated_result, "data") and not hasattr(deploykit, "BenchmarkResult")  # removed in 0.1


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda d: d["rows"][0]["verdict"]["oracle"].clear() or d["rows"][0]["verdict"].pop("oracle"),
            r"rows\[0\]\.verdict: required field 'oracle' is missing",
        ),
        (lambda d: d["rows"][0].update(latency="0.1ms"), r"rows\[0\]\.latency: expected null or object, got string"),
        (lambda d: d.update(schema_version="1"), r"schema_version is '1', expected 1"),
        (lambda d: d.pop("schema_version"), r"schema_version is None, expected 1"),
    ],
)
def test_a_broken_report_names_what_is_wrong(isolated_result, tmp_path, edit, message):
    data = isolated_result.to_dict()
    edit(data)
    (tmp_path / "r.json").write_text(json.dumps(data))
    with pytest.raises(ReportError, match=message):
        BenchmarkReport.from_json(tmp_path / "r.json")


def test_report_folder_is_checked_before_the_bench(catalog_paths, tmp_path):
    from deploykit.errors import OutputError

    (tmp_path / "afile").write_text("x")
    started = tmp_path / "started"
    for target, message in ((tmp_path / "afile", "is a file, expected a folder"),
                            (tmp_path / "afile" / "sub", "is a file, so no folder can be made under it")):  # fmt: skip
        result = CliRunner().invoke(app, ["bench", str(catalog_paths["conv_bn_act"]), "-b", "ort", "--iterations",
                                          "2", "--report", str(target)])  # fmt: skip
        assert result.exit_code == 2 and message in result.stderr and "Traceback" not in result.output
        assert "onnxruntime:cpu" not in result.stdout, "the bench ran before the folder was checked"
    assert not started.exists()
    with pytest.raises(OutputError, match="is a file"):
        deploykit.bench.report_files.check_report_dir(tmp_path / "afile")


def test_report_command_options_that_do_nothing_are_refused(isolated_result, tmp_path):
    write_report(isolated_result, tmp_path / "out")
    runner = CliRunner()
    shown = runner.invoke(app, ["report", str(tmp_path / "out")])  # the folder stands for its report.json
    assert shown.exit_code == 0 and "recommended: deploykit.load(" in shown.stdout
    result = runner.invoke(app, ["report", str(tmp_path / "out" / "report.json"), "-o", str(tmp_path / "x.html")])
    assert result.exit_code == 2 and "--output | is for 'report merge'" in result.stderr
    assert not (tmp_path / "x.html").exists()
    result = runner.invoke(
        app, ["report", "merge", str(tmp_path / "out" / "report.json"), "-o", str(tmp_path / "m.json")]
    )
    assert (
        result.exit_code == 2 and "expected a .html file name" in result.stderr and not (tmp_path / "m.json").exists()
    )


def test_the_recommendation_uses_the_ranking_rule(isolated_result):
    """bench ranks with optimize's rule: a 0.05 % lead of bf16 inside the noise is a tie, and the tie
    keeps f32; a lead whose interval separates wins; blocks travel through the JSON."""
    from deploykit.bench.rows import Block
    from deploykit.optimize.ranking import DECISION_RULE

    report = copy.deepcopy(isolated_result)
    f32, other = report.rows = [r for r in report.rows if r.config.batch == 1][:2]
    rng = np.random.default_rng(0)
    for row, (center, precision) in zip((f32, other), ((3.974, "f32"), (3.972, "bf16")), strict=True):
        row.session = dataclasses.replace(row.session, precision=precision)
        row.latency = dataclasses.replace(row.latency, p50_ms=center)
        row.blocks = [Block(float(v), center, 250.0) for v in rng.normal(center, 0.05, 10)]
    assert judging.best(report) is f32 and "f32 before bf16" in judging.recommend(report).why
    other.blocks = [Block(float(v), 2.0, 500.0) for v in rng.normal(2.0, 0.05, 10)]
    # one measurement per configuration is one round: below the rule's evidence, so even a 2x lead is
    # inconclusive, said in words, and the simpler setup is recommended
    ranked = judging.ranking(report)
    assert ranked is not None and ranked.decision == "inconclusive" and ranked.leader == other.label
    assert judging.best(report) is f32 and "insufficient evidence" in judging.recommend(report).why
    assert "1 round, 10 blocks" in judging.recommend(report).why
    # bench's default of one round can never satisfy the rule: the recommendation says what would
    assert "1 round per configuration can never call one faster: pass --rounds 5" in judging.recommend(report).why
    assert judging.ranking(report).rule == DECISION_RULE
    assert BenchmarkReport.from_dict(report.to_dict()).rows[1].blocks == other.blocks
    assert len(isolated_result.rows[0].blocks) == 6  # 20 timed runs → 6 blocks of at least 3


def test_a_model_replaced_mid_benchmark_is_an_error_not_a_numeric_failure(tmp_path):
    """Issue 21: the file changed between two configurations; the rows would mix two models."""
    import onnx

    from deploykit.errors import ModelError
    from tests.assets.catalog import conv_bn_act, mlp_dynamic_batch

    model, other = tmp_path / "m.onnx", tmp_path / "other.onnx"
    onnx.save(mlp_dynamic_batch(), str(model))
    onnx.save(conv_bn_act(), str(other))

    def replace_after_the_first(index: int, total: int, label: str) -> None:
        if index == 1:
            shutil.copy(other, model)

    with pytest.raises(ModelError, match=r"'m.onnx' \| changed while the benchmark ran \(SHA-256 .* at the start"):
        plan = deploykit.BenchPlan(backends=["onnxruntime", "openvino"], iterations=5, warmup=1)
        deploykit.benchmark(model, plan, progress=replace_after_the_first)


def test_a_sequence_output_is_verified_in_bench_as_in_compare(tmp_path):
    """Issue 21 sweep: bench said "output 's[0]' missing" for a sequence output that compare verifies."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("SequenceConstruct", ["x", "x"], ["s"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, [1, 4])])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "seq.onnx"))
    report = deploykit.benchmark(
        tmp_path / "seq.onnx", deploykit.BenchPlan(backends=["onnxruntime"], iterations=3, warmup=1)
    )
    assert [row.verdict.status for row in report.rows] == ["pass"], [row.verdict for row in report.rows]


def test_every_report_follows_one_protocol(isolated_result, tmp_path):
    """Bench, fleet, conversion and optimize reports: to_dict, from_dict, write; what is written reads back equal,
    and a file that is not one says which kind of report was expected."""
    from deploykit.convert.report import ConversionReport
    from deploykit.distributed.fleet_report import DeviceOutcome, FleetReport
    from deploykit.document import Document
    from deploykit.optimize.results import OptimizeReport

    verdicts = [row.verdict for row in isolated_result.rows]
    conversion = ConversionReport("m.pt", "m.onnx", "torch", "dynamo", 17, 1.5, verdicts=verdicts,
                                  oracle=verdicts[0].oracle, notes=["simplified"])  # fmt: skip
    fleet = FleetReport("m.onnx", "0" * 64, {"iterations": 20}, [DeviceOutcome("alpha", "ok", None, "n1", isolated_result),
                                                                 DeviceOutcome("beta", "failed", "no node")])  # fmt: skip
    for report in (isolated_result, conversion, fleet):
        assert isinstance(report, Document)
        path = report.write(tmp_path / f"{type(report).__name__}.json")
        again = type(report).from_json(path)
        assert again.to_dict() == report.to_dict()
    assert issubclass(OptimizeReport, Document)
    (tmp_path / "junk.json").write_text("{")
    for kind, cls in (("report", BenchmarkReport), ("fleet report", FleetReport), ("conversion report", ConversionReport),
                      ("optimize report", OptimizeReport)):  # fmt: skip
        with pytest.raises(ReportError, match=rf"^{kind} '.*junk.json' \| is not JSON"):
            cls.from_json(tmp_path / "junk.json")
    (tmp_path / "other.json").write_text(json.dumps({"schema": "something else"}))
    with pytest.raises(ReportError, match=r"is not a deploykit fleet report"):
        FleetReport.from_json(tmp_path / "other.json")
    with pytest.raises(ReportError, match=r"is not a deploykit conversion report"):
        ConversionReport.from_json(tmp_path / "other.json")


def test_rounds_give_the_rule_its_evidence(catalog_paths):
    """--rounds 5: every configuration measured five times, interleaved; the rows keep each round's
    blocks and calls, the intervals exist, and the recommendation states the evidence it rests on."""
    from deploykit.optimize.ranking import MIN_BLOCKS, MIN_ROUNDS

    report = deploykit.benchmark(
        catalog_paths["mlp_dynamic_batch"],
        deploykit.BenchPlan(
            backends=("onnxruntime", "openvino:CPU"), precision="f32", warmup=1, iterations=9, rounds=MIN_ROUNDS
        ),
    )
    assert report.settings.rounds == MIN_ROUNDS
    for row in report.rows:
        assert row.ok and len(row.rounds) == MIN_ROUNDS and all(blocks >= MIN_BLOCKS for blocks, _ in row.rounds)
        assert sum(blocks for blocks, _ in row.rounds) == len(row.blocks) and row.calls() == 9 * MIN_ROUNDS
    ranked = judging.ranking(report)
    assert ranked is not None and all(i.sufficient for i in ranked.intervals.values())
    assert f"{MIN_ROUNDS} rounds" in judging.recommend(report).why or ranked.decision != "faster"
    assert "--rounds" not in judging.recommend(report).why  # the rounds asked for could give the evidence
    assert BenchmarkReport.from_dict(report.to_dict()).rows[0].rounds == report.rows[0].rounds
    with pytest.raises(UsageError, match=r"^rounds 0 \| expected 1 or more"):
        deploykit.BenchPlan(rounds=0)
