"""`ir.load_onnx` folds constants with the evaluator `egraph_compiler.ops` installs when it
is imported; import it here so the IR tests do not depend on which test ran first."""

import egraph_compiler.ops  # noqa: F401
