"""encode_batch's job in the C core (csrc/batch_stream.c), run from Python.

C reads every str where it lies (text_units in csrc/pyext/idlist.c gives where, and a copy of
the caller's list holds the strs until the job is finished); worker threads encode groups of
texts while the thread that collects, holding the GIL, turns the finished groups into lists.

Where it runs.  From the main thread, a job of _CANCELLABLE_MIN code units or more is started
and collected on the helper thread of progress.run_cancellable, so that Ctrl-C stops it within
a moment.  A batch of EARLY_WORKERS_MIN texts or more that will be that large (as a sample
of its texts says) goes to that thread at once, and there opens its job (bpe_batch_open: the
worker threads start and get ready) before it locates the texts: locating 30K strs takes
~1 ms, which the workers spend making their copies of the word cache (~0.9 ms in a process's
first batch) instead of after it.  Opened by the main thread while it locates the strs, a new
worker did not run until the main thread stopped: this machine queued it on its creator's
core.  A smaller batch is not worth the hand-over (~0.5 ms).
"""
import threading

from . import _idcache
from ._native import ffi, lib

# encode_batch of this many texts or more, from the main thread, opens its job early (above)
# when a sample of SAMPLED of its texts says they hold the helper thread's minimum of code units.
EARLY_WORKERS_MIN = 4096
SAMPLED = 16


def sampled_units(texts) -> int:
    """About how many code units the texts (a list) hold: len() of SAMPLED of them spread
    over it, scaled up; anything without a len counts 0 (it raises later, when located)."""
    n = len(texts)
    step = max(n // SAMPLED, 1)
    total = 0
    for i in range(0, n, step):
        try:
            total += len(texts[i])
        except (TypeError, IndexError):    # (the caller's list may shrink meanwhile)
            pass
    return total * step


class BatchJob:
    """One encode_batch job: `run` locates the texts, starts the job, collects it, and always
    finishes it (its threads joined, its memory freed) before returning or raising.

    handle: the tokenizer's pointer, held by the caller until `run` returns.  collect(job, n,
    held): every group's lists, as (lists, 0, 0) or ([], error code, failing text); it may
    put None in held in place of the texts that the job no longer reads.  join_utf8(texts):
    (UTF-8 end to end, ends) for texts the helper extension cannot read in place.
    run_batch(start_and_collect, cancel, size): runs start_and_collect() where a job of that
    many code units belongs (Tokenizer._run_batch), on the helper thread from helper_min of
    them on."""

    def __init__(self, handle, mode, num_threads, collect, join_utf8, run_batch, helper_min):
        self.handle = handle
        self.mode = mode
        self.num_threads = num_threads
        self.collect = collect
        self.join_utf8 = join_utf8
        self.run_batch = run_batch
        self.helper_min = helper_min
        self.job_p = ffi.new("bpe_batch_job **")    # NULL until opened or started
        self.stopped = False                         # Ctrl-C came (see cancel)
        self.held = []       # the strs C reads, once located (None where C is done)

    def run(self, texts, own):
        """(lists, 0, 0) or (None / [], error code, failing text) for the texts (own: a list
        nobody else sees, else the caller's, which is copied as it is read)."""
        try:
            if len(texts) >= EARLY_WORKERS_MIN and self.num_threads != 1 and \
                    threading.current_thread() is threading.main_thread():
                sampled = sampled_units(texts)
                if sampled >= self.helper_min:       # run_batch: on the helper thread
                    return self.run_batch(lambda: self._open_locate_collect(texts, own),
                                          self.cancel, sampled)
            located = self._locate(texts, own)
            if not self.held:
                return [], 0, 0
            size = located[2][len(self.held) - 1]
            return self.run_batch(lambda: self._start_and_collect(*located), self.cancel, size)
        finally:
            # read back from C's memory: a signal raising right after the start still ends
            # the job (its threads read the texts) before they can go
            lib.bpe_batch_finish(self.job_p[0])

    def cancel(self):
        """Stops the job from any thread (Ctrl-C); one not started yet stops once it is."""
        self.stopped = True
        lib.bpe_batch_cancel(self.job_p[0])            # NULL (not started yet): nothing

    def _locate(self, texts, own):
        """(joined, starts, ends, kinds) as bpe_batch_begin takes them; the strs in held."""
        units = _idcache.text_units(texts, own)
        if units is None:                    # not all exact strs, or no helper extension
            self.held = texts if own else list(texts)
            joined, ends = self.join_utf8(self.held)
            return joined, ffi.NULL, ends, ffi.NULL
        self.held, starts, ends, kinds = units
        return (ffi.NULL, ffi.from_buffer("uint8_t *[]", starts),
                ffi.from_buffer("size_t[]", ends), ffi.from_buffer("uint8_t[]", kinds))

    def _open_locate_collect(self, texts, own):
        # a failed open leaves job_p NULL: bpe_batch_start starts the workers after
        lib.bpe_batch_open(self.handle, self.num_threads, len(texts), self.job_p)
        if self.stopped:
            lib.bpe_batch_cancel(self.job_p[0])
        located = self._locate(texts, own)
        return self._start_and_collect(*located) if self.held else ([], 0, 0)

    def _start_and_collect(self, joined, starts, ends, kinds):
        n = len(self.held)
        if self.job_p[0] != ffi.NULL:
            rc = lib.bpe_batch_begin(self.job_p[0], n, joined, starts, ends, kinds, self.mode)
        else:
            rc = lib.bpe_batch_start(self.handle, n, joined, starts, ends, kinds, self.mode,
                                     self.num_threads, self.job_p)
        if rc:
            return None, rc, 0
        if self.stopped:          # before the job was there to cancel
            lib.bpe_batch_cancel(self.job_p[0])
        return self.collect(self.job_p[0], n, self.held)
