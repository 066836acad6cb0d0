"""`bpe-cffi encode`: encode a text file into a flat binary array of token ids."""
import argparse
import os
import sys

DESCRIPTION = """\
Encode the UTF-8 text file INPUT into OUT, a flat array of little-endian token ids
(uint16 or uint32, no header), in parallel.  Read it back with numpy:

    ids = numpy.fromfile("OUT.bin", dtype=numpy.uint16)

INPUT "-" reads standard input and "-o -" writes standard output, so the command can sit in
a pipeline:

    xzcat corpus.txt.xz | bpe-cffi encode --tokenizer tok.json - -o - | ...

(standard output must not be a terminal; a file given by `>` or `>>` is written from where it
stands, as any command's output is).  Bytes of INPUT that are not valid UTF-8 are read as
U+FFFD.  Special tokens of the tokenizer
(e.g. <|endoftext|>) found in the text are encoded as their ids: those a tokenizer.json
lists, the known ones of the standard .tiktoken files, and those given with
--special-token (needed for a GPT-2 vocab.json, whose format has no place for them, and for
a .tiktoken file written by `bpe-cffi train`).  Ctrl-C or SIGTERM stops the job and
removes the partial output (standard output keeps what was written).

--tokenizer accepts any file `bpe_cffi.load` reads: a tokenizer.json (as written by
Tokenizer.save), a GPT-2 vocab.json (merges.txt is looked for beside it; the split pattern is
the one its first line records, as `bpe-cffi train --format gpt2` writes it, else gpt2), or a
.tiktoken file (the split pattern is inferred for the standard 50k/100k/200k vocabularies;
otherwise give --pattern).
"""


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "encode", help="encode a text file into a binary array of token ids",
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input", metavar="INPUT", help="text file to encode (UTF-8); - for "
                                                  "standard input")
    p.add_argument("-o", "--output", required=True, metavar="OUT",
                   help="where to write the ids (e.g. train.bin); replaced if it exists; - "
                        "for standard output")
    add_tokenizer_arguments(p, "a special token of a vocab.json or .tiktoken tokenizer (repeat "
                               "for several): in a vocab.json it is the token of that text "
                               "(GPT-2's <|endoftext|> is 50256); in a .tiktoken file the ids "
                               "follow the vocabulary in the order given.  The tokens given are "
                               "all the special tokens: for a standard .tiktoken file they "
                               "replace its known ones (name those too to keep them; they keep "
                               "their ids)")
    p.add_argument("--pattern", metavar="NAME|REGEX",
                   help="split pattern (gpt2, cl100k, o200k or a regex); default: from the "
                        "tokenizer file")
    p.add_argument("--dtype", choices=["uint16", "uint32"],
                   help="id width; default uint16 when the vocabulary has at most 65536 ids, "
                        "else uint32")
    p.add_argument("--threads", type=int, metavar="N",
                   help="worker threads (default, or 0: one per core this process may "
                        "use, no more than its cgroup CPU quota allows)")
    p.add_argument("--no-progress", action="store_true",
                   help="do not draw the progress bar on stderr")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="print nothing but errors (no progress bar, no summary), as train -q")
    p.set_defaults(func=run)


def add_tokenizer_arguments(p, special_help: str) -> None:
    """--tokenizer, --merges and --special-token, as encode and decode take them."""
    p.add_argument("--tokenizer", required=True, metavar="PATH",
                   help="tokenizer.json, vocab.json (with merges.txt beside it) or .tiktoken")
    p.add_argument("--merges", metavar="PATH",
                   help="merges.txt, when --tokenizer is a vocab.json and it is not beside it")
    p.add_argument("--special-token", action="append", metavar="TOKEN", help=special_help)


def _is_gpt2_vocab(path) -> bool:
    """True unless path is plainly another format (.tiktoken, or a JSON object whose "model"
    is an object, as in a tokenizer.json: GPT-2's vocab.json has a token "model");
    load() gives the precise error otherwise."""
    import json
    if str(path).endswith(".tiktoken"):
        return False
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read())
    except (OSError, ValueError):
        return True
    return not (isinstance(doc, dict) and isinstance(doc.get("model"), dict))


def refuse_tokenizer_as_output(args, gpt2_vocab: bool, what: str = "ids") -> None:
    """ValueError when -o names the tokenizer file or the merges file load() reads with it
    (--merges, or beside a GPT-2 vocab.json): the ids would replace it."""
    from . import formats
    from .tokenizer import merges_candidates
    merges = args.merges
    if merges is None and gpt2_vocab:
        merges = next((m for m in merges_candidates(args.tokenizer) if os.path.exists(m)),
                      None)
    for flag, path in (("--tokenizer", args.tokenizer), ("--merges", merges)):
        try:
            st = os.stat(path) if path else None
        except OSError:
            continue                     # load() names a missing file
        if st is not None and formats.same_file(args.output, st):
            raise ValueError(f"-o {args.output} is the {flag} file: refusing to replace it "
                             f"with {what}")


def load_tokenizer(source, kw):
    """bpe_cffi.load(source, **kw), its errors naming this command's flags, not load's
    arguments."""
    from .tokenizer import load
    try:
        return load(source, **kw)
    except ValueError as exc:
        raise ValueError(str(exc).replace("do not pass special_tokens",
                                          "do not pass --special-token")) from None


def run(args) -> int:
    from . import formats
    if args.threads is not None and args.threads < 0:
        raise ValueError(f"--threads must be >= 0 (0: one per core), not {args.threads}")
    source_path = input_path(args.input)
    if not os.path.exists(source_path):
        raise FileNotFoundError(2, "input file not found", args.input)
    if os.path.isdir(source_path):
        raise IsADirectoryError(21, "the input is a directory", args.input)
    to_stdout = args.output == "-"
    if to_stdout:
        output = _stdout_for_ids()
    else:
        output = args.output
        formats.check_output_path(args.output)
    gpt2_vocab = _is_gpt2_vocab(args.tokenizer)
    if not to_stdout:
        refuse_tokenizer_as_output(args, gpt2_vocab)
    kw = {}
    if args.pattern is not None:
        if not args.pattern:
            raise ValueError("--pattern is empty: give a name (gpt2, cl100k, o200k) or a regex")
        kw["pattern"] = args.pattern
    if args.special_token:
        kw["special_tokens"] = args.special_token
    if args.merges and not gpt2_vocab:
        raise ValueError(f"--merges goes with a GPT-2 vocab.json; {args.tokenizer} is not one "
                         f"(a tokenizer.json or .tiktoken holds its own merges)")
    source = (args.tokenizer, args.merges) if args.merges else args.tokenizer
    tok = load_tokenizer(source, kw)
    with tok:
        n = tok.encode_file(source_path, output, dtype=args.dtype,
                            num_threads=args.threads,
                            progress=not (args.no_progress or args.quiet))
        width = args.dtype or ("uint16" if tok.n_vocab <= 65536 else "uint32")
    if not args.quiet:
        where = "standard output" if to_stdout else args.output
        print(f"{n:,} tokens ({width}) written to {where}", file=sys.stderr)
    return 0


def input_path(name: str) -> str:
    """The path to read an input named on the command line from: "-" is standard input (as
    /dev/stdin, which C opens and reads once, a pipe or a redirected file alike)."""
    if name != "-":
        return name
    try:
        os.fstat(0)
    except OSError:
        raise ValueError("-: standard input is closed") from None
    if not os.path.exists("/dev/stdin"):
        raise OSError("reading standard input (-) needs /dev/stdin, which this system lacks: "
                      "give the input file's path")
    return "/dev/stdin"


def _stdout_for_ids():
    """Standard output's binary file for "-o -"; ValueError when it is a terminal (ids are
    binary) or closed."""
    out = sys.stdout
    if out is None or getattr(out, "closed", False):
        raise ValueError("-o -: standard output is closed")
    if out.isatty():
        raise ValueError("-o -: standard output is a terminal; the ids are binary: redirect "
                         "it to a file or a pipe, or give -o FILE")
    return getattr(out, "buffer", out)
