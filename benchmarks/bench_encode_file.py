"""encode_file on a large file: throughput against encode_batch on the same text, and peak RSS.

    python benchmarks/bench_encode_file.py [--gb 1] [--input FILE] [--threads 2]
                                           [--vocab gpt2] [--batch-mb 200] [--reps 2]

Builds --gb GB of English prose in a temporary file by repeating ../shared/corpora/en_books
(or uses --input), then in a child process (so its peak RSS is its own) runs encode_file on
it and reports MB/s and VmHWM (taken before the output is mapped for the check).  For the
baseline, encode_batch runs in another child on the first --batch-mb MB of the same file,
split into documents on blank lines (holding a whole GB of text and its ids as Python lists
would measure Python, not the encoder).  Each runs --reps times, turn about, and the best
time of each is kept.  Prints the ratio encode_file / encode_batch throughput (goal: >= 0.9)
and checks that the output equals encode_ordinary of a prefix.
"""
import argparse
import json
import lzma
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"

CHILD = r'''
import json, sys, time
from pathlib import Path
mode, path, vocab_dir, name, threads, batch_mb = sys.argv[1:7]
threads, batch_mb = int(threads), float(batch_mb)
from bpe_cffi import Tokenizer
vocab_dir = Path(vocab_dir)
if name == "gpt2":
    tok = Tokenizer.from_files(vocab_dir / "gpt2_vocab.json", vocab_dir / "gpt2_merges.txt")
else:
    tok = Tokenizer.from_tiktoken(vocab_dir / f"{name}.tiktoken", pattern=name.split("_")[0])
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
if mode == "file":
    import os
    out = path + ".ids"
    t0 = time.perf_counter()
    n = tok.encode_file(path, out, num_threads=threads, progress=False)
    dt = time.perf_counter() - t0
    peak = hwm()     # before the check below maps the output
    nbytes = os.path.getsize(path)
    import numpy as np
    ids = np.memmap(out, dtype=np.uint16 if tok.n_vocab <= 65536 else np.uint32, mode="r")
    with open(path, "rb") as f:
        head = f.read(2_000_000).decode("utf-8", errors="ignore")
    head = head[: head.rfind("\n\n")]       # a cut where the ids cannot depend on what follows
    ref = tok.encode_ordinary(head)
    ok = len(ids) == n and ids[: len(ref)].tolist() == ref
    del ids
    os.unlink(out)
    print(json.dumps({"mode": mode, "bytes": nbytes, "seconds": dt, "tokens": n,
                      "prefix_ok": ok, "peak_mb": peak}))
else:
    with open(path, "rb") as f:
        text = f.read(int(batch_mb * 1e6)).decode("utf-8", errors="ignore")
    docs = [d for d in text.split("\n\n") if d]
    nbytes = sum(len(d.encode()) for d in docs)
    t0 = time.perf_counter()
    out = tok.encode_batch(docs, num_threads=threads)
    dt = time.perf_counter() - t0
    print(json.dumps({"mode": mode, "bytes": nbytes, "seconds": dt,
                      "tokens": sum(map(len, out)), "peak_mb": hwm()}))
'''


def build_input(gb: float) -> str:
    target = int(gb * 1e9)
    fd, path = tempfile.mkstemp(prefix="bpe-cffi-bench-", suffix=".txt")
    with lzma.open(SHARED / "corpora" / "en_books.txt.xz", "rb") as src:
        book = src.read()
    with os.fdopen(fd, "wb") as f:
        written = 0
        while written < target:
            chunk = book[: target - written]
            f.write(chunk)
            written += len(chunk)
    return path


def child(mode: str, path: str, a) -> dict:
    r = subprocess.run([sys.executable, "-c", CHILD, mode, path, str(SHARED / "vocab"), a.vocab,
                        str(a.threads), str(a.batch_mb)], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{mode} child failed:\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--input", help="an existing text file instead of a generated one")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--vocab", default="gpt2", choices=["gpt2", "cl100k_base", "o200k_base"])
    ap.add_argument("--batch-mb", type=float, default=200.0)
    ap.add_argument("--reps", type=int, default=2,
                    help="runs of each, taken turn about; the best time of each is kept")
    a = ap.parse_args()
    path = a.input or build_input(a.gb)
    try:
        # turn about, best of --reps each: the machine's slow spells fall on both alike
        runs = [(child("file", path, a), child("batch", path, a)) for _ in range(a.reps)]
    finally:
        if not a.input:
            os.unlink(path)
    f = min((r[0] for r in runs), key=lambda x: x["seconds"])
    b = min((r[1] for r in runs), key=lambda x: x["seconds"])
    f["peak_mb"] = max(r[0]["peak_mb"] for r in runs)
    f["prefix_ok"] = all(r[0]["prefix_ok"] for r in runs)
    fr = f["bytes"] / f["seconds"] / 1e6
    br = b["bytes"] / b["seconds"] / 1e6
    print(f"encode_file  {f['bytes'] / 1e9:.2f} GB  {fr:7.1f} MB/s  peak RSS {f['peak_mb']:.0f} MB"
          f"  tokens {f['tokens']:,}  prefix ids equal encode_ordinary: {f['prefix_ok']}")
    print(f"encode_batch {b['bytes'] / 1e6:.0f} MB  {br:7.1f} MB/s  peak RSS {b['peak_mb']:.0f} MB"
          f"  ({a.threads} threads)")
    print(f"ratio encode_file / encode_batch throughput: {fr / br:.2f}x (goal >= 0.9); "
          f"encode_file peak RSS {f['peak_mb']:.0f} MB (goal < 200 MB)")
    return 0 if f["prefix_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
