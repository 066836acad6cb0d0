"""`bpe-cffi decode`: turn a binary file of token ids (what `bpe-cffi encode` writes) back
into the bytes of its text."""
import argparse
import array
import os
import sys

DESCRIPTION = """\
Decode INPUT, a flat array of little-endian token ids (uint16 or uint32, no header: what
`bpe-cffi encode` and Tokenizer.encode_file write), back into text: the bytes of every token
in turn, special tokens as their text.  For ids encoded from UTF-8 text this is that text,
byte for byte, so decoding is the check of an encoded dataset:

    bpe-cffi decode --tokenizer tok.json train.bin | head -c 2000

INPUT "-" reads standard input; the text goes to standard output unless -o names a file
(replaced when done, as encode's).  The file is read in blocks, so memory stays small
whatever its size.  --dtype must be the width the ids were written with: the default is
encode's (uint16 when the vocabulary has at most 65536 ids, else uint32).  A file whose size
is not a whole number of ids, or an id the tokenizer does not have, is an error naming the
position.
"""

BLOCK_IDS = 1 << 20          # ids decoded per block


def add_parser(subparsers) -> None:
    from ._cli_encode import add_tokenizer_arguments
    p = subparsers.add_parser(
        "decode", help="decode a binary array of token ids back into text",
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input", metavar="INPUT", help="file of token ids; - for standard input")
    p.add_argument("-o", "--output", metavar="OUT",
                   help="where to write the text (default: standard output)")
    add_tokenizer_arguments(p, "a special token of a vocab.json or .tiktoken tokenizer, as "
                               "given to encode (repeat for several)")
    p.add_argument("--dtype", choices=["uint16", "uint32"],
                   help="id width; default uint16 when the vocabulary has at most 65536 ids, "
                        "else uint32 (as encode)")
    p.set_defaults(func=run)


def run(args) -> int:
    from . import formats
    from ._cli_encode import (_is_gpt2_vocab, input_path, load_tokenizer,
                              refuse_tokenizer_as_output)
    source = input_path(args.input)
    in_stat = os.stat(source)                 # FileNotFoundError names a missing input
    if os.path.isdir(source):
        raise IsADirectoryError(21, "the input is a directory", args.input)
    if args.output not in (None, "-"):
        if formats.same_file(args.output, in_stat):
            raise ValueError(f"-o {args.output} is the input file: refusing to replace the "
                             f"ids with their text")
        refuse_tokenizer_as_output(args, _is_gpt2_vocab(args.tokenizer), what="text")
    kw = {"special_tokens": args.special_token} if args.special_token else {}
    tok = load_tokenizer((args.tokenizer, args.merges) if args.merges else args.tokenizer, kw)
    width = {"uint16": 2, "uint32": 4}.get(args.dtype, 2 if tok.n_vocab <= 65536 else 4)
    to_stdout = args.output is None or args.output == "-"
    if not to_stdout:
        formats.check_output_path(args.output)
    with tok, open(source, "rb") as fin:
        if to_stdout:
            out = getattr(sys.stdout, "buffer", sys.stdout)
            decode_stream(tok, fin, out, width, args.input)
            out.flush()
        else:
            with formats.output_file(args.output, fsync=False) as fout:
                decode_stream(tok, fin, fout, width, args.input)
    return 0


def decode_stream(tok, fin, fout, width: int, name: str) -> int:
    """Decodes the ids read from fin (little-endian, `width` bytes each) into fout, block by
    block; returns the number of ids.  ValueError names a partial id or an unknown one by
    its position in the file."""
    typecode = "H" if width == 2 else next(c for c in "IL" if array.array(c).itemsize == 4)
    done = 0
    while True:
        raw = fin.read(BLOCK_IDS * width)
        if not raw:
            return done
        if len(raw) % width:
            more = fin.read(width - len(raw) % width)     # a pipe may give a part of an id
            raw += more
            if len(raw) % width:
                raise ValueError(f"{name}: {done * width + len(raw)} bytes, not a whole "
                                 f"number of {width}-byte ids (is --dtype "
                                 f"{'uint16' if width == 2 else 'uint32'} right?)")
        ids = array.array(typecode, raw)
        if sys.byteorder != "little":
            ids.byteswap()
        ids = ids.tolist()
        try:
            fout.write(tok.decode_bytes(ids))
        except ValueError:
            k = _first_unknown(tok, ids)
            raise ValueError(f"{name}: id {ids[k]} at position {done + k} (byte "
                             f"{(done + k) * width}) is not in the vocabulary (n_vocab "
                             f"{tok.n_vocab}; is --dtype right?)") from None
        done += len(ids)


def _first_unknown(tok, ids) -> int:
    for k, i in enumerate(ids):
        try:
            tok.decode_single_token_bytes(i)
        except (ValueError, KeyError):
            return k
    return 0
