"""Short texts one call each (a server's requests, a chat message, a dataset's rows):
bpe_cffi against tiktoken and HuggingFace `tokenizers`, side by side in one process.

    python benchmarks/bench_short.py [--texts 20000] [--reps 5] [--vocab ...] [--corpus ...]

The texts are the lines of each corpus (non-empty, shorter than 4096 characters), in
length buckets; each library encodes every text of a bucket with one call per text
(`encode_ordinary` for bpe_cffi and tiktoken, `encode(...).ids` for HF), turn about, best of
the reps.  Prints microseconds per text and tiktoken's and HF's time over ours (how many
times faster we are).  Checks that our ids equal tiktoken's.
"""
import argparse
import tempfile
import time

from bench_encode import CORPORA, hf, ours, read_prefix

BUCKETS = ((1, 16), (16, 64), (64, 256), (256, 1024), (1024, 4096))


def lines_by_bucket(text: str, per_bucket: int) -> dict:
    """(low, high) -> up to per_bucket lines of text with low <= characters < high."""
    out = {b: [] for b in BUCKETS}
    for line in text.split("\n"):
        for b in BUCKETS:
            if b[0] <= len(line) < b[1] and len(out[b]) < per_bucket:
                out[b].append(line)
    return out


def per_text_us(encode, texts, reps: int) -> float:
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        for t in texts:
            encode(t)
        best = min(best, time.perf_counter() - t0)
    return best / len(texts) * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--texts", type=int, default=4000, help="texts per length bucket")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--vocab", nargs="+", default=["gpt2", "cl100k_base", "o200k_base"])
    ap.add_argument("--corpus", nargs="+", default=["en_books", "multilingual", "code", "web"])
    a = ap.parse_args()
    from offline_tiktoken import get_encoding       # on the path bench_encode set
    print("us per text (one call each); tiktoken / ours and HF / ours: how many times faster")
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.vocab:
            tok, enc = ours(name), get_encoding(name)
            h = hf(name, tok, tmp)
            for corpus in a.corpus:
                text = read_prefix(CORPORA / f"{corpus}.txt.xz", 8_000_000)
                for (low, high), texts in lines_by_bucket(text, a.texts).items():
                    if not texts:
                        continue
                    assert [tok.encode_ordinary(t) for t in texts] == \
                        [enc.encode_ordinary(t) for t in texts], (name, corpus, low)
                    us = {"ours": per_text_us(tok.encode_ordinary, texts, a.reps),
                          "tiktoken": per_text_us(enc.encode_ordinary, texts, a.reps)}
                    if h is not None:
                        us["hf"] = per_text_us(lambda t: h.encode(t).ids, texts, a.reps)
                    line = (f"{name:12s} {corpus:12s} {low:5d}-{high - 1:<5d} chars "
                            f"({len(texts):5d} texts): ours {us['ours']:7.2f}  tiktoken "
                            f"{us['tiktoken']:7.2f} ({us['tiktoken'] / us['ours']:5.2f}x)")
                    if "hf" in us:
                        line += f"  HF {us['hf']:7.2f} ({us['hf'] / us['ours']:5.2f}x)"
                    print(line, flush=True)


if __name__ == "__main__":
    main()
