"""`benchmarks/tune_measure.py`: a class's whole space compiled by ``prepare``, timed by
``run`` (here on PoCL), and replayed by `benchmarks/tune.py` as a measured space."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.tune import gpu_classes, replayed
from benchmarks.tune_measure import prepare, run
from egraph_compiler.backends.opencl.kernel_search import option_to_json
from egraph_compiler.backends.opencl.kernels import KernelParams
from tests.backends.opencl.helpers import static_graph


def test_prepared_space_is_timed_whole_and_replays(tmp_path: Path) -> None:
    """ConvNeXt's 7x7 depthwise class (12 options): every option prepared, timed on
    PoCL by OpenCL events, and replayed option for option; a run past its deadline
    leaves the unfinished class out rather than writing part of it."""
    prepare(tmp_path / "a", "convnext_b8_dw7", "session12")
    run(tmp_path / "a", tmp_path / "space.json", None, repeats=1, jobs=1, deadline_s=1e9)
    table = json.loads((tmp_path / "space.json").read_text())
    key = "Conv m1 n25088 k49 b96 depthwise"
    assert set(table) == {"card", "failed", key} and table["failed"] == {}, table.keys()
    assert table["card"], "the space names the device it was timed on"
    assert all(us > 0 for _, us in table[key]), table[key]
    model, feeds = gpu_classes()
    found, measures = replayed([str(tmp_path / "space.json")], static_graph(model, feeds),
                               KernelParams.for_device("gpu"), tmp_path / "replay")
    assert [a.key for a in found] == [key]
    times = {json.dumps(o, sort_keys=True): us for o, us in table[key]}
    assert sorted(json.dumps(option_to_json(o), sort_keys=True) for o in found[0].space) == \
        sorted(times)
    assert measures[0](found[0].default) == times[json.dumps(option_to_json(found[0].default),
                                                             sort_keys=True)]

    run(tmp_path / "a", tmp_path / "cut.json", None, repeats=1, jobs=1, deadline_s=0.0)
    assert not (tmp_path / "cut.json").exists()
