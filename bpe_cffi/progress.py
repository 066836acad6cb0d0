"""Running a long C call: a progress bar on stderr, and Ctrl-C that really stops it.

A long C call (training, encoding a file) runs with the GIL released in a worker thread while
the calling thread watches a `bpe_progress` struct that C updates.  Python delivers Ctrl-C only
to the main thread, and only between bytecodes, so the main thread waits in short slices; on
KeyboardInterrupt it sets `progress.cancel`, the C call notices within about a tenth of a
second and returns BPE_ERR_CANCELLED, the worker thread is joined, and KeyboardInterrupt is
re-raised.  No thread is left running.
"""
import signal
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


class _SigintRecorded:
    """Between install() and restore(), Ctrl-C in the main thread is recorded (.caught)
    instead of running the handler; restore() puts the handler back and calls it for a
    recorded Ctrl-C (so KeyboardInterrupt is raised there).  run_cancellable starts its
    worker in between: a KeyboardInterrupt raised while the thread starts (a signal that
    came during the C work just before is handled at the first bytecode after, possibly
    inside Thread.start) would otherwise leave with the worker running, and the caller would
    free buffers the C call still writes.  Does nothing outside the main thread (no signal
    arrives there) or when the handler was not set from Python."""

    def __init__(self):
        self.caught = False
        self.old = None

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        old = signal.getsignal(signal.SIGINT)
        if old is None:                      # set by C code: cannot be put back
            return
        self.old = old
        signal.signal(signal.SIGINT, self._record)

    def _record(self, signum, frame):
        self.caught = True

    def restore(self) -> None:
        old, self.old = self.old, None
        if old is None:
            return
        signal.signal(signal.SIGINT, old)
        if not self.caught:
            return
        if callable(old):
            old(signal.SIGINT, None)         # Python's default raises KeyboardInterrupt
        elif old == signal.SIG_DFL:
            signal.raise_signal(signal.SIGINT)   # the system's default: end the process


def _wait_surely(done, thread) -> None:
    """Wait until the worker's call has returned (done set), whatever Ctrl-C comes meanwhile
    (the C call has been told to stop), then for its thread to end.  Not by Thread.join
    alone: in CPython 3.11 a KeyboardInterrupt inside join() can mark a thread that is still
    running as stopped, and join() and is_alive() then no longer wait for it."""
    while not done.is_set():
        try:
            done.wait()
        except KeyboardInterrupt:
            pass
    try:
        thread.join()
    except KeyboardInterrupt:
        pass                                 # its call has returned: nothing is left to wait for


def run_cancellable(call, progress_struct, bars=None):
    """Run `call()` (a C call that takes `progress_struct`) in a worker thread.

    `bars` maps a BPE_PHASE_* value to a Bar (or is None for no display).  Returns what
    `call()` returns.  Ctrl-C in the calling thread cancels the C call, waits for it to
    return and re-raises KeyboardInterrupt; an exception in the worker is re-raised here.
    Whatever leaves this function, normally or by an exception, the call has returned: the
    caller may free what the C call uses.
    """
    result = {}
    done = threading.Event()

    def worker():
        try:
            result["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            result["error"] = exc
        finally:
            done.set()

    thread = threading.Thread(target=worker, name="bpe_cffi-call", daemon=True)
    sigint = _SigintRecorded()
    sigint.install()
    try:
        thread.start()
    except RuntimeError:             # no thread can be started now: run the call here
        sigint.restore()             # (without progress bars, and Ctrl-C waits for it)
        return call()
    except BaseException:
        sigint.restore()
        raise
    shown = None      # the bar drawn last
    last = (0, 0)     # (done, total) as last seen for that bar
    try:
        sigint.restore()             # from here a Ctrl-C raises, and is handled below
        while not done.wait(0.05):
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
        thread.join()
    except BaseException:
        progress_struct.cancel = 1
        _wait_surely(done, thread)
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
