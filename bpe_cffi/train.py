"""Training a byte-level BPE vocabulary: `train_bpe` (vocab + merges) and `train_tokenizer`.

The work is in C (csrc/train*.c): reading and counting pre-tokens on worker threads, then the
merge loop with a pair index and a 4-ary max-heap.  For a pattern given as a regex string
(not one of the built-in names "gpt2", "cl100k", "o200k"), Python's `regex` module splits and
counts the text and C does the merges.

Semantics (tests/reference_trainer.py is the executable definition):

1. Each file is read as UTF-8; bytes that are not valid UTF-8 are replaced by U+FFFD exactly as
   ``bytes.decode("utf-8", errors="replace")`` does.  Each file is a text of its own: no
   pre-token spans two files.
2. The text is split on the special tokens (leftmost match; the longest one at a position);
   nothing is learned across them, and they are not learned as ordinary tokens.
3. Each segment is split into pre-tokens with the pattern; pre-tokens are counted as UTF-8
   byte strings (64-bit counts).
4. The count of a pair (x, y) is, over all pre-tokens, (adjacent positions holding x then y)
   x (the pre-token's count).  Every adjacent position counts, overlapping ones included:
   "aaa" gives (a, a) a count of 2.
5. Each step merges the pair with the highest count; ties go to the greatest
   (left bytes, right bytes) as Python compares tuples of bytes.  Within a pre-token the pair
   is merged left to right without overlap ("aaa" -> "aa" "a").
6. Ids 0..255 are the single bytes, then the learned tokens in the order they were learned,
   then the special tokens.  If a merge spells bytes that are already a token (two merge
   paths can reach the same bytes; rare), the merge is still listed but gets no new id, so
   ids stay unique by bytes; training goes on until the vocabulary is full.
7. Training stops when len(vocab) == vocab_size, when no pair is left (an empty or tiny
   corpus gives fewer tokens; not an error), or when the best count is below min_frequency.
8. The result is the same for every num_threads and every internal block size.

Saving: `Tokenizer.save` writes a HuggingFace tokenizer.json that `tokenizers` loads and
encodes identically (tests/test_train_cli.py).  A .tiktoken file holds ranks (rank = id), and
tiktoken merges the adjacent pair whose concatenation has the lowest rank rather than following
the merge list; the two agree unless one token can be built by two merge paths.  Measured on
300 KB of each corpus at vocab 3000: 0 differing pieces of 4,000-12,000 distinct ones.

Cost: counting is linear in the text; each merge touches only the words holding the pair and
costs O(length) for each of them, so one enormous pre-token (a 1 MB line without spaces)
costs O(length) per merge that touches it.
"""
import os
import time
from collections import Counter

from . import patterns
from ._native import ffi, lib, raise_for
from .progress import Bar, new_progress, run_cancellable

__all__ = ["train_bpe", "train_tokenizer"]

_ADD_BATCH = 1 << 16            # words per bpe_trainer_add_words call
_PY_READ = 8 << 20              # bytes per read on the regex (Python) path


def _as_paths(input_path) -> list:
    if isinstance(input_path, (str, bytes)) or hasattr(input_path, "__fspath__"):
        paths = [input_path]
    else:
        try:
            paths = list(input_path)
        except TypeError:
            raise TypeError("input_path must be a path or a list of paths, not "
                            f"{type(input_path).__name__}") from None
    out = []
    for p in paths:
        if not (isinstance(p, (str, bytes)) or hasattr(p, "__fspath__")):
            raise TypeError(f"input_path entries must be paths, not {type(p).__name__}")
        p = os.fsdecode(os.fspath(p))
        if os.path.isdir(p):
            raise IsADirectoryError(21, "is a directory", p)
        with open(p, "rb"):      # FileNotFoundError / PermissionError naming the file
            pass
        out.append(p)
    if not out:
        raise ValueError("input_path is an empty list")
    return out


def _check_specials(special_tokens) -> list:
    if special_tokens is None:
        return []
    if isinstance(special_tokens, (str, bytes)):
        raise TypeError("special_tokens must be a list of str, not a single string")
    specials = list(special_tokens)
    seen = set()
    for s in specials:
        if not isinstance(s, str):
            raise TypeError(f"special tokens must be str, not {type(s).__name__}: {s!r}")
        if not s:
            raise ValueError("a special token is empty")
        if s in seen:
            raise ValueError(f"special token {s!r} is given twice")
        seen.add(s)
    return specials


def _check_int(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def _split_specials_re(specials):
    import regex
    if not specials:
        return None
    return regex.compile("|".join(regex.escape(s) for s in
                                  sorted(specials, key=len, reverse=True)))


def _count_python(path, pattern: str, specials, cancel_flag) -> Counter:
    """Counts the pre-tokens of one file with a regex string (the non-built-in path).

    The file is read in blocks and cut after its last special token, so memory stays bounded
    by the longest run of text between two special tokens."""
    import codecs
    import regex
    compiled = regex.compile(pattern)
    split = _split_specials_re(specials)
    longest = max((len(s) for s in specials), default=0)
    counts = Counter()
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pending = ""

    def count_text(text):
        segments = split.split(text) if split is not None else [text]
        for seg in segments:
            counts.update(compiled.findall(seg))

    with open(path, "rb") as f:
        while True:
            if cancel_flag():
                raise KeyboardInterrupt("cancelled")
            raw = f.read(_PY_READ)
            pending += decoder.decode(raw, final=not raw)
            if not raw:
                break
            if split is None:
                continue
            last = None
            # the last special token that ends before the unfinished tail
            limit = max(len(pending) - (longest - 1), 0)
            for m in split.finditer(pending, 0, len(pending)):
                if m.start() < limit:
                    last = m
            if last is not None:
                count_text(pending[:last.end()])
                pending = pending[last.end():]
    count_text(pending)
    return Counter({k.encode("utf-8"): v for k, v in counts.items() if k})


def _add_words(trainer, counts: Counter) -> None:
    items = list(counts.items())
    for start in range(0, len(items), _ADD_BATCH):
        batch = items[start:start + _ADD_BATCH]
        data = b"".join(w for w, _ in batch)
        offsets = [0]
        for w, _ in batch:
            offsets.append(offsets[-1] + len(w))
        rc = lib.bpe_trainer_add_words(trainer, ffi.from_buffer(data),
                                       ffi.new("size_t[]", offsets),
                                       ffi.new("uint64_t[]", [c for _, c in batch]), len(batch))
        raise_for(rc, "adding counted words")


def _new_trainer(cid, vocab_size, specials, min_frequency, num_threads, block_size,
                 parallel_words=0, long_word=0):
    cfg = ffi.new("bpe_trainer_config *")
    cfg.pattern = cid
    cfg.vocab_size = vocab_size
    cfg.min_frequency = min_frequency or 0
    cfg.n_threads = num_threads or 0
    cfg.block_size = block_size or 0
    cfg.parallel_words = parallel_words or 0
    cfg.long_word = long_word or 0
    enc = [s.encode("utf-8") for s in specials]
    keep = []
    if enc:
        data = b"".join(enc)
        offsets = [0]
        for e in enc:
            offsets.append(offsets[-1] + len(e))
        keep = [ffi.from_buffer(data), ffi.new("size_t[]", offsets), data]
        cfg.n_special = len(enc)
        cfg.special_bytes = keep[0]
        cfg.special_offsets = keep[1]
    out = ffi.new("bpe_trainer **")
    rc = lib.bpe_trainer_new(cfg, out)
    raise_for(rc, "creating the trainer")
    return ffi.gc(out[0], lib.bpe_trainer_free)


def _result(trainer, specials):
    tb = ffi.new("bpe_bytes *")
    to = ffi.new("bpe_ids *")
    mg = ffi.new("bpe_ids *")
    try:
        raise_for(lib.bpe_trainer_result(trainer, tb, to, mg), "reading the result")
        data = bytes(ffi.buffer(tb.data, tb.len)) if tb.len else b""
        offs = list(ffi.unpack(to.ids, to.len))
        trip = list(ffi.unpack(mg.ids, mg.len)) if mg.len else []
    finally:
        lib.bpe_bytes_free(tb)
        lib.bpe_ids_free(to)
        lib.bpe_ids_free(mg)
    tokens = [data[offs[i]:offs[i + 1]] for i in range(len(offs) - 1)]
    vocab = dict(enumerate(tokens))
    merges = [(tokens[trip[i]], tokens[trip[i + 1]]) for i in range(0, len(trip), 3)]
    for s in specials:
        vocab[len(vocab)] = s.encode("utf-8")
    return vocab, merges


def _finish_bar(bars, phase, prog) -> None:
    """Draws a phase's final line if the phase ended before the bar was first drawn."""
    bar = (bars or {}).get(phase)
    if bar is not None and not bar.drawn and prog.phase == phase:
        bar.update(prog.done, prog.total, force=True)
        bar.close()


def _train(input_path, vocab_size, special_tokens=None, *, pattern="gpt2", num_threads=None,
           min_frequency=None, progress=False, block_size=0, parallel_words=0, long_word=0):
    """train_bpe plus timings: returns (vocab, merges, stats) where stats has count_seconds,
    merge_seconds and n_words.  block_size (bytes per read; 0: 4 MiB) and parallel_words
    (words per thread before a merge runs on threads; 0: 2048) and long_word (words of at
    least this many bytes are merged by position; 0: 64) are for tests."""
    specials = _check_specials(special_tokens)
    _check_int("vocab_size", vocab_size, 0)
    if vocab_size < 256 + len(specials):
        raise ValueError(f"vocab_size must be at least 256 + {len(specials)} special tokens "
                         f"= {256 + len(specials)}, got {vocab_size}")
    if vocab_size > 2**32 - 1:
        raise ValueError(f"vocab_size must be below 2**32, got {vocab_size}")
    if num_threads is not None:
        _check_int("num_threads", num_threads, 1)
    if min_frequency is not None:
        _check_int("min_frequency", min_frequency, 0)
    _check_int("block_size", block_size, 0)
    _name, regex_str, cid = patterns.resolve(pattern)
    paths = _as_paths(input_path)

    _check_int("parallel_words", parallel_words, 0)
    _check_int("long_word", long_word, 0)
    trainer = _new_trainer(cid, vocab_size, specials, min_frequency, num_threads, block_size,
                           parallel_words, long_word)
    prog = new_progress()
    bars = None
    if progress:
        bars = {lib.BPE_PHASE_READ: Bar("counting", "B"),
                lib.BPE_PHASE_MERGE: Bar("merging", "merges")}
    t0 = time.perf_counter()
    if cid:
        prog.total = sum(os.path.getsize(p) for p in paths)

        def count_files():
            for p in paths:
                rc = lib.bpe_trainer_count_file(trainer, p.encode(), prog)
                if rc != lib.BPE_OK:
                    return rc, ffi.errno, p
            return lib.BPE_OK, 0, None

        rc, err, bad = run_cancellable(count_files, prog, bars)
        if rc == lib.BPE_ERR_IO:
            raise OSError(err, f"cannot read {bad}: {os.strerror(err) if err else 'I/O error'}",
                          bad)
        raise_for(rc, f"counting {bad}")
    else:
        def count_py():
            total = Counter()
            for p in paths:
                total.update(_count_python(p, regex_str, specials, lambda: prog.cancel))
            return total

        counts = run_cancellable(count_py, prog, None)
        _add_words(trainer, counts)
    t1 = time.perf_counter()
    if cid:
        _finish_bar(bars, lib.BPE_PHASE_READ, prog)
    rc = run_cancellable(lambda: lib.bpe_trainer_merge(trainer, prog), prog, bars)
    raise_for(rc, "merging")
    _finish_bar(bars, lib.BPE_PHASE_MERGE, prog)
    t2 = time.perf_counter()
    vocab, merges = _result(trainer, specials)
    stats = {"count_seconds": t1 - t0, "merge_seconds": t2 - t1,
             "n_words": int(lib.bpe_trainer_n_words(trainer))}
    return vocab, merges, stats


def train_bpe(input_path, vocab_size, special_tokens=None, *, pattern="gpt2",
              num_threads=None, min_frequency=None, progress=False):
    """Train a byte-level BPE vocabulary on the text of input_path.

    input_path: a path or a list of paths (UTF-8 text; see the module doc for invalid bytes).
    vocab_size: ids wanted in all, 256 bytes + merges + special tokens (>= 256 + specials).
    special_tokens: strings that split the text and get the last ids.
    pattern: "gpt2", "cl100k", "o200k" (C pre-tokenizers) or any regex string (Python `regex`).
    num_threads: worker threads (default: one per core); the result does not depend on it.
    min_frequency: stop when the best pair occurs fewer times (default: no minimum).
    progress: draw counting and merging progress bars on stderr.
    Returns (vocab {id: bytes}, merges [(left bytes, right bytes)] in learned order).
    Ctrl-C stops it within about a second with KeyboardInterrupt.
    """
    vocab, merges, _ = _train(input_path, vocab_size, special_tokens, pattern=pattern,
                              num_threads=num_threads, min_frequency=min_frequency,
                              progress=progress)
    return vocab, merges


def train_tokenizer(input_path, vocab_size, special_tokens=None, *, cls=None, **options):
    """Train (as train_bpe, same options) and return a Tokenizer (or an instance of cls, a
    Tokenizer subclass).  Tokenizer.train is this function as a classmethod:
    ``Tokenizer.train = classmethod(lambda cls, *a, **k: train_tokenizer(*a, cls=cls, **k))``.
    """
    if cls is None:
        from .tokenizer import Tokenizer as cls
    pattern = options.get("pattern", "gpt2")
    vocab, merges = train_bpe(input_path, vocab_size, special_tokens, **options)
    return cls(vocab, merges, list(special_tokens or []), pattern=pattern)
