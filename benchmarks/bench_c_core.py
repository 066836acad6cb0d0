"""Times the C core (bpe_encode_pieces, and bpe_encode once the pre-tokenizer is in) against
tiktoken's encode_ordinary on the same text, in the same process, and prints ratios.

    python benchmarks/bench_c_core.py [--mb 8] [--names gpt2,cl100k_base,o200k_base]

The pieces path is given pieces split beforehand by the `regex` module (not timed), so it
measures BPE + cache only; bpe_encode includes the C pre-tokenizer.  Vocabularies and corpora
are found as the tests find them (../shared, or $BPE_CFFI_VOCAB_DIR / $BPE_CFFI_CORPORA_DIR).
"""
import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import regex  # noqa: E402

import conftest  # noqa: E402
from test_c_core import PATTERN_ID, PATTERN_OF, real_tokenizer  # noqa: E402
from bpe_cffi._native import ffi, lib  # noqa: E402


def best_of(fn, reps=5):
    """Best CPU time of the calling process over reps runs (CPU time, not wall time: the
    machine this was written on is shared, and every timed call runs on this one thread)."""
    best = None
    for _ in range(reps):
        t = time.process_time()
        r = fn()
        dt = time.process_time() - t
        best = dt if best is None or dt < best else best
    return best, r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=8)
    ap.add_argument("--names", default="gpt2,cl100k_base,o200k_base")
    ap.add_argument("--corpus", default="en_books")
    args = ap.parse_args()
    text = conftest.read_corpus(args.corpus, int(args.mb * 1e6))
    data = text.encode()
    print(f"{args.corpus}: {len(data) / 1e6:.1f} MB")
    for name in args.names.split(","):
        tok, enc = real_tokenizer(name, pattern=PATTERN_ID[name], cache=65536)
        ends, pos = [], 0
        for m in regex.finditer(PATTERN_OF[name], text):
            pos += len(m.group().encode())
            ends.append(pos)
        c_ends = ffi.new("size_t[]", ends)
        buf = ffi.from_buffer("uint8_t[]", data)

        def pieces():
            out = ffi.new("bpe_ids *")
            rc = lib.bpe_encode_pieces(tok.ptr, buf, c_ends, len(ends), out)
            assert rc == 0, rc
            ids = ffi.unpack(out.ids, out.len)
            lib.bpe_ids_free(out)
            return ids

        def pieces_c_only():
            out = ffi.new("bpe_ids *")
            rc = lib.bpe_encode_pieces(tok.ptr, buf, c_ends, len(ends), out)
            assert rc == 0, rc
            lib.bpe_ids_free(out)

        def full():
            out = ffi.new("bpe_ids *")
            rc = lib.bpe_encode(tok.ptr, buf, len(data), ffi.NULL, out, ffi.NULL)
            ids = ffi.unpack(out.ids, out.len) if rc == 0 else None
            lib.bpe_ids_free(out)
            return ids

        t_tik, ref = best_of(lambda: enc.encode_ordinary(text))
        t_p, got = best_of(pieces)
        assert got == ref, f"{name}: pieces path differs from tiktoken"
        line = (f"{name:12s} tiktoken {len(data) / t_tik / 1e6:6.1f} MB/s | pieces "
                f"{len(data) / t_p / 1e6:6.1f} MB/s ratio {t_tik / t_p:5.2f}x")
        t_c, _ = best_of(pieces_c_only)
        line += f" (C call alone {len(data) / t_c / 1e6:6.1f} MB/s, {t_tik / t_c:5.2f}x)"
        def full_c_only():
            out = ffi.new("bpe_ids *")
            lib.bpe_encode(tok.ptr, buf, len(data), ffi.NULL, out, ffi.NULL)
            lib.bpe_ids_free(out)

        t_f, got = best_of(full)
        if got == ref:
            t_fc, _ = best_of(full_c_only)
            line += (f" | bpe_encode {len(data) / t_f / 1e6:6.1f} MB/s ratio {t_tik / t_f:5.2f}x"
                     f" (C call alone {len(data) / t_fc / 1e6:6.1f} MB/s, {t_tik / t_fc:5.2f}x)")
        else:
            line += " | bpe_encode: not comparable (pre-tokenizer not merged or differs)"
        print(line, flush=True)


if __name__ == "__main__":
    main()
