"""`dnnr` command line: compile · run · bench · tune · verify · check · explain.

Stage modules are imported lazily so ``dnnr --help`` is instant. Every
`DnnrError` is printed as its message with exit status 1 — never a traceback.
"""

from __future__ import annotations

import argparse
import json
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


def cmd_compile(args: argparse.Namespace) -> int:
    from egraph_compiler import pipeline
    from egraph_compiler.report import render_report

    progress = _progress_printer(not args.quiet and sys.stderr.isatty() or args.progress)
    rule_paths = args.rules or None
    if args.verified_only:
        _require_verified(rule_paths)
    if args.profile_db is not None:  # fail before the slow stages, not after them
        from egraph_compiler.fusion import ProfileDb
        from egraph_compiler.ir.errors import DnnrError

        if args.target != "opencl":
            raise DnnrError("error: --profile-db only applies to --target opencl")
        ProfileDb.load(args.profile_db)
    result = pipeline.compile_model(
        args.model, rule_paths=rule_paths, limits=_limits_from_args(args), progress=progress, target=args.target
    )
    out = Path(args.output) if args.output else None
    if args.target != "onnx" and out is None:
        out = Path(Path(args.model).stem + f".{args.target}")
    if out is not None:
        pipeline.write_artefact(result, args.target, out, bindings=_parse_bindings(args.bind),
                                profile_db=args.profile_db, progress=progress)
    if not args.quiet:
        print(render_report(result.report))
        if out is not None:
            print(f"\nwrote {out}/model.onnx and {out}/report.json")
    return 1 if result.report.limits_hit and args.strict_limits else 0


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


def _require_verified(rule_paths: Sequence[str] | None) -> None:
    from egraph_compiler import pipeline, verify
    from egraph_compiler.ir.errors import DnnrError

    rules = pipeline.load_rules(rule_paths)
    verdicts = verify.verify_rules(rules)
    failed = [v for v in verdicts if not v.ok]
    if failed:
        names = ", ".join(v.rule for v in failed)
        raise DnnrError(f"error: --verified-only: {len(failed)} rule(s) not proved: {names}\n"
                        "  hint: run `dnnr verify` for counterexamples")


def cmd_check(args: argparse.Namespace) -> int:
    from egraph_compiler import dsl

    diagnostics = dsl.check(args.files)
    if diagnostics:
        print(dsl.render_report(diagnostics), file=sys.stderr)
        return 1
    rules = dsl.load_rules(args.files)
    from egraph_compiler.dsl.normalize import attribute_warnings

    for warning in attribute_warnings(rules):
        print(warning, file=sys.stderr)
    print(f"ok: {len(rules.ops)} operators, {len(rules.rules)} rules, "
          f"{len(rules.fusion)} fusion entries in {len(rules.files)} file(s)")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from egraph_compiler import pipeline, verify

    rules = pipeline.load_rules(args.paths or None)
    verdicts = verify.verify_rules(rules, jobs=args.jobs)
    if args.json:
        print(verify.render_json(verdicts))
    else:
        print(verify.render_text(verdicts))
    return 0 if all(v.ok for v in verdicts) else 1


def cmd_explain(args: argparse.Namespace) -> int:
    from egraph_compiler.report import explain

    report_path = Path(args.artefact)
    if report_path.is_dir():
        report_path = report_path / "report.json"
    if not report_path.exists():
        from egraph_compiler.ir.errors import DnnrError

        raise DnnrError(f"error: no compile report at {report_path}\n"
                        "  hint: run `dnnr compile MODEL -o OUT` first, then `dnnr explain OUT`")
    print(explain(json.loads(report_path.read_text()), args.nodes))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from egraph_compiler.runner import run_artefact

    run_artefact(Path(args.artefact), args.input, Path(args.output_dir), device=args.device)
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from egraph_compiler import pipeline
    from egraph_compiler.backends.opencl.bench import bench

    rules = pipeline.load_rules(args.rules or None)

    def optimize(graph):  # type: ignore[no-untyped-def]
        return pipeline.optimize(graph, rules)[0]

    result = bench(args.model, repeats=args.repeats, dims=_parse_bindings(args.bind),
                   optimize=optimize, tables=rules, device=args.device)
    print(result.table())
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    from egraph_compiler import pipeline
    from egraph_compiler.backends.opencl.tune import tune

    result = pipeline.compile_model(args.model, rule_paths=args.rules or None, target="opencl")
    graph = pipeline.static_graph(result.graph, _parse_bindings(args.bind), "opencl")
    db = tune(graph, args.db, repeats=args.repeats, tables=result.rules, device=args.device)
    print(f"{args.db}: {len(db.entries)} entries (device {db.device or 'unknown'})")
    for key, entry in sorted(db.entries.items()):
        print(f"  {key}: fused {entry['fused_us']:.1f} us, separate {entry['separate_us']:.1f} us")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dnnr", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("compile", help="optimise an ONNX model with the rule library")
    p.add_argument("model")
    p.add_argument("--rules", action="append", help="rule file or directory (repeatable)")
    p.add_argument("-o", "--output", help="artefact directory (model.onnx, report.json, ...)")
    p.add_argument("--target", choices=["onnx", "opencl", "hexagon"], default="onnx")
    p.add_argument("--bind", action="append", default=[],
                   help="NAME=INT: fix a symbolic input dim for a static-shape target (repeatable)")
    p.add_argument("--profile-db", help="`dnnr tune` database for the yellow fusion cases (opencl)")
    p.add_argument("--max-nodes", type=int, help="e-node budget (overrides the rule files)")
    p.add_argument("--max-iterations", type=int, help="iteration budget")
    p.add_argument("--max-seconds", type=float, help="saturation wall-time budget")
    p.add_argument("--verified-only", action="store_true", help="refuse rules `dnnr verify` cannot prove")
    p.add_argument("--strict-limits", action="store_true", help="exit 1 when a limit stopped saturation")
    p.add_argument("--progress", action="store_true", help="print stage progress even when not a TTY")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("tune", help="time the yellow fusion cases on the OpenCL device")
    p.add_argument("model")
    p.add_argument("--db", default="dnnr-profile.json", help="profile database (JSON) to fill")
    p.add_argument("--bind", action="append", default=[], help="NAME=INT for symbolic input dims")
    p.add_argument("--rules", action="append", help="rule file or directory (repeatable)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--device", help="OpenCL device name substring (default: PoCL)")
    p.set_defaults(func=cmd_tune)

    p = sub.add_parser("check", help="parse and check rule files; report every error")
    p.add_argument("files", nargs="+")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("verify", help="prove every rule with Z3")
    p.add_argument("paths", nargs="*")
    p.add_argument("--jobs", type=int, default=None, help="processes checking rules (default: every core)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("explain", help="name the rules that produced output nodes")
    p.add_argument("artefact", help="artefact directory or report.json")
    p.add_argument("nodes", nargs="*", help="output node names (default: all rewritten nodes)")
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser("run", help="run a compiled artefact")
    p.add_argument("artefact")
    p.add_argument("--input", action="append", default=[], help="NAME=FILE.npy (repeatable)")
    p.add_argument("--output-dir", default=".")
    p.add_argument("--device", help="OpenCL device (platform:device index or name substring)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("bench", help="time compiled vs fusion-off vs onnxruntime")
    p.add_argument("model")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--rules", action="append", help="rule file or directory (repeatable)")
    p.add_argument("--bind", action="append", default=[], help="NAME=INT for symbolic input dims")
    p.add_argument("--device", help="OpenCL device name substring (default: PoCL)")
    p.set_defaults(func=cmd_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from egraph_compiler.ir.errors import DnnrError

    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except DnnrError as error:
        print(str(error), file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
