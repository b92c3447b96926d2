"""The background load: busy processes started and stopped by deploykit, refused when it would
leave the model no core."""

from __future__ import annotations

import os

import pytest

from deploykit.bench.load import KIND, BackgroundLoad, background_load, check_background_load, usable_cores
from deploykit.errors import UsageError


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] not in ("Z", "X")
    except FileNotFoundError:
        return False


def test_busy_processes_run_inside_the_block_and_are_gone_after():
    if usable_cores() < 2:
        pytest.skip("a 1-core machine can only be measured idle")
    load = BackgroundLoad(1)
    with background_load(load) as pids:
        assert len(pids) == 1 and all(_alive(pid) for pid in pids) and os.getpid() not in pids
    assert not any(_alive(pid) for pid in pids)
    assert load.describe() == f"1 busy thread ({KIND})" and BackgroundLoad.from_dict(load.to_dict()) == load
    assert BackgroundLoad().describe() == "with no added load" and BackgroundLoad.from_dict(None).idle


def test_as_many_busy_threads_as_cores_is_refused_with_the_count():
    cores = usable_cores()
    with pytest.raises(UsageError) as caught:
        BackgroundLoad(cores)
    assert f"--background-load {cores} | this machine has {cores} usable core" in str(caught.value)
    with pytest.raises(UsageError, match="expected 0 or more"):
        check_background_load(-1)
    with pytest.raises(UsageError, match="use at most 3 here"):
        check_background_load(4, cores=4)


def test_the_cli_refuses_the_load_before_any_work(catalog_paths, tmp_path):
    from typer.testing import CliRunner

    from cli.main import app

    cores = usable_cores()
    model = str(catalog_paths["mlp_dynamic_batch"])
    for command in (
        ["bench", model, "-b", "onnxruntime"],
        ["optimize", model, "--no-quantize", "-o", str(tmp_path / "out")],
    ):
        result = CliRunner().invoke(app, [*command, "--background-load", str(cores)])
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        assert f"this machine has {cores} usable core" in result.output
    assert not (tmp_path / "out").exists()


def test_bench_records_the_load_it_measured_under(catalog_paths):
    import deploykit

    if usable_cores() < 2:
        pytest.skip("a 1-core machine can only be measured idle")
    report = deploykit.benchmark(
        catalog_paths["mlp_dynamic_batch"],
        deploykit.BenchPlan(backends=("onnxruntime",), warmup=1, iterations=9, background_load=1),
    )
    assert report.settings.background_load == {"threads": 1, "kind": KIND}
    assert report.rows[0].ok


def test_a_killed_parent_leaves_no_spinning_orphan(tmp_path):
    """SIGKILL gives deploykit no chance to stop its load: the busy processes notice and end."""
    import signal
    import subprocess
    import sys
    import time

    if usable_cores() < 2:
        pytest.skip("a 1-core machine can only be measured idle")
    pids = tmp_path / "pids"
    script = (
        "import sys\n"
        "from deploykit.bench.load import BackgroundLoad, background_load\n"
        "with background_load(BackgroundLoad(1)) as pids:\n"
        f"    open({str(pids)!r}, 'w').write(' '.join(map(str, pids)))\n"
        "    import time; time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 120
    while not (pids.exists() and pids.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    busy = [int(p) for p in pids.read_text().split()]
    assert busy and all(_alive(pid) for pid in busy)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 60  # the loop checks its parent every few milliseconds of CPU
    while any(_alive(pid) for pid in busy) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in busy)
