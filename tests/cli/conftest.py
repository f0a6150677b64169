"""Small models and a user's rule file, written to temp folders as a user would."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

USER_RULE = '''use "operators.dnnr"

# |(|x|)| = |x|: the outer Abs is redundant.
rule my-abs-abs [exact]: Abs(Abs(?x)) => Abs(?x)
'''


def abs_abs_model() -> onnx.ModelProto:
    """y = Identity(Abs(Abs(x))) with x[n, 4]: one place for `my-abs-abs`, one Identity."""
    nodes = [helper.make_node("Abs", ["x"], ["a"], name="abs_inner"),
             helper.make_node("Abs", ["a"], ["b"], name="abs_outer"),
             helper.make_node("Identity", ["b"], ["y"], name="keep_name")]
    graph = helper.make_graph(nodes, "absabs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def abs_model(tmp_path: Path) -> Path:
    path = tmp_path / "model" / "absabs.onnx"
    path.parent.mkdir()
    onnx.save(abs_abs_model(), path)
    return path


@pytest.fixture
def user_rules(tmp_path: Path) -> Path:
    """A rule file in a folder of its own, far from the shipped library, no `ruleset` line."""
    path = tmp_path / "my_rules" / "mine.dnnr"
    path.parent.mkdir()
    path.write_text(USER_RULE)
    return path
