"""Training benchmark: bpe_cffi vs HF tokenizers (BpeTrainer) vs rustbpe, side by side.

Every system trains on the same text (the first --mb MB of a corpus, cut at a line end), with
the same vocabulary size, special token and thread count, each in its own subprocess so that
its peak RSS is its own.  Prints seconds, peak RSS, the ratios against bpe_cffi, and
bpe_cffi's phase split (reading + counting vs merging).

usage:
  python benchmarks/bench_train.py [--corpus en_books] [--mb 50] [--vocab 10000,32000]
                                   [--threads 2] [--systems bpe_cffi,hf,rustbpe] [--json OUT]
The corpus is a name in ../shared/corpora (NAME.txt.xz) or a path (.xz or plain text).
Numbers on a shared machine are noisy: compare the ratios, measured in one run.
Peak RSS is VmHWM from /proc (ru_maxrss of a child inherits the parent's size on Linux).
"""
import argparse
import json
import lzma
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CORPORA = Path(os.environ.get("BPE_CFFI_CORPORA_DIR", REPO.parent / "shared" / "corpora"))
SPECIAL = "<|endoftext|>"

CHILD = r'''
import json, os, resource, sys, time
system, path, vocab, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
special = sys.argv[5]
out = {"system": system}
t0 = time.perf_counter()
if system == "bpe_cffi":
    from bpe_cffi.train import _train
    v, m, stats = _train(path, vocab, [special], num_threads=threads)
    out.update(stats)
    out["n_vocab"] = len(v)
elif system == "hf":
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tr = trainers.BpeTrainer(vocab_size=vocab, special_tokens=[special], show_progress=False,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train([path], tr)
    out["n_vocab"] = tok.get_vocab_size()
elif system == "rustbpe":
    import rustbpe
    tok = rustbpe.Tokenizer()
    def docs():
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                yield line
    # rustbpe has no special tokens: it learns vocab - 256 merges (one fewer to match)
    tok.train_from_iterator(docs(), vocab - 1, pattern=r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
    out["n_vocab"] = tok.vocab_size
out["seconds"] = time.perf_counter() - t0
# VmHWM is this process's own peak; ru_maxrss would carry over the parent's RSS across
# fork + exec on Linux (a floor of the benchmark process's size)
with open("/proc/self/status") as f:
    hwm = [line for line in f if line.startswith("VmHWM:")]
out["peak_mb"] = (int(hwm[0].split()[1]) / 1024 if hwm else
                  resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
print(json.dumps(out))
'''


def corpus_path(name: str) -> Path:
    p = Path(name)
    if p.exists():
        return p
    p = CORPORA / f"{name}.txt.xz"
    if not p.exists():
        sys.exit(f"corpus {name!r} not found (looked for {p}; set BPE_CFFI_CORPORA_DIR)")
    return p


def slice_to_file(src: Path, mb: float) -> str:
    opener = lzma.open if src.suffix == ".xz" else open
    with opener(src, "rb") as f:
        raw = f.read(int(mb * 1e6))
    raw = raw[: raw.rfind(b"\n") + 1]
    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as f:
        f.write(raw)
        return f.name


def run_one(system, path, vocab, threads):
    env = {**os.environ, "RAYON_NUM_THREADS": str(threads),
           "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    r = subprocess.run([sys.executable, "-c", CHILD, system, path, str(vocab), str(threads),
                        SPECIAL], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        tail = (r.stderr.strip().splitlines() or ["?"])[-1]
        return {"system": system, "error": tail}
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default="en_books")
    ap.add_argument("--mb", type=float, default=50)
    ap.add_argument("--vocab", default="10000", help="comma-separated vocabulary sizes")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--systems", default="bpe_cffi,hf,rustbpe")
    ap.add_argument("--json", help="also write all results to this file")
    a = ap.parse_args()
    path = slice_to_file(corpus_path(a.corpus), a.mb)
    size_mb = os.path.getsize(path) / 1e6
    results = []
    try:
        for vocab in [int(v) for v in a.vocab.split(",")]:
            print(f"\n== {a.corpus}: {size_mb:.1f} MB, vocab {vocab}, {a.threads} threads")
            res = {}
            for s in a.systems.split(","):
                res[s] = run_one(s, path, vocab, a.threads)
                r = res[s]
                if "error" in r:
                    print(f"{s:>9}: ERROR {r['error']}")
                    continue
                line = f"{s:>9}: {r['seconds']:8.2f} s  peak {r['peak_mb']:7.1f} MB  " \
                       f"vocab {r['n_vocab']}"
                if s == "bpe_cffi":
                    c, m = r["count_seconds"], r["merge_seconds"]
                    tot = max(c + m, 1e-9)
                    line += (f"  [read+count {c:.2f} s ({100 * c / tot:.0f}%), merge {m:.2f} s "
                             f"({100 * m / tot:.0f}%), {r['n_words']:,} distinct pre-tokens]")
                print(line, flush=True)
            base = res.get("bpe_cffi", {})
            if "seconds" in base:
                for s, r in res.items():
                    if s != "bpe_cffi" and "seconds" in r:
                        print(f"  {s}/bpe_cffi: time {r['seconds'] / base['seconds']:.2f}x, "
                              f"peak RSS {r['peak_mb'] / base['peak_mb']:.2f}x")
            results.append({"corpus": a.corpus, "mb": size_mb, "vocab": vocab,
                            "threads": a.threads, "results": res})
    finally:
        os.unlink(path)
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
