"""Pre-tokenizer throughput: the C scanners (bpe_pretokenize) vs regex.findall, same process.

    python benchmarks/bench_pretok.py [--mb 8] [--corpora en_books,multilingual] [--repeat 3]

Reports MB/s (UTF-8 bytes per second) of each and the ratio C / regex; the best of --repeat
runs is kept for each (the machine is shared, so absolute numbers are noisy, ratios less so).
Also checks that both produce the same pieces on the benchmarked text.
"""
import argparse
import lzma
import os
import sys
import time
from pathlib import Path

import regex

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from bpe_cffi._native import ffi, lib  # noqa: E402
from bpe_cffi.patterns import BUILTIN  # noqa: E402

CORPORA_DIR = Path(os.environ.get("BPE_CFFI_CORPORA_DIR", HERE.parent.parent / "shared" / "corpora"))


def read(name: str, n_bytes: int) -> bytes:
    with lzma.open(CORPORA_DIR / f"{name}.txt.xz", "rb") as f:
        raw = f.read(n_bytes)
    return raw.decode("utf-8", errors="ignore").encode("utf-8")


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=8)
    ap.add_argument("--corpora", default="en_books,multilingual")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"{'corpus':14} {'pattern':8} {'C MB/s':>9} {'regex MB/s':>11} {'C/regex':>8}  pieces")
    for corpus in args.corpora.split(","):
        data = read(corpus, int(args.mb * (1 << 20)))
        text = data.decode("utf-8")
        mb = len(data) / 1e6
        for name, (pat, pid) in BUILTIN.items():
            rx = regex.compile(pat)
            ends = ffi.new("bpe_ids *")

            def run_c():
                ends.len = 0
                assert lib.bpe_pretokenize(pid, data, len(data), ends) == 0

            t_c = best(run_c, args.repeat)
            n_c = ends.len
            t_r = best(lambda: rx.findall(text), max(1, args.repeat - 1))
            n_r = len(rx.findall(text))
            lib.bpe_ids_free(ends)
            ok = "same" if n_c == n_r else f"DIFFERENT ({n_c} vs {n_r})"
            print(f"{corpus:14} {name:8} {mb / t_c:9.1f} {mb / t_r:11.1f} {t_r / t_c:8.1f}  "
                  f"{n_c} ({ok})")


if __name__ == "__main__":
    main()
