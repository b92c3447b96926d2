"""deploykit.workers: errors cross a real worker process as data and come back as the same error."""

from __future__ import annotations

import inspect
import json

import numpy as np
import pytest

from deploykit import errors
from deploykit.errors import ConversionError, DeployKitError, InputError, ModelNotFoundError
from deploykit.verify.isolated import run_candidate
from deploykit.workers import describe_exit, rebuild_error

TREE = [
    cls
    for _, cls in inspect.getmembers(errors, inspect.isclass)
    if issubclass(cls, DeployKitError) and cls.__module__ == errors.__name__
]


@pytest.mark.parametrize("kind", TREE, ids=lambda cls: cls.__name__)
def test_every_error_of_the_tree_survives_json_as_its_own_class(kind):
    error = kind("input 'images' | got shape (1, 3) | (2, 3), expected (1, 4).", hint="resize first.")
    again = DeployKitError.from_dict(json.loads(json.dumps(error.to_dict())))
    assert type(again) is kind
    assert str(again) == str(error)
    assert (again.subject, again.problem, again.hint) == ("input 'images'", "got shape (1, 3) | (2, 3), expected (1, 4).",
                                                          "resize first.")  # fmt: skip


def test_a_message_without_a_subject_and_an_unknown_class():
    data = InputError("no subject here.").to_dict()
    assert (data["subject"], data["problem"], data["hint"]) == ("", "no subject here.", None)
    unknown = {**data, "type": "SomeoneElsesError"}
    assert type(ConversionError.from_dict(unknown)) is ConversionError
    assert type(rebuild_error({**data, "type": "ValueError"})) is DeployKitError
    assert str(DeployKitError.from_dict(unknown)) == "no subject here."


def test_a_workers_error_is_raised_again_in_the_parent_as_the_same_error(tmp_path):
    missing = tmp_path / "missing.onnx"
    run = run_candidate(missing, "onnxruntime", None, [])  # a real worker process, which cannot open the model
    assert run.error_data is not None and run.error_data["type"] == "ModelNotFoundError"
    with pytest.raises(ModelNotFoundError) as raised:
        run.raise_error(missing)
    assert (raised.value.message, raised.value.hint) == (run.error, run.hint)  # message and hint apart, as data
    assert run.hint and str(raised.value) == f"{run.error} Hint: {run.hint}"
    assert raised.value.subject and str(missing.name) in str(raised.value)


def test_exit_codes_and_signals_in_words():
    assert describe_exit(-11) == "killed by signal SIGSEGV (exit code -11)"
    assert describe_exit(3) == "exited with code 3"


def test_raw_arrays_come_back_as_written_and_refuse_what_is_no_tensor(tmp_path):
    """A resident worker's bare-bytes arrays: every fixed-size dtype, 0-d and empty arrays, text, odd names."""
    from deploykit.workers import read_raw_arrays, write_raw_arrays

    arrays = {
        "f": np.arange(6, dtype=np.float32).reshape(2, 3),
        "strided": np.arange(8, dtype=np.float16)[::2],
        "b": np.array([True, False]),
        "empty": np.zeros((0, 4), np.int64),
        "scalar": np.array(3.5),
        "text": np.array(["ab", "c"], dtype=object),
        "x/y:0": np.ones((1, 2), np.uint8),
    }
    path = tmp_path / "a.bin"
    back = read_raw_arrays(path, write_raw_arrays(path, arrays))
    assert list(back) == list(arrays)
    for name, array in arrays.items():
        assert back[name].shape == array.shape, name
        assert back[name].tolist() == array.tolist(), name
        assert array.dtype == object or back[name].dtype == array.dtype, name
    with pytest.raises(TypeError, match="'mixed' is not a tensor of fixed-size items"):
        write_raw_arrays(path, {"mixed": np.array([1, "a"], dtype=object)})
