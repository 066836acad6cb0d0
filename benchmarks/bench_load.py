"""How long a tokenizer takes to load, bpe_cffi against tiktoken and HuggingFace `tokenizers`,
each load in a fresh process (as a CLI call or a new worker does), taken turn about.

    python benchmarks/bench_load.py [--reps 5] [--vocab gpt2 cl100k_base o200k_base]

Rows, per vocabulary:
  tiktoken file   bpe_cffi Tokenizer.from_tiktoken(.tiktoken) (cl100k_base, o200k_base)
  vocab+merges    bpe_cffi Tokenizer.from_files(vocab.json, merges.txt) (gpt2)
  tokenizer.json  bpe_cffi load() of the tokenizer.json bpe_cffi saves, against HF
                  Tokenizer.from_file of the same file
  tiktoken        the tiktoken Encoding built by ../shared/vocab/offline_tiktoken.py
                  (tiktoken's own loader reads a .tiktoken file line by line in Python too)
Times exclude starting Python and importing the library (printed apart, once); median
[min-max] over the reps, in seconds.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_encode import PATTERN, VOCAB

TIMED = """
import sys, time
sys.path.insert(0, {vocab!r})
{imports}
t0 = time.perf_counter()
{load}
print(time.perf_counter() - t0)
"""


def loads(vocab: str, json_path: str) -> dict:
    """name -> (imports, load statement) for one vocabulary."""
    v = str(VOCAB)
    ours = "import bpe_cffi"
    out = {}
    if vocab == "gpt2":
        out["bpe_cffi vocab+merges"] = (
            ours, f"bpe_cffi.Tokenizer.from_files({v!r} + '/gpt2_vocab.json', "
                  f"{v!r} + '/gpt2_merges.txt')")
    else:
        out["bpe_cffi tiktoken file"] = (
            ours, f"bpe_cffi.Tokenizer.from_tiktoken({v!r} + '/{vocab}.tiktoken', "
                  f"pattern={PATTERN[vocab]!r})")
    out["bpe_cffi tokenizer.json"] = (ours, f"bpe_cffi.load({json_path!r})")
    out["HF tokenizer.json"] = ("import tokenizers",
                                f"tokenizers.Tokenizer.from_file({json_path!r})")
    out["tiktoken"] = ("import tiktoken, offline_tiktoken",
                       f"offline_tiktoken.get_encoding({vocab!r})")
    return out


def time_once(imports: str, load: str) -> float:
    code = TIMED.format(vocab=str(VOCAB), imports=imports, load=load)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    return float(done.stdout.split()[-1])


def saved_json(vocab: str, folder: str) -> str:
    """The tokenizer.json bpe_cffi saves for the vocabulary (read by both libraries)."""
    import bpe_cffi
    if vocab == "gpt2":
        tok = bpe_cffi.Tokenizer.from_files(VOCAB / "gpt2_vocab.json", VOCAB / "gpt2_merges.txt")
    else:
        tok = bpe_cffi.Tokenizer.from_tiktoken(VOCAB / f"{vocab}.tiktoken",
                                               pattern=PATTERN[vocab])
    path = os.path.join(folder, f"{vocab}.json")
    tok.save(path)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--vocab", nargs="+", default=["gpt2", "cl100k_base", "o200k_base"])
    a = ap.parse_args()
    imports = {name: time_once("", stmt) for name, stmt in
               (("bpe_cffi", "import bpe_cffi"), ("tokenizers", "import tokenizers"),
                ("tiktoken", "import tiktoken, offline_tiktoken"))}
    print("import only (s): " + ", ".join(f"{k} {t:.3f}" for k, t in imports.items()))
    with tempfile.TemporaryDirectory() as folder:
        for vocab in a.vocab:
            rows = loads(vocab, saved_json(vocab, folder))
            times = {name: [] for name in rows}
            for _ in range(a.reps):
                for name, (imp, load) in rows.items():
                    times[name].append(time_once(imp, load))
            print(f"\n{vocab}:")
            for name, ts in times.items():
                print(f"  {name:24s} {statistics.median(ts):6.3f} s "
                      f"[{min(ts):.3f}-{max(ts):.3f}]")


if __name__ == "__main__":
    main()
