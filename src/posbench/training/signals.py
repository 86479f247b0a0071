"""Stopping on a signal: the handler only sets a flag, so a stop always lands on a step boundary where every
rank saves the same step (a handler that saved or exited itself could tear a checkpoint)."""

from __future__ import annotations

import signal


class StopFlag:
    """SIGTERM/SIGINT set a flag; the loop saves at the next step boundary on all ranks and exits."""

    def __init__(self):
        self.raised = False
        self.previous = {}
        for sig in (signal.SIGTERM, signal.SIGINT):
            self.previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum, frame):
        self.raised = True

    def restore(self):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
