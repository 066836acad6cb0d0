"""encode_iterable over an open text file (CS336's way of tokenizing a large corpus in bounded
memory) against encode of the same text, in one process, turn about, medians.

    python benchmarks/bench_iterable.py [--mb 40] [--vocab gpt2 ...] [--rounds 3]

Writes the first --mb MB of en_books to a temporary file and times, per vocabulary:
  encode         encode(text) of the whole text, read beforehand
  iterable       list(encode_iterable(open(path))): a regular file, read in blocks
  iterable/lines the same file through a wrapper that is not seekable, so it is taken line
                 by line (as a pipe is, and as every file was before the blocks)
  tiktoken       tiktoken's encode of the whole text (it has no lazy form), for scale
Prints MB/s and iterable / encode.  The ids of every call are checked equal.
"""
import argparse
import io
import lzma
import os
import statistics
import tempfile
import time

from bench_encode import CORPORA, PATTERN, ours    # paths and loaders shared with it


class Unseekable(io.TextIOBase):
    """A text file that says it cannot seek: encode_iterable takes it by lines."""

    def __init__(self, f):
        self.f = f

    def seekable(self):
        return False

    def __iter__(self):
        return iter(self.f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=40.0)
    ap.add_argument("--vocab", nargs="*", default=list(PATTERN))
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    from offline_tiktoken import get_encoding
    with lzma.open(CORPORA / "en_books.txt.xz", "rb") as f:
        text = f.read(int(a.mb * 1e6)).decode("utf-8", "ignore")
    fd, path = tempfile.mkstemp(suffix=".txt")
    with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    mb = len(text.encode("utf-8")) / 1e6
    print(f"bench_iterable: {mb:.1f} MB of en_books, {text.count(chr(10))} lines; medians of "
          f"{a.rounds} rounds")
    try:
        for vocab in a.vocab:
            tok, enc = ours(vocab), get_encoding(vocab)

            def from_file(wrap=None):
                with open(path, encoding="utf-8", newline="") as f:
                    return list(tok.encode_iterable(wrap(f) if wrap else f))
            calls = {"encode": lambda: tok.encode(text),
                     "iterable": from_file,
                     "iterable/lines": lambda: from_file(Unseekable),
                     # the special tokens ours knows (none for gpt2 from vocab.json)
                     "tiktoken": lambda: enc.encode(text, allowed_special=set(
                         tok.special_tokens), disallowed_special=())}
            times = {k: [] for k in calls}
            want = None
            for _ in range(a.rounds):
                for name, fn in calls.items():
                    t0 = time.perf_counter()
                    ids = fn()
                    times[name].append(time.perf_counter() - t0)
                    want = ids if want is None else want
                    if ids != want:
                        raise SystemExit(f"{vocab} {name}: ids differ")
                    del ids
            rate = {k: mb / statistics.median(v) for k, v in times.items()}
            print(f"{vocab:11s} " + "  ".join(f"{k} {v:6.1f} MB/s" for k, v in rate.items()) +
                  f"   iterable/encode {rate['iterable'] / rate['encode']:.2f}"
                  f"  lines/encode {rate['iterable/lines'] / rate['encode']:.2f}")
    finally:
        os.unlink(path)


if __name__ == "__main__":
    main()
