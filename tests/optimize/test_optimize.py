"""deploykit optimize end to end on real runtimes: the search, the report, the bundle and its openers.

Expectations come from ``Backend.precisions`` (a CPU with or without bf16/f16), never from this
machine: the candidates are derived from what the backends say they run natively.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

import deploykit
from cli.main import app
from deploykit.backends.registry import get_backend
from deploykit.distributed.cluster import loopback_only
from deploykit.errors import BundleError, UsageError
from deploykit.optimize import BundleWarning, OptimizePlan, OptimizeReport, optimize, read_bundle
from deploykit.optimize.ranking import DECISION_RULE, MIN_BLOCKS, MIN_ROUNDS

BACKENDS = ("onnxruntime", "openvino:CPU")
STOP_REASONS = ("slower than", "not a finalist", "over the screening share", "over the accuracy budget", "verification:", "did not run",
                "accuracy delta unknown", "over the time budget")  # fmt: skip


@pytest.fixture(scope="module")
def searched(classifier_path, photos, tmp_path_factory):
    """One search of the small classifier: ORT and OpenVINO, INT8 from the ORT engine, one thread."""
    output = tmp_path_factory.mktemp("bundle") / "deploy"
    report = optimize(
        classifier_path,
        photos,
        OptimizePlan(backends=BACKENDS, threads=[1], engines=["ort"], time_budget="90s", max_drop="1%"),
        output=output,
    )
    return report, output


def _native(spec: str) -> list[str]:
    name, _, device = spec.partition(":")
    backend = get_backend(name)
    native = backend.precisions(device or backend.default_device)
    return native if "precision" in backend.options else ["f32"]


def test_candidates_are_every_native_precision_and_the_int8_variant(searched):
    report, _ = searched
    labels = {c.label for c in report.candidates}
    for spec in BACKENDS:
        name = spec.partition(":")[0]
        device = get_backend(name).default_device if ":" not in spec else spec.partition(":")[2]
        for precision in _native(spec):
            assert f"{name}:{device} b1 t1 {precision} float" in labels
        backend = get_backend(name)
        if "precision" in backend.options:  # an INT8 model's float layers pinned to each native precision
            for precision in _native(spec):
                assert f"{name}:{device} b1 t1 int8 int8-ort (float layers {precision})" in labels
        else:
            assert f"{name}:{device} b1 t1 int8 int8-ort" in labels
    assert {v.name for v in report.variants} >= {"float", "int8-ort"}
    assert report.settings.calibration_images + report.settings.accuracy_images == 12
    assert report.settings.accuracy_images == 6  # half held out, never calibrated on


def test_every_candidate_has_an_outcome_and_the_choice_is_admissible(searched):
    report, _ = searched
    best = report.best
    assert best.status == "chosen" and best.verdict is not None and best.verdict.passed
    assert best.accuracy_delta is not None and best.accuracy_delta <= report.settings.max_drop
    assert best.headline is not None
    if report.decision.decision == "faster":  # never a claim from less than the rule's evidence, on either side
        for label in report.decision.order[:2]:
            interval = report.decision.intervals[label]
            assert interval.sufficient and interval.rounds >= MIN_ROUNDS and interval.fewest_blocks >= MIN_BLOCKS
    if best.headline.low is not None and best.headline.high is not None:
        assert best.headline.low <= best.headline.estimate <= best.headline.high
    else:
        assert report.decision.decision == "inconclusive" and "insufficient evidence" in report.decision.reason
    for candidate in report.candidates:
        if candidate.status == "stopped":
            assert candidate.reason.startswith(STOP_REASONS), candidate.reason
        else:
            assert candidate.accuracy_delta is not None and candidate.accuracy_delta <= report.settings.max_drop
    assert report.decision.rule == DECISION_RULE and report.decision.chosen == best.label
    assert report.baseline is not None and report.baseline.label.startswith("onnxruntime:cpu")
    assert report.pareto and report.pareto[0] in {c.label for c in report.candidates}
    assert report.oracle.independent and report.metric == "top-1 agreement"


def test_report_round_trips(searched, tmp_path):
    report, output = searched
    data = report.to_dict()
    assert OptimizeReport.from_dict(json.loads(json.dumps(data))).to_dict() == data
    assert read_bundle(output).report().to_dict() == json.loads(json.dumps(data, default=str))
    written = report.write(tmp_path / "report.json")  # the report protocol every report class shares
    assert OptimizeReport.from_json(written).to_dict() == json.loads(json.dumps(data, default=str))


def test_bundle_holds_what_the_device_needs(searched):
    report, output = searched
    manifest = read_bundle(output).manifest
    expected = [manifest.model_file, "deploykit.json", "report.json", "report.html"]
    assert sorted(p.name for p in output.iterdir()) == sorted(expected)
    best = report.best
    assert (manifest.backend, manifest.device, manifest.precision, manifest.threads, manifest.batch) == (
        best.config.backend,
        best.config.device,
        best.config.precision,
        best.config.threads,
        best.config.batch,
    )
    assert manifest.task == "classify" and manifest.preprocess["size"] == [32, 32] and len(manifest.labels) == 10
    assert manifest.verdict["status"] == "pass" and manifest.verdict["oracle"]["name"] == "onnx-reference"
    assert manifest.accuracy["images"] == 6 and manifest.accuracy["delta"] == best.accuracy_delta
    assert set(manifest.latency["p50_ms"]) >= {"estimate", "low", "high"} and manifest.latency["p99_ms"] > 0
    assert manifest.fingerprint["cpu"]["model"] and manifest.versions["deploykit"] == deploykit.__version__
    assert not manifest.partial and manifest.schema_version == 1


class _Marks(HTMLParser):
    """The SVG plots of a page: per plot, its axis texts and its marks (elements tagged by class and
    ``data-label``: matplotlib draws each mark as one ``<g>``)."""

    def __init__(self) -> None:
        super().__init__()
        self.plots: list[dict] = []
        self._text = False

    def handle_starttag(self, tag: str, attrs: list) -> None:
        attributes = dict(attrs)
        if tag == "svg":
            self.plots.append({"texts": [], "points": [], "front": [], "chosen": []})
        elif "data-label" in attributes and self.plots:
            classes = (attributes.get("class") or "").split()
            for kind in ("point", "front", "chosen"):
                if kind in classes:
                    self.plots[-1]["points" if kind == "point" else kind].append(attributes["data-label"])
        self._text = tag == "text"

    def handle_data(self, data: str) -> None:
        if self._text and self.plots:
            self.plots[-1]["texts"].append(data)

    def handle_endtag(self, tag: str) -> None:
        self._text = False


def test_the_html_report_draws_the_pareto_front(searched):
    report, output = searched
    marks = _Marks()
    marks.feed((output / "report.html").read_text())
    assert len(marks.plots) == 1
    plot = marks.plots[0]
    measured = [c.label for c in report.candidates if c.headline is not None and c.accuracy_delta is not None]
    assert len(measured) >= 2 and sorted(plot["points"]) == sorted(measured)  # one mark per measured candidate
    assert sorted(plot["front"]) == sorted(report.pareto)
    assert plot["chosen"] == [report.chosen]
    assert "p50 latency (ms, lower is better)" in plot["texts"]
    assert any(t.startswith("accuracy delta against f32 (top-1 agreement, %)") for t in plot["texts"])
    assert read_bundle(output).manifest.files["report.html"]


def test_the_html_reports_plot_reads_in_a_browser(searched, tmp_path):
    """Chromium lays the page out: the plot's texts (ticks, axis labels, the points' numbers) cover
    nothing of each other, and every number is keyed to its candidate in the table under the plot."""
    from tests.assets.browser import overlapping, plot_layout

    report, output = searched
    (plot,) = plot_layout(output / "report.html", tmp_path)
    assert overlapping(plot["texts"]) == []
    measured = [c for c in report.candidates if c.headline is not None and c.accuracy_delta is not None]
    assert {str(n) for n in range(1, len(measured) + 1)} <= {t["text"] for t in plot["texts"]}
    page = (output / "report.html").read_text()
    assert all(f"<td>{c.label}</td>" in page for c in measured)


def test_load_detector_classifier_predict_and_bench_open_the_chosen_configuration(searched, photos):
    _, output = searched
    manifest = read_bundle(output).manifest
    with warnings.catch_warnings():
        warnings.simplefilter("error", BundleWarning)  # same machine, same runtimes: no warning
        with deploykit.load(output) as session:
            assert session.info.backend == manifest.backend and session.model_path.name == manifest.model_file
            assert session.info.options.get("threads") == manifest.threads
        with deploykit.Classifier(output) as classifier:
            assert classifier(photos / "dog.jpg", top_k=1)[0].label.startswith("class_")
    runner = CliRunner()
    predicted = runner.invoke(app, ["predict", str(output), str(photos / "dog.jpg"), "--top-k", "1"])
    assert predicted.exit_code == 0, predicted.output
    benched = runner.invoke(app, ["bench", str(output), "--iterations", "30", "--recheck"])
    assert benched.exit_code == 0, benched.output
    assert "recheck: p50" in benched.output and manifest.backend in benched.output
    refused = runner.invoke(app, ["bench", str(output), "--threads", "2"])
    assert refused.exit_code == 2 and "a bundle is benchmarked in the configuration it chose" in refused.output
    with pytest.raises(UsageError, match=r"chose backend .*; asked for opencv"):
        deploykit.load(output, "opencv")


def _copy(output: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(output, copy)
    return copy


def test_predict_on_ray_opens_the_bundles_threads_and_precision(searched, photos, tmp_path, monkeypatch):
    """The Ray actors get the bundle's whole configuration. Its manifest is edited to 2 threads (the
    search chose among 1 only) so that the actors' default of one thread per CPU would show."""
    ray = pytest.importorskip("ray", reason="Ray (the deploykit[ray] extra)")
    from deploykit.distributed.store import ResultStore

    _, output = searched
    copy = _copy(output, tmp_path)
    data = json.loads((copy / "deploykit.json").read_text())
    data["threads"], data["options"]["threads"] = 2, 2
    (copy / "deploykit.json").write_text(json.dumps(data))
    folder = tmp_path / "images"
    folder.mkdir()
    for photo in sorted(photos.iterdir())[:3]:
        shutil.copy(photo, folder)
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    with loopback_only():
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        result = CliRunner().invoke(app, ["predict", str(copy), str(folder), "--engine", "ray", "--out",
                                          str(tmp_path / "rows"), "--top-k", "1"])  # fmt: skip
    finally:
        ray.shutdown()
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())  # the console wraps the summary where the temporary path ends
    assert "3 rows written" in said and "on 1 actor" in said  # 2 CPUs, 2 per actor
    rows = list(ResultStore(tmp_path / "rows").rows())
    assert len(rows) == 3 and {r["status"] for r in rows} == {"ok"}
    assert {r["backend"] for r in rows} == {data["backend"]}
    # the precision the session reports, as it did when the search measured it (an INT8 model's float
    # parts may run in bf16 on OpenVINO)
    assert {(r["worker"]["threads"], r["worker"]["precision"]) for r in rows} == {(2, data["session"]["precision"])}
    for row in rows:  # every option the bundle chose (precision included), as the actor's session got it
        assert {k: row["worker"]["options"].get(k) for k in data["options"]} == data["options"]
    assert all(r["worker"]["pid"] != os.getpid() for r in rows)  # in Ray's actors, not here


def test_a_tampered_model_is_an_error(searched, tmp_path):
    _, output = searched
    copy = _copy(output, tmp_path)
    model = copy / read_bundle(copy).manifest.model_file
    model.write_bytes(model.read_bytes() + b"\0")
    with pytest.raises(BundleError, match=r"has SHA-256 .* the file was changed or replaced"):
        deploykit.load(copy)
    with pytest.raises(BundleError, match="SHA-256"):
        read_bundle(copy)
    result = CliRunner().invoke(app, ["predict", str(copy), str(model)])
    assert result.exit_code == 1 and "SHA-256" in result.output


def test_another_machine_warns_and_names_recheck(searched, tmp_path):
    _, output = searched
    copy = _copy(output, tmp_path)
    data = json.loads((copy / "deploykit.json").read_text())
    data["fingerprint"]["cpu"]["model"] = "Some Other CPU"
    data["fingerprint"]["cpu"]["flags"] = [*data["fingerprint"]["cpu"]["flags"], "sve"]
    data["session"]["backend_version"] = "onnxruntime 0.0.1"
    (copy / "deploykit.json").write_text(json.dumps(data))
    with pytest.warns(BundleWarning, match=rf"deploykit bench {copy} --recheck") as caught:
        deploykit.load(copy).close()
    message = str(caught[0].message)
    assert "Some Other CPU" in message and "-sve" in message and "runtime onnxruntime 0.0.1 there" in message


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.update(schema_version=99), "schema version 99; this deploykit reads version 1"),
        (lambda d: d.update(schema="other"), "has schema 'other', expected 'deploykit.bundle'"),
        (lambda d: d.update(model_file="../x.onnx"), "expected a file name inside the folder"),
        (lambda d: d.pop("backend"), "lacks backend"),
    ],
)
def test_a_foreign_or_unknown_manifest_is_an_error(searched, tmp_path, edit, message):
    _, output = searched
    copy = _copy(output, tmp_path)
    data = json.loads((copy / "deploykit.json").read_text())
    edit(data)
    (copy / "deploykit.json").write_text(json.dumps(data))
    with pytest.raises(BundleError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_bundle(copy)


def test_missing_files_and_a_folder_that_is_no_bundle(searched, tmp_path):
    _, output = searched
    copy = _copy(output, tmp_path)
    data = json.loads((copy / "report.json").read_text())
    data["chosen"] = data["candidates"][-1]["label"]
    (copy / "report.json").write_text(json.dumps(data))
    with pytest.raises(BundleError, match=r"report\.json has another SHA-256 than the bundle recorded"):
        read_bundle(copy).report()
    (copy / "report.json").unlink()
    with pytest.raises(BundleError, match=r"its file 'report\.json' is missing"):
        read_bundle(copy)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(BundleError, match=r"is a folder without deploykit\.json"):
        deploykit.load(empty)


def test_mobilenet_v2_end_to_end_under_a_background_load(mobilenet, photos, tmp_path):
    """The real ImageNet MobileNetV2 with a small time budget on a device kept busy by one spinning
    process: every INT8 and reduced float class the backends claim (``Backend.precisions``) is
    screened before any thread variant, the load is recorded, and the choice, within 1 % top-1
    agreement, opens as a Classifier."""
    output = tmp_path / "deploy"
    report = optimize(
        mobilenet,
        photos,
        OptimizePlan(
            backends=BACKENDS, threads=[1, 2], engines=["ort"], max_drop="1%", time_budget="40s", background_load=1
        ),
        output=output,
    )
    assert report.settings.background_load["threads"] == 1
    spinning = get_backend("onnxruntime").options
    if "spinning" in spinning:  # the wait policy is an axis on a busy device
        assert any(c.label.endswith("no-spin") and c.config.options.get("spinning") is False
                   for c in report.candidates)  # fmt: skip
    assert read_bundle(output).manifest.background_load == report.settings.background_load
    for spec in BACKENDS:
        name = spec.partition(":")[0]
        claimed = [p for p in _native(spec) if p != "f32"]
        screened = {c.config.precision for c in report.candidates if c.config.backend == name and c.rounds}
        assert set(claimed) <= screened, (spec, claimed, screened)
        int8 = [c for c in report.candidates if c.config.backend == name and c.variant == "int8-ort"]
        assert int8 and any(c.rounds or c.reason.startswith("did not run") for c in int8)
    for candidate in report.candidates:
        if not candidate.rounds:
            assert candidate.reason, candidate.label  # unmeasured, with the reason
    best = report.best
    assert best.accuracy_delta is not None and best.accuracy_delta <= 0.01
    assert report.metric == "top-1 agreement" and report.settings.accuracy_images == 6
    int8 = [c for c in report.candidates if c.variant == "int8-ort"]
    stopped = ("did not run", "over the screening share of the time budget", "over the time budget before its")
    assert int8 and all(c.verdict is not None or c.reason.startswith(stopped) for c in int8)
    _assert_evidence_behind_the_decision(report)
    with deploykit.Classifier(output) as classifier, deploykit.Classifier(mobilenet) as reference:
        assert classifier.labels == reference.labels and len(classifier.labels) == 1000
        assert classifier(photos / "dog.jpg", top_k=1)[0].label == reference(photos / "dog.jpg", top_k=1)[0].label


def _assert_evidence_behind_the_decision(report: OptimizeReport) -> None:
    """ "faster" rests on the rule's evidence for every side it was compared with (the f32 baseline of
    the speedup included), anything less says inconclusive in words, and a choice made after
    screening left others out says so rather than calling itself the only candidate."""
    decision = report.decision
    if decision.decision == "faster":
        assert len(decision.order) >= 2, decision.reason
        for label in decision.order:
            interval = decision.intervals[label]
            assert interval.rounds >= MIN_ROUNDS and interval.fewest_blocks >= MIN_BLOCKS, (label, interval)
        assert report.baseline is not None
        baseline = report.candidate(report.baseline.label)
        assert baseline is not None and baseline.headline is not None and baseline.headline.sufficient
    elif decision.decision == "inconclusive":
        assert "insufficient evidence" in decision.reason and f"{MIN_ROUNDS} rounds" in decision.reason
    measured = sum(1 for c in report.candidates if c.rounds)
    assert measured == 1 or "the only candidate" not in decision.reason, decision.reason
    if any(c.reason.startswith("not a finalist") for c in report.candidates):
        assert "screened out after one short round" in decision.reason, decision.reason


def test_a_verified_model_is_not_hashed_again_until_it_changes(searched, tmp_path):
    from deploykit.optimize.verified import verified_before

    _, output = searched
    copy = _copy(output, tmp_path)
    bundle = read_bundle(copy)  # a new file: hashed, then remembered
    assert verified_before(bundle.model_path, bundle.manifest.model_sha256)
    data = bundle.model_path.read_bytes()
    bundle.model_path.write_bytes(data)  # the same bytes rewritten: ctime moved, so hashed again (and equal)
    assert not verified_before(bundle.model_path, bundle.manifest.model_sha256)
    read_bundle(copy)
    bundle.model_path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(BundleError, match="SHA-256"):
        read_bundle(copy)


def test_the_bundle_opens_exactly_the_configuration_its_manifest_records(searched):
    """load(bundle).info reports what deploykit.json pins: the compute precision (an INT8 model's
    float layers included), threads and every pinned option; nothing left to the device's default."""
    _, output = searched
    manifest = read_bundle(output).manifest
    with deploykit.load(output) as session:
        info = session.info
        assert info.backend == manifest.backend and info.precision_label == manifest.compute
        assert {k: info.options.get(k) for k in manifest.options} == dict(manifest.options)
        if manifest.threads:
            assert info.options.get("threads") == manifest.threads
        backend = get_backend(manifest.backend)
        if "precision" in backend.options:  # pinned: the float layers' precision on this device
            assert manifest.options.get("precision") == info.precision
        if manifest.variant.startswith("int8") and info.precision != "int8":
            assert manifest.compute == f"int8 (float layers {info.precision})"


def test_a_pinned_precision_this_device_cannot_run_is_the_precision_contracts_error(searched, tmp_path):
    """A bundle pinned to a precision the device does not compute natively (another machine's bf16,
    here written into the manifest) refuses to open, never opening at the device's default."""
    from deploykit.errors import PrecisionUnavailableError

    _, output = searched
    copy = _copy(output, tmp_path)
    data = json.loads((copy / "deploykit.json").read_text())
    if "precision" not in get_backend(data["backend"]).options:  # the same model file, pinned on OpenVINO
        data.update(backend="openvino", device="CPU", options={"threads": 1})
    backend = get_backend(data["backend"])
    missing = [p for p in ("bf16", "f16", "f32") if p not in backend.precisions(data["device"])]
    if not missing:
        pytest.skip(f"{data['backend']}:{data['device']} computes every precision natively here")
    data["options"]["precision"] = missing[0]
    (copy / "deploykit.json").write_text(json.dumps(data))
    with pytest.raises(PrecisionUnavailableError, match=f"does not compute {missing[0]} natively"):
        deploykit.load(copy)


def test_the_printed_pareto_front_says_which_entries_are_not_answers(searched):
    """The front shows what reduced precision would cost; an entry that failed verification or was
    ranked on too few rounds says so beside its label."""
    import dataclasses

    from cli.optimize_cmd import _pareto_line

    report, _ = searched
    first = next(c for c in report.candidates if c.label == report.pareto[0])
    assert _pareto_line(report).split(", ")[0].startswith(first.label)
    failed = dataclasses.replace(first, verdict=dataclasses.replace(first.verdict, status="fail"))
    headline = dataclasses.replace(first.headline, rounds=1, low=None, high=None)  # one screening round
    changed = dataclasses.replace(failed, headline=headline)
    candidates = tuple(changed if c.label == first.label else c for c in report.candidates)
    line = _pareto_line(dataclasses.replace(report, candidates=candidates))
    assert line.split(", ")[0] == f"{first.label} (verification fail; too few rounds to rank)"
