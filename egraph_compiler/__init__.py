"""dnnr: a declarative rule-engine compiler for deep neural networks.

The pipeline (see `egraph_compiler.pipeline.compile_model`) is one function per
stage: ir → shapes → egraph → extract → fusion → plan → backends.
"""

__version__ = "0.1.0"
