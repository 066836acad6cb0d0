"""`bpe-cffi train`: learn a byte-level BPE vocabulary from text files and write it."""
import argparse
import os
import sys
import time

FORMATS = ("hf", "tiktoken", "gpt2")

DESCRIPTION = """\
Train a byte-level BPE tokenizer on one or more UTF-8 text files (invalid bytes count as
U+FFFD).  The text is split on the special tokens, pre-tokenized with the pattern, and the
most frequent adjacent pair is merged until the vocabulary has --vocab-size ids (256 bytes +
merges + special tokens).  Ties go to the greatest (left bytes, right bytes); the result does
not depend on --threads.  Ctrl-C stops it cleanly and writes nothing.

output formats (--format):
  hf        OUT is a HuggingFace tokenizer.json (default; loads with bpe_cffi.load and with
            tokenizers.Tokenizer.from_file)
  tiktoken  OUT is a .tiktoken file: one "base64(token) id" line per ordinary token
            (special tokens are not part of this format; pass them again when loading)
  gpt2      OUT names vocab.json; merges.txt is written beside it
"""

EPILOG = """\
examples:
  bpe-cffi train corpus.txt --vocab-size 32000 --special-token '<|endoftext|>' -o tok.json
  bpe-cffi train a.txt b.txt --vocab-size 10000 --pattern cl100k --format tiktoken -o my.tiktoken
  bpe-cffi train data.txt --vocab-size 5000 --format gpt2 -o out/vocab.json   # + out/merges.txt
"""


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "train", help="train a BPE vocabulary from text files",
        description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+", metavar="FILE", help="UTF-8 text files to train on")
    p.add_argument("--vocab-size", type=int, required=True, metavar="N",
                   help="ids in all: 256 bytes + merges + special tokens")
    p.add_argument("--special-token", action="append", default=[], metavar="S",
                   help="a special token (repeatable); splits the text, gets the last ids")
    p.add_argument("--pattern", default="gpt2", metavar="P",
                   help="pre-tokenizer: gpt2, cl100k, o200k (fast, in C) or any regex "
                        "(Python `regex` module); default gpt2")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="worker threads (default: one per core)")
    p.add_argument("--min-frequency", type=int, default=None, metavar="F",
                   help="stop when the most frequent pair occurs fewer than F times")
    p.add_argument("--format", choices=FORMATS, default="hf",
                   help="output format (default: hf tokenizer.json)")
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="output file")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars or summary")
    p.set_defaults(func=run)


def write_output(fmt: str, out: str, vocab, merges, special_tokens, pattern) -> list:
    """Writes the trained vocabulary (atomically, through bpe_cffi.formats); returns the paths
    written."""
    from . import formats
    if fmt == "tiktoken":     # a .tiktoken file holds the ordinary tokens; specials come last
        ordinary = dict(sorted(vocab.items())[:len(vocab) - len(special_tokens)])
        formats.write_tiktoken(ordinary, out)
        return [out]
    if fmt == "gpt2":
        merges_path = os.path.join(os.path.dirname(os.path.abspath(out)), "merges.txt")
        formats.write_gpt2(vocab, merges, out, merges_path)
        return [out, merges_path]
    from .tokenizer import Tokenizer
    Tokenizer(vocab, merges, special_tokens, pattern=pattern).save(out)
    return [out]


def run(args) -> int:
    from .train import _train
    out_dir = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(out_dir):
        raise FileNotFoundError(2, "output directory does not exist", out_dir)
    t0 = time.perf_counter()
    vocab, merges, stats = _train(args.files, args.vocab_size, args.special_token,
                                  pattern=args.pattern, num_threads=args.threads,
                                  min_frequency=args.min_frequency, progress=not args.quiet)
    written = write_output(args.format, args.output, vocab, merges, args.special_token,
                           args.pattern)
    if not args.quiet:
        dt = time.perf_counter() - t0
        print(f"bpe-cffi: {len(vocab)} tokens ({len(merges)} merges, "
              f"{stats['n_words']:,} distinct pre-tokens) in {dt:.1f} s "
              f"(counting {stats['count_seconds']:.1f} s, merging {stats['merge_seconds']:.1f} s)"
              f"; wrote {', '.join(written)}", file=sys.stderr)
    return 0
