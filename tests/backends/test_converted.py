"""The converted-model cache: one build per key, entries checked by their hashes, all or nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from deploykit.backends.converted import ENTRY_NAME, converted, entry_digest
from deploykit.errors import UnsupportedModelError
from tests.assets.paths import REPO

KEY = {"model_sha256": "ab" * 32, "converter": "tool 1.0", "options": {"fp16": False}}


def _builder(calls: list[Path], text: str = "converted"):
    def build(scratch: Path) -> dict[str, str]:
        calls.append(scratch)
        (scratch / "model.bin").write_text(text)
        (scratch / "convert.log").write_text("ok")
        return {"note": text}

    return build


def _entries(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


def test_an_entry_is_built_once_and_found_after(tmp_path):
    calls: list[Path] = []
    first = converted("tool", KEY, _builder(calls), root=tmp_path)
    second = converted("tool", KEY, _builder(calls), root=tmp_path)
    assert len(calls) == 1 and first.built and not second.built
    assert second.directory == tmp_path / entry_digest(KEY) and second.record == {"note": "converted"}
    assert second.path("model.bin").read_text() == "converted"
    recorded = json.loads((second.directory / ENTRY_NAME).read_text())
    assert set(recorded["files"]) == {"model.bin", "convert.log"} and recorded["key"] == KEY
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "no scratch directory is left"


def test_another_key_is_another_entry(tmp_path):
    calls: list[Path] = []
    converted("tool", KEY, _builder(calls), root=tmp_path)
    converted("tool", {**KEY, "converter": "tool 2.0"}, _builder(calls), root=tmp_path)
    assert len(calls) == 2 and len(_entries(tmp_path)) == 2


@pytest.mark.parametrize("damage", ["edit-file", "remove-file", "garbage-entry", "other-key"])
def test_a_damaged_entry_is_rebuilt_not_trusted(tmp_path, damage):
    calls: list[Path] = []
    entry = converted("tool", KEY, _builder(calls), root=tmp_path).directory
    if damage == "edit-file":
        (entry / "model.bin").write_text("tampered")
    elif damage == "remove-file":
        (entry / "model.bin").unlink()
    elif damage == "garbage-entry":
        (entry / ENTRY_NAME).write_text("{not json")
    else:
        recorded = json.loads((entry / ENTRY_NAME).read_text())
        (entry / ENTRY_NAME).write_text(json.dumps({**recorded, "key": {**KEY, "converter": "other"}}))
    rebuilt = converted("tool", KEY, _builder(calls, "again"), root=tmp_path)
    assert len(calls) == 2 and rebuilt.built and rebuilt.path("model.bin").read_text() == "again"
    assert _entries(tmp_path) == [entry]


def test_an_entry_the_backend_cannot_use_is_rebuilt(tmp_path):
    """An intact entry whose record the backend cannot read back (``usable`` says no) is rebuilt like a
    damaged one; the rebuilt entry is read back through the same check."""
    calls: list[Path] = []
    entry = converted("tool", KEY, _builder(calls, "old"), root=tmp_path).directory
    checked: list[dict] = []

    def usable(found) -> bool:
        checked.append(found.record)
        return found.record.get("note") != "old"

    rebuilt = converted("tool", KEY, _builder(calls, "new"), root=tmp_path, usable=usable)
    assert len(calls) == 2 and rebuilt.built and rebuilt.record == {"note": "new"}
    assert checked[0] == {"note": "old"} and checked[-1] == {"note": "new"}
    assert _entries(tmp_path) == [entry]
    found = converted("tool", KEY, _builder(calls, "again"), root=tmp_path, usable=usable)
    assert len(calls) == 2 and not found.built


def test_a_failed_build_leaves_nothing(tmp_path):
    def build(scratch: Path) -> None:
        (scratch / "half.bin").write_text("half")
        raise UnsupportedModelError("model 'm.onnx' | the converter failed.", hint="try another backend.")

    with pytest.raises(UnsupportedModelError, match="the converter failed"):
        converted("tool", KEY, build, root=tmp_path)
    assert _entries(tmp_path) == [] and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_an_unwritable_cache_is_an_error_naming_the_variable(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(UnsupportedModelError, match=r"tool cache .* cannot be created") as caught:
        converted("tool", KEY, _builder([]), root=blocker / "tool")
    assert "DEPLOYKIT_CACHE_DIR" in (caught.value.hint or "")


def test_the_default_root_is_under_deploykits_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("DEPLOYKIT_CACHE_DIR", str(tmp_path / "cache"))
    found = converted("tool", KEY, _builder([]))
    assert found.directory.parent == tmp_path / "cache" / "tool"


def test_two_processes_building_at_once_do_one_build(tmp_path):
    """Both processes start together on an empty cache; the builder appends to a file and waits."""
    counter = tmp_path / "builds.txt"
    script = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from deploykit.backends.converted import converted

        def build(scratch):
            with open({str(counter)!r}, "a") as handle:
                handle.write("build\\n")
            time.sleep(1)
            (scratch / "model.bin").write_text("converted")

        entry = converted("tool", {KEY!r}, build, root=Path({str(tmp_path / "cache")!r}))
        print(entry.path("model.bin").read_text())
    """)
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", script], env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for _ in range(2)
    ]
    results = [worker.communicate(timeout=120) for worker in workers]
    assert [w.returncode for w in workers] == [0, 0], [r[1].decode()[-2000:] for r in results]
    assert [r[0].decode().strip() for r in results] == ["converted", "converted"]
    assert counter.read_text().count("build") == 1, "the second process waited and used the first one's entry"
