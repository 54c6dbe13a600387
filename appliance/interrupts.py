"""SIGTERM handled as Ctrl-C: `kill` ends a command the way an interrupt does (what finished is stored)."""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Callable, Iterator


@contextmanager
def sigterm_as_interrupt(before: Callable[[], object] | None = None) -> Iterator[None]:
    """Inside the block a SIGTERM calls `before()` (if given), then raises KeyboardInterrupt.

    Signal handlers can only be set from the main thread; elsewhere (the cockpit's worker threads)
    this does nothing. The previous handler is back after the block.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        if before is not None:
            before()
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
