"""encode_batch of a few large texts: each text of 1 MiB or more is cut into parts that the
threads share (csrc/batch_cut.c), so a batch of one 8 MB text is not limited to one thread.

    python benchmarks/bench_large_texts.py [--mb 8] [--threads 2] [--vocab gpt2 ...]
                                           [--corpus en_books ...] [--rounds 5]

For each (vocab, corpus), in one process, turn about, medians over the rounds (ms):
  single     bpe_cffi encode_ordinary(text)
  batch 1    encode_batch([text], num_threads=N, allowed_special=set())   (one text)
  batch 4    encode_batch(the text in 4 pieces cut at newlines, num_threads=N)
  tiktoken   encode_ordinary_batch([text], num_threads=N)
and the ratios single / batch (aim: close to N) and tiktoken / ours.  Every call's ids are
checked against tiktoken's of the same texts.
"""
import argparse
import statistics
import time

from bench_encode import CORPORA, PATTERN, ours    # paths and loaders shared with it


def load(corpus, mb):
    import lzma
    with lzma.open(CORPORA / f"{corpus}.txt.xz", "rb") as f:
        return f.read(int(mb * 1e6)).decode("utf-8", "ignore")


def four_pieces(text):
    """text cut into 4 pieces at the first newline after each quarter."""
    cuts, n = [0], len(text)
    for k in (1, 2, 3):
        at = text.find("\n", k * n // 4)
        cuts.append(at + 1 if at >= 0 else n)
    cuts.append(n)
    return [text[a:b] for a, b in zip(cuts, cuts[1:]) if b > a]


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=8.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--vocab", nargs="*", default=list(PATTERN))
    ap.add_argument("--corpus", nargs="*", default=["en_books", "multilingual", "code", "web"])
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    from offline_tiktoken import get_encoding
    print(f"bench_large_texts: {a.mb:g} MB per corpus, {a.threads} threads, medians of "
          f"{a.rounds} rounds (ms)")
    for vocab in a.vocab:
        tok, enc = ours(vocab), get_encoding(vocab)
        for corpus in a.corpus:
            text = load(corpus, a.mb)
            pieces = four_pieces(text)
            want = {"single": [enc.encode_ordinary(text)],
                    "batch 1": [enc.encode_ordinary(text)],
                    "batch 4": enc.encode_ordinary_batch(pieces, num_threads=a.threads)}
            calls = {
                "single": lambda: [tok.encode_ordinary(text)],
                "batch 1": lambda: tok.encode_batch([text], num_threads=a.threads,
                                                    allowed_special=set()),
                "batch 4": lambda: tok.encode_batch(pieces, num_threads=a.threads,
                                                    allowed_special=set()),
                "tiktoken": lambda: enc.encode_ordinary_batch([text], num_threads=a.threads),
            }
            times = {k: [] for k in calls}
            for _ in range(a.rounds):
                for name, fn in calls.items():
                    t, out = timed(fn)
                    times[name].append(t)
                    if name != "tiktoken" and out != want[name]:
                        raise SystemExit(f"{vocab}/{corpus} {name}: ids differ from tiktoken")
                    del out
            med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
            print(f"{vocab:11s} {corpus:12s} " +
                  "  ".join(f"{k} {v:6.1f}" for k, v in med.items()) +
                  f"   single/batch 1 {med['single'] / med['batch 1']:.2f}x"
                  f"  single/batch 4 {med['single'] / med['batch 4']:.2f}x"
                  f"  tiktoken/batch 1 {med['tiktoken'] / med['batch 1']:.1f}x")


if __name__ == "__main__":
    main()
