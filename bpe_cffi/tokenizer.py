"""The Python face of the C encoder: `Tokenizer` and `load`.

A Tokenizer owns one immutable C `bpe_tokenizer` (csrc/bpe.h), plus the Python-side facts it
was built from (ordinary vocabulary, merges, special tokens, rule, pattern) so it can be saved.
Every encode call checks its arguments here (a str: TypeError for anything else), hands the
text to C as UTF-8 (an ASCII str's characters in place, without a copy), and turns the C
error code into an exception with a message naming the token, id or file.  CFFI releases
the GIL during C calls, and the C tokenizer may be used by any number of threads at once, so
one Tokenizer serves many threads.

Two ways of splitting text:
  - a built-in pattern ("gpt2", "cl100k", "o200k") runs in C, special tokens included;
  - any other regex is run here with the `regex` module; special tokens are matched here too,
    and only the BPE of the pieces runs in C (bpe_encode_pieces).

Lifetime: `close()` (or leaving a `with` block) frees the C tokenizer, at once or, while
another thread's call still uses it, when that call returns (calls started after close()
raise ValueError); otherwise it is freed when the object is garbage collected (ffi.gc).
"""
import contextlib
import errno
import gc
import io
import itertools
import operator
import os
import re
import stat
import threading
import weakref
from array import array

from . import _idcache
from . import added_tokens
from . import formats
from . import patterns
from ._batch_job import BatchJob
from ._native import ffi, lib, raise_for
from .tiktoken_api import TiktokenMethods

DEFAULT_CACHE_CAPACITY = 65536    # word-cache entries per slot (32 B of table, ~20 B of record);
                                  # a cache grows to 4x when emptied pieces keep returning

_RULE_C = {formats.RULE_MERGES: lib.BPE_RULE_MERGES, formats.RULE_TIKTOKEN: lib.BPE_RULE_TIKTOKEN}

# The special tokens of the well-known tiktoken vocabularies, by number of ordinary tokens.
_KNOWN_TIKTOKEN = {
    50256: ("gpt2", {"<|endoftext|>": 50256}),
    100256: ("cl100k", {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258,
                        "<|fim_middle|>": 100259, "<|fim_suffix|>": 100260,
                        "<|endofprompt|>": 100276}),
    199998: ("o200k", {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}),
}


_UINT_IS_32 = memoryview(b"\0\0\0\0").cast("I").itemsize == 4


def _address(ptr) -> int:
    return int(ffi.cast("uintptr_t", ptr))


def _ids(ptr, n) -> list:
    """A list of the n uint32 ids at ptr (by the helper: untracked by the cycle collector,
    as encode_batch's are, also when empty)."""
    if _idcache.FAST:
        return _idcache.ids_list(_address(ptr), n)
    return _ids_py(ptr, n)


def _ids_py(ptr, n) -> list:
    """_ids without the C helper.  memoryview.tolist() makes the ints ~30% faster than
    ffi.unpack for long results; ffi.unpack has less fixed cost for short ones."""
    if n == 0:
        return []
    if n < 48 or not _UINT_IS_32:
        return ffi.unpack(ptr, n)
    return memoryview(ffi.buffer(ptr, 4 * n)).cast("I").tolist()


# The C core's bpe_batch_step and bpe_batch_poll, for the helper's collect_batch (it does
# not link the core).
_BATCH_STEP = int(ffi.cast("uintptr_t", ffi.addressof(lib, "bpe_batch_step")))
_BATCH_POLL = int(ffi.cast("uintptr_t", ffi.addressof(lib, "bpe_batch_poll")))
# ... and the functions its encode_str and decode_ids call (short jobs in one call)
_ENCODE = int(ffi.cast("uintptr_t", ffi.addressof(lib, "bpe_encode")))
_IDS_FREE = int(ffi.cast("uintptr_t", ffi.addressof(lib, "bpe_ids_free")))
_DECODE = int(ffi.cast("uintptr_t", ffi.addressof(lib, "bpe_decode")))
_BYTES_FREE = int(ffi.cast("uintptr_t", ffi.addressof(lib, "bpe_bytes_free")))
# texts shorter than this (characters) go through encode_str: a longer one's encoding can
# take long enough to want Ctrl-C, which the CFFI path handles, and the call's own cost is
# lost in it anyway
_SHORT_TEXT = 4096
_encode_str = _idcache.encode_str
_decode_ids = _idcache.decode_ids


def _split_ids(ptr, ends_ptr, n_texts) -> list:
    """[ids[0:ends[0]], ids[ends[0]:ends[1]], ...] for the uint32 ids at ptr and the n_texts
    size_t ends at ends_ptr."""
    if _idcache.FAST:
        return _idcache.ids_lists(_address(ptr), _address(ends_ptr), n_texts)
    return _split_ids_py(ptr, ends_ptr, n_texts)


def _split_ids_py(ptr, ends_ptr, n_texts) -> list:
    ends = ffi.unpack(ends_ptr, n_texts)
    total = ends[-1] if ends else 0
    if total == 0:
        return [[] for _ in ends]
    flat = memoryview(ffi.buffer(ptr, 4 * total)).cast("I") if _UINT_IS_32 else \
        ffi.unpack(ptr, total)
    out, start = [], 0
    for end in ends:
        part = flat[start:end]
        out.append(part.tolist() if _UINT_IS_32 else part)
        start = end
    return out


_BYTE_TOKEN = re.compile(rb"<0x[0-9A-F]{2}>")     # byte_fallback's tokens


def _special_hint(b: bytes, special_tokens) -> str:
    """The end of the message for two vocab ids with the bytes b, when b is a special token
    (a special token in a vocab dict is found by its bytes, so they must be unique)."""
    try:
        named = any((s.encode("utf-8") if isinstance(s, str) else bytes(s)) == b
                    for s in special_tokens or ())
    except (TypeError, ValueError):
        return ""
    return " (a special token: it must not also be an ordinary token)" if named else ""


def _mode_key(arg):
    """An allowed_special / disallowed_special argument as a key of the mode cache when it
    needs no reading: "all", or "none" for an empty collection (text from users:
    allowed_special=set()); None for any other."""
    if isinstance(arg, str):
        return "all" if arg == "all" else None
    return "none" if type(arg) in (set, frozenset, tuple, list) and not arg else None


def _plain_vocab(vocab: dict):
    """(vocab as {int id: bytes}, {bytes: id}) when every entry is already so (int ids in
    range, non-empty distinct bytes), checked a list at a time; (None, None) otherwise."""
    ids, tokens = list(vocab), list(vocab.values())
    if not ids or not all(type(i) is int for i in ids) or \
            not all(type(b) is bytes and b for b in tokens) or \
            not 0 <= min(ids) <= max(ids) < 2 ** 32 - 1:
        return None, None
    seen = dict(zip(tokens, ids))
    return (dict(vocab), seen) if len(seen) == len(ids) else (None, None)


def _checked_vocab(vocab: dict, special_tokens):
    """(vocab as {int id: bytes}, {bytes: id}) entry by entry, raising on the first bad
    one."""
    clean = {}
    seen = {}
    for i, b in vocab.items():
        if isinstance(i, bool) or not hasattr(i, "__index__"):
            raise TypeError(f"vocab: token id {i!r} is not an int")
        i = i.__index__()
        if not isinstance(b, (bytes, bytearray, memoryview)):
            raise TypeError(f"vocab: token {i} must be bytes, not {type(b).__name__}")
        if i < 0 or i >= 2 ** 32 - 1:
            raise ValueError(f"vocab: token id {i} is out of range")
        b = bytes(b)
        if not b:
            raise ValueError(f"vocab: token {i} is empty")
        if b in seen:
            raise ValueError(f"vocab: tokens {seen[b]} and {i} have the same bytes {b!r}"
                             + _special_hint(b, special_tokens))
        seen[b] = int(i)
        clean[int(i)] = b
    return clean, seen


def _numbered_after(vocab: dict, known: dict, names) -> dict:
    """{name: id} for special tokens given as a list: a known one keeps its id, the others
    follow the highest id of the vocabulary and of the known ones, in order."""
    next_id = max([*vocab, *known.values()], default=-1) + 1
    out = {}
    for s in names:
        if not isinstance(s, str):
            raise TypeError(f"special token {s!r} is not a str")
        if s in out:
            continue
        if s in known:
            out[s] = known[s]
        else:
            out[s] = next_id
            next_id += 1
    return out


def _check_special_ids(vocab: dict, special, byte_level: bool = True) -> None:
    """Checks special tokens given as {str: id} against a vocabulary {id: bytes}: ValueError
    for an id that is another token's, or two tokens with one id, or (for a character-level
    vocabulary) a token that is also an ordinary token under another id.  A byte-level
    vocabulary may have a special token's bytes as an ordinary token (HF's added "\n\n" in a
    GPT-2 vocabulary, whose token string is "\u010a\u010a"): encode finds the special token
    first, encode_ordinary gives the ordinary one; a character-level tokenizer.json could not
    hold both under one string."""
    if not isinstance(special, dict):
        raise TypeError("special_tokens must be a dict {str: id}")
    wanted = {s.encode("utf-8") for s in special if isinstance(s, str)}
    # the ordinary ids of special tokens' bytes; a whole reverse map only when some are
    by_bytes = {} if wanted.isdisjoint(vocab.values()) else \
        {b: i for i, b in vocab.items() if b in wanted}
    for s, i in special.items():
        if not isinstance(s, str) or not s:
            raise ValueError(f"special token {s!r} must be a non-empty str")
        if type(i) is not int or not 0 <= i < 2 ** 32 - 1:
            raise ValueError(f"special token {s!r}: id {i!r} is not a valid id")
        if i in vocab and vocab[i] != s.encode("utf-8"):
            raise ValueError(f"special token {s!r}: id {i} is already the ordinary token "
                             f"{vocab[i]!r}")
        j = by_bytes.get(s.encode("utf-8"))
        if j is not None and j != i and not byte_level:
            raise ValueError(f"special token {s!r} has id {i} but is also the ordinary "
                             f"token {j}")
    ids = list(special.values())
    if len(set(ids)) != len(ids):
        raise ValueError(f"special tokens share an id: {special}")


def _c_threads(num_threads) -> int:
    """num_threads as the C calls take it: 0 for one per core (None or 0), else at most
    BPE_MAX_THREADS (what C would use anyway; a larger int does not fit its int)."""
    if num_threads is None:
        return 0
    if isinstance(num_threads, bool) or not hasattr(num_threads, "__index__"):
        raise TypeError(f"num_threads must be an int >= 1 (None or 0: one per core), not "
                        f"{num_threads!r}")
    num_threads = operator.index(num_threads)       # numpy's ints too
    if num_threads < 0:
        raise ValueError(f"num_threads must be an int >= 1 (None or 0: one per core), not "
                         f"{num_threads!r}")
    return min(num_threads, lib.BPE_MAX_THREADS)


def _numpy_ids(arr):
    """A C-contiguous uint32 numpy array of the ids in a one-dimensional numpy integer array
    (itself when it is one already: no copy), or None for an array to read item by item (an
    object array, or not one-dimensional).  TypeError for a bool, float or other array;
    ValueError naming the first id outside 0 .. 2**32-1."""
    import numpy as np
    if arr.ndim != 1 or arr.dtype.kind == "O":
        return None
    if arr.dtype.kind not in "iu":
        raise TypeError(f"ids must be integers, not a numpy array of {arr.dtype}")
    bad = np.zeros(arr.shape, dtype=bool)
    if arr.dtype.kind == "i":
        bad |= arr < 0
    if arr.dtype.itemsize > 4:
        bad |= arr > 0xFFFFFFFF
    if bad.any():
        k = int(bad.argmax())
        raise ValueError(f"unknown token id {arr[k]} at position {k}")
    return np.ascontiguousarray(arr, dtype=np.uint32)


# Tokenizers with dropout and a random seed: a forked child gives each a new seed, or every
# child (a fork-based data loader's workers) would repeat its parent's "random" stream.
_RANDOM_SEEDED = weakref.WeakSet()


def _reseed_all() -> None:
    for tok in list(_RANDOM_SEEDED):
        ptr = tok._ptr
        if ptr is not None:
            lib.bpe_tokenizer_reseed(ptr, int.from_bytes(os.urandom(8), "little"))


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reseed_all)


class _GCPaused:
    """Pauses the cyclic garbage collector while many result lists are built without the C
    helper (with it, the helper pauses it while it holds the GIL; see idlist.c).

    Each new list counts towards the collector's threshold, so building tens of thousands of
    id lists (encode_batch) runs full collections over everything tracked, about doubling
    the cost; the lists hold only ints and can form no cycles.  The collector's prior state is
    restored on exit; concurrent callers compose (whoever found it enabled re-enables it)."""

    def __enter__(self):
        self.was_enabled = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc):
        if self.was_enabled:
            gc.enable()


def _refuse_same_file(in_stat, in_path, out) -> None:
    """ValueError when out, a path (through symlinks) or an open descriptor, is the input
    file (whose os.stat is in_stat): the ids written there would replace the text, or be read
    back as text."""
    if isinstance(out, int):
        same = stat.S_ISREG(in_stat.st_mode) and os.path.samestat(os.fstat(out), in_stat)
        what = f"file descriptor {out}"
    else:
        same = formats.same_file(out, in_stat)
        what = repr(out)
    if same:
        raise ValueError(f"output_path {what} is the input file {in_path!r}: refusing to "
                         f"replace the text with its ids")


def _utf8(text) -> bytes:
    """UTF-8 of a str; lone surrogates become U+FFFD, as tiktoken does."""
    if type(text) is not str:
        if isinstance(text, str):
            text = str.__str__(text)    # its characters, whatever its own __str__ says
        else:
            raise TypeError(f"text must be a str, not {type(text).__name__}")
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace").encode("utf-8")


class _Counted:
    """The strs of `chunks`, their UTF-8 bytes counted into a progress bar (None: none) out
    of `total` (0: unknown)."""

    def __init__(self, chunks, bar, total):
        self.chunks, self.bar, self.total, self.done = chunks, bar, total, 0

    def __iter__(self):
        for chunk in self.chunks:
            self.done += len(chunk.encode("utf-8", "surrogatepass"))
            if self.bar is not None:
                self.bar.update(min(self.done, self.total) if self.total else self.done,
                                self.total)
            yield chunk


_FILE_BLOCK = 1 << 15   # characters read at a time from a regular text file (encode_iterable):
# small enough that a block, its UTF-8 and its ids stay below malloc's mmap threshold (CS336's
# test allows 1 MB over the resident size, less than the address space already mapped, so no
# new mapping may be made), large enough that the per-chunk Python costs under 2% (32K: 44
# MB/s on 40 MB of English, 1M: 48, 8K: 42)


def _file_blocks(iterable):
    """A regular text file (seekable: not a pipe, terminal or socket) as blocks of
    _FILE_BLOCK characters instead of its lines: the same text (read() and iteration apply
    the same newline translation), in far fewer chunks.  Each chunk costs a few microseconds
    of Python around the C call, so a file of short lines (40 MB of English books, 52
    characters a line) went through encode_iterable at ~17 MB/s, and at ~44 MB/s in blocks.  A
    stream that is not seekable keeps its lines, so ids still come out as text arrives.
    Anything else is returned as it is."""
    if not isinstance(iterable, io.TextIOBase):
        return iterable
    try:
        seekable = iterable.seekable()
    except (OSError, ValueError):   # closed, or a wrapper that cannot tell
        seekable = False
    if not seekable:
        return iterable
    return iter(lambda: iterable.read(_FILE_BLOCK), "")


def _pairs_kept_whole(iterable):
    """The items of iterable, a high surrogate that ends a str moved to the start of the next
    one: a surrogate pair cut between two chunks is then one character, as in the joined
    text (each half alone would be U+FFFD)."""
    held = ""
    for chunk in iterable:
        if not isinstance(chunk, str):
            hint = " (a file opened in binary mode? open it as text: open(path, " \
                "encoding='utf-8'))" if isinstance(chunk, (bytes, bytearray)) else ""
            raise TypeError(f"encode_iterable: the iterable gave an item of type "
                            f"{type(chunk).__name__}, not a str{hint}")
        if held:
            chunk, held = held + chunk, ""
        if chunk and "\ud800" <= chunk[-1] <= "\udbff":
            chunk, held = chunk[:-1], chunk[-1]
        if chunk:
            yield chunk
    if held:
        yield held


def _grown_enough(chunks, tail_len):
    """The UTF-8 of chunks (strs), several joined where needed so that each piece handed out
    is at least as long as the tail the encoder carried over (tail_len(), read when the piece
    is due): a tail that finds no cut (one long piece, e.g. a run of blank lines read line by
    line) is then scanned again only after doubling, not at every chunk, which was quadratic
    (100K blank lines: 12 s against 1 ms for encode)."""
    parts, size = [], 0
    for chunk in chunks:
        b = _utf8(chunk)
        parts.append(b)
        size += len(b)
        if size >= tail_len():
            yield b"".join(parts) if len(parts) > 1 else parts[0]
            parts, size = [], 0
    if parts:
        yield b"".join(parts)


def _piece_ends_walk(rx, text: str, data: bytes) -> list:
    """Tokenizer._regex_piece_ends match by match: text's pieces are rx's non-empty matches
    and the text between them; their ends as offsets into data (text's UTF-8)."""
    ends = []
    pos = 0
    for m in rx.finditer(text):
        s, e = m.span()
        if e == s:
            continue
        if s > pos:
            ends.append(s)
        ends.append(e)
        pos = e
    if pos < len(text):
        ends.append(len(text))
    if len(text) != len(data):          # char offsets -> byte offsets
        byte_ends = []
        last_c = last_b = 0
        for e in ends:
            last_b += len(text[last_c:e].encode("utf-8"))
            last_c = e
            byte_ends.append(last_b)
        ends = byte_ends
    return ends


# From this many characters on, a non-ASCII str is read where it lies and C writes its UTF-8
# a part at a time as it encodes (bpe_encode_units); a shorter one goes through str.encode,
# which costs less than the longer path's setup there.
_UNITS_PATH_MIN = 4096

# A batch of at most _FEW_TEXTS strs of at most _FEW_CHARS characters in all is encoded text
# by text: a job's setup (~9 us) costs more than encoding them (1 short text: 11.0 us as a
# job, 2.2 us alone; the two cross at about 5 texts), and so few bytes start no worker.
_FEW_TEXTS = 4
_FEW_CHARS = 16384


def _short_strs(texts) -> bool:
    total = 0
    for t in texts:
        if type(t) is not str:
            return False
        total += len(t)
    return total <= _FEW_CHARS


# From this many bytes on, encode runs its C call on a helper thread while the main thread
# waits, so that Ctrl-C stops it within milliseconds (progress.run_cancellable) instead of
# after the whole text (~30 ms of work at this size).  encode_batch starts and collects its
# job on the helper thread from this many code units of texts on.
_CANCELLABLE_MIN = 4 << 20


def _join_utf8(texts: list):
    """(b"".join(_utf8(t) for t in texts), a size_t[] of the end of each), by the C helper
    when it can (no bytes object per text), else text by text (which also raises TypeError
    for a text that is not a str)."""
    got = _idcache.join_utf8(texts)
    if got is not None:
        return got[0], ffi.from_buffer("size_t[]", got[1])
    return _join_utf8_py(texts)


def _join_utf8_py(texts: list):
    """_join_utf8 text by text: for the texts the C helper leaves to Python (a surrogate, a
    str subclass, not a str: _utf8 converts or raises)."""
    with _naming_bad_text(texts):
        datas = [_utf8(t) for t in texts]
    return b"".join(datas), size_t_array(itertools.accumulate(map(len, datas)))


@contextlib.contextmanager
def _naming_bad_text(texts: list):
    """Around work on a batch: a TypeError raised in it becomes one that names the first
    text that is not a str by its index (a batch of a million texts deserves it)."""
    try:
        yield
    except TypeError:
        bad = next(((k, t) for k, t in enumerate(texts) if not isinstance(t, str)), None)
        if bad is None:
            raise
        raise TypeError(f"texts[{bad[0]}] must be a str, not {type(bad[1]).__name__}") \
            from None


_SIZE_T = next(c for c in "QLI" if array(c).itemsize == ffi.sizeof("size_t"))


def size_t_array(values):
    """A C size_t[] holding values (an iterable of ints >= 0), filled by array.array:
    ffi.new("size_t[]", a_list) converts item by item, ~0.5 us each."""
    return ffi.from_buffer("size_t[]", array(_SIZE_T, values))


def _disallowed_error(token: str) -> ValueError:
    """tiktoken's error for a disallowed special token; the token itself is its
    special_token attribute (the daemon words the error for its own protocol)."""
    exc = ValueError(
        f"Encountered text corresponding to disallowed special token {token!r}.\n"
        f"If you want this text to be encoded as a special token, pass it to `allowed_special`, "
        f"e.g. `allowed_special={{{token!r}, ...}}`.\n"
        f"If you want this text to be encoded as normal text, disable the check for this token "
        f"by passing `disallowed_special=(enc.special_tokens_set - {{{token!r}}})`.\n"
        f"To disable this check for all special tokens, pass `disallowed_special=()`.\n")
    exc.special_token = token
    return exc


_MODEL_DEFAULTS = {"byte_level": True, "dropout": None, "seed": None, "unk_token": None,
                   "fuse_unk": False, "byte_fallback": False,
                   "continuing_subword_prefix": None, "end_of_word_suffix": None}
_COMPONENTS = (("pre_tokenizer", "pre_tokenize_str"), ("normalizer", "normalize_str"),
               ("decoder", "decode"))


def _check_options(opts: dict) -> dict:
    """The model options (keys of _MODEL_DEFAULTS), checked and normalised; ValueError or
    TypeError naming the bad one."""
    unknown = set(opts) - set(_MODEL_DEFAULTS)
    if unknown:
        raise TypeError(f"unknown model options {sorted(unknown)}")
    o = dict(_MODEL_DEFAULTS)
    o.update(opts)
    for name in ("byte_level", "fuse_unk", "byte_fallback"):
        if not isinstance(o[name], bool):
            raise TypeError(f"{name} must be a bool, not {type(o[name]).__name__}")
    d = o["dropout"]
    if d is not None:
        if isinstance(d, bool) or not isinstance(d, (int, float)):
            raise TypeError(f"dropout must be a float in [0, 1] or None, not {d!r}")
        if not 0.0 <= d <= 1.0:
            raise ValueError(f"dropout must be in [0, 1], not {d!r}")
        o["dropout"] = float(d)
    s = o["seed"]
    if s is not None and (isinstance(s, bool) or not isinstance(s, int)
                          or not 0 <= s < 2 ** 64):
        raise ValueError(f"seed must be an int in 0 .. 2**64-1 or None, not {s!r}")
    for name in ("unk_token", "continuing_subword_prefix", "end_of_word_suffix"):
        v = o[name]
        if v is None:
            continue
        if isinstance(v, (bytearray, memoryview)):
            v = o[name] = bytes(v)
        if not isinstance(v, (str, bytes)):
            raise TypeError(f"{name} must be a str (as in vocab.json), bytes or None, not "
                            f"{type(v).__name__}")
        if not v:
            raise ValueError(f"{name} must not be empty")
    return o


def _option_bytes(value, byte_level: bool, name: str) -> bytes:
    """A token-string option as token bytes: a str is written as in vocab.json (the GPT-2
    byte alphabet for a byte-level vocabulary, plain text otherwise); bytes are taken as is."""
    if isinstance(value, bytes):
        return value
    if byte_level:
        return formats.token_str_to_bytes(value, name)
    return value.encode("utf-8")


class Tokenizer(TiktokenMethods):
    """A byte-level BPE tokenizer (see the module docstring).

    Tokenizer(vocab, merges, special_tokens=None, *, pattern="gpt2") builds one from a
    vocabulary {id: bytes} and a ranked merge list [(bytes, bytes)] (merge rank = list order;
    what a BPE trainer returns).  special_tokens: a list of str, those already in the
    vocabulary keeping their id and the others taking the next free ids; or a dict {str: id}
    (ValueError for an id that is another token's).  cache_capacity: the pieces each
    thread's word cache holds (0: no cache); a cache doubles, up to 4 times that, when the
    pieces it emptied out to make room keep coming back (the same large text again).

    Model options (HuggingFace BPE's, same semantics and ids; applied in C, csrc/model.c):
      byte_level=True: tokens are byte strings and a piece starts as its bytes (GPT-2 style;
        vocab.json in the byte-to-unicode alphabet).  False: tokens are text (their UTF-8),
        a piece starts as its characters (SentencePiece/BERT-style vocabularies, "▁the",
        "##ing"); vocab.json / merges.txt hold the token text literally.
      dropout=None: BPE-dropout probability p in [0, 1]; each merge is skipped with
        probability p (HF's Word::merge_all).  With p > 0 the word cache and the
        ignore_merges shortcut are bypassed, as in HF.  0 and None: off.
      seed=None: seeds the dropout generators.  Call k of this tokenizer draws from a
        stream seeded by (seed, k), so a tokenizer made with the same seed gives the same
        ids for the same sequence of single-threaded calls (encode, encode_batch with
        num_threads=1: one stream per text in order); with more threads, texts / file
        chunks take streams in the order threads reach them, so ids vary run to run (the
        distribution does not).  None: a random seed, drawn again in a forked child (so
        fork-based workers each draw their own stream; with a given seed they all repeat
        the parent's).
      unk_token=None: the token that stands for a character (byte) with no token; None drops
        such characters (as HF does; so does a byte-level vocabulary lacking some single-byte
        tokens, trained by HF without its initial alphabet).  ValueError if it is not in the
        vocabulary.  (A tiktoken vocabulary lacking a byte raises ValueError at encode.)
      fuse_unk=False: consecutive unknown characters become one unk_token.
      byte_fallback=False: a character with no token becomes the tokens "<0xNN>" of its
        UTF-8 bytes if all exist, else unk_token.
      continuing_subword_prefix=None ("##"), end_of_word_suffix=None ("</w>"): added to
        every initial symbol but a piece's first, resp. to its last, before the lookup; a
        merge (a, b) makes a + b[len(prefix):].
      A str option is written as in vocab.json (for byte_level, in the byte alphabet);
      bytes are taken as token bytes.
    Pipeline components (objects with HF's method protocol; HF's own objects work):
      normalizer.normalize_str(text) -> str, applied first (special tokens are matched in
        the raw text before, as HF does for non-normalized added tokens);
      pre_tokenizer.pre_tokenize_str(text) -> [(piece, (start, end))], replaces `pattern`;
        pieces are taken as plain text (for byte_level the model does the byte mapping, so
        do not pass a byte-mapping pre-tokenizer such as HF's ByteLevel);
      decoder.decode(tokens: list[str]) -> str, used by decode() on the token strings.
    encode_iterable / encode_file refuse a normalizer or pre_tokenizer; encode_with_offsets
    refuses options that change the token bytes (normalizer, pre_tokenizer, prefix, suffix,
    unk_token, byte_fallback).
    A tokenizer.json's added tokens with lstrip, rstrip, single_word or normalized set are
    found as HF finds them (bpe_cffi.added_tokens; with a regex pattern instead of a
    built-in one, encode_iterable / encode_file refuse them).
    """

    _ptr = None       # the C tokenizer; an instance attribute until close() takes it
    # what a loaded tokenizer.json held for HF alone (post_processor, truncation, padding,
    # the added tokens that are not special, the added tokens' options), written back by
    # save(); None: nothing
    _hf_kept = None
    # added_tokens.AddedTokens when a loaded tokenizer.json's added-token options change
    # where its tokens are found (then the text goes through Python: _encode_py)
    _added = None

    # ---- construction ---------------------------------------------------------------------

    def __init__(self, vocab, merges, special_tokens=None, *, pattern: str = "gpt2",
                 cache_capacity: int = DEFAULT_CACHE_CAPACITY, ignore_merges: bool = True,
                 byte_level: bool = True, dropout=None, seed=None, unk_token=None,
                 fuse_unk: bool = False, byte_fallback: bool = False,
                 continuing_subword_prefix=None, end_of_word_suffix=None,
                 pre_tokenizer=None, normalizer=None, decoder=None):
        extra = dict(byte_level=byte_level, dropout=dropout, seed=seed, unk_token=unk_token,
                     fuse_unk=fuse_unk, byte_fallback=byte_fallback,
                     continuing_subword_prefix=continuing_subword_prefix,
                     end_of_word_suffix=end_of_word_suffix, pre_tokenizer=pre_tokenizer,
                     normalizer=normalizer, decoder=decoder)
        if not isinstance(vocab, dict):
            raise TypeError(f"vocab must be a dict {{id: bytes}}, not {type(vocab).__name__}")
        clean, seen = _plain_vocab(vocab)
        if clean is None:
            clean, seen = _checked_vocab(vocab, special_tokens)
        if merges is None:
            merges = []
        merges = list(merges)
        cut = 0
        if continuing_subword_prefix is not None:
            opts = _check_options({k: extra[k] for k in _MODEL_DEFAULTS})
            cut = len(_option_bytes(opts["continuing_subword_prefix"], opts["byte_level"],
                                    "continuing_subword_prefix"))
        merge_ids = formats.check_merges(clean, merges, "merges", cut=cut)
        merges = [(clean[a], clean[b]) for a, b in merge_ids]
        if special_tokens is None:
            special_tokens = []
        if isinstance(special_tokens, (str, bytes)):
            raise TypeError("special_tokens must be a list of str, not a single string")
        if isinstance(special_tokens, dict):         # ids given: kept, or refused
            special = dict(special_tokens)
            _check_special_ids(clean, special, bool(byte_level))
            special_tokens = ()
        else:
            special = {}
        next_id = max(clean, default=-1) + 1
        for s in special_tokens:
            if isinstance(s, (bytes, bytearray)):
                s = bytes(s).decode("utf-8")
            if not isinstance(s, str):
                raise TypeError(f"special token {s!r} is not a str")
            if not s:
                raise ValueError("the empty string cannot be a special token")
            if s in special:
                continue
            b = s.encode("utf-8")
            if b in seen:
                special[s] = seen[b]
            else:
                special[s] = next_id
                next_id += 1
        self._build(formats.RULE_MERGES, clean, merges, special, pattern, cache_capacity,
                    ignore_merges, extra)

    @classmethod
    def from_files(cls, vocab_filepath, merges_filepath, special_tokens=None, *,
                   pattern: str = None, byte_level: bool = True, **kw) -> "Tokenizer":
        """GPT-2 style vocab.json + merges.txt (byte-to-unicode alphabet; with
        byte_level=False the token text literally).  pattern: by default the one that
        merges.txt records (save_gpt2 and `bpe-cffi train --format gpt2` record one other
        than GPT-2's), else gpt2.  Other keywords as for Tokenizer()."""
        vocab = formats.read_gpt2_vocab(vocab_filepath, byte_level=byte_level)
        merges, lines = formats.read_gpt2_merges(merges_filepath, with_lines=True,
                                                 byte_level=byte_level)
        if pattern is None:
            pattern = formats.recorded_pattern(merges_filepath) or "gpt2"
        try:
            return _named(cls(vocab, merges, special_tokens, pattern=pattern,
                              byte_level=byte_level, **kw), vocab_filepath)
        except ValueError as exc:
            if str(exc).startswith("merges:"):     # say which line of the file is wrong
                cut = kw.get("continuing_subword_prefix")
                cut = len(_option_bytes(cut, byte_level, "continuing_subword_prefix")) \
                    if isinstance(cut, (str, bytes)) else 0
                formats.check_merges(vocab, merges, os.fspath(merges_filepath),
                                     line_of=lambda k: lines[k], cut=cut)
            raise

    @classmethod
    def from_tiktoken(cls, path, *, pattern: str = None, special_tokens=None,
                      **kw) -> "Tokenizer":
        """A .tiktoken file (base64 token, rank a line; rank = id), tiktoken's merge rule.

        special_tokens: {str: id}; or a list of str, numbered after the vocabulary in order
        (as `bpe-cffi train --format tiktoken` leaves them to be given again), a known one of
        the file keeping its id; None means the known ones for cl100k_base / o200k_base /
        r50k_base when the file is one of those (recognised by its size), else none.
        pattern: required unless the file is one of those."""
        vocab = formats.read_tiktoken(path)
        known = _KNOWN_TIKTOKEN.get(len(vocab))
        if pattern is None:
            if known is None:
                raise ValueError(f"{os.fspath(path)}: cannot infer the split pattern of a "
                                 f"vocabulary of {len(vocab)} tokens; pass pattern= (the "
                                 f"CLI's --pattern): a name (gpt2, cl100k, o200k) or a regex")
            pattern = known[0]
        known_ids = dict(known[1]) if known and max(vocab) + 1 == len(vocab) else {}
        if special_tokens is None:
            special_tokens = known_ids
        elif isinstance(special_tokens, (list, tuple)):
            special_tokens = _numbered_after(vocab, known_ids, special_tokens)
        return _named(cls._from_parts(formats.RULE_TIKTOKEN, vocab, [], special_tokens,
                                      pattern, **kw), path)

    @classmethod
    def train(cls, input_path, vocab_size, special_tokens=None, **options) -> "Tokenizer":
        """Train a vocabulary on text file(s) (bpe_cffi.train_bpe, same options) and return
        the tokenizer."""
        from .train import train_tokenizer
        return train_tokenizer(input_path, vocab_size, special_tokens, cls=cls, **options)

    @classmethod
    def _from_parts(cls, rule, vocab, merges, special, pattern,
                    cache_capacity=DEFAULT_CACHE_CAPACITY, ignore_merges=True, **extra):
        _check_special_ids(vocab, special, bool(extra.get("byte_level", True)))
        self = cls.__new__(cls)
        self._build(rule, vocab, merges, special, pattern, cache_capacity, ignore_merges,
                    extra)
        return self

    def _options(self, extra, rule, vocab):
        """Checks the model options and pipeline components of `extra` (see the class
        docstring) and sets self._opts (dict), self._components; returns (opts, unk_id,
        prefix bytes, suffix bytes)."""
        extra = dict(extra or {})
        comps = {}
        for name, method in _COMPONENTS:
            obj = extra.pop(name, None)
            if obj is not None and not callable(getattr(obj, method, None)):
                raise TypeError(f"{name} must have a {method}() method (HF's protocol), "
                                f"{type(obj).__name__} has none")
            comps[name] = obj
        opts = _check_options(extra)
        bl = opts["byte_level"]
        if rule != formats.RULE_MERGES and any(
                opts[k] != v for k, v in _MODEL_DEFAULTS.items() if k != "seed"):
            raise ValueError("model options (byte_level=False, dropout, unk_token, fuse_unk, "
                             "byte_fallback, prefix/suffix) need a merge-list vocabulary, "
                             "not a tiktoken one")
        unk_id = None
        if opts["unk_token"] is not None:
            ub = _option_bytes(opts["unk_token"], bl, "unk_token")
            unk_id = next((i for i, b in vocab.items() if b == ub), None)
            if unk_id is None:
                raise ValueError(f"unk_token {opts['unk_token']!r} is not in the vocabulary")
        prefix = suffix = b""
        if opts["continuing_subword_prefix"] is not None:
            prefix = _option_bytes(opts["continuing_subword_prefix"], bl,
                                   "continuing_subword_prefix")
        if opts["end_of_word_suffix"] is not None:
            suffix = _option_bytes(opts["end_of_word_suffix"], bl, "end_of_word_suffix")
        if not bl:
            for i, b in vocab.items():
                try:
                    b.decode("utf-8")
                except UnicodeDecodeError:
                    raise ValueError(f"vocab: token {i} ({b!r}) is not UTF-8 text, which a "
                                     f"character-level (byte_level=False) token must "
                                     f"be") from None
        self._opts = opts
        self._components = comps
        return opts, unk_id, prefix, suffix

    def _build(self, rule, vocab, merges, special, pattern, cache_capacity, ignore_merges,
               extra=None):
        """vocab {id: bytes} (may contain special tokens' bytes under their ids: those are
        removed from the ordinary tokens, except the unk_token and, with byte_fallback, the
        <0xNN> tokens, which the model uses too), merges [(bytes, bytes)], special {str: id},
        extra: model options and pipeline components (class docstring)."""
        self._ptr = None
        self.name = "bpe_cffi"      # tiktoken's Encoding.name; loaders set the file's (_named)
        name, regex_str, cpattern = patterns.resolve(pattern)
        if type(cache_capacity) is not int or cache_capacity < 0:
            raise ValueError(f"cache_capacity must be an int >= 0, not {cache_capacity!r}")
        opts, unk_id, prefix, suffix = self._options(extra, rule, vocab)
        special_ids = set(special.values())
        vocab = dict(vocab)
        shared = special_ids.intersection(vocab)     # special ids the vocabulary has too
        kept = {unk_id}
        if opts["byte_fallback"]:
            kept.update(i for i in shared if _BYTE_TOKEN.fullmatch(vocab[i]))
        # a special token that is also an ordinary token the merges use or make (HF's
        # add_tokens(["ing"])), or one of the model's initial symbols (a byte, or a
        # character): it stays ordinary for the model (split out of the text first); else
        # text holding that byte or character outside the special token lost it
        if shared:
            in_merges = formats.merge_names(merges, prefix)
            kept.update(i for i in shared if vocab[i] in in_merges or
                        formats.is_initial_symbol(vocab[i], opts["byte_level"], prefix,
                                                  suffix))
        removed = {vocab[i] for i in shared.difference(kept)}   # no longer model tokens
        for i in shared.difference(kept):
            del vocab[i]
        if len(vocab) != len(set(vocab.values())):
            raise ValueError("vocab: two tokens have the same bytes")
        merges = [(a, b) for a, b in merges if a + b not in removed
                  and a not in removed and b not in removed]
        self._rule = rule
        self._vocab = vocab
        self._merges = merges
        self._special = dict(special)
        self._special_names = list(special)          # spec order = special_mode order
        self._special_index = {s: k for k, s in enumerate(self._special_names)}
        self._pattern_name = name
        self._pattern_regex = regex_str
        self._cpattern = cpattern
        self._ignore_merges = bool(ignore_merges)
        self._cache_capacity = cache_capacity
        self._n_vocab = max(max(vocab, default=-1), max(special_ids, default=-1)) + 1
        self._id_bytes = dict(vocab)
        for s_, i in special.items():
            self._id_bytes[i] = s_.encode("utf-8")
        self._modes = {}
        self._modes_lock = threading.Lock()
        self._py_split = None
        self._py_special_re = {}
        self._pre_tokenizer = self._components["pre_tokenizer"]
        self._pre_ours = _is_ours(self._pre_tokenizer)
        self._normalizer = self._components["normalizer"]
        self._decoder = self._components["decoder"]
        # text goes through Python (split, normalize, pre-tokenize) before C sees pieces
        self._py_path = cpattern == 0 or self._pre_tokenizer is not None or \
            self._normalizer is not None
        self._token_strs = None
        if cpattern == 0:
            import regex
            self._py_split = regex.compile(regex_str)

        order = sorted(vocab)
        ordered = list(map(vocab.__getitem__, order))
        tok_bytes = b"".join(ordered)
        offsets = list(itertools.accumulate(map(len, ordered), initial=0))
        keep = []
        spec = ffi.new("bpe_spec *")
        spec.rule = _RULE_C[rule]
        spec.pattern = cpattern
        spec.ignore_merges = 1 if ignore_merges else 0
        spec.cache_capacity = cache_capacity
        spec.n_tokens = len(order)
        c_bytes = ffi.new("uint8_t[]", tok_bytes)
        c_offsets = ffi.new("size_t[]", offsets)
        c_ids = ffi.new("uint32_t[]", order)
        keep += [c_bytes, c_offsets, c_ids]
        spec.token_bytes, spec.token_offsets, spec.token_ids = c_bytes, c_offsets, c_ids
        if rule == formats.RULE_MERGES:
            ids = {b: i for i, b in vocab.items()}
            flat = []
            for a, b in merges:
                flat += (ids[a], ids[b])
            c_merges = ffi.new("uint32_t[]", flat or 1)
            keep.append(c_merges)
            spec.n_merges = len(merges)
            spec.merges = c_merges
        sp_bytes = [s.encode("utf-8") for s in self._special_names]
        sp_offsets = [0]
        for b in sp_bytes:
            sp_offsets.append(sp_offsets[-1] + len(b))
        c_sp = ffi.new("uint8_t[]", b"".join(sp_bytes) or b"\0")
        c_sp_off = ffi.new("size_t[]", sp_offsets)
        c_sp_ids = ffi.new("uint32_t[]", [special[s] for s in self._special_names] or 1)
        keep += [c_sp, c_sp_off, c_sp_ids]
        spec.n_special = len(sp_bytes)
        spec.special_bytes, spec.special_offsets, spec.special_ids = c_sp, c_sp_off, c_sp_ids
        spec.char_level = 0 if opts["byte_level"] else 1
        spec.byte_fallback = 1 if opts["byte_fallback"] else 0
        spec.fuse_unk = 1 if opts["fuse_unk"] else 0
        if unk_id is not None:
            spec.has_unk, spec.unk_id = 1, unk_id
        spec.dropout = opts["dropout"] or 0.0
        seed = opts["seed"]
        spec.seed = seed if seed is not None else int.from_bytes(os.urandom(8), "little")
        if prefix:
            c_prefix = ffi.new("uint8_t[]", prefix)
            keep.append(c_prefix)
            spec.subword_prefix, spec.subword_prefix_len = c_prefix, len(prefix)
        if suffix:
            c_suffix = ffi.new("uint8_t[]", suffix)
            keep.append(c_suffix)
            spec.word_suffix, spec.word_suffix_len = c_suffix, len(suffix)

        out = ffi.new("bpe_tokenizer **")
        bad = ffi.new("size_t *")
        rc = lib.bpe_tokenizer_new(spec, out, bad)
        if rc == lib.BPE_ERR_VOCAB:
            k = bad[0]
            what = (f"token {order[k]} ({vocab[order[k]]!r})" if k < len(order)
                    else f"index {k}")
            raise ValueError(f"vocabulary rejected at {what}: {_strerror(rc)}")
        if rc == lib.BPE_ERR_MERGE:
            k = bad[0]
            what = f"merge {k} {merges[k]!r}" if k < len(merges) else f"merge {k}"
            if prefix:
                what += f" (with continuing_subword_prefix {prefix!r} cut from its right part)"
            raise ValueError(f"merges rejected at {what}: {_strerror(rc)}")
        raise_for(rc, "building the tokenizer")
        self._ptr = ffi.gc(out[0], lib.bpe_tokenizer_free)
        if opts["dropout"] and seed is None:
            _RANDOM_SEEDED.add(self)     # a forked child draws its own stream (_reseed_all)
        self._all_mode, self._all_mode_address = self._mode_entry("all", ())
        self._address = _address(self._ptr)             # for encode_str (_short_ids)
        _idcache.reserve(lib.bpe_tokenizer_id_limit(self._ptr))

    # ---- lifetime ---------------------------------------------------------------------------

    def __getstate__(self):
        """Pickling (e.g. for multiprocessing) sends the parts; the C tokenizer is rebuilt."""
        return {"rule": self._rule, "vocab": self._vocab, "merges": self._merges,
                "special": self._special, "pattern": self._pattern_name or self._pattern_regex,
                "cache_capacity": self._cache_capacity, "ignore_merges": self._ignore_merges,
                "options": dict(self._opts), "components": dict(self._components),
                "hf_kept": self._hf_kept, "name": self.name}

    def __setstate__(self, state):
        extra = dict(state.get("options") or {})
        extra.update(state.get("components") or {})
        self._build(state["rule"], state["vocab"], state["merges"], state["special"],
                    state["pattern"], state["cache_capacity"], state["ignore_merges"], extra)
        self.name = state.get("name", self.name)
        if state.get("hf_kept") is not None:
            self._hf_kept = state["hf_kept"]
            self._use_added_flags(self._hf_kept.get("added_flags") or {})

    def _use_added_flags(self, flags: dict) -> None:
        """Find the added tokens as HF does, given {content: added_tokens.Flags} of those whose
        options are set (a tokenizer.json's)."""
        flags = {s: added_tokens.Flags(*f) for s, f in flags.items() if s in self._special}
        if added_tokens.needed(self._special, flags, self._normalizer is not None):
            normalize = self._normalizer.normalize_str if self._normalizer is not None else None
            self._added = added_tokens.AddedTokens(self._special, flags, normalize)
            self._py_path = True

    def close(self) -> None:
        """Free the C tokenizer: now, or when the last call still running in another thread
        returns.  Safe to call twice; the tokenizer is unusable after (ValueError).

        The C tokenizer is freed by its cdata's destructor (ffi.gc) when the last reference
        goes.  Every call into C holds one for as long as C may use the tokenizer (the
        argument of a call; a local across an encode_batch job), so dropping the
        tokenizer's own reference here frees it at once when nothing runs, and otherwise as
        the last running call returns; freeing it outright (ffi.release) crashed a call
        running in another thread."""
        self.__dict__.pop("_ptr", None)      # one atomic step: a second close finds nothing

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _handle(self):
        ptr = self._ptr
        if ptr is None:
            raise ValueError("the tokenizer is closed")
        return ptr

    def _cache_size(self, slot: int = 0) -> tuple:
        """(entries held, capacity now) of the word cache of C work slot `slot` (slot 0 is a
        single-threaded caller's); (0, 0) before it exists.  For tests: call it while no other
        thread uses this tokenizer."""
        count = ffi.new("size_t *")
        capacity = ffi.new("size_t *")
        lib.bpe_tokenizer_cache_size(self._handle(), slot, count, capacity)
        return count[0], capacity[0]

    def __repr__(self) -> str:
        pattern = self._pattern_name or repr(self._pattern_regex)
        state = "" if self._ptr is not None else ", closed"
        return (f"Tokenizer(n_vocab={self._n_vocab}, rule={self._rule}, pattern={pattern}, "
                f"merges={len(self._merges)}, special_tokens={len(self._special)}{state})")

    # ---- facts ------------------------------------------------------------------------------

    @property
    def n_vocab(self) -> int:
        """Largest id + 1 (ordinary and special tokens)."""
        return self._n_vocab

    @property
    def special_tokens(self) -> dict:
        return dict(self._special)

    @property
    def special_tokens_set(self) -> set:
        return set(self._special)

    @property
    def pattern(self) -> str:
        """The pattern's name when it is a built-in one, else the regex."""
        return self._pattern_name or self._pattern_regex

    @property
    def rule(self) -> str:
        return self._rule

    @property
    def model_options(self) -> dict:
        """The model options (byte_level, dropout, seed, unk_token, fuse_unk, byte_fallback,
        continuing_subword_prefix, end_of_word_suffix) as given."""
        return dict(self._opts)

    @property
    def pre_tokenizer(self):
        return self._pre_tokenizer

    @property
    def normalizer(self):
        return self._normalizer

    @property
    def decoder(self):
        return self._decoder

    @property
    def vocab(self) -> dict:
        """{id: bytes} of every token, special tokens included (as their UTF-8)."""
        v = dict(self._vocab)
        for s, i in self._special.items():
            v[i] = s.encode("utf-8")
        return v

    @property
    def merges(self) -> list:
        """The ranked merges [(bytes, bytes)] (for a tiktoken vocabulary: synthesized)."""
        if self._rule == formats.RULE_TIKTOKEN:
            return self._synth_merges()
        return list(self._merges)

    def _synth_merges(self):
        cached = getattr(self, "_synth", None)
        if cached is None:
            cached = self._synth = formats.synthesize_merges(self._vocab)
        return list(cached)

    # ---- special-token modes -----------------------------------------------------------------

    def _names(self, value, what: str) -> frozenset:
        if isinstance(value, str):
            raise ValueError(f"{what} must be 'all' or a set of special-token strings, not "
                             f"{value!r}")
        try:
            names = frozenset(value)
        except TypeError:
            raise TypeError(f"{what} must be 'all' or a set of str, not "
                            f"{type(value).__name__}") from None
        unknown = [s for s in names if s not in self._special]
        if unknown:
            raise ValueError(f"{what}: {sorted(map(str, unknown))} are not special tokens of "
                             f"this tokenizer (known: {sorted(self._special)})")
        return names

    def _sets(self, allowed_special, disallowed_special):
        allowed = (frozenset(self._special) if allowed_special == "all"
                   else self._names(allowed_special, "allowed_special"))
        if disallowed_special == "all":
            disallowed = frozenset(self._special) - allowed
        else:           # named ones are disallowed even when also allowed, as in tiktoken
            disallowed = self._names(disallowed_special, "disallowed_special")
        return allowed, disallowed

    def _mode_for(self, allowed_special, disallowed_special):
        """The C special_mode array (or NULL) for these arguments; cached."""
        return self._mode_entry(allowed_special, disallowed_special)[0]

    def _mode_entry(self, allowed_special, disallowed_special):
        """(the C special_mode array or NULL, its address or None) for these arguments;
        cached.  "all" and empty collections are keys as they are; any other argument is
        read into the sets it names first (which checks the names): ~1.5 us a call."""
        key = (_mode_key(allowed_special), _mode_key(disallowed_special))
        if None in key:
            key = self._sets(allowed_special, disallowed_special)
        entry = self._modes.get(key)
        if entry is None:       # made once (the sets read again, on this first use only)
            entry = self._new_mode(*self._sets(allowed_special, disallowed_special))
            with self._modes_lock:
                if len(self._modes) > 256:
                    self._modes.clear()
                self._modes[key] = entry
        return entry

    def _new_mode(self, allowed, disallowed):
        """(special_mode array, its address) for these sets; (NULL, None) when neither names
        a special token."""
        if not allowed and not disallowed:
            return ffi.NULL, None
        mode = ffi.new("uint8_t[]", [lib.BPE_SPECIAL_DISALLOWED if s in disallowed else
                                     lib.BPE_SPECIAL_ALLOWED if s in allowed else
                                     lib.BPE_SPECIAL_TEXT for s in self._special_names])
        return mode, _address(mode)

    def _refuse_components(self, what: str) -> None:
        if self._normalizer is not None or self._pre_tokenizer is not None:
            raise ValueError(f"{what} does not support a tokenizer with a normalizer or "
                             f"pre_tokenizer (a chunk boundary could change their output); "
                             f"use encode / encode_batch on whole documents")
        if self._added is not None and self._cpattern == 0:
            raise ValueError(f"{what} does not support added tokens with lstrip, rstrip, "
                             f"single_word or normalized set with a regex pattern (a chunk "
                             f"boundary could change where they are found); use encode / "
                             f"encode_batch on whole documents")

    def _raise_encode(self, rc, info, context="encode"):
        if rc == lib.BPE_ERR_DISALLOWED:
            k = info
            name = self._special_names[k] if k < len(self._special_names) else f"#{k}"
            raise _disallowed_error(name)
        if rc == lib.BPE_ERR_NOBYTE:
            raise ValueError(f"{context}: the text has a byte that is not a token (the "
                             f"vocabulary lacks some single-byte tokens)")
        raise_for(rc, context)

    # ---- encoding ---------------------------------------------------------------------------

    def encode(self, text, *, allowed_special="all", disallowed_special=()) -> list:
        """Token ids of `text`.  Every special token in allowed_special ("all" or a set) is
        emitted as its id (the longest where two start at the same place); one in
        disallowed_special ("all": every special token not allowed; a set: those, also where
        allowed_special names them, as tiktoken does) raises ValueError; any other is
        encoded as text."""
        if (allowed_special == "all" and disallowed_special == ()) or (
                allowed_special == "all" and not disallowed_special):
            mode, address = self._all_mode, self._all_mode_address
        else:
            mode, address = self._mode_entry(allowed_special, disallowed_special)
        ids = self._short_ids(text, address)
        return ids if ids is not None else self._encode_text(text, mode)

    def _short_ids(self, text, mode_address):
        """The ids of a short str (shorter than _SHORT_TEXT) of a tokenizer that encodes in
        C, made in one call of the helper extension (csrc/pyext/one_call.c); None when
        this is not such a text, for the general path."""
        ptr = self._ptr         # read once: held by the call, so a close() cannot free it
        if ptr is None or type(text) is not str or len(text) >= _SHORT_TEXT or \
                self._py_path or _encode_str is None:
            return None
        ids = _encode_str(text, ptr, self._address, mode_address, _ENCODE, _IDS_FREE,
                          _idcache.CACHE)
        if type(ids) is tuple:
            self._raise_encode(*ids)
        return ids

    def _encode_text(self, text, mode) -> list:
        """The ids of a str (mode: a special-token mode array, or ffi.NULL for none).  An
        all-ASCII str is read in place, its characters being its UTF-8; a long one of other
        characters too, converted by C as it encodes; any other is encoded to UTF-8 first."""
        if not self._py_path:
            storage = _idcache.str_storage(text)       # None: not exactly a str
            if storage is not None and (storage[1] == 0 or len(text) >= _UNITS_PATH_MIN):
                return self._encode_units(text, storage[0], storage[1], mode)
        data = _utf8(text)
        if self._py_path:
            return self._encode_py(data, mode)
        return self._encode_c(data, mode)

    def _encode_c(self, data, mode) -> list:
        """The ids of UTF-8 data (bytes) by the C pre-tokenizer and encoder (mode: a
        special-token mode array, or ffi.NULL for none)."""
        n = len(data)
        return self._encode_call(
            lambda ptr, cancel, out, info:
                lib.bpe_encode_cancellable(ptr, data, n, mode, cancel, out, info), n)

    def _encode_units(self, text, address, kind, mode) -> list:
        """The ids of an exact str whose characters lie at address, kind bytes each (0: ASCII,
        its UTF-8): C converts them to UTF-8 a part at a time as it encodes
        (bpe_encode_units), instead of this thread converting the whole text first.  The
        caller holds text meanwhile."""
        units = ffi.cast("const uint8_t *", address)
        n = len(text)
        return self._encode_call(
            lambda ptr, cancel, out, info:
                lib.bpe_encode_units(ptr, units, n, kind, mode, cancel, out, info), n)

    def _encode_call(self, call, n) -> list:
        """The list of the ids that call(tokenizer pointer, cancel flag, bpe_ids *, size_t *
        info) appends, for a text of about n bytes; an error code it returns is raised.  From
        n = _CANCELLABLE_MIN on, the main thread runs it on a helper thread: Ctrl-C there
        sets the cancel flag, waits for the call to stop and raises KeyboardInterrupt."""
        out = ffi.new("bpe_ids *")
        info = ffi.new("size_t *")
        ptr = self._handle()
        try:
            if n >= _CANCELLABLE_MIN and threading.current_thread() is threading.main_thread():
                from .progress import new_progress, run_cancellable
                prog = new_progress()
                cancel = ffi.addressof(prog, "cancel")
                rc = run_cancellable(lambda: call(ptr, cancel, out, info), prog)
            else:
                rc = call(ptr, ffi.NULL, out, info)
            if rc:
                self._raise_encode(rc, info[0])
            return _ids(out.ids, out.len)
        finally:
            lib.bpe_ids_free(out)

    def encode_ordinary(self, text) -> list:
        """Token ids of `text`, special tokens treated as ordinary text."""
        ids = self._short_ids(text, None)
        return ids if ids is not None else self._encode_text(text, ffi.NULL)

    def __call__(self, text):
        return self.encode(text)

    def encode_iterable(self, iterable):
        """Yield the ids of the concatenation of the strings of `iterable` (e.g. an open text
        file; with a built-in pattern a regular file is read in blocks of 32 Ki characters
        rather than by lines), lazily, holding only about one chunk in memory.  The ids equal
        encode("".join(iterable)) even where a chunk boundary cuts a piece or special token:
        always with the built-in patterns; with a regex pattern, for a regex whose pieces
        depend on at most the next piece (the GPT-style ones) - one with a lookbehind, \\b, or
        a lookahead past the next piece may split differently at a chunk boundary (so may
        encode_file, which reads such a tokenizer's file by lines)."""
        if isinstance(iterable, str):
            iterable = (iterable,)
        self._refuse_components("encode_iterable")
        if self._cpattern == 0:     # a regex pattern: a file keeps its line ends as cuts
            return self._iter_py(_pairs_kept_whole(iterable))
        iterable = _pairs_kept_whole(_file_blocks(iterable))
        if self._added is not None:
            return self._iter_added(iterable)
        return self._iter_c(iterable)

    def _iter_added(self, iterable):
        for ids in self._added_lists(iterable):
            yield from ids

    def _added_lists(self, iterable):
        """encode_iterable, a list of ids at a time, when _added finds the added tokens
        (built-in pattern, no normalizer): of the text so far (the tail carried over plus the
        next chunk) the start that text appended later cannot change is encoded
        (_added_final); the rest is the tail carried into the next chunk."""
        tail = ""
        for data in _grown_enough(iterable, lambda: len(tail)):
            text = tail + data.decode("utf-8")
            out = []
            cut = self._added_final(text, out)
            yield out
            tail = text[cut:]
        out = []
        self._encode_added(tail, self._special_names, out)
        yield out

    def _added_final(self, text: str, out: list) -> int:
        """Encodes into out the start of text that text appended to it cannot change, and
        returns its length (characters).  The end that can still change (the hazard): a
        possible start of a token, the whitespace before it that an lstrip token could take,
        and a token at the very end that rstrip or single_word would judge by what follows.
        The cut is made in the last stretch of plain text before the hazard, where the C
        pre-tokenizer says its pieces are final (bpe_encode_prefix), and where the character
        before it changes nothing for the next scan (AddedTokens.clean_cut); everything
        before that stretch is final."""
        added = self._added
        parts = self._added_parts(text, self._special_names)
        n = len(text)
        hazard = n - added.prefix_at_end(text)
        if added.any_lstrip:
            hazard = added_tokens.space_start(text, hazard)
        for part in parts:
            if isinstance(part[0], int) and part[2] == n:
                f = added.flags_of_id[part[0]]
                if f.rstrip or f.single_word:
                    hazard = min(hazard, part[1])
        for j in range(len(parts) - 1, -1, -1):
            part = parts[j]
            if isinstance(part[0], int) or part[1] >= hazard:
                continue
            got = self._clean_prefix(text, part[1], min(part[1] + len(part[0]), hazard))
            if got is None:
                continue
            for earlier in parts[:j]:
                if isinstance(earlier[0], int):
                    out.append(earlier[0])
                else:
                    self._pieces(_utf8(earlier[0]), out)
            out.extend(got[1])
            return got[0]
        return 0

    def _clean_prefix(self, text: str, a: int, limit: int):
        """(cut, ids of text[a:cut]) for the longest prefix of text[a:limit] (plain text)
        whose C pieces are final and after which AddedTokens.clean_cut holds; None if there
        is none, not even a itself."""
        added = self._added
        while limit > a:
            data = text[a:limit].encode("utf-8")
            ids, consumed = self._encode_prefix_c(data)
            cut = a + len(data[:consumed].decode("utf-8"))
            if added.clean_cut(text, cut):
                return cut, ids
            if cut == a:
                break
            # shorten to before the whitespace or word that makes the cut unclean
            limit = added_tokens.space_start(text, cut) if text[cut - 1] in \
                added_tokens.WHITE_SPACE else added_tokens.word_start(text, cut)
        return (a, []) if added.clean_cut(text, a) else None

    def _encode_prefix_c(self, data: bytes):
        """(ids, consumed bytes) of the start of data whose ids text appended later cannot
        change, no special tokens (bpe_encode_prefix)."""
        out = ffi.new("bpe_ids *")
        consumed = ffi.new("size_t *")
        info = ffi.new("size_t *")
        try:
            rc = lib.bpe_encode_prefix(self._handle(), data, len(data), ffi.NULL, 0, out,
                                       consumed, info)
            if rc:
                self._raise_encode(rc, info[0], "encode_iterable")
            return _ids(out.ids, out.len), consumed[0]
        finally:
            lib.bpe_ids_free(out)

    def _iter_c(self, iterable):
        mode = self._all_mode
        out = ffi.new("bpe_ids *")
        consumed = ffi.new("size_t *")
        info = ffi.new("size_t *")
        tail = b""
        try:
            for data in _grown_enough(iterable, lambda: len(tail)):
                if tail:
                    data = tail + data
                rc = lib.bpe_encode_prefix(self._handle(), data, len(data), mode, 0, out,
                                           consumed, info)
                if rc:
                    self._raise_encode(rc, info[0], "encode_iterable")
                tail = data[consumed[0]:]
                if out.len:
                    ids = _ids(out.ids, out.len)
                    out.len = 0
                    yield from ids
            rc = lib.bpe_encode_prefix(self._handle(), tail, len(tail), mode, 1, out,
                                       consumed, info)
            if rc:
                self._raise_encode(rc, info[0], "encode_iterable")
            if out.len:
                ids = _ids(out.ids, out.len)
                out.len = 0
                yield from ids
        finally:
            lib.bpe_ids_free(out)

    def encode_batch(self, texts, *, num_threads=None, allowed_special="all",
                     disallowed_special=()) -> list:
        """[encode(t) for t in texts], computed by C on up to num_threads threads (None: one
        per core the process may use, within its cgroup CPU quota).  A text of 1 MiB or more
        is cut into parts that the threads share (where cutting cannot change its ids), so a
        batch of a few large texts, or of one, uses them all too."""
        if isinstance(texts, str):
            raise TypeError("encode_batch takes a list of str, not a str")
        own = type(texts) is not list
        if own:
            texts = list(texts)       # else the C path copies the list as it reads it
        num_threads = _c_threads(num_threads)
        mode = self._mode_for(allowed_special, disallowed_special)
        n = len(texts)
        if n == 0:
            return []
        if self._py_path:
            if self._added is not None and self._c_between_tokens():
                return self._encode_batch_added(texts, mode, num_threads)
            with _naming_bad_text(texts):
                return [self._encode_py(_utf8(t), mode) for t in texts]
        return self._encode_batch_c(texts, mode, num_threads, own)

    def _c_between_tokens(self) -> bool:
        """Whether C alone encodes the text between added tokens (a built-in pattern, no
        normalizer or pre-tokenizer)."""
        return self._cpattern != 0 and self._normalizer is None and self._pre_tokenizer is None

    def _encode_batch_added(self, texts, mode, num_threads) -> list:
        """encode_batch when _added finds the added tokens and C encodes the rest: the tokens
        are found text by text, and all the text between them is one C batch."""
        allowed, disallowed = self._mode_sets(mode)
        with _naming_bad_text(texts):
            pieces, plans = self._plan_added(texts, allowed, disallowed)
        lists = self._encode_batch_c(pieces, ffi.NULL, num_threads, True) if pieces else []
        out = []
        for plan in plans:
            if len(plan) == 1 and plan[0] < 0:
                out.append(lists[-1 - plan[0]])
                continue
            ids = []
            for x in plan:
                if x >= 0:
                    ids.append(x)
                else:
                    ids += lists[-1 - x]
            out.append(ids)
        return out

    def _plan_added(self, texts, allowed, disallowed):
        """(pieces, plans) of _encode_batch_added: the text between added tokens of every
        text, and per text its token ids, and -1 - k for the ids of pieces[k]."""
        pieces = []
        plans = []
        for t in texts:
            if not (type(t) is str and t.isascii()):    # (surrogates repaired as encode)
                data = _utf8(t)
                self._check_disallowed(data, disallowed)
                t = data.decode("utf-8")
            elif disallowed:
                self._check_disallowed(t.encode("ascii"), disallowed)
            plan = []
            for part in (self._added_parts(t, allowed) if allowed else [(t, 0, False)]):
                if isinstance(part[0], int):
                    plan.append(part[0])
                else:
                    plan.append(-1 - len(pieces))
                    pieces.append(part[0])
            plans.append(plan)
        return pieces, plans

    def _encode_batch_c(self, texts, mode, num_threads, own) -> list:
        """encode_batch of a list of str by the C pre-tokenizer and encoder.  own: texts is a
        list of our own, which nobody else sees or changes; else it is the caller's, which
        another thread may change meanwhile, and C reads a copy."""
        n = len(texts)
        if n <= _FEW_TEXTS and _short_strs(texts):
            return [self._encode_text(t, mode) for t in texts]
        # C encodes groups of the texts on worker threads while this thread turns the groups
        # already done into lists (bpe_batch_step), so the int-making, which needs the GIL,
        # overlaps the encoding instead of following it.  C reads every str where it lies
        # (its encoders write the UTF-8 of the non-ASCII ones, lone surrogates as U+FFFD like
        # _utf8): the job holds the strs, and the C tokenizer (see close), until it is
        # finished, within run (see _batch_job.py).
        job = BatchJob(self._handle(), mode, num_threads, self._collect_batch, _join_utf8_py,
                       self._run_batch, _CANCELLABLE_MIN)
        out, rc, k = job.run(texts, own)
        if out is None:
            raise_for(rc, "encode_batch")
        if rc:
            if rc == lib.BPE_ERR_DISALLOWED or rc == lib.BPE_ERR_NOBYTE:
                # k names the text; a single-text encode raises with the token's name
                if k < len(job.held) and job.held[k] is not None:
                    self._encode_text(job.held[k], mode)
            self._raise_encode(rc, k, "encode_batch")
        return out

    @staticmethod
    def _run_batch(start_and_collect, cancel, size):
        """start_and_collect() (a batch job started, then collected), on a helper thread
        when this is the main thread and the texts' code units number `size` >=
        _CANCELLABLE_MIN, where Ctrl-C (SIGINT, or SIGTERM with a Python handler) then calls
        cancel() and raises.  On the helper thread: a text no cut could split, or all of
        them with no worker thread, cannot keep Ctrl-C waiting, as the job's encoders poll
        its cancel flag.  The job is started there too, not here: a worker thread started
        here was running on the other core when the helper woke up, which then sometimes
        waited milliseconds to be scheduled.  (A batch of many texts goes to the helper
        thread before this: see _batch_job.py.)  (This thread collecting and looking at
        signals between steps was tried: 5% faster in calls made one after another, 7%
        slower in the yardstick's first calls of a process, o200k 8 runs each turn about,
        its lists made in the main thread's malloc arena.)"""
        if size >= _CANCELLABLE_MIN and threading.current_thread() is threading.main_thread():
            from .progress import run_cancellable
            return run_cancellable(start_and_collect, None, cancel=cancel)
        return start_and_collect()

    @staticmethod
    def _collect_batch(job, n, held=None):
        """(lists of ids of the n texts, 0, 0), or ([], error code, failing text).  Groups
        come in the order they finish; each goes to its place.  held: None or the list of
        the n texts held for the job; with the helper extension, each text the job no longer
        reads is replaced by None there as its group comes in (see collect_batch)."""
        if _idcache.FAST:
            out, rc, k = _idcache.collect_batch(_BATCH_STEP, _BATCH_POLL, _address(job), n,
                                                held)
            return (out, 0, 0) if rc == 0 else ([], rc, k)
        first = ffi.new("size_t *")
        count = ffi.new("size_t *")
        ids = ffi.new("uint32_t **")
        id_ends = ffi.new("size_t **")
        info = ffi.new("size_t *")
        out = [None] * n
        with _GCPaused():
            while True:
                # a step at a time: signals are looked at between them
                rc = lib.bpe_batch_step(job, first, count, ids, id_ends, info)
                if rc == lib.BPE_BATCH_PENDING:
                    continue
                if rc:
                    return [], rc, info[0]
                c = count[0]
                if c == 0:
                    return out, 0, 0
                f = first[0]
                out[f:f + c] = _split_ids(ids[0], id_ends[0], c)

    def encode_file(self, input_path, output_path, *, dtype=None, num_threads=None,
                    progress: bool = True) -> int:
        """Encode the file input_path (UTF-8; invalid bytes read as U+FFFD) into output_path as
        a flat little-endian array of ids (numpy.fromfile(output_path, dtype) reads it).
        output_path may also be an open binary file or a file descriptor (sys.stdout.buffer,
        a socket's fileno()): the ids are written to it in place, after what it holds, and it
        is left open.  dtype: None (uint16 when n_vocab <= 65536, else uint32), "uint16",
        "uint32", or a numpy dtype or string that is one of them ("<u4", "u2").  Shows a
        progress bar on stderr when progress is true;
        Ctrl-C stops it (and the output file is removed).  Memory does not grow with the
        file, but each thread adds its word cache and buffers (~130 MB peak RSS on 2 threads,
        ~560 MB on 64): more threads than cores cost memory and gain nothing.  Returns the
        number of ids written."""
        width = self._id_width(dtype)
        self._refuse_components("encode_file")
        formats.refuse_open_file(input_path, "encode_file")
        in_path = os.fspath(input_path)
        stream_fd = formats.open_stream(output_path)      # None: a path
        out_path = formats.output_name(output_path)
        # stat, not open: opening a named pipe here and closing it would lose its writer's
        # data before C opens it (a missing input: FileNotFoundError naming it)
        in_stat = os.stat(in_path)
        if stat.S_ISDIR(in_stat.st_mode):
            raise IsADirectoryError(errno.EISDIR, "the input is a directory", in_path)
        formats.refuse_compressed(in_path, in_stat, "encode --tokenizer TOKENIZER -o OUT")
        _refuse_same_file(in_stat, in_path, out_path if stream_fd is None else stream_fd)
        if stream_fd is None:     # a missing directory named, not the temporary file in it
            formats.check_output_path(out_path)
        num_threads = _c_threads(num_threads)
        if self._cpattern == 0 or self._added is not None:
            return self._encode_file_py(in_path, output_path, width, progress)
        from .progress import Bar, new_progress, run_cancellable
        prog = new_progress()
        n_tokens = ffi.new("uint64_t *")
        info = ffi.new("size_t *")
        ptr = self._handle()
        mode = self._all_mode

        c_in = os.fsencode(in_path)
        bars = None
        if progress:
            bars = {lib.BPE_PHASE_READ: Bar(f"encode {os.path.basename(in_path)}", "B")}
        # the output policy (a temporary file renamed over out_path, a pipe or device written
        # in place, an open file from where it stands) is output_file's; C writes to its
        # descriptor
        with formats.output_file(output_path, fsync=False) as out:
            out_fd = out.fileno()

            def call():
                rc = lib.bpe_encode_file(ptr, c_in, out_fd, width, mode, num_threads, prog,
                                         n_tokens, info)
                return rc, ffi.errno

            rc, err = run_cancellable(call, prog, bars)
            if rc == lib.BPE_ERR_IO:
                raise OSError(err, f"encoding {in_path} into {out_path}: {_strerror(rc)}"
                                   + (f" ({os.strerror(err)})" if err else ""))
            if rc:
                self._raise_encode(rc, info[0], f"encoding {in_path}")
        return int(n_tokens[0])

    def _id_width(self, dtype) -> int:
        if dtype is None:
            return 2 if self._n_vocab <= 65536 else 4
        name = dtype if isinstance(dtype, str) and dtype in ("uint16", "uint32") else None
        if name is None:                # a numpy dtype, or a string numpy reads as one ('<u4')
            try:
                import numpy
                name = numpy.dtype(dtype).name
                if numpy.dtype(dtype).str.startswith(">"):    # ('=' on a big-endian host too)
                    name = "big-endian " + name
            except Exception:
                name = repr(dtype)
        if name not in ("uint16", "uint32"):
            raise ValueError(f"dtype must be uint16 or uint32, not {name}")
        if name == "uint16" and self._n_vocab > 65536:
            raise ValueError(f"dtype uint16 cannot hold ids up to {self._n_vocab - 1}; use "
                             f"uint32")
        return 2 if name == "uint16" else 4

    # ---- the Python-split path (custom regex) ---------------------------------------------

    def _special_regex(self, names):
        key = frozenset(names)
        rx = self._py_special_re.get(key)
        if rx is None:
            import regex
            alts = sorted((s.encode("utf-8") for s in names), key=len, reverse=True)
            rx = regex.compile(b"|".join(regex.escape(a) for a in alts))
            self._py_special_re[key] = rx
        return rx

    def _mode_sets(self, mode):
        if mode == ffi.NULL:
            return [], []
        allowed = [s for k, s in enumerate(self._special_names)
                   if mode[k] == lib.BPE_SPECIAL_ALLOWED]
        disallowed = [s for k, s in enumerate(self._special_names)
                      if mode[k] == lib.BPE_SPECIAL_DISALLOWED]
        return allowed, disallowed

    def _pieces(self, data: bytes, out: list, at: int = 0, normalized: bool = False) -> None:
        """One stretch of UTF-8 text between special tokens: normalize it (normalizer; not
        when `normalized` says it was), split it (pre_tokenizer, else the custom regex, else
        the built-in pattern in C), BPE each piece in C; extend out.  Text the regex does not
        match is kept as a piece of its own (as HF's Split does), so decode(encode(s)) == s
        for any regex.  `at`: where the stretch starts in the whole text (only whether it is
        0 matters: Metaspace's prepend_scheme="first")."""
        if not data:
            return
        if (self._normalizer is not None and not normalized) or \
                self._pre_tokenizer is not None:
            data = self._normalize_split(data, out, at, normalized)
            if data is None:
                return
        if self._cpattern != 0:             # a built-in pattern: C splits it
            out.extend(self._encode_c(data, ffi.NULL))
            return
        self._encode_split(data, self._regex_piece_ends(data), out)

    def _regex_piece_ends(self, data: bytes) -> list:
        """The byte offsets where the pieces of data end, as the custom regex splits it (text
        it does not match is a piece of its own)."""
        text = data.decode("utf-8")
        rx = self._py_split
        if rx.groups == 0:
            # the usual case, matches that cover the text end to end, in C loops (findall,
            # map): no empty match, no text between matches (else _piece_ends_walk)
            strs = rx.findall(text)
            if all(strs) and sum(map(len, strs)) == len(text):
                if len(text) != len(data):
                    strs = map(str.encode, strs)
                return list(itertools.accumulate(map(len, strs)))
        return _piece_ends_walk(rx, text, data)

    def _encode_split(self, data: bytes, ends: list, out: list) -> None:
        """BPE of the pieces data[ends[k-1]:ends[k]] in C; extend out."""
        c_ends = ffi.new("size_t[]", ends)
        res = ffi.new("bpe_ids *")
        rc = lib.bpe_encode_pieces(self._handle(), data, c_ends, len(ends), res)
        try:
            if rc:
                self._raise_encode(rc, 0)
            out.extend(_ids(res.ids, res.len))
        finally:
            lib.bpe_ids_free(res)

    def _normalize_split(self, data: bytes, out: list, at: int = 0, normalized: bool = False):
        """The normalizer / pre_tokenizer part of _pieces: encodes into out and returns None
        (a pre_tokenizer), or returns the normalized UTF-8 for the split that follows."""
        text = data.decode("utf-8")
        if self._normalizer is not None and not normalized:
            text = self._normalizer.normalize_str(text)
            if not isinstance(text, str):
                raise TypeError(f"normalizer.normalize_str returned "
                                f"{type(text).__name__}, not str")
        if self._pre_tokenizer is None:
            return _utf8(text)
        pre = self._pre_tokenizer
        if self._pre_ours:
            # the pieces' texts alone, no offsets; a stretch after a special token is
            # pre-tokenized as HF does (only whether its offset is 0 matters)
            strs = pre.piece_texts(text, at)
        else:
            strs = [p[0] for p in pre.pre_tokenize_str(text)]
        try:
            parts = list(map(str.encode, strs))
        except UnicodeEncodeError:              # a lone surrogate: repaired as _utf8 does
            parts = list(map(_utf8, strs))
        self._encode_split(b"".join(parts), list(itertools.accumulate(map(len, parts))), out)
        return None

    def _check_disallowed(self, data: bytes, disallowed) -> None:
        if disallowed:
            m = self._special_regex(disallowed).search(data)
            if m:
                raise _disallowed_error(m.group().decode("utf-8"))

    def _encode_py(self, data: bytes, mode) -> list:
        allowed, disallowed = self._mode_sets(mode)
        self._check_disallowed(data, disallowed)
        out = []
        if not allowed:
            self._pieces(data, out)
            return out
        if self._added is not None:
            self._encode_added(data.decode("utf-8"), allowed, out)
            return out
        pos = 0
        for m in self._special_regex(allowed).finditer(data):
            self._pieces(data[pos:m.start()], out, pos)
            out.append(self._special[m.group().decode("utf-8")])
            pos = m.end()
        self._pieces(data[pos:], out, pos)
        return out

    def _added_parts(self, text: str, allowed) -> list:
        normalize = self._normalizer.normalize_str if self._normalizer is not None else None
        return self._added.parts(text, allowed, normalize)

    def _encode_added(self, text: str, allowed, out: list) -> None:
        """Encode text into out, finding the allowed added tokens as HF does (_added)."""
        for part in self._added_parts(text, allowed):
            if isinstance(part[0], int):
                out.append(part[0])
            else:
                piece, at, normalized = part
                self._pieces(_utf8(piece), out, at, normalized)

    def _iter_py(self, iterable):
        """encode_iterable for a custom regex: of the text so far (the tail carried over plus
        the next chunk) only the part that text appended later cannot change is encoded
        (_encode_py_final); the rest is the tail carried into the next chunk."""
        tail = b""
        for data in _grown_enough(iterable, lambda: len(tail)):
            data = tail + data
            out = []
            done = self._encode_py_final(data, out)
            yield from out
            tail = data[done:]
        yield from self._encode_py(tail, self._all_mode)

    def _encode_py_final(self, data: bytes, out: list) -> int:
        """Encodes into out (every special token allowed) the start of data that text appended
        to it cannot change, and returns its length in bytes.  That is everything before the
        last special token that a longer one cannot replace, and then every piece of the
        stretch after it but the last two, as the regex splits the whole stretch (not the
        stretch cut short, whose end would look like the end of the text to the regex), and
        nothing of a possible start of a special token.  Exact for patterns whose pieces depend
        on at most the next piece, which covers the usual GPT-style patterns."""
        pos = 0
        if self._special:
            limit = len(data) - self._special_prefix_at_end(data)
            for m in self._special_regex(self._special).finditer(data):
                if m.start() >= limit:          # a longer special token may still start here
                    break
                self._pieces(data[pos:m.start()], out, pos)
                out.append(self._special[m.group().decode("utf-8")])
                pos = m.end()
        stretch = data[pos:len(data) - self._special_prefix_at_end(data[pos:])]
        ends = self._regex_piece_ends(stretch) if stretch else []
        if len(ends) < 3:
            return pos
        self._encode_split(stretch, ends[:-2], out)
        return pos + ends[-3]

    def _special_prefix_at_end(self, data: bytes) -> int:
        """The length of the longest end of data that is the start (not the whole) of a
        special token."""
        longest = 0
        for s in self._special:
            b = s.encode("utf-8")
            for k in range(min(len(b) - 1, len(data)), longest, -1):
                if data.endswith(b[:k]):
                    longest = k
                    break
        return longest

    def _encode_file_py(self, in_path, output, width, progress) -> int:
        """encode_file through encode_iterable, with a bar of the bytes read: a custom
        regex reads the file by lines, added tokens' options by blocks of 1 MiB (lists of ids
        at a time)."""
        import array
        from .progress import Bar
        typecode = "H" if width == 2 else "I"
        n = 0
        bar = Bar(f"encode {os.path.basename(in_path)}", "B") if progress else None
        st = os.stat(in_path)
        size = st.st_size if stat.S_ISREG(st.st_mode) else 0      # 0: unknown (a pipe)
        try:
            with open(in_path, "r", encoding="utf-8", errors="replace", newline="") as fin, \
                    formats.output_file(output, fsync=False) as fout:
                if self._added is not None and self._cpattern != 0:
                    chunks = _Counted(iter(lambda: fin.read(1 << 20), ""), bar, size)
                    lists = self._added_lists(_pairs_kept_whole(chunks))
                else:
                    chunks = _Counted(fin, bar, size)
                    ids = self.encode_iterable(chunks)
                    lists = iter(lambda: list(itertools.islice(ids, 1 << 16)), [])
                for got in lists:
                    buf = array.array(typecode, got)
                    _write_le(fout, buf)
                    n += len(buf)
            if bar is not None:
                bar.update(max(chunks.done, size), size, force=True)
        finally:
            if bar is not None:
                bar.close()
        return n

    # ---- decoding -------------------------------------------------------------------------

    def _id_array(self, ids):
        """(ids, a uint32_t[] of them for C).  Each id is read as operator.index reads it (as
        tiktoken does): ints and numpy's ints, not floats, Decimals or Fractions (TypeError);
        ValueError for one outside 0 .. 2**32-1.  Both name the item and its position."""
        if hasattr(ids, "dtype") and hasattr(ids, "tolist"):
            arr = _numpy_ids(ids)
            if arr is not None:
                return ids, ffi.from_buffer("uint32_t[]", arr)
            ids = ids.tolist()
        elif not isinstance(ids, (list, tuple)):
            if isinstance(ids, (str, bytes, set, frozenset, dict)):   # (no order: a set's)
                raise TypeError(f"ids must be a sequence of int, not {type(ids).__name__}")
            ids = list(ids)
        if _idcache.FAST:
            return ids, ffi.from_buffer("uint32_t[]", _idcache.u32_ids(ids))
        values = []
        for k, i in enumerate(ids):
            try:
                i = operator.index(i)
            except TypeError:
                raise TypeError(f"token id {i!r} at position {k} is not an int") from None
            if not 0 <= i < 2 ** 32:
                raise ValueError(f"unknown token id {i} at position {k}")
            values.append(i)
        return ids, ffi.new("uint32_t[]", values)

    def _short_decode(self, ids, errors):
        """decode_bytes(ids) (errors None) or its text decoded with `errors`, for a list of
        up to 1024 plain ints, in one call of the helper extension (csrc/pyext/one_call.c);
        None for other ids, left to the general path."""
        ptr = self._ptr         # read once: held by the call, so a close() cannot free it
        if ptr is None or type(ids) is not list or _decode_ids is None:
            return None
        out = _decode_ids(ids, ptr, self._address, _DECODE, _BYTES_FREE, errors)
        if type(out) is tuple:
            self._raise_decode(ids, *out)
        return out

    def _raise_decode(self, ids, rc, k):
        if rc == lib.BPE_ERR_ID:
            raise ValueError(f"unknown token id {ids[k]} at position {k} (n_vocab is "
                             f"{self._n_vocab})")
        raise_for(rc, "decode")

    def decode_bytes(self, ids) -> bytes:
        """The bytes of a sequence of ids; ValueError naming an unknown id."""
        out = self._short_decode(ids, None)
        if out is not None:
            return out
        if type(ids) is list and len(ids) <= 512 and self._ptr is not None:
            # short lists: a dict lookup per id beats building a C array (per-call cost);
            # only for ints (a float equal to an id would find it)
            try:
                if type(sum(ids)) is int:
                    return b"".join(map(self._id_bytes.__getitem__, ids))
            except (KeyError, TypeError):
                pass                       # the C path below names the bad id
        ids, arr = self._id_array(ids)
        if not len(ids):
            return b""
        out = ffi.new("bpe_bytes *")
        bad = ffi.new("size_t *")
        rc = lib.bpe_decode(self._handle(), arr, len(ids), out, bad)
        try:
            if rc:
                self._raise_decode(ids, rc, bad[0])
            return ffi.unpack(ffi.cast("char *", out.data), out.len) if out.len else b""
        finally:
            lib.bpe_bytes_free(out)

    def decode(self, ids, errors: str = "replace", *, skip_special_tokens: bool = False) -> str:
        """The text of a sequence of ids; bytes that are not valid UTF-8 are handled by
        `errors` as bytes.decode does ("replace": U+FFFD, as tiktoken; "strict" raises
        UnicodeDecodeError).  With a decoder: decoder.decode(the token strings), as HF does
        (special tokens included; errors must then be "replace", the decoders' own rule).
        skip_special_tokens: leave out the special tokens' ids, as HF's decode does by
        default (an added token a tokenizer.json marks "special": false is kept, as there)."""
        if type(errors) is not str:     # (None would have asked _short_decode for bytes)
            if not isinstance(errors, str):
                raise TypeError(f"decode() argument 'errors' must be str, not "
                                f"{'None' if errors is None else type(errors).__name__}")
            errors = str(errors)
        if skip_special_tokens:
            skip = self._skipped_ids()
            ids = [i for i in (ids.tolist() if hasattr(ids, "tolist") else ids)
                   if i not in skip]
        if self._decoder is not None:
            if errors != "replace":
                raise ValueError(f"decode(errors={errors!r}): a tokenizer with a decoder "
                                 f"decodes as its decoder does (errors='replace')")
            return self._decoder.decode(self.id_to_tokens(ids))
        text = self._short_decode(ids, errors)
        return text if text is not None else self.decode_bytes(ids).decode("utf-8",
                                                                            errors=errors)

    def _skipped_ids(self) -> frozenset:
        """The ids decode(skip_special_tokens=True) leaves out (made once: a file may list
        thousands of added tokens, and a stream decodes a few ids at a time)."""
        skip = self.__dict__.get("_skip_ids")
        if skip is None:
            plain = set((self._hf_kept or {}).get("non_special") or ())
            skip = self._skip_ids = frozenset(i for s, i in self._special.items()
                                              if s not in plain)
        return skip

    def id_to_tokens(self, ids) -> list:
        """The token strings of ids, as in vocab.json / tokenizer.json: the text of a
        character-level token, the byte-alphabet string of a byte-level one, a special
        token's text.  ValueError naming an unknown id."""
        strs = self._token_strs
        if strs is None:
            if self._opts["byte_level"]:
                strs = {i: formats.bytes_to_token_str(b) for i, b in self._vocab.items()}
            else:
                strs = {i: b.decode("utf-8") for i, b in self._vocab.items()}
            strs.update({i: s for s, i in self._special.items()})
            self._token_strs = strs
        ids, _ = self._id_array(ids)
        try:
            return [strs[i] for i in ids]
        except KeyError:
            k = next(k for k, i in enumerate(ids) if i not in strs)
            raise ValueError(f"unknown token id {ids[k]} at position {k} (n_vocab is "
                             f"{self._n_vocab})") from None

    def decode_single_token_bytes(self, token_id) -> bytes:
        if type(token_id) is int and self._ptr is not None:    # the common case, in Python
            b = self._id_bytes.get(token_id)
            if b is not None:
                return b
        if isinstance(token_id, bool) or not hasattr(token_id, "__index__"):
            raise TypeError(f"token id must be an int, not {type(token_id).__name__}")
        token_id = token_id.__index__()         # numpy's ints too
        if not 0 <= token_id < 2 ** 32:
            raise ValueError(f"unknown token id {token_id}")
        p = ffi.new("uint8_t **")
        n = ffi.new("size_t *")
        ptr = self._handle()      # p points into the tokenizer: held until unpacked
        rc = lib.bpe_token_bytes(ptr, token_id, p, n)
        if rc == lib.BPE_ERR_ID:
            raise ValueError(f"unknown token id {token_id}")
        raise_for(rc, "decode_single_token_bytes")
        return ffi.unpack(ffi.cast("char *", p[0]), n[0])

    def decode_tokens_bytes(self, ids) -> list:
        return [self.decode_single_token_bytes(i) for i in ids]

    def token_to_id(self, token: bytes):
        """The id of the token with exactly these bytes (an ordinary token, else a special
        one), or None."""
        if isinstance(token, str):
            raise TypeError("token_to_id takes the token's bytes (e.g. 'hi'.encode()), not a "
                            "str")
        if type(token) is bytes and self._ptr is not None:
            return self._ordinary_ids().get(token)
        i = ffi.new("uint32_t *")
        rc = lib.bpe_token_id(self._handle(), bytes(token), len(token), i)
        return int(i[0]) if rc == lib.BPE_OK else None

    def _ordinary_ids(self) -> dict:
        """{bytes: id} as bpe_token_id answers: the ordinary tokens, then the special ones
        (made at the first token_to_id: a dict lookup is ten times faster than a call into C
        for one token)."""
        ids = self.__dict__.get("_bytes_ids")
        if ids is None:
            ids = {s.encode("utf-8"): i for s, i in self._special.items()}
            ids.update((b, i) for i, b in self._vocab.items())
            self._bytes_ids = ids
        return ids

    # ---- offsets and streaming decode (bpe_cffi/offsets.py, bpe_cffi/stream_decode.py) ---------

    def encode_with_offsets(self, text, *, ordinary: bool = False, **encode_kwargs):
        """(ids, offsets): offsets[k] = (start, end) character span in `text` of token k, the
        span of the whole character where a token splits one (HF `Encoding.offsets`; for a
        tokenizer.json whose post-processor trims offsets, without the spaces a token starts
        or ends with, as HF reports them).  `ordinary=True` encodes as encode_ordinary; other
        keywords go to encode."""
        from .offsets import encode_with_offsets, trim_spaces, trimming_steps
        o = self._opts
        if (self._normalizer is not None or self._pre_tokenizer is not None or o["unk_token"]
                or o["byte_fallback"] or o["continuing_subword_prefix"]
                or o["end_of_word_suffix"]):
            raise ValueError("encode_with_offsets needs tokens whose bytes are the text's: not "
                             "available with a normalizer, pre_tokenizer, unk_token, "
                             "byte_fallback, continuing_subword_prefix or end_of_word_suffix")
        strs = None
        if self._added is not None and not ordinary:
            ids, spans, strs = self._added_offsets(text, **encode_kwargs)
        else:
            ids, spans = encode_with_offsets(self, text, ordinary=ordinary, **encode_kwargs)
        # A character dropped for want of a token (character-level, or a byte-level
        # vocabulary lacking a lead or ASCII byte) shifts every later span, and the spans
        # then end before the text does; a dropped continuation byte shifts nothing.
        if (spans[-1][1] if spans else 0) != len(text):
            raise ValueError("encode_with_offsets: some characters of the text have no token "
                             "and were dropped (pass unk_token), so offsets cannot be given")
        # a loaded tokenizer.json's post-processor may trim spaces off the spans (HF's)
        steps = trimming_steps((self._hf_kept or {}).get("post_processor"))
        if steps:
            strs = strs or self.id_to_tokens(ids)
            for add_prefix_space in steps:
                spans = trim_spaces(spans, strs, add_prefix_space)
        return ids, spans

    def _added_offsets(self, text, allowed_special="all", disallowed_special=()):
        """encode_with_offsets' (ids, spans, token strings) when _added finds the added
        tokens: the text between them as encode_with_offsets gives it, and each added token
        with the span HF gives it (whitespace it took included) and that text as its string
        (the string HF's offset trimming reads)."""
        from .offsets import encode_with_offsets, surrogate_spans
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, not {type(text).__name__}")
        allowed, disallowed = self._mode_sets(self._mode_for(allowed_special,
                                                             disallowed_special))
        data = _utf8(text)                       # surrogates repaired as encode does
        self._check_disallowed(data, disallowed)
        encoded = data.decode("utf-8")
        ids, spans, strs = [], [], []
        for part in self._added_parts(encoded, allowed):
            if isinstance(part[0], int):
                tid, start, end = part
                ids.append(tid)
                spans.append((start, end))
                strs.append(encoded[start:end])
            else:
                piece, at = part[0], part[1]
                got, got_spans = encode_with_offsets(self, piece, ordinary=True)
                ids += got
                spans += [(at + a, at + b) for a, b in got_spans]
                strs += self.id_to_tokens(got)
        if encoded != text:
            spans = surrogate_spans(encoded, text, spans)
        return ids, spans, strs

    def decode_with_offsets(self, ids, errors: str = "strict"):
        """(text, offsets): offsets[k] = index in text of the first character holding a byte
        of token k, as tiktoken's decode_with_offsets.  errors="strict" raises
        UnicodeDecodeError on invalid UTF-8 (as tiktoken); "replace" decodes as decode()."""
        from .offsets import decode_with_offsets
        if self._decoder is not None:
            raise ValueError("decode_with_offsets works on token bytes and ignores a decoder; "
                             "not available for a tokenizer with a decoder")
        return decode_with_offsets(self, ids, errors)

    def stream_decoder(self):
        """A StreamDecoder: feed ids one at a time, get text as soon as characters complete."""
        from .stream_decode import StreamDecoder
        if self._decoder is not None:
            raise ValueError("stream_decoder works on token bytes and ignores a decoder; not "
                             "available for a tokenizer with a decoder")
        return StreamDecoder(self)

    # ---- saving -------------------------------------------------------------------------------

    def save(self, path) -> None:
        """Write the tokenizer to one file in HuggingFace's tokenizer.json format (readable by
        `tokenizers.Tokenizer.from_file`, and by `load`, which restores it exactly),
        atomically."""
        merges = self.merges
        o = self._opts
        doc = formats.hf_json(self._vocab, merges, self._special, self._pattern_regex,
                              self._rule, self._pattern_name, byte_level=o["byte_level"])
        model = doc["model"]
        model["ignore_merges"] = self._ignore_merges
        model["dropout"] = o["dropout"]
        model["fuse_unk"] = o["fuse_unk"]
        model["byte_fallback"] = o["byte_fallback"]
        for key in ("unk_token", "continuing_subword_prefix", "end_of_word_suffix"):
            v = o[key]
            if isinstance(v, bytes):      # given as token bytes: written as a token string
                v = (formats.bytes_to_token_str(v) if o["byte_level"]
                     else v.decode("utf-8", "replace"))
            model[key] = v
        model["bpe_cffi"]["byte_level"] = o["byte_level"]
        if o["seed"] is not None:
            model["bpe_cffi"]["seed"] = o["seed"]
        for name in ("normalizer", "pre_tokenizer", "decoder"):
            obj = self._components[name]
            if obj is not None:
                section = _component_json(obj, name)
                if section is not None:
                    doc[name] = section
        if self._pre_tokenizer is not None:
            del model["bpe_cffi"]["pattern"]   # the pattern is not what splits the text
        self._put_hf_kept(doc)
        formats.write_hf(path, doc)

    def _put_hf_kept(self, doc: dict) -> None:
        """Writes back into a tokenizer.json document what load() kept of the file: its
        post-processor (special tokens around an encoding, offset trimming), truncation,
        padding, which added tokens are not special, and the added tokens' options."""
        kept = self._hf_kept
        if not kept:
            return
        for key in ("post_processor", "truncation", "padding"):
            doc[key] = kept[key]
        plain = set(kept["non_special"])
        flags = kept.get("added_flags") or {}
        for t in doc["added_tokens"]:
            if t["content"] in plain:
                t["special"] = False
            if t["content"] in flags:
                t.update(zip(added_tokens.FLAG_NAMES, flags[t["content"]]))

    def save_gpt2(self, vocab_path, merges_path) -> None:
        """Write GPT-2 style vocab.json + merges.txt (special tokens included in vocab.json).
        The format holds a byte-level vocabulary and its merges; a split pattern other than
        GPT-2's is recorded in merges.txt's first line, where other readers skip it, and
        from_files / load use it.  A tokenizer with options or components the format cannot
        hold is refused (ValueError): save() it instead."""
        o = self._opts
        lost = [name for name, value in (
            ("byte_level=False", not o["byte_level"]), ("dropout", o["dropout"]),
            ("unk_token", o["unk_token"] is not None), ("byte_fallback", o["byte_fallback"]),
            ("continuing_subword_prefix", o["continuing_subword_prefix"]),
            ("end_of_word_suffix", o["end_of_word_suffix"]),
            ("normalizer", self._normalizer is not None),
            ("pre_tokenizer", self._pre_tokenizer is not None)) if value]
        if lost:
            raise ValueError(f"save_gpt2: the GPT-2 vocab.json + merges.txt format cannot hold "
                             f"{', '.join(lost)}; a tokenizer loaded from it would give other "
                             f"ids: use save() (tokenizer.json)")
        formats.write_gpt2(self.vocab, self.merges, vocab_path, merges_path,
                           pattern=self._pattern_name or self._pattern_regex)


def _named(tok: "Tokenizer", path) -> "Tokenizer":
    """tok, named after the file it was loaded from without its extension (tiktoken's names
    are those of its files: cl100k_base.tiktoken is "cl100k_base"), and for a GPT-2
    <prefix>vocab.json without "vocab" ("gpt2" for gpt2_vocab.json)."""
    stem = os.path.splitext(os.path.basename(os.fsdecode(os.fspath(path))))[0]
    prefix = stem[:-len("vocab")].rstrip("-_.") if stem.endswith("vocab") else ""
    tok.name = prefix or stem
    return tok


def _is_ours(pre_tokenizer) -> bool:
    """True for bpe_cffi.hf_components pre-tokenizers (piece_texts(text, offset)); others
    have HF's pre_tokenize_str(text) only."""
    from . import hf_components
    return isinstance(pre_tokenizer, hf_components._PreTokenizer)


def _component_json(obj, name: str):
    """The tokenizer.json section of a pipeline component: its HF serialisation (HF's objects
    pickle as their JSON), else ValueError."""
    import json
    if callable(getattr(obj, "to_json", None)):      # bpe_cffi.hf_components objects
        return obj.to_json()
    state = None
    try:
        state = obj.__getstate__()
        if isinstance(state, (bytes, str)):
            return json.loads(state)
    except (AttributeError, TypeError, ValueError):
        pass
    if isinstance(state, dict) and isinstance(state.get("type"), str):
        return state
    raise ValueError(f"save: the {name} {type(obj).__name__} cannot be written to "
                     f"tokenizer.json (it does not serialise as HF's objects do)")


def _strerror(rc) -> str:
    return ffi.string(lib.bpe_strerror(rc)).decode()


def _write_le(f, arr) -> None:
    import sys
    if sys.byteorder != "little":
        arr = arr[:]
        arr.byteswap()
    arr.tofile(f)


def _load_hf(p, doc, text, pattern, special_tokens, kw) -> Tokenizer:
    """A Tokenizer from a parsed tokenizer.json (see hf_import for what is accepted)."""
    import warnings
    from . import hf_import
    parts = hf_import.read_hf_tokenizer_json(p, doc, text)
    for w in parts["warnings"]:
        warnings.warn(f"{p}: {w}", stacklevel=3)
    if special_tokens is not None:
        raise ValueError("load: a tokenizer.json names its own special tokens; do not pass "
                         "special_tokens")
    special = parts["special"]
    options = dict(parts["options"])
    if pattern is not None:                 # the caller's split replaces the file's
        parts["pattern"] = pattern
        options.pop("pre_tokenizer", None)
    kw.setdefault("ignore_merges", parts["ignore_merges"])
    tok = _tokenizer_of_parts(p, parts, special, options, kw)
    tok._hf_kept = {"post_processor": parts["post_processor"],
                    "truncation": doc.get("truncation"), "padding": doc.get("padding"),
                    "non_special": list(parts["added_non_special"]),
                    "added_flags": {s: tuple(f) for s, f in parts["added_flags"].items()}}
    try:
        tok._use_added_flags(tok._hf_kept["added_flags"])
    except ValueError as exc:
        raise ValueError(f"{p}: {exc}") from None
    return tok


def _tokenizer_of_parts(p, parts, special, options, kw) -> Tokenizer:
    """The Tokenizer of hf_import's parts of the file p, with Tokenizer keywords kw."""
    from . import hf_import
    vocab = parts["vocab"]
    if options:
        # options the C core gained with the model options (byte_level, pre_tokenizer, ...):
        # accepted only if this Tokenizer takes them
        hf_import.check_options_supported(Tokenizer, options, p)
        full = dict(vocab)
        model_bytes = set(vocab.values())
        prefix = options.get("continuing_subword_prefix") or ""
        suffix = options.get("end_of_word_suffix") or ""
        for s, i in special.items():
            b = s.encode("utf-8")
            if not parts["byte_level"] and i not in vocab and \
                    formats.is_initial_symbol(s, False, prefix, suffix):
                continue    # a character the file's model does not have: not the model's
            if b not in model_bytes or vocab.get(i) == b:   # (else a model token's bytes
                full[i] = b                                 # under another id)
        if parts["pattern"] is not None:
            kw.setdefault("pattern", parts["pattern"])
        try:    # Tokenizer checks the merges (a continuing_subword_prefix changes the rule)
            return Tokenizer(full, parts["merges"], dict(special), **options, **kw)
        except ValueError as exc:
            raise ValueError(f"{p}: {exc}") from None
    if parts["rule"] == formats.RULE_TIKTOKEN:
        tok = Tokenizer._from_parts(formats.RULE_TIKTOKEN, vocab, [], special,
                                    parts["pattern"], **kw)
        tok._synth = parts["merges"]     # the merges we synthesized when saving it
        return tok
    formats.check_merges(vocab, parts["merges"], p)
    return Tokenizer._from_parts(formats.RULE_MERGES, vocab, parts["merges"], special,
                                 parts["pattern"], **kw)


def merges_candidates(vocab_path) -> list:
    """Where load() looks for the merges of a GPT-2 vocab.json, in order: `<prefix>merges.txt`
    for a `<prefix>vocab.json`, then `merges.txt`, beside it."""
    d, base = os.path.split(os.fspath(vocab_path))
    out = []
    if base.endswith("vocab.json"):
        out.append(os.path.join(d, base[:-len("vocab.json")] + "merges.txt"))
    out.append(os.path.join(d, "merges.txt"))
    return out


def load(path, *, pattern: str = None, special_tokens=None, **kw) -> Tokenizer:
    """Load a tokenizer from any supported file:
      - a tokenizer.json (HuggingFace format: as written by Tokenizer.save, or any BPE model
        whose components bpe_cffi.hf_import accepts; others are refused with a ValueError
        naming what is unsupported);
      - a GPT-2 vocab.json (merges.txt is looked for beside it: `<prefix>merges.txt` for a
        `<prefix>vocab.json`, else `merges.txt`), or a (vocab.json, merges.txt) tuple;
      - a .tiktoken file (pattern= names the split pattern; inferred for the standard 50k,
        100k and 200k vocabularies).
    """
    if isinstance(path, (tuple, list)):
        if len(path) != 2:
            raise ValueError("load: a tuple must be (vocab.json, merges.txt)")
        return Tokenizer.from_files(path[0], path[1], special_tokens,
                                    pattern=pattern, **kw)
    p = os.fspath(path)
    if not os.path.exists(p):
        raise FileNotFoundError(2, "No such file or directory", p)
    with open(p, "rb") as f:
        head = f.read(4096)
    stripped = head.lstrip()
    json_name = p.lower().endswith(".json")
    if head.startswith(b"#version") or os.path.basename(p).lower().endswith("merges.txt"):
        raise ValueError(f"{p} is a GPT-2 merges.txt: load its vocab.json (the merges.txt "
                         f"beside it is read with it), or pass (vocab.json, merges.txt)")
    if p.endswith(".tiktoken") or (stripped and not stripped.startswith(b"{") and
                                   not json_name):
        return Tokenizer.from_tiktoken(p, pattern=pattern, special_tokens=special_tokens, **kw)
    text = formats._read_text(p)
    doc = formats._parse_json(text, p)
    if isinstance(doc, dict) and isinstance(doc.get("model"), dict):
        return _named(_load_hf(p, doc, text, pattern, special_tokens, kw), p)
    if not isinstance(doc, dict) or not all(type(i) is int for i in doc.values()):
        raise ValueError(f"{p}: neither a tokenizer.json (no \"model\" object) nor a GPT-2 "
                         f"vocab.json (an object of token: id)")
    # a GPT-2 vocab.json: find merges.txt beside it
    candidates = merges_candidates(p)
    for m in candidates:
        if os.path.exists(m):
            return Tokenizer.from_files(p, m, special_tokens, pattern=pattern, **kw)
    raise FileNotFoundError(2, f"{p} is a vocab.json but no merges file was found beside it "
                               f"(tried {', '.join(candidates)}); pass (vocab, merges)",
                            candidates[0])
