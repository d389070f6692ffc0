"""hopgym._atomic: outputs whole or absent, destinations checked first, errors that name the file."""

from __future__ import annotations

import errno
import os
import pickle
import signal
import stat
import subprocess
import sys

import pytest

from hopgym import _atomic
from hopgym._atomic import (
    OutputFileError,
    OutputFileHeldError,
    atomic_directory,
    atomic_write,
    check_distinct,
    check_writable,
    save_figure,
    sole_writer,
    write_json,
    write_text,
)
from hopgym.errors import HopgymError


def _full_disk(monkeypatch, after: int = 0):
    """Make writes through ``atomic_write`` fail with ENOSPC after ``after`` bytes."""
    real = os.fdopen

    def fdopen(fd, mode, *a, **kw):
        fh = real(fd, mode, *a, **kw)
        written = [0]
        write = fh.write

        def limited(data):
            written[0] += len(data)
            if written[0] > after:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return write(data)

        fh.write = limited
        return fh

    monkeypatch.setattr(_atomic.os, "fdopen", fdopen)


def test_a_full_disk_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "metrics.json"
    path.write_text("old\n")
    _full_disk(monkeypatch, after=3)
    with pytest.raises(OutputFileError) as err:
        write_text(path, "new and longer\n")
    assert str(path) in str(err.value) and "no space left" in str(err.value)
    assert isinstance(err.value, OSError) and isinstance(err.value, HopgymError)
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json"]


def test_a_full_disk_leaves_no_file_where_there_was_none(tmp_path, monkeypatch):
    _full_disk(monkeypatch)
    with pytest.raises(OutputFileError):
        write_json(tmp_path / "m.json", {"a": 1})
    assert list(tmp_path.iterdir()) == []


def test_an_error_in_the_block_keeps_the_old_file(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("kept\n")
    with pytest.raises(KeyboardInterrupt), atomic_write(path) as fh:
        fh.write("half")
        raise KeyboardInterrupt
    assert path.read_text() == "kept\n"
    assert len(list(tmp_path.iterdir())) == 1


def test_save_figure_writes_the_suffix_format_and_a_full_disk_keeps_the_old_picture(tmp_path, monkeypatch):
    plt = pytest.importorskip("matplotlib.pyplot")
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    png, svg = tmp_path / "c.png", tmp_path / "c.svg"
    assert save_figure(fig, png, dpi=50) == png and png.read_bytes().startswith(b"\x89PNG")
    assert save_figure(fig, svg).read_text().lstrip().startswith("<?xml")
    old = png.read_bytes()
    _full_disk(monkeypatch, after=100)
    with pytest.raises(OutputFileError, match="c.png: no space left"):
        save_figure(fig, png, dpi=80)
    plt.close(fig)
    assert png.read_bytes() == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.png", "c.svg"]


def test_write_json_encodes_before_touching_the_file(tmp_path):
    path = tmp_path / "m.json"
    path.write_text("{}\n")
    with pytest.raises(TypeError):
        write_json(path, {"x": object()})
    assert path.read_text() == "{}\n"
    assert len(list(tmp_path.iterdir())) == 1


def test_a_new_file_gets_the_usual_permissions_and_an_old_one_keeps_its_own(tmp_path):
    new = tmp_path / "new.txt"
    write_text(new, "x")
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(new.stat().st_mode) == 0o666 & ~umask
    old = tmp_path / "old.txt"
    old.write_text("x")
    old.chmod(0o640)
    write_text(old, "y")
    assert stat.S_IMODE(old.stat().st_mode) == 0o640 and old.read_text() == "y"


def test_check_writable_names_the_file(tmp_path):
    (tmp_path / "a_folder").mkdir()
    with pytest.raises(OutputFileError, match="a_folder: is a folder"):
        check_writable(tmp_path / "a_folder")
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    with pytest.raises(OutputFileError, match=r"blocker/out.json: cannot be written"):
        check_writable(blocker / "out.json")
    with pytest.raises(OutputFileError, match="does not exist"):
        check_writable(tmp_path / "nope" / "x.json", create_parent=False)
    assert check_writable(tmp_path / "made" / "x.json").parent.is_dir()
    assert not (tmp_path / "made" / "x.json").exists()
    assert list((tmp_path / "made").iterdir()) == []  # the probe is gone


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_check_writable_refuses_a_read_only_folder(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(OutputFileError, match="ro/m.json: cannot be written"):
            check_writable(ro / "m.json")
    finally:
        ro.chmod(0o700)


def test_check_distinct_refuses_one_path_for_two_outputs(tmp_path):
    check_distinct({"--json": tmp_path / "a", "--report": None, "--trajectories": tmp_path / "b"})
    with pytest.raises(OutputFileError, match="--json and --trajectories are the same file"):
        check_distinct({"--json": tmp_path / "x" / ".." / "a", "--trajectories": tmp_path / "a"})


def test_atomic_directory_swaps_only_when_complete(tmp_path):
    index = tmp_path / "index"
    index.mkdir()
    (index / "old").write_text("old")
    with pytest.raises(RuntimeError), atomic_directory(index) as build:
        (build / "new").write_text("half")
        raise RuntimeError("disk full")
    assert [p.name for p in index.iterdir()] == ["old"]
    assert [p.name for p in tmp_path.iterdir()] == ["index"]
    with atomic_directory(index) as build:
        (build / "new").write_text("new")
    assert [p.name for p in index.iterdir()] == ["new"]
    assert [p.name for p in tmp_path.iterdir()] == ["index"]


_HOLD = """
import sys, time
from hopgym._atomic import sole_writer
with sole_writer(sys.argv[1]):
    print("held", flush=True)
    time.sleep(60)
"""


def _holder(path):
    proc = subprocess.Popen([sys.executable, "-c", _HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_sole_writer_refuses_a_second_process_naming_the_file_and_the_holder(tmp_path):
    path = tmp_path / "eval500.json"
    proc = _holder(path)
    try:
        with pytest.raises(OutputFileHeldError) as err:
            with sole_writer(path):
                pass
        assert isinstance(err.value, OutputFileError)  # callers catching the general error still do
        assert err.value.path == str(path)
        assert (err.value.holder, err.value.lock) == (str(proc.pid), str(tmp_path / ".eval500.json.lock"))
        assert f"process {proc.pid}" in str(err.value)
        assert str(path) in str(err.value)
        again = pickle.loads(pickle.dumps(err.value))  # crosses process pools whole
        assert (type(again), str(again), again.holder) == (OutputFileHeldError, str(err.value), str(proc.pid))
    finally:
        proc.kill()
        proc.wait()


def test_sole_writer_is_free_again_when_the_holder_is_killed(tmp_path):
    """A kill leaves the lock file behind; the kernel has let the lock itself go."""
    path = tmp_path / "eval500.json"
    proc = _holder(path)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert (tmp_path / ".eval500.json.lock").exists()
    with sole_writer(path) as held:
        assert held == path
        assert (tmp_path / ".eval500.json.lock").read_text() == f"{os.getpid()}\n"
    assert not (tmp_path / ".eval500.json.lock").exists()


def test_sole_writer_with_wait_waits_for_the_holder_instead_of_refusing(tmp_path):
    import threading

    path = tmp_path / "results.json"
    order: list[str] = []

    def second() -> None:
        with sole_writer(path, wait=True):
            order.append("second")

    with sole_writer(path):
        waiter = threading.Thread(target=second)
        waiter.start()
        waiter.join(timeout=0.5)
        assert waiter.is_alive()  # still waiting while the lock is held
        order.append("first lets go")
    waiter.join(timeout=30)
    assert order == ["first lets go", "second"]


def test_sole_writer_lets_go_when_the_block_raises(tmp_path):
    path = tmp_path / "r.json"
    with pytest.raises(KeyError):
        with sole_writer(path):
            raise KeyError("x")
    with sole_writer(path):
        pass


def test_sole_writer_names_the_file_when_its_folder_cannot_be_made(tmp_path):
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(OutputFileError, match="cannot be written") as err:
        with sole_writer(tmp_path / "a_file" / "r.json"):
            pass
    assert err.value.path == str(tmp_path / "a_file" / "r.json")
