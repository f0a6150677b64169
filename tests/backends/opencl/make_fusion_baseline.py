"""Write fusion_baseline.json: operators, kernels and fusion rate of every light model.

Run from the repository root: ``python -m tests.backends.opencl.make_fusion_baseline``.
The planner test asserts the fusion rate never drops below what this file records.
"""

from __future__ import annotations

import json
from pathlib import Path

from egraph_compiler.fusion import plan_fusion
from tests.backends.opencl.helpers import static_graph
from tests.modelzoo import LIGHT_MODELS, light_model, random_inputs


def main() -> None:
    baseline = {}
    for name in LIGHT_MODELS:
        model = light_model(name)
        plan = plan_fusion(static_graph(model, random_inputs(model, 0)))
        baseline[name] = {"operators": plan.operator_count, "kernels": plan.kernel_count,
                          "fusion_rate": round(plan.fusion_rate, 4)}
        print(name, baseline[name])
    path = Path(__file__).with_name("fusion_baseline.json")
    path.write_text(json.dumps(baseline, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
