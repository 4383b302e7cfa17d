"""Writing a file whole or not at all (a temp file beside it, fsync, rename), for every writer of results, configs and
caches; light (os only), so that the worker processes import no pandas for it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: str | Path, data: bytes) -> None:
    """`data` as the file `path`: a temp file of its own in the same folder, fsync, rename.  Readers see the old
    file or the new one, never half; writers racing on one path (workers on several GPUs) each finish whole."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), usual_mode())  # mkstemp makes 0600: give the file the usual mode
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:  # incl. KeyboardInterrupt: leave no temp file behind
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    # Persist the rename itself; not every platform can open a directory, hence best effort.
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def usual_mode() -> int:
    """The mode an ordinary new file gets here (0666 less the umask): what a mkstemp file (0600) is given."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask
