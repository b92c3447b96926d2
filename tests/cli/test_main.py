"""The root of the ``deploykit`` command: the exit code an error gives (2 for the caller's mistake, 1 for
a failure), and shell completion (typer's), exercised in a real bash."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from deploykit.errors import ModelNotFoundError, UsageError
from deploykit.sessions import load

BIN = Path(sys.executable).parent
needs_bash = pytest.mark.skipif(shutil.which("bash") is None, reason="no bash on this machine")


def _bash(script: str, home: Path) -> subprocess.CompletedProcess[str]:
    """``script`` in a bash whose PATH starts with this environment's ``deploykit`` and whose HOME is ``home``."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "HOME": str(home)}
    env.pop("_DEPLOYKIT_COMPLETE", None)
    # typer finds the shell from the parent process: bash would exec a lone command in its own place, and
    # the parent would be whatever ran the tests (make's sh in CI), so bash stays the parent until the end
    return subprocess.run(["bash", "-c", f"{script}\nexit $?"], capture_output=True, text=True, env=env, timeout=300)


def _complete(words: str, home: Path, setup: str = "source <(deploykit --show-completion)") -> list[str]:
    """What bash offers for TAB after ``words`` (the last word is the one being completed)."""
    script = (
        f"{setup}\n"
        f"COMP_WORDS=({words}); COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))\n"
        "_deploykit_completion deploykit\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = _bash(script, home)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@needs_bash
def test_show_completion_prints_the_bash_script_for_this_command(tmp_path):
    done = _bash("deploykit --show-completion", tmp_path)
    assert done.returncode == 0, done.stderr
    assert "_DEPLOYKIT_COMPLETE=complete_bash" in done.stdout
    assert "complete -o default -F _deploykit_completion deploykit" in done.stdout


@needs_bash
def test_bash_completes_commands_subcommands_and_options(tmp_path):
    assert _complete("deploykit ver", tmp_path) == ["version"]
    assert set(_complete("deploykit models ''", tmp_path)) == {"list", "build"}
    assert set(_complete("deploykit bench m.onnx --ora", tmp_path)) == {"--oracle", "--oracle-memory"}
    assert set(_complete("deploykit quantize m.onnx --quant", tmp_path)) == {"--quantizer", "--quantize-head"}
    assert _complete("deploykit quantize m.onnx --js", tmp_path) == ["--json"]  # 0.1's hidden forms are not offered


@needs_bash
def test_install_completion_writes_only_into_home_and_works_from_there(tmp_path):
    done = _bash("deploykit --install-completion", tmp_path)
    assert done.returncode == 0, done.stderr
    assert "bash completion installed in" in done.stdout
    script = tmp_path / ".bash_completions" / "deploykit.sh"
    assert script.is_file() and "source" in (tmp_path / ".bashrc").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".bash_completions", ".bashrc"]
    assert _complete("deploykit platforms ''", tmp_path, setup=f"source {script}") == ["list", "add", "remove"]


def _deploykit(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """The installed ``deploykit`` command, as a user runs it (its launcher, its signal policy, its exit)."""
    return subprocess.run([str(BIN / "deploykit"), *map(str, args)], capture_output=True, text=True, timeout=120)


def test_an_option_value_the_backend_cannot_use_exits_2(tiny):
    with pytest.raises(UsageError):  # the class that decides the code, as the library raises it
        load(tiny["dynamic"], "onnxruntime", threads="abc")
    done = _deploykit("run", tiny["dynamic"], "-b", "onnxruntime", "-O", "threads=abc")
    assert done.returncode == 2, done.stderr
    said = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(said) == 1 and said[0].startswith("error: ") and "option threads='abc' is not an integer" in said[0]
    assert "Traceback" not in done.stderr + done.stdout


def test_an_output_onto_the_input_exits_2(tiny, tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(tiny["dynamic"].read_bytes())
    done = _deploykit("run", model, "-o", model)
    assert done.returncode == 2 and "is the file this command reads" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and model.read_bytes() == tiny["dynamic"].read_bytes()


def test_a_sound_command_that_fails_still_exits_1(tmp_path):
    missing = tmp_path / "missing.onnx"
    with pytest.raises(ModelNotFoundError) as raised:  # not a UsageError: the command line was right
        load(missing)
    assert not isinstance(raised.value, UsageError)
    done = _deploykit("run", missing)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith(f"error: model '{missing}'") and "Traceback" not in done.stderr, done.stderr
