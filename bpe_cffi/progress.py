"""Running a long C call: a progress bar on stderr, and Ctrl-C that really stops it.

A long C call (training, encoding a file) runs with the GIL released in a worker thread while
the calling thread watches a `bpe_progress` struct that C updates.  Python delivers Ctrl-C only
to the main thread, and only between bytecodes, so the main thread waits in short slices; on
KeyboardInterrupt it sets `progress.cancel`, the C call notices within about a tenth of a
second and returns BPE_ERR_CANCELLED, and once the call has returned KeyboardInterrupt is
re-raised.  No call is left running.  The worker is one thread kept for these calls
(_KeptThread), idle between them.
"""
import os
import signal
import sys
import threading
import time

from ._native import ffi

_UNITS = {"B": (1e6, "MB"), "merges": (1.0, "merges")}
_SMALL_BYTES = (1e3, "KB")     # bytes while the amount and the total are under a megabyte


def _fmt_eta(seconds: float) -> str:
    if seconds != seconds or seconds == float("inf") or seconds < 0:
        return "--:--"
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


# Away from a terminal (a log file, a pipe, a batch job's output) a bar cannot be redrawn:
# it writes a plain line this often, so an hours-long job still shows it is moving.
LOG_INTERVAL = 60.0


class Bar:
    """A one-line progress bar on a stream (stderr), redrawn at most ten times a second on a
    terminal; elsewhere a plain line every LOG_INTERVAL seconds and one at the end."""

    def __init__(self, label: str, unit: str = "B", stream=None):
        self.label = label
        self.scale, self.unit = _UNITS.get(unit, (1.0, unit))
        self.stream = stream if stream is not None else sys.stderr
        self.start = None         # the clock starts at the first update (the phase's
        self.done0 = 0            # start: a bar made before an earlier phase ran must not
        self.last = 0.0           # count that phase's time in its rate and ETA)
        self.drawn = False        # a line is open (drawn and not yet closed)
        self.ever_drawn = False   # update() ran at least once
        self.last_line = ""
        self.logged = None        # (time, line) of the last plain line written (not a tty)
        isatty = getattr(self.stream, "isatty", None)
        self.interactive = bool(isatty and isatty())

    def update(self, done: int, total: int, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last < 0.1:
            return
        self.last = now
        if self.start is None:
            self.start, self.done0 = now, done
        elapsed = now - self.start
        rate = (done - self.done0) / elapsed if elapsed > 0 else 0.0
        if self.unit in ("MB", "KB", "B"):   # "0.0/0.0 MB" said nothing of a 40 KB file
            most = max(done, total)
            self.scale, self.unit = _UNITS["B"] if most >= 1e6 else \
                _SMALL_BYTES if most >= 1e3 else (1.0, "B")
        amount = f"{done / self.scale:,.1f}" if self.scale != 1.0 else f"{done:,}"
        # no rate yet at the first update (a phase over before the bar was first drawn
        # shows its amount alone, not "0.0/s")
        speed = f" {rate / self.scale:,.1f} {self.unit}/s" if elapsed > 0 else ""
        if total:
            frac = min(done / total, 1.0)
            width = 24
            filled = int(frac * width)
            bar = "#" * filled + "-" * (width - filled)
            whole = f"{total / self.scale:,.1f}" if self.scale != 1.0 else f"{total:,}"
            eta = "" if done >= total else \
                f" ETA {_fmt_eta((total - done) / rate) if rate > 0 else '--:--'}"
            line = (f"{self.label} [{bar}] {100 * frac:5.1f}% {amount}/{whole} {self.unit}"
                    f"{speed}{eta}")
        else:
            line = f"{self.label} {amount} {self.unit}{speed}"
        if self.interactive:
            self.stream.write("\r" + line + "\x1b[K")
            self.stream.flush()
        elif now - (self.logged[0] if self.logged else self.start) >= LOG_INTERVAL:
            self.stream.write(line + "\n")
            self.stream.flush()
            self.logged = (now, line)
        self.last_line = line
        self.drawn = True
        self.ever_drawn = True

    def close(self) -> None:
        """End the bar's line.  On a terminal the bar was redrawn in place; elsewhere (a log
        file, a pipe) the final state is written plainly, unless the last line logged was
        already that."""
        if self.drawn:
            if self.interactive:
                self.stream.write("\n")
            elif self.logged is None or self.logged[1] != self.last_line:
                self.stream.write(self.last_line + "\n")
            self.stream.flush()
            self.drawn = False


class _SignalsRecorded:
    """Between install() and restore(), SIGINT (and SIGTERM where Python handles it) in the
    main thread are recorded instead of running their handlers, and `on_signal` is called
    (run_cancellable: set progress.cancel, so the C call stops).  restore() puts the handlers
    back and calls the one of the first signal recorded (Python's SIGINT handler raises
    KeyboardInterrupt; the system default ends the process; SIG_IGN ignores it).

    Why.  A handler that raises, run while the main thread waits for the worker (a
    Condition's wait, or Thread.start), can leave that wait's lock in a broken state when a
    second signal comes during its cleanup: two quick SIGTERMs left the CLI hung for good
    (1 in 40) or ended it with 'release unlocked lock'.  Recording never raises; the handler
    runs once the C call has returned.  Does nothing outside the main thread (no signal
    arrives there) or for a handler not set from Python (SIGTERM's default, C code's)."""

    def __init__(self, on_signal=None):
        self.caught = []
        self.old = {}
        self.on_signal = on_signal

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGINT, signal.SIGTERM):
            old = signal.getsignal(sig)
            if old is None or (sig == signal.SIGTERM and not callable(old)):
                continue                     # C code's, or the system's for SIGTERM
            self.old[sig] = old
            signal.signal(sig, self._record)

    def _record(self, signum, frame):
        self.caught.append(signum)
        if self.on_signal is not None and self.old.get(signum) != signal.SIG_IGN:
            self.on_signal()

    def restore(self) -> None:
        old, self.old = self.old, {}
        for sig, handler in old.items():
            signal.signal(sig, handler)
        first = next((sig for sig in self.caught if sig in old), None)
        if first is None:
            return
        handler = old[first]
        if callable(handler):
            handler(first, None)             # Python's SIGINT default raises KeyboardInterrupt
        elif handler == signal.SIG_DFL:
            signal.raise_signal(first)       # the system's default: end the process


class _KeptThread:
    """The thread that runs run_cancellable's calls, kept between them instead of one
    started (and joined) per call: a start and a join cost the calling thread 0.3-0.8 ms,
    serial work in a 45 ms encode_batch of 8 MB (the shared yardstick, 2 threads), and each
    new thread could be given a different malloc arena, in which making the batch's lists
    took longer or shorter depending on what other threads had left there; the kept thread
    keeps its own.  One call at a time: `busy` is held by the run_cancellable whose call it
    runs, from handing it over until that call has returned (a call arriving meanwhile, from
    another thread or a signal handler, starts a thread of its own).  A forked child makes a
    new one (the parent's thread does not exist there)."""

    def __init__(self):
        self.busy = threading.Lock()
        self.handed = threading.Event()    # set when `job` holds a call to run
        self.job = None
        self.thread = threading.Thread(target=self._serve, name="bpe_cffi-call", daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            self.handed.wait()
            self.handed.clear()      # before the job: the next one is handed only after it
            job, self.job = self.job, None
            job()                    # run_cancellable's worker: it never raises
            # dropped now, not when the next call comes: the worker holds the call's result
            # and the call what it used (encode_batch's copy of the texts list)
            del job

    def hand(self, job) -> None:
        self.job = job
        self.handed.set()


_KEPT = None                         # the _KeptThread, once one has started
_KEPT_LOCK = threading.Lock()        # guards _KEPT's creation


def _forget_kept_thread() -> None:
    global _KEPT, _KEPT_LOCK
    _KEPT = None
    _KEPT_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_kept_thread)


def _take_kept_thread():
    """The kept thread with its `busy` lock taken, or None when it is busy (a new thread
    then runs the call).  Starts it on first use: RuntimeError when no thread can start."""
    global _KEPT
    with _KEPT_LOCK:
        if _KEPT is None or not _KEPT.thread.is_alive():   # (it never ends; if it did, a
            _KEPT = _KeptThread()                          # call handed to it would hang)
        kept = _KEPT
    return kept if kept.busy.acquire(blocking=False) else None


def _start_call(worker):
    """Runs worker() on the kept thread, or on a new one when that is busy; returns the
    function that waits for that thread to be done with it (`done` already set)."""
    kept = _take_kept_thread()
    if kept is not None:
        kept.hand(worker)
        return kept.busy.release
    thread = threading.Thread(target=worker, name="bpe_cffi-call", daemon=True)
    thread.start()
    return thread.join


def _wait_surely(done, finish) -> None:
    """Wait until the worker's call has returned (done set), whatever Ctrl-C comes meanwhile
    (the C call has been told to stop), then for its thread to be done with it (`finish`).
    Not by Thread.join alone: in CPython 3.11 a KeyboardInterrupt inside join() can mark a
    thread that is still running as stopped, and join() and is_alive() then no longer wait
    for it."""
    while not done.is_set():
        try:
            done.wait()
        except KeyboardInterrupt:
            pass
    try:
        finish()
    except KeyboardInterrupt:
        pass                                 # its call has returned: nothing is left to wait for


def calls_running() -> int:
    """How many run_cancellable calls are running (for tests: none once they returned)."""
    kept = _KEPT
    return sum(t.name == "bpe_cffi-call" and t.is_alive() and (kept is None or
                                                             t is not kept.thread)
               for t in threading.enumerate()) + (kept is not None and kept.busy.locked())


def run_cancellable(call, progress_struct, bars=None, cancel=None):
    """Run `call()` (a C call that takes `progress_struct`) in a worker thread.

    `bars` maps a BPE_PHASE_* value to a Bar (or is None for no display).  Returns what
    `call()` returns.  Ctrl-C in the calling thread cancels the C call (by `cancel()`, by
    default setting progress_struct.cancel), waits for it to return and re-raises
    KeyboardInterrupt; an exception in the worker is re-raised here.  Whatever leaves this
    function, normally or by an exception, the call has returned: the caller may free what
    the C call uses.
    """
    if cancel is None:
        def cancel():
            progress_struct.cancel = 1
    result = {}
    done = threading.Event()

    def worker():
        try:
            result["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            result["error"] = exc
        finally:
            done.set()

    signals = _SignalsRecorded(cancel)
    signals.install()                # until the call has returned: see _SignalsRecorded
    try:
        finish = _start_call(worker)
    except RuntimeError:             # no thread can be started now: run the call here
        signals.restore()            # (without progress bars, and Ctrl-C waits for it)
        return call()
    except BaseException:
        signals.restore()
        raise
    shown = None      # the bar drawn last
    last = (0, 0)     # (done, total) as last seen for that bar
    try:
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
        finish()
    except BaseException:
        cancel()
        _wait_surely(done, finish)
        if shown is not None:
            shown.close()
        signals.restore()
        raise
    if shown is not None:
        shown.update(progress_struct.done, progress_struct.total, force=True)
        shown.close()
    signals.restore()                # a signal recorded meanwhile: its handler runs now
    if "error" in result:
        raise result["error"]
    return result.get("value")


def new_progress():
    """A zeroed bpe_progress struct (owned by Python, freed with the returned object)."""
    return ffi.new("bpe_progress *")


__all__ = ["Bar", "run_cancellable", "new_progress"]
