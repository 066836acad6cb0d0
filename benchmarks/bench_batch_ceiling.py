"""Where encode_batch's time goes, against one encode_ordinary of the whole text, and the
highest batch/single ratio that the Python objects of the result leave possible.

    python benchmarks/bench_batch_ceiling.py [--mb 8] [--vocab gpt2 ...] [--rounds 15]

The shared yardstick (compare_encode.py) times encode_ordinary(text) against
encode_batch(docs, num_threads=2) on the same text cut at blank lines (~30K documents for
8 MB of English), each call including the freeing of the previous call's result.  Both calls
do the same C encoding; what differs is Python's part.  Measured here, in one process, turn
about, medians over the rounds (ms):

  C single     the single call's C part: bpe_encode_units of the str where CPython keeps it
               (its UTF-8 made part by part as it is encoded; no list)
  C batch 1/2  the batch job alone (bpe_batch_start / bpe_batch_next) on 1 and 2 threads
  make/free 1  one list of all the ids, and freeing it
  make/free N  one list per document (the same ids), and freeing them (CPython's list_dealloc)
  units        list(docs) and locating each str's characters, before the batch job starts

Ceiling: if the C encoding split perfectly over 2 threads and the caller's list making were
shared evenly with the worker, a batch call would still take C/2 + make N/2 + free N + units,
against C + make 1 + free 1 for the single call; the ratio of the two is the most any
batch implementation that returns these lists could show in the yardstick's terms.  The
measured ratios (whole calls, freeing included) are printed beside it, and a second ceiling
for a batch whose N lists cost no more to make than one list and that starts at once.
"""
import argparse
import itertools
import lzma
import statistics
import time

from bench_encode import CORPORA, PATTERN, ours    # paths and loaders shared with it


class Parts:
    """The timed parts of one (vocab, text), each a function returning a result that the
    next call of the same part replaces (so, as in the yardstick, it is freed inside it)."""

    def __init__(self, tok, text, docs):
        from bpe_cffi import _idcache
        from bpe_cffi._native import ffi, lib
        from bpe_cffi.tokenizer import size_t_array
        self.ffi, self.lib, self.idcache = ffi, lib, _idcache
        self.tok, self.text, self.docs = tok, text, docs
        self.storage = _idcache.str_storage(text)        # (address, kind), as encode reads it
        bdocs = [d.encode("utf-8") for d in docs]
        self.flat = b"".join(bdocs)
        self.ends = size_t_array(itertools.accumulate(map(len, bdocs)))
        lists = tok.encode_batch(docs, num_threads=1)
        self.n_ids = sum(map(len, lists))
        self.ids = ffi.new("uint32_t[]", [i for ids in lists for i in ids])
        self.id_ends = size_t_array(itertools.accumulate(map(len, lists)))
        self.ids_at = int(ffi.cast("uintptr_t", self.ids))
        self.id_ends_at = int(ffi.cast("uintptr_t", self.id_ends))

    def c_single(self):
        ffi = self.ffi
        out = ffi.new("bpe_ids *")
        info = ffi.new("size_t *")
        units = ffi.cast("const uint8_t *", self.storage[0])
        rc = self.lib.bpe_encode_units(self.tok._handle(), units, len(self.text),
                                       self.storage[1], ffi.NULL, ffi.NULL, out, info)
        self.lib.bpe_ids_free(out)
        assert rc == 0, rc

    def c_batch(self, threads):
        ffi, lib = self.ffi, self.lib
        first, count = ffi.new("size_t *"), ffi.new("size_t *")
        ids, id_ends, info = ffi.new("uint32_t **"), ffi.new("size_t **"), ffi.new("size_t *")
        job = ffi.new("bpe_batch_job **")
        rc = lib.bpe_batch_start(self.tok._handle(), len(self.docs), self.flat, ffi.NULL,
                                 self.ends, ffi.NULL, ffi.NULL, threads, job)
        assert rc == 0, rc
        try:
            while True:
                rc = lib.bpe_batch_next(job[0], first, count, ids, id_ends, info)
                assert rc == 0, rc
                if count[0] == 0:
                    return
        finally:
            lib.bpe_batch_finish(job[0])

    def make_one(self):
        return self.idcache.ids_list(self.ids_at, self.n_ids)

    def make_many(self):
        return self.idcache.ids_lists(self.ids_at, self.id_ends_at, len(self.docs))

    def units(self):
        return self.idcache.text_units(self.docs)     # copies the list as encode_batch does

    def single(self):
        return self.tok.encode_ordinary(self.text)

    def batch(self, threads):
        return lambda: self.tok.encode_batch(self.docs, num_threads=threads)


def time_free(make):
    """(make, free) times of one result of make()."""
    t0 = time.perf_counter()
    out = make()
    t1 = time.perf_counter()
    del out
    return t1 - t0, time.perf_counter() - t1


def measure(p: Parts, rounds: int):
    """Medians (ms) of every part, the parts taken turn about in each round."""
    calls = {"single": p.single, "batch 2": p.batch(2), "batch 1": p.batch(1),
             "C single": p.c_single, "C batch 1": lambda: p.c_batch(1),
             "C batch 2": lambda: p.c_batch(2), "units": p.units}
    kept = {k: None for k in calls}
    got = {k: [] for k in list(calls) + ["make 1", "free 1", "make N", "free N"]}
    for _ in range(rounds):
        for k, fn in calls.items():
            t0 = time.perf_counter()
            kept[k] = fn()                      # the previous result is freed in the timing
            got[k].append(time.perf_counter() - t0)
        for k, make in (("1", p.make_one), ("N", p.make_many)):
            m, f = time_free(make)
            got["make " + k].append(m)
            got["free " + k].append(f)
    return {k: statistics.median(v) * 1e3 for k, v in got.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=8.0, help="MB of English prose (default 8)")
    ap.add_argument("--vocab", nargs="*", default=list(PATTERN))
    ap.add_argument("--rounds", type=int, default=15)
    a = ap.parse_args()
    with lzma.open(CORPORA / "en_books.txt.xz", "rb") as f:
        text = f.read(int(a.mb * 1e6)).decode("utf-8", errors="ignore")
    docs = [d for d in text.split("\n\n") if d]      # as compare_encode.py cuts it
    print(f"bench_batch_ceiling: {len(text.encode()) / 1e6:.1f} MB of en_books, {len(docs)} "
          f"documents, medians of {a.rounds} rounds (ms)")
    for name in a.vocab:
        tok = ours(name)
        p = Parts(tok, text, docs)
        m = measure(p, a.rounds)
        print(f"\n{name}: {p.n_ids} ids\n  " + "  ".join(f"{k} {v:.1f}" for k, v in m.items()))
        single = m["C single"] + m["make 1"] + m["free 1"]
        batch = m["C single"] / 2 + m["make N"] / 2 + m["free N"] + m["units"]
        print(f"  ceiling batch(2)/single: ({m['C single']:.1f} + "
              f"{m['make 1']:.1f} + {m['free 1']:.1f}) / ({m['C single'] / 2:.1f} + "
              f"{m['make N'] / 2:.1f} + {m['free N']:.1f} + {m['units']:.1f}) = "
              f"{single / batch:.2f}x; with lists made at the cost of one and no units: "
              f"{single / (m['C single'] / 2 + m['make 1'] / 2 + m['free N']):.2f}x")
        print(f"  measured: batch(2)/single {m['single'] / m['batch 2']:.2f}x, "
              f"batch(2)/batch(1) {m['batch 1'] / m['batch 2']:.2f}x, C alone: "
              f"batch(2)/batch(1) {m['C batch 1'] / m['C batch 2']:.2f}x, "
              f"batch(2)/single {m['C single'] / m['C batch 2']:.2f}x")
        tok.close()


if __name__ == "__main__":
    main()
