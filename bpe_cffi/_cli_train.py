"""`bpe-cffi train`: learn a BPE vocabulary (byte-level, or with --char-level on characters)
from text files and write it."""
import argparse
import os
import sys
import time

FORMATS = ("hf", "tiktoken", "gpt2")

DESCRIPTION = """\
Train a byte-level BPE tokenizer on one or more UTF-8 text files (invalid bytes count as
U+FFFD; FILE "-" is standard input: `xzcat corpus.xz | bpe-cffi train - ...`).  The text is
split on the special tokens, pre-tokenized with the pattern, and the most frequent adjacent
pair is merged until the vocabulary has --vocab-size ids (256 bytes + merges + special
tokens).  Ties go to the greatest (left bytes, right bytes); the result does not depend on
--threads.  Ctrl-C stops it cleanly and writes nothing.

With --char-level the initial tokens are the characters of the text instead of the 256
bytes, as HuggingFace's BpeTrainer does without a ByteLevel pre-tokenizer; then
--initial-alphabet, --limit-alphabet, --continuing-subword-prefix and --end-of-word-suffix
apply, and the output is a character-level tokenizer.json (--format hf only).

output formats (--format):
  hf        OUT is a HuggingFace tokenizer.json (default; loads with bpe_cffi.load and with
            tokenizers.Tokenizer.from_file)
  tiktoken  OUT is a .tiktoken file: one "base64(token) id" line per ordinary token
            (special tokens and the split pattern are not part of this format: pass them
            again when loading, --special-token and --pattern)
  gpt2      OUT names vocab.json; merges.txt is written beside it (a --pattern other than
            gpt2 is recorded in its first line, which other readers skip)
"""

EPILOG = """\
examples:
  bpe-cffi train corpus.txt --vocab-size 32000 --special-token '<|endoftext|>' -o tok.json
  bpe-cffi train a.txt b.txt --vocab-size 10000 --pattern cl100k --format tiktoken -o my.tiktoken
  bpe-cffi train data.txt --vocab-size 5000 --format gpt2 -o out/vocab.json   # + out/merges.txt
  bpe-cffi train data.txt --vocab-size 8000 --char-level --limit-alphabet 1000 \\
      --continuing-subword-prefix '##' --max-token-length 16 -o char.json
"""


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "train", help="train a BPE vocabulary from text files",
        description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="UTF-8 text files to train on; - for standard input")
    p.add_argument("--vocab-size", type=int, required=True, metavar="N",
                   help="ids in all: 256 bytes (or, with --char-level, the characters) + "
                        "merges + special tokens")
    p.add_argument("--special-token", action="append", default=[], metavar="S",
                   help="a special token (repeatable); splits the text, gets the last ids")
    p.add_argument("--pattern", default="gpt2", metavar="P",
                   help="pre-tokenizer: gpt2, cl100k, o200k (fast, in C) or any regex "
                        "(Python `regex` module); default gpt2")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="worker threads (default, or 0: one per core this process may "
                        "use, no more than its cgroup CPU quota allows)")
    p.add_argument("--min-frequency", type=int, default=None, metavar="F",
                   help="stop when the most frequent pair occurs fewer than F times")
    p.add_argument("--max-token-length", type=int, default=None, metavar="L",
                   help="learn no token longer than L: bytes (byte-level) or characters "
                        "(--char-level; the prefix and suffix do not count); default: no limit")
    c = p.add_argument_group("character-level training")
    c.add_argument("--char-level", action="store_true",
                   help="start from the characters of the text, not the 256 bytes (the "
                        "vocabulary then only covers characters seen or listed below)")
    c.add_argument("--initial-alphabet", default=None, metavar="CHARS",
                   help="characters always in the vocabulary, even if unseen "
                        "(e.g. 'abcdefghijklmnopqrstuvwxyz')")
    c.add_argument("--limit-alphabet", type=int, default=None, metavar="N",
                   help="keep at most N characters: the initial alphabet, then the most "
                        "frequent; the others are dropped from the text")
    c.add_argument("--continuing-subword-prefix", default=None, metavar="S",
                   help="put S before every token that does not start a pre-token "
                        "(e.g. '##')")
    c.add_argument("--end-of-word-suffix", default=None, metavar="S",
                   help="put S after every token that ends a pre-token (e.g. '</w>')")
    p.add_argument("--format", choices=FORMATS, default="hf",
                   help="output format (default: hf tokenizer.json)")
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="output file")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars or summary")
    p.set_defaults(func=run)


def write_output(fmt: str, out: str, vocab, merges, special_tokens, pattern,
                 char_level=None) -> list:
    """Writes the trained vocabulary (atomically, through bpe_cffi.formats); returns the paths
    written.  char_level: None for a byte-level vocabulary, else the options
    {"continuing_subword_prefix": ..., "end_of_word_suffix": ...} of a char-level one."""
    from . import formats
    if char_level is not None:
        return write_char_level(fmt, out, vocab, merges, special_tokens, pattern, char_level)
    if fmt == "tiktoken":     # a .tiktoken file holds the ordinary tokens; specials come last
        ordinary = dict(sorted(vocab.items())[:len(vocab) - len(special_tokens)])
        formats.write_tiktoken(ordinary, out)
        return [out]
    if fmt == "gpt2":
        merges_path = os.path.join(os.path.dirname(os.path.abspath(out)), "merges.txt")
        formats.write_gpt2(vocab, merges, out, merges_path, pattern=pattern)
        return [out, merges_path]
    from .tokenizer import Tokenizer
    Tokenizer(vocab, merges, special_tokens, pattern=pattern).save(out)
    return [out]


def write_char_level(fmt, out, vocab, merges, special_tokens, pattern, options) -> list:
    from . import formats, patterns
    if fmt != "hf":
        raise ValueError(f"--format {fmt} holds byte-level vocabularies only; a --char-level "
                         "vocabulary is written as --format hf (tokenizer.json)")
    name, regex_str, _ = patterns.resolve(pattern)
    n = len(vocab) - len(special_tokens)
    ordinary = {i: b for i, b in vocab.items() if i < n}
    special = {s: n + k for k, s in enumerate(special_tokens)}
    doc = formats.hf_json_char_level(ordinary, merges, special, regex_str, name,
                                     options.get("continuing_subword_prefix"),
                                     options.get("end_of_word_suffix"))
    formats.write_hf(out, doc)
    return [out]


def save_rescue(out: str, vocab, special_tokens, char_level):
    """When the output asked for cannot be written after the training (a vocabulary its
    format cannot hold, a full disk), the ordinary tokens go to a .tiktoken file (which holds
    any bytes) beside it, else in the current or temporary directory; its path, or None (a
    char-level vocabulary, or nowhere to write)."""
    import tempfile
    from . import formats
    if char_level is not None:
        return None
    ordinary = dict(sorted(vocab.items())[:len(vocab) - len(special_tokens or ())])
    name = os.path.basename(out.rstrip("/" + os.sep)) or "vocabulary"
    for directory in (os.path.dirname(os.path.abspath(out)), os.getcwd(), tempfile.gettempdir()):
        for k in range(100):
            path = os.path.join(directory, f"{name}.rescue{k or ''}.tiktoken")
            if os.path.exists(path):
                continue
            try:
                formats.write_tiktoken(ordinary, path)
                return path
            except OSError:
                break                     # this directory: try the next
    return None


def output_paths(fmt: str, out: str) -> list:
    """The files --format fmt -o out writes."""
    if fmt == "gpt2":
        return [out, os.path.join(os.path.dirname(os.path.abspath(out)), "merges.txt")]
    return [out]


def check_outputs(fmt: str, out: str, inputs) -> None:
    """Before the training: an error for outputs that cannot be written or would replace
    an input (or each other)."""
    from . import formats
    if out == "-":
        raise ValueError("train writes files: -o - (standard output) is not one; name the "
                         "file to write")
    paths = output_paths(fmt, out)
    formats.check_output_path(out)
    if len(paths) == 2 and (os.path.basename(out) == "merges.txt" or
                            os.path.abspath(out) == os.path.abspath(paths[1])):
        raise ValueError(f"--format gpt2 writes merges.txt beside the vocabulary: -o {out} "
                         f"would be overwritten by it (name the vocabulary vocab.json)")
    for p in inputs:
        try:
            st = os.stat(p)
        except OSError:
            continue                     # the trainer names a missing input
        for q in paths:
            if formats.same_file(q, st):
                raise ValueError(f"output {q!r} is the input file {p!r}: refusing to replace "
                                 f"the text with the vocabulary")


def check_specials_fit(args) -> None:
    """Before the training: a special token that a byte-level tokenizer.json may not hold
    beside the tokens learned is refused now, not after the training: one whose text is
    the stand-in of other bytes in GPT-2's byte alphabet, as 'Ġthe' is of ' the'.  A
    one-character one ('é', 'Ġ') is a byte's token, which every vocabulary has."""
    from . import formats
    if args.format != "hf" or args.char_level:
        return
    alphabet = set(formats.byte_to_unicode())
    for s in args.special_token or ():
        if s in alphabet:
            raise ValueError(f"special token {s!r} is the text of a byte's token in a byte-level "
                             f"tokenizer.json (GPT-2's byte alphabet), which cannot hold both: "
                             f"use another special token, or --format tiktoken / gpt2")
        stands_for = formats.token_str_to_bytes(s, "") if set(s) <= alphabet else None
        if stands_for is not None and stands_for != s.encode("utf-8"):
            raise ValueError(f"special token {s!r} is how a byte-level tokenizer.json writes the "
                             f"token of the bytes {stands_for!r}: if the training learns that "
                             f"token the file cannot hold both; use another special token, or "
                             f"--format tiktoken / gpt2")


def check_pattern_fits(args) -> None:
    """Before the training: a tokenizer.json holds its split pattern in the dialect of HF's
    regex engine, and a pattern that has no exact form there is refused now."""
    from . import formats, patterns
    if args.format != "hf":
        return
    try:
        formats.onig_regex(patterns.resolve(args.pattern)[1])
    except ValueError as exc:
        raise ValueError(f"{exc}; --format hf writes the pattern into tokenizer.json for HF's "
                         f"regex engine (Oniguruma): rewrite it, or write --format tiktoken "
                         f"or gpt2, which keep it as it is") from None


def run(args) -> int:
    from ._cli_encode import input_path
    from .train import _train
    if args.files.count("-") > 1:
        raise ValueError("standard input (-) can be read only once: name it once")
    args.files = [input_path(f) for f in args.files]
    check_outputs(args.format, args.output, args.files)
    check_specials_fit(args)
    check_pattern_fits(args)
    char_level = None
    options = {"max_token_length": args.max_token_length}
    if args.char_level:
        char_level = {"continuing_subword_prefix": args.continuing_subword_prefix,
                      "end_of_word_suffix": args.end_of_word_suffix}
        options.update(char_level, byte_level=False, initial_alphabet=args.initial_alphabet,
                       limit_alphabet=args.limit_alphabet)
        if args.format != "hf":     # fail before the training, not after
            write_char_level(args.format, None, {}, [], [], args.pattern, char_level)
    else:
        for flag, value in (("--initial-alphabet", args.initial_alphabet),
                            ("--limit-alphabet", args.limit_alphabet),
                            ("--continuing-subword-prefix", args.continuing_subword_prefix),
                            ("--end-of-word-suffix", args.end_of_word_suffix)):
            if value is not None:
                raise ValueError(f"{flag} needs --char-level (byte-level training always "
                                 "starts from the 256 bytes)")
    t0 = time.perf_counter()
    try:
        vocab, merges, stats = _train(args.files, args.vocab_size, args.special_token,
                                      pattern=args.pattern, num_threads=args.threads,
                                      min_frequency=args.min_frequency,
                                      progress=not args.quiet, **options)
    except (ValueError, TypeError) as exc:
        raise type(exc)(_flag_names(str(exc))) from None
    try:
        written = write_output(args.format, args.output, vocab, merges, args.special_token,
                               args.pattern, char_level)
    except (ValueError, OSError):
        rescue = save_rescue(args.output, vocab, args.special_token, char_level)
        if rescue:
            print(f"bpe-cffi: the trained vocabulary could not be written as asked (below); "
                  f"it is kept in {rescue}: Tokenizer.from_tiktoken({rescue!r}, pattern="
                  f"{args.pattern!r}, special_tokens={list(args.special_token or [])!r}) "
                  f"reads it", file=sys.stderr)
        raise
    if not args.quiet:
        dt = time.perf_counter() - t0
        print(f"bpe-cffi: {len(vocab)} tokens ({len(merges)} merges, "
              f"{stats['n_words']:,} distinct pre-tokens) in {dt:.1f} s "
              f"(counting {stats['count_seconds']:.1f} s, merging {stats['merge_seconds']:.1f} s)"
              f"; wrote {', '.join(written)}", file=sys.stderr)
    note = size_note(len(vocab), len(merges), args)
    if stats["n_words"] == 0 and any(os.path.getsize(f) for f in args.files
                                     if os.path.isfile(f)):
        note = (f"the text has no pre-token: the pattern {args.pattern!r} matched none of it "
                f"(nothing was learned)")
        if args.special_token:
            note = (f"the text has no pre-token: it holds only special tokens, or the pattern "
                    f"{args.pattern!r} matched none of the rest (nothing was learned)")
    if note:
        print(f"bpe-cffi: note: {note}", file=sys.stderr)
    return 0


_FLAGS = {"vocab_size": "--vocab-size", "num_threads": "--threads",
          "min_frequency": "--min-frequency", "max_token_length": "--max-token-length",
          "limit_alphabet": "--limit-alphabet", "initial_alphabet": "--initial-alphabet",
          "continuing_subword_prefix": "--continuing-subword-prefix",
          "end_of_word_suffix": "--end-of-word-suffix"}


def _flag_names(message: str) -> str:
    """A train_bpe error message with its argument names written as this command's flags."""
    for name, flag in _FLAGS.items():
        message = message.replace(name, flag)
    return message


def size_note(n_vocab, n_merges, args):
    """Why the vocabulary is not --vocab-size tokens, or None when it is."""
    if n_vocab > args.vocab_size:
        return (f"{n_vocab} tokens, more than --vocab-size {args.vocab_size}: the initial "
                f"tokens and special tokens alone are {n_vocab - n_merges}"
                + (" (--limit-alphabet keeps fewer characters)" if args.char_level else ""))
    if n_vocab < args.vocab_size:
        why = "no pair of tokens was left to merge"
        if args.min_frequency:
            why += f" at least {args.min_frequency} times (--min-frequency)"
        if args.max_token_length is not None:
            why += f" within --max-token-length {args.max_token_length}"
        return f"{n_vocab} tokens, fewer than --vocab-size {args.vocab_size}: {why}"
    return None
