"""Model files and streams that broke the CLI with a traceback (issue 21): metadata and node names that are
not UTF-8, an element type code the ONNX spec does not define, a string input with nothing to feed it,
and a standard output that is closed."""

from __future__ import annotations

import subprocess
import sys

import onnx
from onnx import TensorProto, helper

from tests.fuzz.harness import invoke_checked


def _relu(path, elem_type=TensorProto.FLOAT):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="NODEX")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", elem_type, [1, 4])])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    model.metadata_props.add(key="note", value="VALUEX")
    return model


def test_metadata_and_node_names_that_are_not_utf8_are_shown_not_crashed_on(tmp_path):
    path = tmp_path / "latin.onnx"
    data = _relu(path).SerializeToString()
    path.write_bytes(data.replace(b"VALUEX", b"caf\xe9 \xff").replace(b"NODEX", b"n\xfe\xfdde"))
    result = invoke_checked(["inspect", path, "--full"], reads=[path])
    assert result.exit_code == 0, result.output
    assert "note = caf\ufffd \ufffd" in result.output  # the bytes that are not UTF-8 shown as U+FFFD
    assert invoke_checked(["run", path], reads=[path]).exit_code == 0


def test_an_element_type_the_spec_does_not_define_is_named(tmp_path):
    path = tmp_path / "t99.onnx"
    model = _relu(path)
    model.graph.output[0].type.tensor_type.elem_type = 99
    path.write_bytes(model.SerializeToString())
    for command in (["inspect", path], ["run", path]):
        result = invoke_checked(command, reads=[path])
        assert result.exit_code == 1
        assert "graph value 'y' | element type code 99 is not an ONNX tensor type" in " ".join(result.stderr.split())


def test_a_string_input_says_what_to_feed(tmp_path):
    path = tmp_path / "strings.onnx"
    graph = helper.make_graph([helper.make_node("Identity", ["s"], ["t"])], "g",
                              [helper.make_tensor_value_info("s", TensorProto.STRING, [1])],
                              [helper.make_tensor_value_info("t", TensorProto.STRING, [1])])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    result = invoke_checked(["run", path], reads=[path])
    assert result.exit_code == 1
    assert "input 's' | is a string tensor (ONNX STRING); deploykit makes random data only for numbers" in (
        " ".join(result.stderr.split())
    )


def test_a_closed_stdout_still_writes_the_outputs(tiny, tmp_path):
    saved = tmp_path / "outputs.npz"
    command = f"exec '{sys.executable}' -c 'from deploykit.cli.main import main; main()' run '{tiny['dynamic']}' " \
              f"--save '{saved}' >&-"  # fmt: skip
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "warning: standard output is closed; what deploykit prints there is dropped." in done.stderr
    assert "Traceback" not in done.stderr and saved.is_file()


def test_a_graph_that_lists_an_output_twice_is_refused(tmp_path):
    """Issue 21 sweep: the checker lets it pass, the oracle then died in a zip() and the verdict said unverified."""
    path = tmp_path / "twice.onnx"
    model = _relu(path)
    model.graph.output.append(model.graph.output[0])
    path.write_bytes(model.SerializeToString())
    result = invoke_checked(["compare", path, "-b", "onnxruntime"], reads=[path])
    assert result.exit_code == 1
    assert "graph | lists the output 'y' more than once" in " ".join(result.stderr.split())


def _zero_sized(path):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [0, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [0, 4])])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_an_axis_declared_zero_is_a_real_size_not_an_unknown_one(tmp_path):
    """[0, 4] is an empty tensor, not '(1, 4) will do': random data for it is refused up front, a (1, 4)
    feed is the wrong shape (with ONNX Runtime's own detail lines where it is the one refusing), and
    empty feeds give a verdict that says the reference holds nothing."""
    import numpy as np

    path = _zero_sized(tmp_path / "zero.onnx")
    refused = invoke_checked(["bench", path, "-b", "ort", "--iterations", "2"], reads=[path])
    assert refused.exit_code == 2
    assert "input 'x' | axis 0 of (0, 4) is declared with size 0 in 'zero.onnx': a zero-size input holds no values" in (
        refused.stderr
    )
    np.save(tmp_path / "one.npy", np.ones((1, 4), np.float32))
    wrong = invoke_checked(["run", path, "-i", f"x={tmp_path / 'one.npy'}"], reads=[path])
    assert wrong.exit_code == 1 and "input 'x' | got shape (1, 4), expected (0, 4)" in wrong.stderr
    np.savez(tmp_path / "empty.npz", x=np.ones((0, 4), np.float32))
    compared = invoke_checked(["compare", path, "--inputs", tmp_path / "empty.npz", "-b", "ort"], reads=[path])
    assert "degenerate" in compared.stdout and "it is empty (shape (0, 4))" in compared.output, compared.output


def test_onnx_runtime_s_detail_lines_are_kept():
    from deploykit.backends.onnxruntime import ort_reason

    text = (
        "[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Got invalid dimensions for input: x for the following indices\n"
        " index: 0 Got: 1 Expected: 0\n Please fix either the inputs/outputs or the model."
    )
    assert ort_reason(RuntimeError(text)) == (
        "Got invalid dimensions for input: x for the following indices; index: 0 Got: 1 Expected: 0"
    )


def _strings(path, values):
    constant = helper.make_tensor("c", TensorProto.STRING, [len(values)], values)
    graph = helper.make_graph([helper.make_node("Constant", [], ["s"], value=constant),
                               helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("s", TensorProto.STRING, [len(values)]),
                               helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_a_string_output_that_is_not_utf8_is_the_model_s_fault_by_name(tmp_path):
    path = _strings(tmp_path / "latin.onnx", [b"ok", b"\xff\xfebad"])
    result = invoke_checked(["run", path, "-b", "ort"], reads=[path])
    assert result.exit_code == 1
    assert "error: output 's' of 'latin.onnx' | holds bytes that are not UTF-8 text" in result.stderr
    compared = invoke_checked(["compare", path, "-b", "ort"], reads=[path])
    assert "model 'latin.onnx' | 'c' holds bytes that are not UTF-8 text" in compared.output  # the oracle's load


def test_string_outputs_are_compared_exactly(tmp_path):
    import numpy as np

    path = _strings(tmp_path / "text.onnx", [b"ok", "caf\u00e9".encode()])
    compared = invoke_checked(["compare", path, "-b", "ort"], reads=[path])
    assert compared.exit_code == 0, compared.output
    assert "pass" in compared.stdout, compared.output
    from deploykit.verify.metrics import compare_array, thresholds_for

    text = np.array(["ok", "café"], dtype=object)  # ONNX Runtime's str against OpenVINO's bytes: the same text
    same = compare_array("s", text, np.array([b"ok", "café".encode()]), thresholds_for("f32"), reduced=False)
    differ = compare_array("s", text, np.array(["ok", "cafe"]), thresholds_for("f32"), reduced=False)
    assert same.passed and not differ.passed
    assert differ.problem == "element [1] is 'café', the reference's 'cafe' (text is compared exactly)"


def _checked(path, nodes):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_the_checker_s_unnamed_node_is_named_by_op_type_and_index(tmp_path):
    """onnx.checker says "Name:  OpType: Add" of a node without a name: deploykit says which node it is."""
    wrong_arity = _checked(tmp_path / "a.onnx", [helper.make_node("Add", ["x", "x"], ["h"]),
                                                 helper.make_node("Add", ["h"], ["y"])])  # fmt: skip
    result = invoke_checked(["inspect", wrong_arity], reads=[wrong_arity])
    assert result.exit_code == 1
    assert "fails the ONNX checker: Node with schema(::Add:14) has input size 1 not in range [min=2, max=2]; " \
        "at node 1 (an unnamed Add)." in result.stderr  # fmt: skip
    unsorted = _checked(tmp_path / "b.onnx", [helper.make_node("Relu", ["q"], ["y"]),
                                              helper.make_node("Relu", ["x"], ["q"])])  # fmt: skip
    result = invoke_checked(["inspect", unsorted], reads=[unsorted])
    assert "however input 'q' of node 0 (an unnamed Relu) is not output of any previous nodes." in result.stderr


def test_a_tensor_name_longer_than_a_zip_member_name_travels_to_the_workers(tmp_path):
    """Sweep 21b: an input named 'n' * 100000 made np.savez raise struct.error when compare handed the feeds
    to its workers (a zip member's name has 16 bits); such names are stored by index with their names beside."""
    import numpy as np

    from deploykit.workers import read_arrays, write_arrays

    name = "n" * 100_000
    graph = helper.make_graph([helper.make_node("Relu", [name], ["y"])], "g",
                              [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "long.onnx")
    compared = invoke_checked(["compare", tmp_path / "long.onnx", "-b", "ort"], reads=[tmp_path / "long.onnx"])
    assert compared.exit_code == 0 and "pass" in compared.stdout, compared.output
    write_arrays(tmp_path / "a.npz", {name: np.ones(2), "short": np.zeros(1)})
    assert sorted(read_arrays(tmp_path / "a.npz")) == sorted([name, "short"])


def test_the_reference_returns_an_optional_tensor_as_the_others_do(tmp_path):
    """Sweep 21b: onnx's evaluator wraps an optional tensor in a one-element list; 'run -b ref' refused it
    and compare had no oracle. The reference hands back the array (or None), so it judges the others."""
    optional = helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2, 3]))
    graph = helper.make_graph([helper.make_node("Optional", ["x"], ["o"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_value_info("o", optional)])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "optional.onnx")
    assert invoke_checked(["run", "-b", "ref", tmp_path / "optional.onnx"]).exit_code == 0
    compared = invoke_checked(["compare", tmp_path / "optional.onnx", "-b", "ort"])
    assert compared.exit_code == 0 and "pass" in compared.stdout and "(independent)" in compared.stdout, compared.output


def test_no_random_data_is_made_for_any_float8(tmp_path):
    """Sweep 21b: float8_e5m2 (which ml_dtypes calls kind 'f') got random data and ONNX Runtime's "Numpy_type
    262 can't be converted"; every float8 input is refused the same way, by name."""
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT8E5M2, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT8E5M2, [1, 4])])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    onnx.save(model, tmp_path / "f8.onnx")
    result = invoke_checked(["run", tmp_path / "f8.onnx"])
    assert result.exit_code == 1
    assert "input 'x' | is a float8_e5m2 tensor; deploykit makes random data only for numbers" in result.stderr
