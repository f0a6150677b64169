"""Artefacts are atomic and self-checking: no stale run, no half-written or damaged
artefact runs, a failed or interrupted compile changes nothing (issue 16, items 1 and 6)."""

from __future__ import annotations

import errno
import fcntl
import json
import os
from pathlib import Path

import numpy as np
import pytest

from egraph_compiler import pipeline
from egraph_compiler.backends import artefact
from egraph_compiler.backends.artefact import ArtefactError, check_artefact
from egraph_compiler.cli import main
from egraph_compiler.runner import load_artefact
from tests.faults.helpers import add_relu_model, expected

X = np.linspace(-3, 3, 6, dtype=np.float32).reshape(2, 3)


@pytest.fixture(scope="module")
def compiled() -> dict[float, pipeline.CompileResult]:
    return {offset: pipeline.compile_model(add_relu_model(offset).SerializeToString())
            for offset in (0.0, 10.0)}


def _leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if "dnnr-" in p.name)  # tmp, old, lock


def test_reused_directory_runs_the_new_model(compiled, tmp_path: Path) -> None:
    out = tmp_path / "out"
    pipeline.write_artefact(compiled[0.0], "opencl", out)
    np.testing.assert_array_equal(load_artefact(out).run({"x": X})["y"], expected(0.0, X))
    pipeline.write_artefact(compiled[10.0], "onnx", out)  # another model, another target
    assert not (out / "plan.json").exists() and not (out / "kernels.cl").exists()
    manifest = check_artefact(out)
    assert manifest["target"] == "onnx"
    assert manifest["source_sha256"] == compiled[10.0].source_sha256 != compiled[0.0].source_sha256
    np.testing.assert_array_equal(load_artefact(out).run({"x": X})["y"], expected(10.0, X))
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("target", ["onnx", "opencl"])
def test_every_damaged_file_is_refused(compiled, tmp_path: Path, target: str) -> None:
    pristine = tmp_path / "pristine"
    pipeline.write_artefact(compiled[0.0], target, pristine)
    files = sorted(check_artefact(pristine)["files"])
    assert "model.onnx" in files and (target == "onnx" or "weights.npz" in files)
    for damage in ("truncate", "flip", "delete"):
        for name in files:
            out = tmp_path / f"{damage}-{name}"
            pipeline.write_artefact(compiled[0.0], target, out)
            path = out / name
            data = path.read_bytes()
            if damage == "truncate":
                path.write_bytes(data[: len(data) // 2])
            elif damage == "flip":
                path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
            else:
                path.unlink()
            with pytest.raises(ArtefactError, match=rf"{out / name} is (damaged|missing)"):
                load_artefact(out)


def test_damaged_or_missing_manifest_is_refused(compiled, tmp_path: Path) -> None:
    out = tmp_path / "out"
    pipeline.write_artefact(compiled[0.0], "onnx", out)
    manifest = out / "manifest.json"
    text = manifest.read_text()
    manifest.write_text(text[: len(text) // 2])
    with pytest.raises(ArtefactError, match="manifest.json is damaged"):
        load_artefact(out)
    manifest.write_text(json.dumps({**json.loads(text), "version": 99}))
    with pytest.raises(ArtefactError, match="artefact format 99"):
        load_artefact(out)
    manifest.unlink()
    with pytest.raises(ArtefactError, match="not a complete dnnr artefact"):
        load_artefact(out)


def _count_writes(monkeypatch: pytest.MonkeyPatch, fail_at: int | None, error: BaseException) -> list[str]:
    """Make the ``fail_at``-th file write of an artefact raise ``error``; the list of writes."""
    writes: list[str] = []
    real_bytes, real_text = Path.write_bytes, Path.write_text
    real_savez, real_manifest = np.savez, artefact.write_manifest

    def hit(what: str) -> None:
        writes.append(what)
        if fail_at is not None and len(writes) == fail_at:
            raise error

    def write_bytes(self: Path, data: bytes) -> int:
        hit(self.name)
        return real_bytes(self, data)

    def write_text(self: Path, data: str, *args, **kwargs) -> int:  # type: ignore[no-untyped-def]
        hit(self.name)
        return real_text(self, data, *args, **kwargs)

    def savez(file, *args, **kwargs):  # type: ignore[no-untyped-def]
        hit(Path(file).name)
        return real_savez(file, *args, **kwargs)

    def write_manifest(directory, described):  # type: ignore[no-untyped-def]
        hit("manifest.json")
        return real_manifest(directory, described)

    monkeypatch.setattr(Path, "write_bytes", write_bytes)
    monkeypatch.setattr(Path, "write_text", write_text)
    monkeypatch.setattr(np, "savez", savez)
    monkeypatch.setattr(artefact, "write_manifest", write_manifest)
    return writes


def test_interrupt_at_each_write_leaves_the_old_artefact(compiled, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    pipeline.write_artefact(compiled[0.0], "opencl", out)
    before = check_artefact(out)
    with monkeypatch.context() as patch:
        writes = _count_writes(patch, None, KeyboardInterrupt())
        pipeline.write_artefact(compiled[10.0], "opencl", tmp_path / "count")
    assert {"kernels.cl", "plan.json", "weights.npz", "model.onnx", "report.json", "manifest.json"} <= set(writes)
    for step in range(1, len(writes) + 1):
        with monkeypatch.context() as patch:
            _count_writes(patch, step, KeyboardInterrupt())
            with pytest.raises(KeyboardInterrupt):
                pipeline.write_artefact(compiled[10.0], "opencl", out)
        assert check_artefact(out) == before, f"interrupted at write {step} ({writes[step - 1]})"
        assert _leftovers(tmp_path) == []
    np.testing.assert_array_equal(load_artefact(out).run({"x": X})["y"], expected(0.0, X))


@pytest.mark.parametrize(("code", "why"), [(errno.ENOSPC, "the file system is full"),
                                           (errno.EROFS, "the file system is read-only")])
def test_full_or_read_only_file_system_is_a_clear_error(compiled, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str], code: int, why: str) -> None:
    out = tmp_path / "out"
    pipeline.write_artefact(compiled[0.0], "onnx", out)
    before = check_artefact(out)
    for step in (1, 2, 3):  # model.onnx, report.json, manifest.json
        with monkeypatch.context() as patch:
            _count_writes(patch, step, OSError(code, os.strerror(code)))
            with pytest.raises(ArtefactError, match=f"cannot write the artefact {out}: {why}"):
                pipeline.write_artefact(compiled[10.0], "onnx", out)
        assert check_artefact(out) == before
        assert _leftovers(tmp_path) == []


def test_bad_output_paths_are_clear_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "m.onnx"
    model.write_bytes(add_relu_model().SerializeToString())
    a_file = tmp_path / "file"
    a_file.write_text("mine")
    users = tmp_path / "users"
    users.mkdir()
    (users / "notes.txt").write_text("mine")
    for out, message in ((a_file, "is an existing file"), (Path("/proc/dnnr-out"), "is under /proc"),
                         (Path("/sys/dnnr-out"), "is under /sys"), (users, "not a dnnr artefact")):
        code = main(["compile", str(model), "-q", "-o", str(out)])
        err = capsys.readouterr().err
        assert code == 1 and message in err and "Traceback" not in err, err
    assert a_file.read_text() == "mine" and (users / "notes.txt").read_text() == "mine"


def test_concurrent_compile_into_one_directory_is_refused(compiled, tmp_path: Path) -> None:
    out = tmp_path / "out"
    fd = os.open(tmp_path / ".out.dnnr-lock", os.O_CREAT | os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another compile is writing
        with pytest.raises(ArtefactError, match="another dnnr compile is writing"):
            pipeline.write_artefact(compiled[0.0], "onnx", out)
    finally:
        os.close(fd)
    pipeline.write_artefact(compiled[0.0], "onnx", out)
    check_artefact(out)


def test_a_directory_without_manifest_does_not_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "plan.json").write_text('{"target": "opencl"}')  # what a killed compile left
    (tmp_path / "x.npy").write_bytes(b"")
    code = main(["run", str(tmp_path), "--output-dir", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 1 and "not a complete dnnr artefact" in err and "Traceback" not in err

