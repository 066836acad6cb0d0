"""Single-thread encode speed against tiktoken as a robust ratio: alternating pairs.

    python benchmarks/bench_single.py [--mb 8] [--pairs 9] [--vocab gpt2 cl100k_base o200k_base]
                                      [--corpus en_books code multilingual web] [--same-text]
                                      [--cache-capacity N [N ...]]

On a shared machine the speed of both encoders drifts from second to second, so a ratio of two
separately measured bests can be off by 2x.  Here each pair times tiktoken's encode_ordinary
and ours back to back on the same text (order alternating), and the MEDIAN of the per-pair
ratios is reported, with the min and max.

Each pair encodes a NEW slice of --mb MB of the corpus (slice 0 checks the ids against
tiktoken first; a corpus too short for pairs + 1 slices is reused from slice 1 on, which is
said).  So our word cache is warm from the corpus's earlier text, as in steady use, but never
holds the very text being timed; tiktoken has no such cache.  --same-text times one slice
over and over instead (what the first versions of this script did; it flatters a cache that
can hold all of a text's words).  --cache-capacity N M ... times one tokenizer per word-cache
capacity in every pair (the order rotating), a row each: the capacities compared on the same
texts in the same seconds.
"""
import argparse
import lzma
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
if not SHARED.exists():   # a git worktree: the data sits next to the main checkout
    SHARED = Path("/work/shared")
PATTERN = {"gpt2": "gpt2", "cl100k_base": "cl100k", "o200k_base": "o200k"}


def tokenizer(name: str, cache_capacity=None):
    from bpe_cffi import Tokenizer
    vocab = SHARED / "vocab"
    extra = {} if cache_capacity is None else {"cache_capacity": cache_capacity}
    if name == "gpt2":
        return Tokenizer.from_files(vocab / "gpt2_vocab.json", vocab / "gpt2_merges.txt", **extra)
    return Tokenizer.from_tiktoken(vocab / f"{name}.tiktoken", pattern=PATTERN[name], **extra)


def read_slices(corpus: str, mb: float, n: int) -> list:
    """Up to n consecutive slices of about mb MB of the corpus (at least one), each cut after
    a newline so that no slice starts inside a line."""
    size = int(mb * 1e6)
    with lzma.open(SHARED / "corpora" / f"{corpus}.txt.xz", "rb") as f:
        data = f.read(size * n + 65536)
    out, start = [], 0
    while len(out) < n and start < len(data):
        end = data.find(b"\n", start + size)
        end = len(data) if end < 0 else end + 1
        if out and end - start < size // 2:
            break                                # a short tail: not a slice
        out.append(data[start:end].decode("utf-8", errors="ignore"))
        start = end
    return out


def timed(fn, text) -> float:
    t0 = time.perf_counter()
    fn(text)
    return time.perf_counter() - t0


def time_pair(enc, toks, text, i) -> list:
    """[tiktoken's time, then each of toks'] on text, taken in an order that rotates with i."""
    fns = [enc.encode_ordinary] + [t.encode_ordinary for t in toks]
    took = [0.0] * len(fns)
    for k in range(len(fns)):
        j = (i + k) % len(fns)
        took[j] = timed(fns[j], text)
    return took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=8.0)
    ap.add_argument("--pairs", type=int, default=9)
    ap.add_argument("--vocab", nargs="+", default=["gpt2", "cl100k_base", "o200k_base"])
    ap.add_argument("--corpus", nargs="+", default=["en_books", "code", "multilingual", "web"])
    ap.add_argument("--same-text", action="store_true",
                    help="time one slice over and over (flatters our word cache)")
    ap.add_argument("--cache-capacity", type=int, nargs="+", default=[None],
                    help="word-cache capacities to compare, a tokenizer each (default: ours)")
    a = ap.parse_args()
    sys.path.insert(0, str(SHARED / "vocab"))
    from offline_tiktoken import get_encoding
    print(f"single-thread encode_ordinary, {a.mb} MB per pair, {a.pairs} alternating pairs, "
          f"{'the same text each time' if a.same_text else 'a new slice of the corpus each'}; "
          f"ratio = tiktoken time / bpe_cffi time (median [min-max])")
    slices = {corpus: read_slices(corpus, a.mb, 1 if a.same_text else a.pairs + 1)
              for corpus in a.corpus}
    for corpus, parts in slices.items():
        if not a.same_text and len(parts) < a.pairs + 1:
            print(f"({corpus}: {len(parts)} slices of {a.mb} MB; pairs reuse slices 1..)")
    for name in a.vocab:
        enc = get_encoding(name)
        toks = [tokenizer(name, c) for c in a.cache_capacity]
        for corpus, parts in slices.items():
            if any(t.encode_ordinary(parts[0]) != enc.encode_ordinary(parts[0]) for t in toks):
                print(f"{name} {corpus}: ids differ from tiktoken")
                return 1
            ratios, ours = [[] for _ in toks], [[] for _ in toks]
            for i in range(a.pairs):
                text = parts[0] if len(parts) == 1 else parts[1 + i % (len(parts) - 1)]
                took = time_pair(enc, toks, text, i)
                for k in range(len(toks)):
                    ratios[k].append(took[0] / took[1 + k])
                    ours[k].append(len(text.encode()) / took[1 + k] / 1e6)
            for k, cap in enumerate(a.cache_capacity):
                label = "" if cap is None else f"cache {cap:<8d} "
                print(f"{name:12s} {corpus:13s} {label}ours {statistics.median(ours[k]):6.1f} MB/s"
                      f"   ratio {statistics.median(ratios[k]):5.2f}x "
                      f"[{min(ratios[k]):.2f}-{max(ratios[k]):.2f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
