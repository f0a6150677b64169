"""Artefact directories that are atomic and self-checking.

`write_atomically` builds an artefact in a private temporary directory beside the
destination, writes ``manifest.json`` (format version, target, the source model's
digest, every file with its size and SHA-256, the dtype/shape of every weight and
of every input/output), and only then swaps it into place: a reader sees the old
artefact whole or the new one whole, never a mixture, and an interrupted or failed
compile leaves the old one untouched. A lock beside the destination refuses a
second compile into the same directory while one is writing.

`check_artefact` is what every loader calls first: it refuses a directory without
a manifest (interrupted, or written by a dnnr without manifests), of another format
version, or whose files differ from the manifest (damaged, truncated, edited),
each with a one-line message naming the file.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from egraph_compiler.ir.errors import DnnrError

MANIFEST = "manifest.json"
FORMAT = "dnnr-artefact"
FORMAT_VERSION = 1
# files a dnnr artefact of any version may hold: a directory with none of these and
# something else in it is the user's, and is never replaced
_ARTEFACT_MARKERS = (MANIFEST, "report.json", "model.onnx", "plan.json", "meta.json")
_SYSTEM_ROOTS = (Path("/proc"), Path("/sys"), Path("/dev"))
_CHUNK = 1 << 20


class ArtefactError(DnnrError):
    pass


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def source_digest(model: str | Path | bytes) -> str:
    """SHA-256 of the source model (its bytes, or the file's)."""
    if isinstance(model, bytes):
        return hashlib.sha256(model).hexdigest()
    try:
        return file_digest(Path(model))
    except OSError:
        return ""  # the importer reports an unreadable model with its own message


def check_destination(out: Path) -> None:
    """Refuse an ``-o`` that cannot hold an artefact before any work is done: an existing
    file, a system file system, a directory of the user's own."""
    problem = _destination_error(out)
    if problem:
        raise ArtefactError(problem)


def _destination_error(out: Path) -> str | None:
    resolved = out.resolve()
    for root in _SYSTEM_ROOTS:
        if resolved == root or root in resolved.parents:
            return f"error: -o {out} is under {root}, a system file system; choose a directory of your own"
    if out.exists() and not out.is_dir():
        return f"error: -o {out} is an existing file, not a directory\n  hint: choose another -o"
    if out.is_dir():
        entries = {p.name for p in out.iterdir()}
        if entries and not entries & set(_ARTEFACT_MARKERS):
            return (f"error: -o {out} is a non-empty directory that is not a dnnr artefact; "
                    "refusing to replace it\n  hint: choose a new or empty directory")
    return None


def _os_error(out: Path, error: OSError) -> ArtefactError:
    why = {errno.ENOSPC: "the file system is full", errno.EROFS: "the file system is read-only",
           errno.EACCES: "permission denied", errno.EPERM: "permission denied",
           errno.EDQUOT: "the disk quota is exceeded"}.get(error.errno or 0, error.strerror or str(error))
    where = f" ({error.filename})" if error.filename else ""
    return ArtefactError(f"error: cannot write the artefact {out}: {why}{where}; "
                         f"nothing was changed at {out}")


@contextlib.contextmanager
def _lock(out: Path) -> Iterator[None]:
    lock_path = out.parent / f".{out.name}.dnnr-lock"
    fd = os.open(lock_path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ArtefactError(f"error: another dnnr compile is writing {out} right now\n"
                                "  hint: wait for it, or choose another -o") from None
        try:
            yield
        finally:
            # no lock file is left behind; a compile that opened it just before the
            # unlink may then run beside a later one, and the rename keeps each whole
            with contextlib.suppress(OSError):
                lock_path.unlink()
    finally:
        os.close(fd)  # closing releases the lock


def write_atomically(out: Path, build: Callable[[Path], Mapping[str, Any]]) -> None:
    """Run ``build(tmp)`` to fill a temporary directory, add the manifest (``build``
    returns its description fields: target, source digest, weights, inputs, outputs)
    and swap it into ``out``, replacing an earlier artefact there whole."""
    check_destination(out)
    tmp: Path | None = None
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with _lock(out):
            tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.dnnr-tmp-", dir=out.parent))
            described = dict(build(tmp))
            write_manifest(tmp, described)
            _swap(tmp, out)
            tmp = None
    except OSError as error:
        raise _os_error(out, error) from None
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _swap(tmp: Path, out: Path) -> None:
    old: Path | None = None
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.dnnr-old-", dir=out.parent))
        os.rename(out, old / "artefact")
    try:
        os.rename(tmp, out)
    except BaseException:
        if old is not None:  # put the old artefact back: a failed compile changes nothing
            os.rename(old / "artefact", out)
            shutil.rmtree(old, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def write_manifest(directory: Path, described: Mapping[str, Any]) -> None:
    files = {}
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        rel = path.relative_to(directory).as_posix()
        if rel != MANIFEST:
            files[rel] = {"bytes": path.stat().st_size, "sha256": file_digest(path)}
    manifest = {"format": FORMAT, "version": FORMAT_VERSION, **described, "files": files}
    target = directory / MANIFEST
    with target.open("w") as stream:
        stream.write(json.dumps(manifest, indent=1) + "\n")
        stream.flush()
        os.fsync(stream.fileno())


def check_artefact(out: Path, *, hashes: bool = True) -> dict[str, Any]:
    """The manifest of ``out`` after checking every file against it; an `ArtefactError`
    naming the first problem otherwise."""
    if not out.is_dir():
        raise ArtefactError(f"error: {out} is not a directory\n  hint: dnnr compile MODEL -o {out}")
    path = out / MANIFEST
    if not path.is_file():
        raise ArtefactError(f"error: {out} is not a complete dnnr artefact (no {MANIFEST}): its "
                            "compile was interrupted, or an older dnnr wrote it\n"
                            f"  hint: compile it again with dnnr compile MODEL -o {out}")
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ArtefactError(f"error: {path} is damaged ({exc}); compile the artefact again") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ArtefactError(f"error: {path} is not a dnnr manifest; compile the artefact again")
    if manifest.get("version") != FORMAT_VERSION:
        raise ArtefactError(f"error: {out} was written by another dnnr (artefact format "
                            f"{manifest.get('version')}, this dnnr reads {FORMAT_VERSION}); "
                            "compile it again")
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise ArtefactError(f"error: {path} lists no files; compile the artefact again")
    for rel, info in sorted(files.items()):
        member = out / rel
        if not member.is_file():
            raise ArtefactError(f"error: {member} is missing from the artefact; compile it again")
        size = member.stat().st_size
        if size != info.get("bytes"):
            raise ArtefactError(f"error: {member} is damaged: {size} bytes, the manifest says "
                                f"{info.get('bytes')}; compile the artefact again")
        if hashes and file_digest(member) != info.get("sha256"):
            raise ArtefactError(f"error: {member} is damaged: its SHA-256 differs from the "
                                "manifest's; compile the artefact again")
    return manifest


def _dims(shape: Any) -> list[int | str] | None:
    if shape is None:
        return None
    return [d if isinstance(d, int) else str(d) for d in shape]


def describe(target: str, source_sha256: str, graph: Any, directory: Path) -> dict[str, Any]:
    """The manifest's description of an artefact built from ``graph`` (the graph the
    backend compiled, with its inputs bound): its inputs, outputs and weights."""
    def signature(values: Any) -> dict[str, Any]:
        return {v.name: {"dtype": v.type.dtype, "shape": _dims(v.type.shape)} for v in values}

    weights = {name: {"dtype": str(array.dtype), "shape": list(array.shape)}
               for name, array in sorted(graph.constants.items())}
    plan = directory / "plan.json"
    if plan.is_file():  # OpenCL: the constants the kernels read, derived ones included
        tensors = json.loads(plan.read_text())["tensors"]
        weights = {name: {"dtype": info["dtype"], "shape": info["shape"]}
                   for name, info in sorted(tensors.items()) if info["kind"] == "constant"}
    return {"target": target, "source_sha256": source_sha256,
            "inputs": signature(graph.inputs), "outputs": signature(graph.outputs),
            "weights": weights}
