"""Running a long C call: a progress bar on stderr, and Ctrl-C that really stops it.

A long C call (training, encoding a file) runs with the GIL released in a worker thread while
the calling thread watches a `bpe_progress` struct that C updates.  Python delivers Ctrl-C only
to the main thread, and only between bytecodes, so the main thread waits in short slices; on
KeyboardInterrupt it sets `progress.cancel`, the C call notices within about a tenth of a
second and returns BPE_ERR_CANCELLED, the worker thread is joined, and KeyboardInterrupt is
re-raised.  No thread is left running.
"""
import sys
import threading
import time

from ._native import ffi, lib

_UNITS = {"B": (1e6, "MB"), "merges": (1.0, "merges")}


def _fmt_eta(seconds: float) -> str:
    if seconds != seconds or seconds == float("inf") or seconds < 0:
        return "--:--"
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


class Bar:
    """A one-line progress bar on a stream (stderr), redrawn at most ten times a second."""

    def __init__(self, label: str, unit: str = "B", stream=None):
        self.label = label
        self.scale, self.unit = _UNITS.get(unit, (1.0, unit))
        self.stream = stream if stream is not None else sys.stderr
        self.start = time.monotonic()
        self.last = 0.0
        self.drawn = False        # a line is open (drawn and not yet closed)
        self.ever_drawn = False   # update() ran at least once
        self.last_line = ""
        isatty = getattr(self.stream, "isatty", None)
        self.interactive = bool(isatty and isatty())

    def update(self, done: int, total: int, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last < 0.1:
            return
        self.last = now
        elapsed = max(now - self.start, 1e-9)
        rate = done / elapsed
        amount = f"{done / self.scale:,.1f}" if self.scale != 1.0 else f"{done:,}"
        if total:
            frac = min(done / total, 1.0)
            width = 24
            filled = int(frac * width)
            bar = "#" * filled + "-" * (width - filled)
            whole = f"{total / self.scale:,.1f}" if self.scale != 1.0 else f"{total:,}"
            eta = _fmt_eta((total - done) / rate) if rate > 0 else "--:--"
            line = (f"{self.label} [{bar}] {100 * frac:5.1f}% {amount}/{whole} {self.unit} "
                    f"{rate / self.scale:,.1f} {self.unit}/s ETA {eta}")
        else:
            line = f"{self.label} {amount} {self.unit} {rate / self.scale:,.1f} {self.unit}/s"
        if self.interactive:
            self.stream.write("\r" + line + "\x1b[K")
            self.stream.flush()
        self.last_line = line
        self.drawn = True
        self.ever_drawn = True

    def close(self) -> None:
        """End the bar's line.  On a terminal the bar was redrawn in place; elsewhere (a log
        file, a pipe) nothing was written yet, and the final state is written once, plainly."""
        if self.drawn:
            self.stream.write("\n" if self.interactive else self.last_line + "\n")
            self.stream.flush()
            self.drawn = False


def run_cancellable(call, progress_struct, bars=None):
    """Run `call()` (a C call that takes `progress_struct`) in a worker thread.

    `bars` maps a BPE_PHASE_* value to a Bar (or is None for no display).  Returns what
    `call()` returns.  Ctrl-C in the calling thread cancels the C call, joins the worker and
    re-raises KeyboardInterrupt; an exception in the worker is re-raised here.
    """
    result = {}

    def worker():
        try:
            result["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            result["error"] = exc

    thread = threading.Thread(target=worker, name="bpe_cffi-call", daemon=True)
    thread.start()
    shown = None      # the bar drawn last
    last = (0, 0)     # (done, total) as last seen for that bar
    try:
        while thread.is_alive():
            thread.join(0.05)
            if not bars:
                continue
            bar = bars.get(progress_struct.phase)
            if bar is not shown and shown is not None:
                shown.update(*last, force=True)    # finish the previous phase's line
                shown.close()
            if bar is not None:
                last = (progress_struct.done, progress_struct.total)
                bar.update(*last)
            shown = bar
    except KeyboardInterrupt:
        progress_struct.cancel = 1
        thread.join()
        if shown is not None:
            shown.close()
        raise
    if shown is not None:
        shown.update(progress_struct.done, progress_struct.total, force=True)
        shown.close()
    if "error" in result:
        raise result["error"]
    return result.get("value")


def new_progress():
    """A zeroed bpe_progress struct (owned by Python, freed with the returned object)."""
    return ffi.new("bpe_progress *")


__all__ = ["Bar", "run_cancellable", "new_progress"]
