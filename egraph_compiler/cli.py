"""`dnnr` command line: compile · run · bench · tune · verify · check · explain.

Stage modules are imported lazily so ``dnnr --help`` is instant. Every
`DnnrError` is printed as its message with exit status 1 — never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path


def _progress_printer(enabled: bool):  # type: ignore[no-untyped-def]
    if not enabled:
        return None

    def emit(message: str) -> None:
        print(f"  .. {message}", file=sys.stderr, flush=True)

    return emit


def _limits_from_args(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    if args.max_nodes is None and args.max_iterations is None and args.max_seconds is None:
        return None
    from egraph_compiler.dsl.ast import Limits

    base = Limits()
    return Limits(
        nodes=args.max_nodes if args.max_nodes is not None else base.nodes,
        iterations=args.max_iterations if args.max_iterations is not None else base.iterations,
        seconds=args.max_seconds if args.max_seconds is not None else base.seconds,
    )


def _rule_options(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from egraph_compiler.dsl.library import RuleOptions

    return RuleOptions(add=tuple(getattr(args, "add_rules", None) or ()),
                       search=tuple(getattr(args, "rules_path", None) or ()),
                       disable=tuple(getattr(args, "disable_rule", None) or ()),
                       only=tuple(getattr(args, "only_ruleset", None) or ()))


def _warn_unscheduled(rules) -> None:  # type: ignore[no-untyped-def]
    from egraph_compiler.dsl.library import unscheduled_warnings

    for warning in unscheduled_warnings(rules):
        print(warning, file=sys.stderr)


def _emit_dump(stage: str, text: str) -> None:
    print(f"// ----- dnnr: after {stage} -----\n{text}", file=sys.stderr, flush=True)


def _dumps_from_args(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from egraph_compiler.dump import BACKEND_STAGES, Dumps
    from egraph_compiler.ir.errors import DnnrError

    after = frozenset(args.dump_after or ())
    backend = sorted(after & set(BACKEND_STAGES))
    if backend and args.target != "opencl":
        raise DnnrError(f"error: --dump-after {backend[0]}: the {args.target} target has no "
                        f"{backend[0]} stage (fusion and plan are the OpenCL backend's; add --target opencl)")
    egraph_file = Path(args.dump_egraph) if args.dump_egraph else None
    return Dumps(after=after, emit=_emit_dump, egraph_file=egraph_file)


def _files_under(folder: Path) -> dict[Path, int]:
    if not folder.is_dir():
        return {}
    return {p: p.stat().st_mtime_ns for p in sorted(folder.rglob("*")) if p.is_file()}


def cmd_compile(args: argparse.Namespace) -> int:
    from egraph_compiler import pipeline
    from egraph_compiler.report import render_report

    progress = _progress_printer(not args.quiet and sys.stderr.isatty() or args.progress)
    rule_paths = args.rules or None
    bindings = _parse_bindings(args.bind)  # a malformed --bind is an error on every target
    dumps = _dumps_from_args(args)
    options = _rule_options(args)
    if args.verified_only:
        _require_verified(rule_paths, options, args.target)
    if args.profile_db is not None:  # fail before the slow stages, not after them
        from egraph_compiler.fusion import ProfileDb
        from egraph_compiler.ir.errors import DnnrError

        if args.target != "opencl":
            raise DnnrError("error: --profile-db only applies to --target opencl")
        ProfileDb.load(args.profile_db)
    out = Path(args.output) if args.output else None
    if args.target != "onnx" and out is None:
        out = Path(Path(args.model).stem + f".{args.target}")
    if out is not None:  # an -o that cannot hold an artefact fails before the slow stages
        from egraph_compiler.backends.artefact import check_destination

        check_destination(out)
    result = pipeline.compile_model(
        args.model, rule_paths=rule_paths, limits=_limits_from_args(args), progress=progress, target=args.target,
        rule_options=options, dumps=dumps, dims=_parse_dim_ranges(args.dim), started=args.started, fp=args.fp,
    )
    _warn_unscheduled(result.rules)
    written: list[Path] = []
    if out is not None:
        before = _files_under(out)
        pipeline.write_artefact(result, args.target, out, bindings=bindings,
                                profile_db=args.profile_db, progress=progress,
                                kernel_device=args.opencl_kernels, tuned_device=args.tuned_device,
                                dim_steps=_parse_dim_steps(args.dim))
        written = [p for p, mtime in _files_under(out).items() if before.get(p) != mtime]
    elif bindings:
        from egraph_compiler import shapes

        shapes.bind_symbols(result.graph, bindings)  # names the model lacks are errors here too
    if not args.quiet:
        print(render_report(result.report))
        if out is None:
            print("\nnothing written (add -o OUT to write OUT/model.onnx and OUT/report.json)")
        else:
            print(f"\nwrote {len(written)} file(s) in {out}: " + ", ".join(str(p.relative_to(out)) for p in written))
    return 1 if result.report.limits_hit and args.strict_limits else 0


def _parse_dim_ranges(specs: Sequence[str]) -> dict[str, tuple[int, int]]:
    return {name: (low, high) for name, (low, high, _) in _parse_dims(specs).items()}


def _parse_dim_steps(specs: Sequence[str]) -> dict[str, int]:
    """``--dim height=32..64:8``: the symbolic OpenCL artefact covers every 8th height."""
    return {name: step for name, (_, _, step) in _parse_dims(specs).items() if step != 1}


def _parse_dims(specs: Sequence[str]) -> dict[str, tuple[int, int, int]]:
    from egraph_compiler.ir.errors import DnnrError

    ranges: dict[str, tuple[int, int, int]] = {}
    for spec in specs:
        for part in spec.split(","):
            name, _, bounds = part.partition("=")
            low, dots, rest = bounds.partition("..")
            high, colon, step = rest.partition(":")
            if not dots or not name.strip() or not low.strip().isdigit() or not high.strip().isdigit() \
                    or (colon and not (step.strip().isdigit() and int(step) >= 1)):
                raise DnnrError(f"error: --dim expects NAME=LO..HI or NAME=LO..HI:STEP (e.g. "
                                f"seq=1..512, height=32..224:32), got {part!r}")
            ranges[name.strip()] = (int(low), int(high), int(step) if colon else 1)
    return ranges


def _parse_bindings(specs: Sequence[str]) -> dict[str, int]:
    from egraph_compiler.ir.errors import DnnrError

    bindings: dict[str, int] = {}
    for spec in specs:
        for part in spec.split(","):
            name, sep, value = part.partition("=")
            if not sep or not name.strip() or not value.strip().isdigit() or int(value) < 1:
                raise DnnrError(f"error: --bind expects NAME=POSITIVE_INT (e.g. batch=1), got {part!r}")
            bindings[name.strip()] = int(value)
    return bindings


def _require_verified(rule_paths: Sequence[str] | None, options=None, target: str = "onnx") -> None:  # type: ignore[no-untyped-def]
    from egraph_compiler import pipeline, verify
    from egraph_compiler.ir.errors import DnnrError

    rules = pipeline.load_rules(rule_paths, target, options)
    verdicts = verify.verify_rules(rules)
    failed = [v for v in verdicts if not v.ok]
    if failed:
        names = ", ".join(v.rule for v in failed)
        raise DnnrError(f"error: --verified-only: {len(failed)} rule(s) not proved: {names}\n"
                        "  hint: run `dnnr verify` for counterexamples")


def _check_groups(files: Sequence[str]) -> list[list[str]]:
    """A file in a ``targets/`` folder is a target's own program (it replaces the
    library's schedule and limits, `pipeline.target_rules`): checked as a load of
    its own; every other file goes into one shared load."""
    shared = [f for f in files if Path(f).resolve().parent.name != "targets"]
    targets = [[f] for f in files if Path(f).resolve().parent.name == "targets"]
    return ([shared] if shared else []) + targets


def cmd_check(args: argparse.Namespace) -> int:
    from egraph_compiler import dsl
    from egraph_compiler.dsl.library import schedule_added
    from egraph_compiler.dsl.normalize import attribute_warnings
    from egraph_compiler.ir.errors import DnnrError

    added = list(args.add_rules or ())
    groups = [(group, []) for group in _check_groups(args.files)]
    if added:  # as `dnnr compile --add-rules` loads them: after the shipped library
        groups.append(([str(dsl.rules_dir()), *added], added))
    if not groups:
        raise DnnrError("error: dnnr check needs rule files (FILE.dnnr or a folder) or --add-rules FILE")
    status = 0
    for group, added_here in groups:
        diagnostics = dsl.check(group, args.rules_path or ())
        if diagnostics:
            print(dsl.render_report(diagnostics), file=sys.stderr)
            status = 1
            continue
        rules = schedule_added(dsl.load_rules(group, args.rules_path or ()), added_here)
        _warn_unscheduled(rules)
        for warning in attribute_warnings(rules):  # a right-hand side drops an attribute
            print(warning, file=sys.stderr)
        from egraph_compiler.verify.special_values import exact_tag_errors

        tag_errors = exact_tag_errors(rules)  # [exact] against each rule's special-value record
        if tag_errors:
            print("\n".join(tag_errors), file=sys.stderr)
            status = 1
            continue
        print(f"ok: {len(rules.ops)} operators, {len(rules.rules)} rules, "
              f"{len(rules.fusion)} fusion entries in {len(rules.files)} file(s)")
    return status


def cmd_verify(args: argparse.Namespace) -> int:
    from egraph_compiler import pipeline, verify

    rules = pipeline.load_rules(args.paths or None, options=_rule_options(args))
    if args.add_rules and not args.paths:  # the library gives the operators; prove the added rules
        import dataclasses

        from egraph_compiler.dsl.loader import expand_paths

        added = {str(p) for p in expand_paths(args.add_rules)}
        rules = dataclasses.replace(rules, rules=tuple(r for r in rules.rules if r.span.file in added))
    verdicts = verify.verify_rules(rules, jobs=args.jobs)
    if args.json:
        print(verify.render_json(verdicts))
    else:
        print(verify.render_text(verdicts))
    return 0 if all(v.ok for v in verdicts) else 1


def cmd_explain(args: argparse.Namespace) -> int:
    from egraph_compiler.report import UnknownNode, explain

    report_path = Path(args.artefact)
    if report_path.is_dir():
        report_path = report_path / "report.json"
    if not report_path.exists():
        from egraph_compiler.ir.errors import DnnrError

        raise DnnrError(f"error: no compile report at {report_path}\n"
                        "  hint: run `dnnr compile MODEL -o OUT` first, then `dnnr explain OUT`")
    model_path = report_path.parent / "model.onnx"
    known: dict[str, str] = {}
    if model_path.exists():
        import onnx

        known = {n.name: n.op_type for n in onnx.load(str(model_path), load_external_data=False).graph.node}
    try:
        print(explain(json.loads(report_path.read_text()), args.nodes, known))
    except UnknownNode as error:
        from egraph_compiler.ir.errors import DnnrError

        raise DnnrError(f"error: no node named {error} in {model_path} or among the nodes it replaced\n"
                        "  hint: `dnnr explain OUT` without a node lists every rewritten node") from None
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from egraph_compiler.runner import run_artefact

    run_artefact(Path(args.artefact), args.input, Path(args.output_dir), device=args.device,
                 cast=args.cast)
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from egraph_compiler import pipeline
    from egraph_compiler.backends.opencl.bench import bench

    rules = pipeline.load_rules(args.rules or None)
    bindings = _parse_bindings(args.bind)
    if bindings:  # a --bind naming no symbolic dim of the model is an error, as in compile
        from egraph_compiler import ir, shapes

        shapes.bind_symbols(ir.load_onnx(args.model), bindings)

    def optimize(graph):  # type: ignore[no-untyped-def]
        return pipeline.optimize(graph, rules)[0]

    from egraph_compiler.backends.opencl import KernelParams

    result = bench(args.model, repeats=args.repeats, dims=bindings, optimize=optimize,
                   tables=rules, device=args.device,
                   params=KernelParams.for_device(args.opencl_kernels))
    print(result.table())
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    from egraph_compiler import pipeline
    from egraph_compiler.backends.opencl.tune import tune

    result = pipeline.compile_model(args.model, rule_paths=args.rules or None, target="opencl")
    graph = pipeline.static_graph(result.graph, _parse_bindings(args.bind), "opencl")
    db = tune(graph, args.db, repeats=args.repeats, tables=result.rules, device=args.device,
              kernel_budget=args.budget, kernel_device=args.opencl_kernels)
    print(f"{args.db}: {len(db.entries)} entries (device {db.device or 'unknown'})")
    for key, entry in sorted(db.entries.items()):
        print(f"  {key}: fused {entry['fused_us']:.1f} us, separate {entry['separate_us']:.1f} us")
    return 0


def _process_started() -> float:
    from egraph_compiler.pipeline import process_started

    return process_started()


RULES_HELP = "rule file or directory to load INSTEAD of the shipped library (repeatable)"
ADD_RULES_HELP = ("rule file or directory to load IN ADDITION to the shipped library (repeatable); "
                  "its rules without a `ruleset` line run under the library's schedule")
RULES_PATH_HELP = "folder where `use \"FILE\"` looks after the using file's own folder (repeatable)"
BIND_HELP = "NAME=INT: fix a symbolic input dim (repeatable, or NAME=INT,NAME=INT)"
DEVICE_HELP = "OpenCL device: platform:device index or name substring (default: PoCL)"


def _add_rule_options(p: argparse.ArgumentParser, *, replace: bool = True, filters: bool = False) -> None:
    if replace:
        p.add_argument("--rules", action="append", metavar="FILE_OR_DIR", help=RULES_HELP)
    p.add_argument("--add-rules", action="append", metavar="FILE_OR_DIR", help=ADD_RULES_HELP)
    p.add_argument("--rules-path", action="append", metavar="DIR", help=RULES_PATH_HELP)
    if filters:
        p.add_argument("--disable-rule", action="append", metavar="NAME",
                       help="leave this rule out (repeatable; for bisecting a bad compile)")
        p.add_argument("--only-ruleset", action="append", metavar="NAME",
                       help="run only the rules of this ruleset (repeatable; the schedule keeps its order)")


def build_parser() -> argparse.ArgumentParser:
    from egraph_compiler import __version__
    from egraph_compiler.dump import STAGES

    parser = argparse.ArgumentParser(prog="dnnr", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"dnnr {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("compile", help="optimise an ONNX model with the rule library")
    p.add_argument("model", help="the ONNX model to compile")
    _add_rule_options(p, filters=True)
    p.add_argument("-o", "--output", metavar="OUT",
                   help="artefact directory (model.onnx, report.json, ...); without it the onnx target "
                        "writes nothing")
    p.add_argument("--target", choices=["onnx", "opencl", "hexagon"], default="onnx",
                   help="what to write: ONNX (default), OpenCL kernels, or Hexagon HVX code")
    p.add_argument("--bind", action="append", default=[], metavar="NAME=INT",
                   help=BIND_HELP + "; opencl/hexagon need every symbol bound, onnx writes the bound model")
    p.add_argument("--dim", action="append", default=[], metavar="NAME=LO..HI",
                   help="range of a symbolic input dim (repeatable; default 1..2147483647): shape "
                        "inference and rule guards may assume it; the report lists every range")
    p.add_argument("--profile-db", metavar="FILE",
                   help="`dnnr tune` database for the yellow fusion cases (opencl)")
    p.add_argument("--opencl-kernels", choices=["cpu", "gpu"], default="cpu",
                   help="device class whose cost model picks each conv/matmul kernel (opencl)")
    p.add_argument("--fp", choices=["reals", "strict"], default="reals",
                   help="reals (default): all rules, exact over the reals; strict: only [exact] "
                        "rules, onnxruntime's inf/NaN/-0 kept bit for bit")
    p.add_argument("--tuned-device", metavar="NAME",
                   help="whose kernel choices to read from --profile-db when it holds several "
                        "devices (a name substring)")
    p.add_argument("--max-nodes", type=int, metavar="N", help="e-node budget (overrides the rule files)")
    p.add_argument("--max-iterations", type=int, metavar="N", help="iteration budget (overrides the rule files)")
    p.add_argument("--max-seconds", type=float, metavar="S",
                   help="saturation wall-time budget (overrides the rule files)")
    p.add_argument("--verified-only", action="store_true", help="refuse rules `dnnr verify` cannot prove")
    p.add_argument("--strict-limits", action="store_true", help="exit 1 when a limit stopped saturation")
    p.add_argument("--dump-after", action="append", choices=STAGES, metavar="STAGE",
                   help=f"print that stage's output as text on stderr (repeatable; one of {', '.join(STAGES)}; "
                        "fusion and plan need --target opencl)")
    p.add_argument("--dump-egraph", metavar="FILE", help="write the saturated e-graph as JSON (egglog's serialisation)")
    p.add_argument("--progress", action="store_true", help="print stage progress even when not a TTY")
    p.add_argument("-q", "--quiet", action="store_true", help="print no report")
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("tune", help="time the yellow fusion cases on the OpenCL device")
    p.add_argument("model", help="the ONNX model whose fusion cases to time")
    p.add_argument("--db", default="dnnr-profile.json", metavar="FILE", help="profile database (JSON) to fill")
    p.add_argument("--bind", action="append", default=[], metavar="NAME=INT", help=BIND_HELP)
    p.add_argument("--rules", action="append", metavar="FILE_OR_DIR", help=RULES_HELP)
    p.add_argument("--repeats", type=int, default=5, metavar="N", help="timed runs per case (default 5)")
    p.add_argument("--device", help=DEVICE_HELP)
    p.add_argument("--budget", type=int, default=24, metavar="N",
                   help="kernel-parameter measurements per anchor shape class and search "
                        "(Chameleon, and random search beside it; 0: skip; default 24)")
    p.add_argument("--opencl-kernels", choices=["cpu", "gpu"], default="cpu",
                   help="device class whose defaults the kernel search starts from")
    p.set_defaults(func=cmd_tune)

    p = sub.add_parser("check", help="parse and check rule files; report every error")
    p.add_argument("files", nargs="*", metavar="FILE_OR_DIR",
                   help="rule files or folders, checked as one load (a file in a targets/ folder: "
                        "as a load of its own)")
    _add_rule_options(p, replace=False)
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("verify", help="prove every rule with Z3")
    p.add_argument("paths", nargs="*", metavar="FILE_OR_DIR",
                   help="rule files or folders (default: the shipped library; with only --add-rules, "
                        "the added files' rules)")
    _add_rule_options(p, replace=False)
    p.add_argument("--jobs", type=int, default=None, metavar="N",
                   help="worker processes (default: every core)")
    p.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("explain", help="show how rules derived output nodes from the input model's nodes")
    p.add_argument("artefact", help="artefact directory or report.json")
    p.add_argument("nodes", nargs="*", metavar="NODE",
                   help="output (or input-model) node names (default: all rewritten nodes)")
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser("run", help="run a compiled artefact")
    p.add_argument("artefact", help="artefact directory written by `dnnr compile -o`")
    p.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy", help="an input (repeatable)")
    p.add_argument("--output-dir", default=".", metavar="DIR", help="where to write OUTPUT.npy files")
    p.add_argument("--device", help=DEVICE_HELP)
    p.add_argument("--cast", action="store_true",
                   help="convert inputs to the model's dtypes instead of refusing a mismatch")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("bench", help="time compiled vs fusion-off vs onnxruntime")
    p.add_argument("model", help="the ONNX model to time")
    p.add_argument("--repeats", type=int, default=20, metavar="N", help="timed runs per variant (default 20)")
    p.add_argument("--rules", action="append", metavar="FILE_OR_DIR", help=RULES_HELP)
    p.add_argument("--bind", action="append", default=[], metavar="NAME=INT", help=BIND_HELP)
    p.add_argument("--device", help=DEVICE_HELP)
    p.add_argument("--opencl-kernels", choices=["cpu", "gpu"], default="cpu",
                   help="device class whose kernel parameters both compiles use (as compile's)")
    p.set_defaults(func=cmd_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from egraph_compiler.ir.errors import DnnrError

    args = build_parser().parse_args(argv)
    # run as the `dnnr` program, compile's time limit covers the whole process (start-up
    # included); called from Python (tests), it starts with the call
    args.started = _process_started() if argv is None and args.command == "compile" else None
    try:
        code = int(args.func(args))
    except DnnrError as error:
        print(str(error), file=sys.stderr)
        code = error.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    if args.started is not None:
        _exit_now(code)
    return code


def _exit_now(code: int) -> None:
    """End the `dnnr compile` process without Python's teardown, which frees every
    object one by one (a second of CPU after loading 10,000 rules) and so would run
    past the time limit. Nothing is left to clean up: the artefact is written and
    renamed into place, and the output streams are flushed here."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:  # a closed pipe: nothing more can be said
            pass
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
