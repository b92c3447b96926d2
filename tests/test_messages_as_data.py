"""Nothing parses message text (issue 22, item 4): an error's message and hint travel apart, in rows,
verdicts and reports; only reports of deploykit 0.1, whose text held both, are split, in one place."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from deploykit.bench.config import BenchConfig
from deploykit.bench.rows import Row
from deploykit.convert.report import ConversionReport
from deploykit.errors import BackendError, legacy_message_and_hint
from deploykit.verify.verdict import OracleInfo, Verdict, error_verdict
from tests.assets.paths import REPO

SPLIT_ON_HINT = re.compile(r"\.(r?split|r?partition)\(\s*(['\"])\s*Hint:")
LEGACY_READER = ("deploykit/errors.py", "legacy_message_and_hint")
ORACLE = OracleInfo("reference", True, "onnx's reference evaluator")
OLD_REASON = "backend 'openvino' | cannot compile op Foo. Hint: try another backend."


def _functions_holding(path: Path, line: int) -> list[str]:
    tree = ast.parse(path.read_text())
    return [
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.lineno <= line <= (node.end_lineno or 0)
    ]


def test_no_code_splits_a_message_on_its_hint_but_the_reader_of_old_reports():
    found = []
    for folder in ("deploykit", "cli"):
        for path in sorted((REPO / folder).rglob("*.py")):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if SPLIT_ON_HINT.search(line):
                    found.append((str(path.relative_to(REPO)), number))
    assert found, "the legacy reader itself must match: the pattern is wrong"
    for relative, number in found:
        where = (relative, LEGACY_READER[1])
        assert where == LEGACY_READER and LEGACY_READER[1] in _functions_holding(REPO / relative, number), (
            f"{relative}:{number} splits message text on ' Hint: '; carry the hint as data (DeployKitError.hint, "
            "Row.hint, Verdict.hint) instead"
        )


def test_an_error_verdict_keeps_message_and_hint_apart_and_reads_back():
    verdict = error_verdict("openvino", ORACLE, "backend 'openvino' | cannot compile op Foo.", hint="try another.")
    data = verdict.to_dict()
    assert data["reason"] == "backend 'openvino' | cannot compile op Foo." and data["hint"] == "try another."
    assert "Hint:" not in data["reason"] and "Hint:" not in verdict.describe()
    assert Verdict.from_dict(data) == verdict
    assert verdict.explanation == "backend 'openvino' | cannot compile op Foo. Hint: try another."


def test_an_error_verdict_of_the_old_schema_is_read_with_its_hint_apart():
    old = {**error_verdict("openvino", ORACLE, OLD_REASON).to_dict(), "reason": OLD_REASON}
    del old["hint"]  # deploykit 0.1 wrote no hint key: the hint was inside the reason
    verdict = Verdict.from_dict(old)
    assert (verdict.reason, verdict.hint) == ("backend 'openvino' | cannot compile op Foo.", "try another backend.")
    assert verdict.explanation == OLD_REASON
    not_an_error = Verdict.from_dict({**old, "status": "fail", "reason": "max |d| 3. Hint: in a name"})
    assert not_an_error.reason == "max |d| 3. Hint: in a name" and not_an_error.hint is None


def test_a_conversion_report_of_the_old_schema_still_passes_the_backends_hint_on():
    report = ConversionReport("net.pt", "net.onnx", "torch", "dynamo", 17, 0.1, verdicts=[])
    data = report.to_dict()
    data["verdicts"] = [{**error_verdict("openvino", ORACLE, OLD_REASON).to_dict(), "reason": OLD_REASON}]
    del data["verdicts"][0]["hint"]
    old = ConversionReport.from_dict(data)
    assert old.first_failure() == "openvino: error against reference — backend 'openvino' | cannot compile op Foo"
    hint = old.failure_hint(kept=False, mismatch="unused")
    assert "its hint: try another backend." in hint and hint.count("Hint:") == 0
    again = ConversionReport.from_dict(old.to_dict())  # written now: the hint apart, read back the same
    assert again.verdicts[0].hint == "try another backend." and again.to_dict() == old.to_dict()


def test_a_failed_row_keeps_message_and_hint_apart_and_reads_old_rows():
    config = BenchConfig("openvino", "CPU")
    row = Row.from_failure(config, BackendError("backend 'openvino' | cannot compile op Foo.", hint="try another."))
    data = row.to_dict()
    assert (data["error"], data["hint"]) == ("backend 'openvino' | cannot compile op Foo.", "try another.")
    assert Row.from_dict(data).to_dict() == data and "Hint" not in repr(row)
    assert row.explanation == "backend 'openvino' | cannot compile op Foo. Hint: try another."
    old = {**data, "error": OLD_REASON}
    del old["hint"]  # deploykit 0.1
    read = Row.from_dict(old)
    assert (read.error, read.hint) == ("backend 'openvino' | cannot compile op Foo.", "try another backend.")
    crash = Row.from_failure(config, "killed by signal SIGSEGV (exit code -11)")
    assert (crash.error, crash.hint) == ("killed by signal SIGSEGV (exit code -11)", None)


def test_the_legacy_reader_leaves_text_without_a_hint_as_it_is():
    assert legacy_message_and_hint("no hint here.") == ("no hint here.", None)
    assert legacy_message_and_hint("a | b. Hint: c") == ("a | b.", "c")
