"""SIGTERM and SIGHUP stop a command as Ctrl-C does (what `kill`, Kubernetes and CI cancellation send, and a closed
terminal): the workers are stopped, finished rows stay on disk, the tables, summary and JSON document are printed;
then the process ends by that signal, so the shell sees 143 or 129 (Ctrl-C: 130).  A second signal ends it at once."""

from __future__ import annotations

import os
import signal
import sys

STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_caught: list[int] = []


def _stop(signum: int, frame) -> None:
    if _caught:  # the user insists: no more cleanup (each worker's watcher ends it: worker_process.WATCHER)
        os._exit(128 + signum)
    _caught.append(signum)
    raise KeyboardInterrupt


def install() -> None:
    for sig in STOPPING:
        signal.signal(sig, _stop)


def end_by_signal() -> None:
    """After the command's own cleanup: die by the signal that stopped it (not SIGINT, whose 130 the command
    already exits with), its output flushed first."""
    if _caught and _caught[0] != signal.SIGINT:
        sys.stdout.flush()
        sys.stderr.flush()
        signal.signal(_caught[0], signal.SIG_DFL)
        os.kill(os.getpid(), _caught[0])
