"""Worst-case inputs stay linear: encode time per byte of pathological text against English prose.

    python benchmarks/bench_worst_case.py [--mb 10] [--vocab gpt2 cl100k_base o200k_base]
                                          [--check-mb 1] [--tiktoken-mb 0.05] [--reps 3]
                                          [--heap]

For each vocabulary, times encode_ordinary (one call, fresh tokenizer so no cache is warm;
--reps rounds over all the inputs in turn, prose first) on
--mb MB of: English prose (en_books), one repeated character, one word of random letters,
spaces, "^", and --mb/10 MB of emoji; prints the best MB/s and two ratios of time-per-byte to
prose's (the goal: every ratio <= 3): the median over the rounds of each round's ratio (an
input against the prose of its own round, as bench_single.py takes medians of pairs: a slow
spell of this shared machine falling on one input's every timing must not decide it), and
the ratio of the bests.  The time includes building the long-piece tables, which a
fresh tokenizer does on its first long piece (printed once per vocabulary as well).
tiktoken's speed is printed for each input at --tiktoken-mb MB (its merge of one piece is
quadratic, so larger sizes do not finish; 0: skip).  --heap sets BPE_CFFI_LONG_PIECE=0: every
piece takes the heap path, the numbers before csrc/longpiece.c.  Then checks the ids against
tiktoken on --check-mb MB of each input (its o200k regex overflows on long whitespace, so that
one piece is encoded with tiktoken's single-piece BPE).
"""
import argparse
import lzma
import os
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
if not SHARED.exists():   # a git worktree: the data sits next to the main checkout
    SHARED = Path("/work/shared")
PATTERN = {"gpt2": "gpt2", "cl100k_base": "cl100k", "o200k_base": "o200k"}
EMOJI = ["😀", "🏳️‍🌈", "👍🏽", "🇫🇷", "🤖", "❤️", "👨‍👩‍👧‍👦", "🙂"]


def inputs(mb: float) -> dict:
    n = int(mb * 1e6)
    rng = random.Random(0)
    with lzma.open(SHARED / "corpora" / "en_books.txt.xz", "rb") as f:
        prose = f.read(n).decode("utf-8", errors="ignore")
    emoji = []
    size = 0
    while size < n // 10:
        e = rng.choice(EMOJI)
        emoji.append(e)
        size += len(e.encode())
    return {
        "prose": prose,
        "repeated char": "a" * n,
        "random-letter word": "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(n)),
        "spaces": " " * n,
        "caret": "^" * n,
        "dashes": "-" * n,      # '-' has tokens longer than BPE of a run ends with
        "emoji": "".join(emoji),
    }


def tokenizer(name: str):
    from bpe_cffi import Tokenizer
    vocab = SHARED / "vocab"
    if name == "gpt2":
        return Tokenizer.from_files(vocab / "gpt2_vocab.json", vocab / "gpt2_merges.txt")
    return Tokenizer.from_tiktoken(vocab / f"{name}.tiktoken", pattern=PATTERN[name])


def reference_ids(enc, name: str, text: str) -> list:
    if name == "o200k_base" and text.strip() == "":
        return enc._encode_single_piece(text.encode())
    return enc.encode_ordinary(text)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=10.0)
    ap.add_argument("--vocab", nargs="+", default=["gpt2", "cl100k_base", "o200k_base"])
    ap.add_argument("--check-mb", type=float, default=1.0,
                    help="MB of each input whose ids are checked against tiktoken (0: none)")
    ap.add_argument("--tiktoken-mb", type=float, default=0.05,
                    help="MB of each input timed with tiktoken (0: none)")
    ap.add_argument("--reps", type=int, default=5,
                    help="rounds: timings of each input (a fresh tokenizer each)")
    ap.add_argument("--heap", action="store_true", help="the heap path only (before longpiece)")
    a = ap.parse_args()
    if a.heap:
        os.environ["BPE_CFFI_LONG_PIECE"] = "0"
    texts = inputs(a.mb)
    sizes = {label: len(text.encode()) for label, text in texts.items()}
    sys.path.insert(0, str(SHARED / "vocab"))
    from offline_tiktoken import get_encoding
    worst = worst_best = 0.0
    for name in a.vocab:
        print(f"\n{name}: encode_ordinary, one call, fresh tokenizer")
        enc = get_encoding(name)
        if not a.heap:
            tok = tokenizer(name)
            t0 = time.perf_counter()
            tok.encode_ordinary(texts["random-letter word"][:5000])
            print(f"  (first long piece of a fresh tokenizer, 5000 bytes: "
                  f"{time.perf_counter() - t0:.3f} s, mostly building the long-piece tables)")
            tok.close()
        rounds = []                    # per round: label -> seconds per byte
        for _ in range(a.reps):        # turn about over the inputs: slow spells hit all alike
            took = {}
            for label, text in texts.items():
                tok = tokenizer(name)
                t0 = time.perf_counter()
                tok.encode_ordinary(text)
                took[label] = (time.perf_counter() - t0) / sizes[label]
                tok.close()
            rounds.append(took)
        per_byte = {label: min(r[label] for r in rounds) for label in texts}
        for label, text in texts.items():
            nbytes = sizes[label]
            ratio = statistics.median(r[label] / r["prose"] for r in rounds)
            ratio_best = per_byte[label] / per_byte["prose"]
            if label != "prose":
                worst = max(worst, ratio)
                worst_best = max(worst_best, ratio_best)
            tik = ""
            if a.tiktoken_mb > 0:
                part = text[: int(a.tiktoken_mb * 1e6) // max(1, len(text[:1].encode()))]
                t0 = time.perf_counter()
                reference_ids(enc, name, part)
                tik = (f"   tiktoken {len(part.encode()) / (time.perf_counter() - t0) / 1e6:8.2f}"
                       f" MB/s on {len(part.encode()) / 1e6:.2f} MB")
            print(f"  {label:20s} {nbytes / 1e6:6.1f} MB {1 / per_byte[label] / 1e6:8.1f} MB/s "
                  f"time/byte vs prose {ratio:5.2f}x (bests {ratio_best:5.2f}x){tik}")
        if a.check_mb > 0:
            tok = tokenizer(name)
            for label, text in texts.items():
                part = text[: int(a.check_mb * 1e6) // max(1, len(text[:1].encode()))]
                same = tok.encode_ordinary(part) == reference_ids(enc, name, part)
                print(f"  ids == tiktoken on {len(part.encode()) / 1e6:.1f} MB of {label}: {same}")
                if not same:
                    return 1
    print(f"\nworst time-per-byte ratio to prose: {worst:.2f}x, median of {a.reps} rounds "
          f"(goal <= 3x); of the bests: {worst_best:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
