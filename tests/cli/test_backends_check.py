"""``deploykit backends --check``: every claimed backend × device × precision runs as claimed."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from deploykit.backends.registry import get_backend
from deploykit.cli.main import app
from deploykit.verify.check import default_backend_specs, parse_backend_spec

runner = CliRunner()


def test_check_runs_every_claim_and_says_what_ran():
    result = runner.invoke(app, ["backends", "--check", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ok"] is True
    expected = set()
    for spec in default_backend_specs():
        name, device = parse_backend_spec(spec)
        backend = get_backend(name)
        expected |= {(backend.name, device, p) for p in backend.precisions(device)}
    seen = {(row["backend"], row["device"], row["precision"]) for row in report["rows"]}
    assert seen == expected  # exactly the claims: none skipped, none invented
    for row in report["rows"]:
        assert row["ran"] == row["precision"] and row["status"] == "pass", row
        assert row["precision"] in row["claimed"]
    for backend_name, device, precision in {
        (b, d, p) for b, d, _ in expected for p in ("f32", "bf16", "f16")
    } - expected:
        assert any(f"{backend_name}:{device} {precision}: not supported here" in n for n in report["notes"]), (
            backend_name,
            device,
            precision,
            report["notes"],
        )


def test_check_prints_a_table_with_claims_and_what_ran():
    result = runner.invoke(app, ["backends", "--check"])
    assert result.exit_code == 0, result.output
    assert "what each backend claims here, and what ran" in result.stdout
    assert "onnxruntime" in result.stdout and "claims" in result.stdout and "ran" in result.stdout


def test_a_plug_in_that_cannot_load_is_one_row_not_the_whole_listing(monkeypatch):
    monkeypatch.setenv("DEPLOYKIT_BACKENDS", "bogus=nonexistent.module:Nothing")
    result = runner.invoke(app, ["backends", "--json"])
    assert result.exit_code == 0, result.output
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert rows["bogus"]["available"] is False and "its plug-in failed to load" in rows["bogus"]["reason"]
    assert rows["onnxruntime"]["available"] is True
