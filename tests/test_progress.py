"""The progress bar: redrawn in place on a terminal; anywhere else a plain line now and then
and one at the end."""
import io

import pytest

from bpe_cffi.progress import Bar


class FakeTTY(io.StringIO):
    def isatty(self):
        return True


def test_bar_writes_one_plain_line_to_a_log():
    out = io.StringIO()
    bar = Bar("encode x", unit="B", stream=out)
    for done in (0, 500_000, 1_000_000):
        bar.update(done, 1_000_000, force=True)
    bar.close()
    text = out.getvalue()
    assert "\r" not in text and "\x1b" not in text
    assert text.count("\n") == 1 and "100.0%" in text and text.startswith("encode x")


def test_bar_logs_a_plain_line_now_and_then_away_from_a_terminal(monkeypatch):
    """A job writing to a log showed nothing for hours, until its end.  A fake clock: updates
    every 10 s for 150 s (from t=1000); a plain line after 60 s and 120 s, the final one at close."""
    import bpe_cffi.progress as progress
    now = [0.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    out = io.StringIO()
    bar = Bar("encode big", unit="B", stream=out)
    for step in range(16):
        now[0] = 1000.0 + 10.0 * step
        bar.update(step * 1_000_000, 15_000_000)
    bar.close()
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue() and len(lines) == 3, lines
    assert "6.0/15.0 MB" in lines[0] and "12.0/15.0 MB" in lines[1], lines
    assert "100.0%" in lines[2], lines
    out = io.StringIO()                       # the last line logged is the final state:
    bar = Bar("encode big", unit="B", stream=out)    # not written twice
    now[0] = 2000.0
    bar.update(0, 10, force=True)
    now[0] = 2060.0
    bar.update(10, 10, force=True)
    bar.close()
    assert out.getvalue().count("100.0%") == 1, out.getvalue()


def test_bytes_under_a_megabyte_are_shown_in_kilobytes():
    """A 40 KB file read "0.0/0.0 MB"; a stream shows KB until it passes a megabyte."""
    out = io.StringIO()
    bar = Bar("counting", unit="B", stream=out)
    bar.update(40_960, 40_960, force=True)
    bar.close()
    assert "100.0% 41.0/41.0 KB" in out.getvalue(), out.getvalue()
    out = FakeTTY()
    bar = Bar("encode stdin", unit="B", stream=out)
    bar.update(300_000, 0, force=True)
    bar.update(2_500_000, 0, force=True)
    bar.close()
    assert "encode stdin 300.0 KB" in out.getvalue() and "encode stdin 2.5 MB" in \
        out.getvalue(), out.getvalue()


def test_bar_redraws_in_place_on_a_terminal():
    out = FakeTTY()
    bar = Bar("merging", unit="merges", stream=out)
    bar.update(1, 4, force=True)
    bar.update(4, 4, force=True)
    bar.close()
    text = out.getvalue()
    assert text.count("\r") == 2 and text.endswith("\n") and "4/4 merges" in text


def test_rate_and_eta_count_from_the_bar_s_first_update(monkeypatch):
    """Training makes the merge bar before counting starts: its rate and ETA counted the
    counting phase too (5 merges/s and ETA 31:26 for a phase of 13K merges/s).  A fake clock:
    made at t=0, first update at t=100 (0 done), then 500 of 1000 done at t=101."""
    import bpe_cffi.progress as progress
    now = [0.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    out = io.StringIO()
    bar = Bar("merging", unit="merges", stream=out)
    now[0] = 100.0
    bar.update(0, 1000, force=True)
    now[0] = 101.0
    bar.update(500, 1000, force=True)
    bar.close()
    assert "500.0 merges/s ETA 00:01" in out.getvalue(), out.getvalue()


def test_close_twice_writes_nothing_more():
    out = io.StringIO()
    bar = Bar("x", stream=out)
    bar.update(1, 2, force=True)
    bar.close()
    first = out.getvalue()
    bar.close()
    assert out.getvalue() == first


def test_training_prints_each_phase_once(tmp_path):
    """Training with progress on a small file prints one 'counting' and one 'merging' line
    (a phase that ended before the first redraw used to print its final line twice)."""
    import contextlib

    from bpe_cffi import train_bpe
    p = tmp_path / "t.txt"
    p.write_text("hello world, the quick brown fox jumps over the lazy dog. " * 200)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        train_bpe(p, 300, progress=True)
    lines = err.getvalue().splitlines()
    assert sum(line.startswith("counting") for line in lines) == 1, lines
    assert sum(line.startswith("merging") for line in lines) == 1, lines


SIGINT_SCRIPT = r"""
import os, signal, sys, time
sys.path[:0] = {paths!r}
from bpe_cffi.progress import _SignalsRecorded
kind = {kind!r}
seen = []
if kind == "ignore":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
elif kind == "custom":
    signal.signal(signal.SIGINT, lambda s, f: seen.append(s))
elif kind == "system":
    signal.signal(signal.SIGINT, signal.SIG_DFL)
rec = _SignalsRecorded()
rec.install()
os.kill(os.getpid(), signal.SIGINT)     # while recorded: no handler runs
time.sleep(0.05)
print("recorded", rec.caught == [signal.SIGINT], seen == [], flush=True)
try:
    rec.restore()                       # now the handler that was there sees it
    print("after", seen == [signal.SIGINT], signal.getsignal(signal.SIGINT) == signal.SIG_IGN)
except KeyboardInterrupt:
    print("after KeyboardInterrupt")
"""


def test_sigint_recorded_while_a_worker_starts_reaches_the_handler_after():
    """run_cancellable starts its worker with Ctrl-C recorded, not raised; restore() hands
    a recorded one to whatever handler was set: Python's default raises KeyboardInterrupt,
    a custom one is called, SIG_IGN ignores it, the system default ends the process."""
    import os
    import signal
    import subprocess
    import sys
    import bpe_cffi
    from conftest import default_sigint
    paths = [os.path.dirname(os.path.dirname(bpe_cffi.__file__))]
    outs = {}
    for kind in ("python", "ignore", "custom", "system"):
        res = subprocess.run([sys.executable, "-c", SIGINT_SCRIPT.format(paths=paths,
                                                                          kind=kind)],
                             capture_output=True, text=True, timeout=60,
                             preexec_fn=default_sigint)
        outs[kind] = (res.returncode, res.stdout.split("\n")[:2])
    assert outs["python"] == (0, ["recorded True True", "after KeyboardInterrupt"])
    assert outs["ignore"] == (0, ["recorded True True", "after False True"])
    assert outs["custom"] == (0, ["recorded True True", "after True False"])
    assert outs["system"] == (-signal.SIGINT, ["recorded True True", ""])


def test_run_cancellable_runs_the_call_here_when_no_thread_starts(monkeypatch):
    """Out of threads (Thread.start raises RuntimeError): the call still runs, on the
    calling thread, and its result comes back (encode of a long text goes this way)."""
    import threading
    from bpe_cffi import progress
    from bpe_cffi._native import ffi

    def refuse(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    monkeypatch.setattr(progress, "_KEPT", None)      # so that one must start
    prog = ffi.new("bpe_progress *")
    assert progress.run_cancellable(lambda: threading.current_thread().name, prog) == \
        threading.current_thread().name


def test_a_phase_over_before_its_first_draw_shows_no_rate(monkeypatch):
    """A phase that ended before its bar was first drawn (its first update is its last) said
    '144/144 merges 0.0 merges/s ETA --:--': now its amount alone."""
    import bpe_cffi.progress as progress
    monkeypatch.setattr(progress.time, "monotonic", lambda: 5.0)
    out = io.StringIO()
    bar = Bar("merging", unit="merges", stream=out)
    bar.update(144, 144, force=True)
    bar.close()
    line = out.getvalue()
    assert "144/144 merges" in line and "/s" not in line and "ETA" not in line, line



def test_run_cancellable_keeps_one_thread_for_its_calls():
    """Calls one after another run on the same kept thread (no thread started per call), each
    result or exception comes back to its caller, and none is left running after; a call
    made while that thread is busy (here: from inside a call) runs on a thread of its own
    instead of waiting for it."""
    import threading
    from bpe_cffi import progress
    from bpe_cffi._native import ffi
    prog = ffi.new("bpe_progress *")
    here = threading.get_ident()
    first = progress.run_cancellable(threading.get_ident, prog)
    assert first != here
    assert [progress.run_cancellable(threading.get_ident, prog) for _ in range(5)] == [first] * 5

    def fails():
        raise ValueError("from the call")

    with pytest.raises(ValueError, match="from the call"):
        progress.run_cancellable(fails, prog)
    inner = progress.run_cancellable(
        lambda: (threading.get_ident(), progress.run_cancellable(threading.get_ident, prog)),
        prog)
    assert inner[0] == first and inner[1] not in (first, here)
    assert progress.run_cancellable(threading.get_ident, prog) == first
    assert progress.calls_running() == 0


def test_run_cancellable_keeps_nothing_of_a_call_after_it_returns():
    """The kept thread lets go of a call (its result, what it used) once the call is over,
    not when the next call comes: a program that drops a large result (encode_batch's lists)
    or its input gets the memory back."""
    import time
    import weakref
    from bpe_cffi import progress
    from bpe_cffi._native import ffi

    class Thing:
        pass

    def call_of(used, made):     # cells of its own: the del below does not empty them
        return lambda: (used, made)[1]

    prog = ffi.new("bpe_progress *")
    used, made = Thing(), Thing()
    got = progress.run_cancellable(call_of(used, made), prog)
    assert got is made
    gone = [weakref.ref(used), weakref.ref(made)]
    del used, made, got
    deadline = time.monotonic() + 5
    while any(r() is not None for r in gone) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [r() for r in gone] == [None, None]


def test_run_cancellable_in_a_forked_child():
    """A child forked after the kept thread started (it does not exist in the child) runs
    its calls on a kept thread of its own."""
    import os
    import threading
    from bpe_cffi import progress
    from bpe_cffi._native import ffi
    if not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    prog = ffi.new("bpe_progress *")
    parent_thread = progress.run_cancellable(threading.get_ident, prog)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:                                 # the child: report, then leave at once
        try:
            got = [progress.run_cancellable(lambda: 6 * 7, prog) for _ in range(2)]
            ok = got == [42, 42] and progress.calls_running() == 0
            os.write(write, b"ok" if ok else repr(got).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        said = f.read()
    _, status = os.waitpid(pid, 0)
    assert said == b"ok" and status == 0, said
    assert progress.run_cancellable(threading.get_ident, prog) == parent_thread
