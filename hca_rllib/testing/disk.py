"""A small disk, simulated in-process, for testing what a full disk does to a run.

``SmallDisk(root, capacity)`` gives every write under ``root`` (Python's ``open``, RLlib's
pyarrow output streams) ``capacity`` bytes in all, counted from ``install()``: the write
that crosses it writes what still fits and raises ``OSError(ENOSPC)``, as a real full
disk does, and so does every later write under ``root``. ``fail={"rename": n}`` (or
``"replace"``, ``"fsync"``) fails the n-th such call on a path under ``root`` instead.
``shutil.disk_usage`` reports the simulated free space for paths under ``root``. Every
fault raised is recorded in ``injected``; ``writes`` (bytes per file, in order) and
``calls`` (renames, replaces, fsyncs under ``root``) say where a fault can be placed.

Test scaffolding only: nothing in ``hca_rllib`` imports it. It patches module attributes
(``builtins.open``, ``io.open``, ``os.rename``, ``os.replace``, ``os.fsync``,
``shutil.disk_usage`` and RLlib's ``pyarrow`` reference) while installed, in this process
only; a test runs the CLI under it as ``python -c`` that installs it, then calls
``hca_rllib.cli.main``.
"""

from __future__ import annotations

import builtins
import errno as errno_module
import io
import math
import os
import shutil
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

__all__ = ["SmallDisk"]

_REAL = {"open": builtins.open, "rename": os.rename, "replace": os.replace, "fsync": os.fsync,
         "disk_usage": shutil.disk_usage}


class SmallDisk:
    def __init__(self, root, capacity: float = math.inf, fail: Optional[Dict[str, int]] = None,
                 errno: int = errno_module.ENOSPC):
        self.root = Path(root).resolve()
        self.capacity = capacity
        self.used = 0
        self.fail = dict(fail or {})
        self.errno = errno
        self.calls: Dict[str, int] = {}  # rename, replace, fsync calls under root
        self.writes: Dict[str, int] = {}  # bytes written per path, in the order first written
        self.injected: List[Tuple[str, str]] = []
        self._saved: Dict[str, Any] = {}

    # -------------------------------------------------------------- the fault

    def under(self, path) -> bool:
        try:
            path = Path(os.fsdecode(path)).resolve()
        except (TypeError, ValueError):
            return False
        return path == self.root or self.root in path.parents

    def _error(self, what: str, path) -> OSError:
        self.injected.append((what, str(path)))
        return OSError(self.errno, os.strerror(self.errno), str(path))

    def take(self, size: int, path) -> int:
        """Room for `size` more bytes at `path`: the bytes that fit (all of them, or
        fewer; the caller writes those, then raises `self.full(path)`)."""
        room = self.capacity - self.used
        fits = int(max(0, min(size, room)))
        self.used += fits
        self.writes[str(path)] = self.writes.get(str(path), 0) + fits
        return fits

    def full(self, path) -> OSError:
        return self._error("write", path)

    def _call(self, name: str, path) -> None:
        if self.under(path):
            self.calls[name] = self.calls.get(name, 0) + 1
            if self.calls[name] == self.fail.get(name):
                raise self._error(name, path)

    # -------------------------------------------------------------- the patches

    def _open(self, file, mode="r", *args, **kwargs):
        handle = _REAL["open"](file, mode, *args, **kwargs)
        if isinstance(file, int) or not any(c in mode for c in "wax+") or not self.under(file):
            return handle
        return _File(handle, self, file)

    def _rename(self, src, dst, *args, **kwargs):
        self._call("rename", dst)
        return _REAL["rename"](src, dst, *args, **kwargs)

    def _replace(self, src, dst, *args, **kwargs):
        self._call("replace", dst)
        return _REAL["replace"](src, dst, *args, **kwargs)

    def _fsync(self, fd):
        fd_number = fd if isinstance(fd, int) else fd.fileno()
        try:
            path = os.readlink(f"/proc/self/fd/{fd_number}")
        except OSError:
            path = ""
        if path:
            self._call("fsync", path)
        return _REAL["fsync"](fd)

    def _disk_usage(self, path):
        usage = _REAL["disk_usage"](path)
        if self.under(path) and math.isfinite(self.capacity):
            free = int(max(0, self.capacity - self.used))
            return type(usage)(int(self.capacity), int(self.capacity) - free, free)
        return usage

    def install(self) -> "SmallDisk":
        import ray.rllib.utils.checkpoints as rllib_checkpoints

        self._saved = {"rllib_pyarrow": rllib_checkpoints.pyarrow}
        rllib_checkpoints.pyarrow = _Pyarrow(rllib_checkpoints.pyarrow, self)
        builtins.open = io.open = self._open
        os.rename, os.replace, os.fsync = self._rename, self._replace, self._fsync
        shutil.disk_usage = self._disk_usage
        return self

    def uninstall(self) -> None:
        import ray.rllib.utils.checkpoints as rllib_checkpoints

        if self._saved:
            rllib_checkpoints.pyarrow = self._saved["rllib_pyarrow"]
        builtins.open = io.open = _REAL["open"]
        os.rename, os.replace, os.fsync = _REAL["rename"], _REAL["replace"], _REAL["fsync"]
        shutil.disk_usage = _REAL["disk_usage"]
        self._saved = {}

    def __enter__(self) -> "SmallDisk":
        return self.install()

    def __exit__(self, *exc) -> None:
        self.uninstall()


class _File:
    """A file (Python's, or a pyarrow output stream) whose writes count against the disk."""

    def __init__(self, handle, disk: SmallDisk, path):
        self._handle, self._disk, self._path = handle, disk, path

    def write(self, data):
        text = isinstance(data, str)
        size = len(data.encode()) if text else memoryview(data).nbytes
        fits = self._disk.take(size, self._path)
        if fits < size:
            if fits:
                part = data.encode()[:fits].decode(errors="ignore") if text else bytes(memoryview(data).cast("B")[:fits])
                self._handle.write(part)
                if hasattr(self._handle, "flush"):
                    self._handle.flush()
            raise self._disk.full(self._path)
        return self._handle.write(data)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._handle.close()

    def __getattr__(self, name):
        return getattr(self._handle, name)


class _Pyarrow:
    """RLlib's `pyarrow` reference, whose `fs.FileSystem.from_uri` gives a counting file
    system."""

    def __init__(self, real, disk: SmallDisk):
        self._real = real
        self.fs = _Namespace(real.fs, FileSystem=_Namespace(
            real.fs.FileSystem, from_uri=lambda uri: _from_uri(real, disk, uri)))

    def __getattr__(self, name):
        return getattr(self._real, name)


def _from_uri(real, disk: SmallDisk, uri):
    filesystem, path = real.fs.FileSystem.from_uri(uri)
    return _FileSystem(filesystem, disk), path


class _Namespace:
    def __init__(self, real, **overrides):
        self._real = real
        self.__dict__.update(overrides)

    def __getattr__(self, name):
        return getattr(self._real, name)


class _FileSystem:
    def __init__(self, real, disk: SmallDisk):
        self._real, self._disk = real, disk

    def open_output_stream(self, path, *args, **kwargs):
        stream = self._real.open_output_stream(path, *args, **kwargs)
        return _File(stream, self._disk, path) if self._disk.under(path) else stream

    def __getattr__(self, name):
        return getattr(self._real, name)
