"""MNN's converter as deploykit runs it: through its compiled binding, never ``MNN.tools`` (whose import
runs ``pip install -U aliyun-log-python-sdk`` and sends telemetry). Converting and running a model
changes nothing outside deploykit's cache, starts no program but the converter's child, and attempts
no connection: every Python process involved is watched by an audit hook (``sys.addaudithook``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import onnx
import pytest

from deploykit.backends.mnn_convert import log_reason, unsupported_ops
from deploykit.backends.registry import get_backend
from tests.assets.paths import REPO, missing_asset
from tests.assets.samples import tiny_classifier

# Installed in every Python process of the run (PYTHONPATH): appends what it sees to AUDIT_DIR/<pid>.jsonl
AUDIT_HOOK = textwrap.dedent("""
    import atexit, json, os, sys

    _WATCHED = ("socket.", "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
                "os.fork", "urllib.Request", "http.client.connect")
    _FILE = os.path.join(os.environ["AUDIT_DIR"], f"{os.getpid()}.jsonl")

    def _write(record):
        with open(_FILE, "a") as handle:
            handle.write(json.dumps(record, default=repr) + "\\n")

    def _hook(event, args):
        if event.startswith(_WATCHED):
            _write({"event": event, "args": [repr(a)[:300] for a in args]})
        elif event == "import" and str(args[0]).split(".")[0] in ("aliyun", "pip", "urllib", "http"):
            _write({"event": "import", "args": [str(args[0])]})

    sys.addaudithook(_hook)
    atexit.register(lambda: _write({"event": "exit", "modules": sorted(m for m in sys.modules if m.startswith("MNN"))}))
""")


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and directory under ``root`` with its size and modification time."""
    found = {}
    for path in sorted(root.rglob("*")):
        try:
            status = path.lstat()
        except FileNotFoundError:
            continue
        found[str(path.relative_to(root))] = (status.st_size if path.is_file() else 0, status.st_mtime_ns)
    return found


def _site_packages() -> list[Path]:
    return sorted({Path(sysconfig.get_paths()[key]) for key in ("purelib", "platlib")})


@pytest.mark.slow
def test_converting_changes_nothing_outside_the_cache_and_attempts_no_connection(tmp_path):
    if get_backend("mnn").unavailable_reason():
        missing_asset("the mnn backend's runtime", str(get_backend("mnn").unavailable_reason()))
    model = tmp_path / "classifier.onnx"
    onnx.save(tiny_classifier(), model)
    home, work, cache, audit, hooks, tools = (tmp_path / n for n in ("home", "work", "cache", "audit", "hooks", "bin"))
    for folder in (home, work, audit, hooks, tools):
        folder.mkdir()
    (hooks / "sitecustomize.py").write_text(AUDIT_HOOK)
    # a pip and a mnnconvert first on PATH that leave a mark if anything starts them
    for name in ("pip", "pip3", "mnnconvert"):
        (tools / name).write_text(f"#!/bin/sh\ntouch {tmp_path / ('ran-' + name)}\n")
        (tools / name).chmod(0o755)
    script = textwrap.dedent(f"""
        import numpy as np
        from deploykit.backends.mnn_convert import convert
        from deploykit.model import Model
        import deploykit

        entry = convert(Model.open({str(model)!r}))
        with deploykit.load({str(model)!r}, "mnn") as session:
            session.run({{"images": np.ones((1, 3, 32, 32), np.float32)}})
        print(entry.directory)
    """)
    environment = {
        **{k: v for k, v in os.environ.items() if k not in ("XDG_CACHE_HOME", "PYTHONSTARTUP")},
        "PYTHONPATH": f"{hooks}{os.pathsep}{REPO}",
        "HOME": str(home),
        "DEPLOYKIT_CACHE_DIR": str(cache),
        "AUDIT_DIR": str(audit),
        "PATH": f"{tools}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    before = {str(p): _tree(p) for p in _site_packages()}
    done = subprocess.run([sys.executable, "-c", script], cwd=work, env=environment, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()[-3000:]

    entry = Path(done.stdout.decode().strip())
    assert entry.parent == cache / "mnn" and (entry / "model.mnn").is_file()
    assert {str(p): _tree(p) for p in _site_packages()} == before, "the environment's packages are untouched"
    assert _tree(home) == {} and _tree(work) == {}, "nothing is written to HOME or the working directory"
    assert {p.name for p in cache.iterdir()} == {"mnn"}
    assert not list(tmp_path.glob("ran-*")), "no pip or mnnconvert program was started"

    records = {path.stem: [json.loads(line) for line in path.read_text().splitlines()] for path in audit.iterdir()}
    assert len(records) == 2, f"deploykit and the converter's child, nothing else: {sorted(records)}"
    events = [record for found in records.values() for record in found]
    assert not [r for r in events if r["event"].startswith(("socket.", "urllib", "http"))], "no connection"
    assert not [r for r in events if r["event"] == "import"], "no pip, aliyun, urllib or http module is imported"
    started = [r for r in events if r["event"] != "exit" and r["event"] != "import"]
    assert len(started) == 1 and started[0]["event"] == "subprocess.Popen", started
    assert repr(sys.executable) in started[0]["args"][0] and "_tools" in started[0]["args"][1]
    assert "MNN.tools" not in started[0]["args"][1]
    exits = [r["modules"] for r in events if r["event"] == "exit"]
    assert len(exits) == 2 and not [m for modules in exits for m in modules if m.startswith("MNN.tools")]


def test_the_ops_the_converter_names_are_read_from_its_log():
    log = "Start to Optimize the MNN Net...\n[02:45:57] :220: These Op Not Support: ONNX::Hardmax ONNX::STFT \n"
    assert unsupported_ops(log) == ["Hardmax", "STFT"]
    assert unsupported_ops("Converted Success!\n") == []


def test_a_failure_reason_is_the_logs_last_complaint_without_its_stamp():
    log = (
        "The device supports: i8sdot:0, fp16:0\nStart to Convert Other Model Format To MNN Model...\n"
        "[02:56:04] :27: Not support 1 input for Sum op\nStart to Optimize the MNN Net...\n"
    )
    assert log_reason(log) == "Not support 1 input for Sum op"
    assert log_reason("") == "no output"
