"""The fuzzer that keeps the CLI honest: generated careless and hostile arguments for every command that
reads or writes files, on tiny real assets, checked by ``invoke_checked`` (exit code 0/1/2, no traceback,
inputs unchanged, nothing left by a failed command, no temporary files).

``make test`` runs a few hundred examples, derandomized (the same ones every run, < 60 s);
``make fuzz`` runs thousands with fresh random seeds (``DEPLOYKIT_FUZZ_EXAMPLES``, ``DEPLOYKIT_FUZZ_RANDOM``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.assets.paths import require_module
from tests.fuzz.harness import assert_said, invoke_checked, run_cli, sha256
from tests.fuzz.strategies import (
    BACKENDS,
    DEVICES,
    INT_TEXTS,
    LIMITED_COMMANDS,
    METADATA,
    NUMBER_TEXTS,
    OPTIONS,
    RESOURCE_LIMITS,
    SHAPES,
    SMALL_NUMBER_TEXTS,
    SPECIAL_KINDS,
    SPECIAL_ROLES,
    flag,
    make_special,
    mostly,
    optional,
    path_choice,
    special_command,
)

SCALE = float(os.environ.get("DEPLOYKIT_FUZZ_SCALE", "1"))
RANDOM = os.environ.get("DEPLOYKIT_FUZZ_RANDOM", "") not in ("", "0")


def fuzz(examples: int) -> Any:
    """Settings: ``examples`` × DEPLOYKIT_FUZZ_SCALE, derandomized unless DEPLOYKIT_FUZZ_RANDOM is set."""
    return settings(
        max_examples=max(1, int(examples * SCALE)),
        derandomize=not RANDOM,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        print_blob=True,
    )


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def fresh(workdir: Path, tiny: dict[str, Path]) -> tuple[Path, dict[str, Path]]:
    """Empty the work directory, copy the assets into it (commands may legitimately overwrite a
    file they do not read) and link ``link-to-input`` to one of them."""
    for entry in workdir.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    (workdir / "in").mkdir()
    copies = {}
    for name, path in tiny.items():
        if name != "factory":
            copies[name] = workdir / "in" / path.name
            shutil.copy2(path, copies[name])
    (workdir / "link-to-input").symlink_to(copies["dynamic"])
    return workdir, copies


def check(work: Path, args: list[str], reads: list[str], outputs: list[str]) -> None:
    """Run and assert the promises; ``reads`` are the arguments the command reads as files."""
    # Relative outputs ("-", "") land in the working directory: make it the work directory.
    previous = os.getcwd()
    os.chdir(work)
    try:
        read_files = [(work / p) for p in reads if p and sha256(work / p) is not None]
        writes = [(work / p) for p in outputs if p and (work / p).parent in (work, work / "in")]
        invoke_checked(args, reads=read_files, writes=writes, watch=[work])
    finally:
        os.chdir(previous)


@fuzz(60)
@given(data=st.data())
def test_run(tiny, workdir, data):
    work, copies = fresh(workdir, tiny)
    paths = path_choice(copies, work, output=True)
    model = data.draw(mostly(copies["dynamic"], st.one_of(st.just(str(copies["classifier"])), paths)))
    save = data.draw(optional(paths.map(lambda p: ["-o", p])))
    inputs = data.draw(flag("-i", st.one_of(SHAPES.map(lambda s: f"x=random:{s}"), st.just(str(copies["npz"])), paths)))
    args = ["run", model, *inputs, *save]
    args += data.draw(flag("-b", BACKENDS))
    args += data.draw(flag("-d", DEVICES))
    args += data.draw(optional(st.lists(OPTIONS, max_size=2).map(lambda items: [a for o in items for a in ("-O", o)])))
    args += data.draw(flag("--seed", INT_TEXTS))
    args += data.draw(optional(st.just(["--allow-fallback"])))
    check(work, args, [model, *inputs[1:]], save[1:])


@fuzz(50)
@given(data=st.data())
def test_inspect(tiny, workdir, data):
    work, copies = fresh(workdir, tiny)
    target = data.draw(
        st.one_of(
            st.sampled_from([str(copies["classifier"]), str(copies["cfg"])]), path_choice(copies, work, output=False)
        )
    )
    args = ["inspect", target]
    args += data.draw(optional(st.just(["--json"])))
    args += data.draw(optional(st.just(["--full"])))
    args += data.draw(flag("--input-size", st.one_of(SHAPES, st.sampled_from(["32x32", "64", "33x32", "0x0"]))))
    check(work, args, [target], [])


@fuzz(60)
@given(data=st.data())
def test_predict(tiny, workdir, data):
    work, copies = fresh(workdir, tiny)
    paths = path_choice(copies, work, output=True)
    model = data.draw(mostly(copies["classifier"], paths))
    image = data.draw(mostly(copies["image"], st.one_of(st.just(str(copies["png"])), paths)))
    draw = data.draw(optional(paths.map(lambda p: ["--draw", p])))
    json_out = data.draw(optional(paths.map(lambda p: ["-o", f"{p}.json"])))  # the one-image JSON document
    json_out = json_out or data.draw(optional(st.just(["--json"])))  # or JSON lines on stdout
    labels = data.draw(flag("--labels", paths))
    args = ["predict", model, image, *draw, *json_out, *labels]
    args += data.draw(flag("--task", st.sampled_from(["auto", "detect", "classify", "segment"])))
    args += data.draw(flag("--conf", SMALL_NUMBER_TEXTS))
    args += data.draw(flag("--iou", SMALL_NUMBER_TEXTS))
    args += data.draw(flag("--top-k", INT_TEXTS))
    args += data.draw(flag("-b", BACKENDS))
    check(work, args, [model, image, *labels[1:]], [*draw[1:], *json_out[1:]])


@fuzz(40)
@given(data=st.data())
def test_model_metadata(tiny, workdir, data):
    """A model whose metadata_props hold anything: predict and inspect end with a result or a clear error."""
    import onnx

    work, copies = fresh(workdir, tiny)
    model = onnx.load(str(copies["classifier"]))
    stamped = data.draw(METADATA)
    kept = [p for p in model.metadata_props if p.key not in stamped]  # one value a key (the checker's rule)
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    for key, value in stamped.items():
        model.metadata_props.add(key=key, value=value)
    path = work / "in" / "stamped.onnx"
    onnx.save(model, str(path))
    command = data.draw(st.sampled_from(["predict", "inspect"]))
    args = [command, str(path), str(copies["image"])] if command == "predict" else [command, str(path)]
    args += data.draw(flag("--task", st.sampled_from(["auto", "detect", "classify"]))) if command == "predict" else []
    check(work, args, [str(path)], [])


@fuzz(40)
@given(data=st.data())
def test_convert_darknet(tiny, workdir, data):
    work, copies = fresh(workdir, tiny)
    paths = path_choice(copies, work, output=True)
    cfg = data.draw(mostly(copies["cfg"], paths))
    weights = data.draw(mostly(copies["weights"], paths))
    output = data.draw(mostly(work / "out.onnx", paths))
    report = data.draw(optional(paths.map(lambda p: ["--report", p])))
    labels = data.draw(flag("--labels", st.one_of(st.just(str(copies["labels"])), paths)))
    args = ["convert", "darknet", cfg, weights, "-o", output, *report, *labels]
    # Verification runs rarely: a passing conversion costs a second, a refused one a millisecond.
    args += ["--verify-backends", data.draw(st.sampled_from(["", "", "", "", "nosuch", "onnxruntime"]))]
    args += data.draw(flag("--input-size", st.one_of(SHAPES, st.sampled_from(["32x32", "64x32", "33x32"]))))
    args += data.draw(flag("--batch", st.one_of(INT_TEXTS, st.just("dynamic"))))
    args += data.draw(flag("--head", st.sampled_from(["raw", "decoded", "both"])))
    args += data.draw(flag("--opset", mostly(13, INT_TEXTS)))
    args += data.draw(flag("--opencv-threshold", SMALL_NUMBER_TEXTS))
    # Not 'darknet': it may compile Darknet's helper, which is its own test's business.
    args += data.draw(flag("--oracle", st.sampled_from(["auto", "none", "opencv", "nosuch", ""])))
    check(work, args, [cfg, weights, *labels[1:]], [output, *report[1:]])


@fuzz(12)
@given(data=st.data())
def test_convert_torch(tiny, workdir, data):
    require_module("torch", "pip install 'deploykit[torch]'", "PyTorch")
    work, copies = fresh(workdir, tiny)
    paths = path_choice(copies, work, output=True)
    factory = tiny["factory"]
    source = data.draw(
        mostly(
            f"{factory}:tiny_cnn", st.one_of(st.sampled_from([f"{factory}:nosuch", "os:getcwd", "nosuch.mod:x"]), paths)
        )
    )
    output = data.draw(mostly(work / "out.onnx", paths))
    report = data.draw(optional(paths.map(lambda p: ["--report", p])))
    weights = data.draw(flag("--weights", st.one_of(st.just(str(copies.get("state_dict", ""))), paths)))
    args = ["convert", "torch", source, "-o", output, *report, *weights]
    dtype_range = data.draw(
        st.sampled_from(
            ["", "", "", ":float16", ":int64:0..9", ":uint8:0..300", ":int64:0..99999999999999999999", ":x"]
        )
    )
    args += ["-i", "x:" + data.draw(mostly("1x3x8x8", SHAPES)) + dtype_range]
    args += data.draw(flag("--weights-key", st.sampled_from(["state_dict", "model", "a.b", ""])))
    args += data.draw(flag("--ignore-keys", st.sampled_from(["^loss", "([", ".*", ""])))
    args += data.draw(flag("--opset", st.sampled_from(["17", "6", "99", "-1", "x"])))
    args += data.draw(flag("--atol", NUMBER_TEXTS))
    args += data.draw(flag("--seed", INT_TEXTS))
    args += data.draw(flag("--exporter", st.sampled_from(["torchscript", "dynamo", "auto", "onnx"])))
    # Most examples are refused before exporting (what is fuzzed); a valid one exports in seconds.
    args += ["--verify-backends", ""]
    check(work, args, [source.rpartition(":")[0] or source, *weights[1:]], [output, *report[1:]])


@fuzz(40)
@given(data=st.data())
def test_report(tiny, workdir, data):
    work, copies = fresh(workdir, tiny)
    files = {
        "not-json": "{",
        "list": "[]",
        "foreign": '{"schema": "other"}',
        "future": '{"schema": "deploykit.bench", "schema_version": 99}',
        "partial": '{"schema": "deploykit.bench", "schema_version": 1, "rows": [{"latency": null}]}',
        "binary": "\x00\x01",
    }
    for name, text in files.items():
        (work / f"{name}.json").write_text(text)
    reports = st.one_of(
        st.sampled_from([str(work / f"{n}.json") for n in files]), path_choice(copies, work, output=False)
    )
    if data.draw(st.booleans()):
        output = data.draw(st.one_of(reports, path_choice(copies, work, output=True)))
        chosen = data.draw(st.lists(reports, min_size=0, max_size=3))
        check(work, ["report", "merge", *chosen, "-o", output], chosen, [output])
    else:
        report = data.draw(reports)
        baseline = data.draw(flag("--baseline", reports))
        args = ["report", report, *baseline, *data.draw(flag("--threshold", NUMBER_TEXTS))]
        check(work, args, [report, *baseline[1:]], [])


@fuzz(20)
@given(data=st.data())
def test_backends_and_help(tiny, workdir, data):
    work, _ = fresh(workdir, tiny)
    args = data.draw(
        st.sampled_from(
            [["backends"], ["backends", "--options"], ["backends", "--json"], ["--help"], ["run", "--help"],
             ["nosuch"], ["convert"], ["convert", "nosuch"], ["run"], ["predict"], ["--version"]]
        )
    )  # fmt: skip
    check(work, args, [], [])


# The real command line in a subprocess (``harness.run_cli``): special files, resource limits, a full disk.
# Each example starts a Python with the runtimes (seconds), so these draw few examples.


def _subprocess_work(workdir: Path, tiny: dict[str, Path]) -> tuple[Path, dict[str, str]]:
    work, copies = fresh(workdir, tiny)
    return work, {**{name: str(path) for name, path in copies.items()}, "work": str(work)}


@fuzz(4)
@given(data=st.data())
def test_special_files_in_every_role(tiny, workdir, data):
    """A FIFO, a socket, /dev/zero, a folder or a symlink loop as a model, input, report, labels, cfg or
    weights: refused by what it is, naming the path; never read until it hangs or runs out of memory."""
    work, copies = fresh(workdir, tiny)
    role, kind = data.draw(SPECIAL_ROLES), data.draw(SPECIAL_KINDS)
    special = make_special(kind, role, work)
    valid = role == "report" and kind == "directory"  # a folder is what --report asks for
    outputs = [special / "report.json"] if valid else [work / "out.onnx"]
    done = run_cli(special_command(role, special, copies, work), cwd=work)
    assert_said(done, [special.name], outputs=outputs)
    assert (done.returncode == 0) == valid, done.stderr


@fuzz(2)
@given(data=st.data())
def test_resource_limits(tiny, workdir, data):
    """``ulimit -n 64``, ``-v`` 1.5 GiB, ``-f`` 2 KiB on a command that writes: it succeeds with all of its
    outputs, or fails with a message naming the limit or the output, and leaves nothing half-written."""
    work, names = _subprocess_work(workdir, tiny)
    limit, words = data.draw(RESOURCE_LIMITS)
    template = data.draw(LIMITED_COMMANDS)
    command = [part.format(**names) for part in template]
    outputs = [Path(part.format(**names)) for part in template if part.startswith("{work}")]
    if command[0] == "bench":
        outputs = [outputs[0] / "report.json"]
    done = run_cli(command, cwd=work, prefix=["prlimit", limit])
    assert_said(done, [*words, *(p.name for p in outputs)], outputs=outputs)


def _full_tmpfs_problem() -> str | None:
    """None where this user can mount a tmpfs in a namespace of its own (``unshare -rm``), else why not."""
    if shutil.which("unshare") is None:
        return "no unshare(1) on this machine"
    import subprocess

    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=16k none /mnt"],
                           capture_output=True, text=True, timeout=30)  # fmt: skip
    return None if probe.returncode == 0 else f"unshare -rm cannot mount a tmpfs here: {probe.stderr.strip()}"


@fuzz(2)
@given(data=st.data())
def test_a_full_tmpfs(tiny, workdir, data):
    """A 64 KiB tmpfs filled to the last block (in a mount namespace of the test's own): every command that
    writes there fails naming its output and the full disk, and leaves nothing there."""
    problem = _full_tmpfs_problem()
    if problem is not None:
        pytest.skip(problem)
    work, names = _subprocess_work(workdir, tiny)
    disk = work / "disk"
    disk.mkdir()
    names["work"] = str(disk)
    template = data.draw(LIMITED_COMMANDS)
    if template[0] == "compare":  # compare writes nothing: a bench report instead
        template = ("bench", "{dynamic}", "-b", "ort", "--iterations", "2", "--report", "{work}/report")
    command = [part.format(**names) for part in template]
    outputs = [Path(part.format(**names)) for part in template if part.startswith("{work}")]
    if command[0] == "bench":
        outputs = [outputs[0] / "report.json"]
    fill = f'mount -t tmpfs -o size=64k none {disk} && (cat /dev/zero > {disk}/fill 2>/dev/null; true) && exec "$@"'
    done = run_cli(command, cwd=work, prefix=["unshare", "-rm", "sh", "-c", fill, "sh"])
    assert done.returncode == 1, done.stderr
    assert_said(done, ["the disk is full", "No space left"], outputs=[])
    assert any(p.name in done.stderr or str(p.parent) in done.stderr for p in outputs), done.stderr
