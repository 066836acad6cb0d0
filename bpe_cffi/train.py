"""Training a BPE vocabulary (byte-level; or character-level with byte_level=False):
`train_bpe` (vocab + merges) and `train_tokenizer`.

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

Options (issue #6; tests/reference_trainer.py defines them too):

9. max_token_length: no learned token covers more than this many units of a word: BYTES in
   byte-level training (the unit the byte-level model works in: a token is a byte string,
   and the bound then also bounds every token's size), CHARACTERS in character-level
   training, as HuggingFace counts (the continuing_subword_prefix and end_of_word_suffix are
   not counted).  A pair that would make a longer token is never counted, so it can never be
   the best pair.  A token's length is fixed when it is first made (1 for an initial token;
   left + right for a learned one).  Unlike HF, the bound holds for every token: HF lets
   the first pairs of the words through unchecked (max_token_length=1 still learns "ab") and
   refuses later tokens of exactly max_token_length.  0 and 1 both mean "learn nothing".
10. byte_level=False trains on characters instead of bytes, as HF's BpeTrainer without a
   ByteLevel pre-tokenizer does:
   - the alphabet is every character of the pre-tokens, plus initial_alphabet (always kept).
     With limit_alphabet, only that many characters are kept: the initial ones, then the most
     frequent (occurrences x pre-token count), ties to the smaller code point (HF leaves ties
     to hash order).  limit_alphabet may not be below len(initial_alphabet) (HF would then
     drop initial characters in an arbitrary order).
   - a pre-token becomes one symbol per kept character: continuing_subword_prefix + c unless
     c is the pre-token's first character, and c + end_of_word_suffix if it is its last.
     First and last are judged before dropping the characters that are not kept, and a
     dropped character simply disappears (its neighbours become adjacent), exactly as HF.
   - ids: the kept characters in code point order (HF's order too), then the decorated
     symbols that occur in byte order, then the learned tokens, then the special tokens (HF
     puts special tokens first; we keep our own layout).  Token bytes are the UTF-8 of the
     token strings.  A merge (x, y) makes x + y with y's leading prefix removed (HF's rule).
   - vocab_size counts every id; when the initial tokens and specials already reach it,
     nothing is learned and the vocabulary is bigger than vocab_size (as with HF).
   The tie-break stays ours (rule 5, on the token strings' UTF-8), so merges differ from
   HF's where counts tie; the alphabet and the shape of the tokens are HF's.

Saving: `Tokenizer.save` writes a HuggingFace tokenizer.json that `tokenizers` loads and
encodes identically (tests/test_train_cli.py), but for characters assigned in recent Unicode
versions, which HF's Oniguruma does not know as letters (README, Known gaps).  A .tiktoken
file holds ranks (rank = id), and tiktoken merges the adjacent pair whose concatenation has
the lowest rank rather than following the merge list; the two agree unless one token can be
built by two merge paths.  Measured on 300 KB of each corpus at vocab 3000: 0 differing
pieces of 4,000-12,000 distinct ones.

Cost: counting is linear in the text; each merge touches only the words holding the pair and
costs O(length) for each of them, so one enormous pre-token (a 1 MB line without spaces)
costs O(length) per merge that touches it.
"""
import os
import time
from collections import Counter

from . import formats
from . import patterns
from ._native import ffi, lib, raise_for
from .progress import Bar, new_progress, run_cancellable

__all__ = ["train_bpe", "train_tokenizer"]

_ADD_BATCH = 1 << 16            # words per bpe_trainer_add_words call
_PY_READ = 8 << 20              # bytes per read on the regex (Python) path
_COUNT_BATCH = 1 << 16          # pieces counted at a time there


def _as_paths(input_path) -> list:
    if isinstance(input_path, (str, bytes)) or hasattr(input_path, "__fspath__"):
        paths = [input_path]
    else:
        formats.refuse_open_file(input_path, "train_bpe")
        try:
            paths = list(input_path)
        except TypeError:
            raise TypeError("input_path must be a path or a list of paths, not "
                            f"{type(input_path).__name__}") from None
    out = []
    for p in paths:
        if not (isinstance(p, (str, bytes)) or hasattr(p, "__fspath__")):
            formats.refuse_open_file(p, "train_bpe")
            raise TypeError(f"input_path entries must be paths, not {type(p).__name__}")
        p = os.fsdecode(os.fspath(p))
        if os.path.isdir(p):
            raise IsADirectoryError(21, "is a directory", p)
        with open(p, "rb"):      # FileNotFoundError / PermissionError naming the file
            pass
        formats.refuse_compressed(p, os.stat(p), "train --vocab-size N -o OUT")
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


def _refuse_specials_in_alphabet(specials, opts) -> None:
    """ValueError, before any training, for a special token that the vocabulary could also
    hold as an ordinary token (the same bytes under two ids, which no tokenizer can be built
    from): a single byte in byte-level training, an initial_alphabet character in
    character-level training, and there a token that starts with continuing_subword_prefix
    or ends with end_of_word_suffix, as the trainer's own symbols and tokens do ("##l" is
    the symbol of an "l" inside a word; the text never spells it, so splitting the special
    tokens out of the text first does not keep the trainer from making it)."""
    for s in specials:
        if opts.byte_level and len(s.encode("utf-8")) == 1:
            raise ValueError(f"special token {s!r} is a single byte, which byte-level training "
                             f"always has as an ordinary token: the vocabulary would hold it "
                             f"twice (use a longer special token)")
        if opts.byte_level:
            continue
        if s in opts.initial_alphabet:
            raise ValueError(f"special token {s!r} is also in initial_alphabet: the vocabulary "
                             f"would hold it twice")
        for what, affix, has in (("continuing_subword_prefix", opts.prefix, str.startswith),
                                 ("end_of_word_suffix", opts.suffix, str.endswith)):
            if affix and len(s) > len(affix) and has(s, affix):
                raise ValueError(f"special token {s!r} has the {what} {affix!r}, as the "
                                 f"trainer's own symbols do: it could also be an ordinary "
                                 f"token, and the vocabulary would hold it twice (use a "
                                 f"special token without it)")


def _check_int(name, value, minimum=None):
    """value as an int (numpy's ints too); TypeError for a bool, float or str, ValueError
    below minimum (if given)."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    value = value.__index__()
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def _split_specials_re(specials):
    import regex
    if not specials:
        return None
    return regex.compile("|".join(regex.escape(s) for s in
                                  sorted(specials, key=len, reverse=True)))


def _count_python(path, pattern: str, specials, prog) -> Counter:
    """Counts the pre-tokens of one file with a regex string (the non-built-in path).

    The file is read in blocks and cut after its last special token, so the text held is at
    most the longest run between two special tokens (a regex gives no other place where a cut
    cannot change the pieces).  Pieces are counted _COUNT_BATCH at a time, never as one list
    of all the matches; between batches prog.cancel is looked at (Ctrl-C) and prog.done
    moves (characters counted, as bytes for the bar)."""
    import codecs
    import itertools
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
            # whole matches, as the encoder splits (findall would give a pattern's groups)
            matches = compiled.finditer(seg)
            while True:
                if prog.cancel:
                    raise KeyboardInterrupt("cancelled")
                batch = [m[0] for m in itertools.islice(matches, _COUNT_BATCH)]
                if not batch:
                    break
                counts.update(batch)
                done = prog.done + sum(map(len, batch))    # (no total for a pipe: no cap)
                prog.done = min(done, prog.total) if prog.total else done

    with open(path, "rb") as f:
        while True:
            if prog.cancel:
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


class _Options:
    """The checked issue-#6 options, as train_bpe takes them."""

    def __init__(self, max_token_length=None, byte_level=True, initial_alphabet=None,
                 limit_alphabet=None, continuing_subword_prefix=None, end_of_word_suffix=None):
        if max_token_length is not None:
            max_token_length = _check_int("max_token_length", max_token_length, 0)
        if not isinstance(byte_level, bool):
            raise TypeError(f"byte_level must be True or False, not {byte_level!r}")
        if byte_level:
            given = [name for name, v in (("initial_alphabet", initial_alphabet),
                                          ("limit_alphabet", limit_alphabet),
                                          ("continuing_subword_prefix", continuing_subword_prefix),
                                          ("end_of_word_suffix", end_of_word_suffix))
                     if v is not None]
            if given:
                raise ValueError(f"{', '.join(given)} only apply to character-level training: "
                                 "pass byte_level=False (byte-level training always starts "
                                 "from the 256 bytes)")
        alphabet = _check_alphabet(initial_alphabet)
        if limit_alphabet is not None:
            limit_alphabet = _check_int("limit_alphabet", limit_alphabet, 0)
            if limit_alphabet < len(alphabet):
                raise ValueError(f"limit_alphabet ({limit_alphabet}) is smaller than "
                                 f"initial_alphabet ({len(alphabet)} distinct characters), "
                                 "whose characters are always kept")
        for name, v in (("continuing_subword_prefix", continuing_subword_prefix),
                        ("end_of_word_suffix", end_of_word_suffix)):
            if v is not None and not isinstance(v, str):
                raise TypeError(f"{name} must be a str or None, not {type(v).__name__}")
        self.max_token_length = max_token_length
        self.byte_level = byte_level
        self.initial_alphabet = alphabet
        self.limit_alphabet = limit_alphabet
        self.prefix = continuing_subword_prefix or None      # "" is no prefix, as in HF
        self.suffix = end_of_word_suffix or None


def _check_alphabet(initial_alphabet) -> list:
    """initial_alphabet (a str, or an iterable of one-character strs) -> sorted characters."""
    if initial_alphabet is None:
        return []
    if isinstance(initial_alphabet, bytes):
        raise TypeError("initial_alphabet must be a str or an iterable of characters, not bytes")
    try:
        items = list(initial_alphabet)
    except TypeError:
        raise TypeError("initial_alphabet must be a str or an iterable of characters, not "
                        f"{type(initial_alphabet).__name__}") from None
    for c in items:
        if not isinstance(c, str):
            raise TypeError(f"initial_alphabet entries must be str, not {type(c).__name__}: "
                            f"{c!r}")
        if len(c) != 1:
            raise ValueError(f"initial_alphabet entries must be single characters, got {c!r}")
        if 0xD800 <= ord(c) <= 0xDFFF:
            raise ValueError(f"initial_alphabet entry {c!r} is a lone surrogate")
    return sorted(set(items))


_SIZE_MAX = 2 ** (8 * ffi.sizeof("size_t")) - 1


def _new_trainer(cid, vocab_size, specials, min_frequency, num_threads, block_size,
                 parallel_words=0, long_word=0, options=None):
    cfg = ffi.new("bpe_trainer_config *")
    cfg.pattern = cid
    cfg.vocab_size = vocab_size
    # values past what C's fields hold mean the same as C's largest: no count reaches such a
    # minimum, and C uses at most BPE_MAX_THREADS threads
    cfg.min_frequency = min(min_frequency or 0, 2**64 - 1)
    cfg.n_threads = min(num_threads or 0, lib.BPE_MAX_THREADS)
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
    if options is not None:
        keep.append(_set_options(cfg, options))
    out = ffi.new("bpe_trainer **")
    rc = lib.bpe_trainer_new(cfg, out)
    raise_for(rc, "creating the trainer")
    return ffi.gc(out[0], lib.bpe_trainer_free)


def _set_options(cfg, o: _Options) -> list:
    """Fills cfg's option fields; returns the cdata they point to (keep it alive)."""
    keep = []
    if o.max_token_length is not None:
        # C: 0 is "no limit"; a limit past SIZE_MAX bytes (or characters) is none either
        cfg.max_token_length = min(max(o.max_token_length, 1), _SIZE_MAX)
    if o.byte_level:
        return keep
    cfg.char_level = 1
    if o.limit_alphabet is not None:
        cfg.has_limit_alphabet = 1
        cfg.limit_alphabet = min(o.limit_alphabet, _SIZE_MAX)   # past it: no limit
    if o.initial_alphabet:
        arr = ffi.new("uint32_t[]", [ord(c) for c in o.initial_alphabet])
        keep.append(arr)
        cfg.initial_alphabet = arr
        cfg.n_initial_alphabet = len(o.initial_alphabet)
    for name, value in (("prefix", o.prefix), ("suffix", o.suffix)):
        if value:
            data = ffi.new("uint8_t[]", value.encode("utf-8"))
            keep.append(data)
            setattr(cfg, name, data)
            setattr(cfg, name + "_len", len(value.encode("utf-8")))
    return keep


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
    if bar is not None and not bar.ever_drawn and prog.phase == phase:
        bar.update(prog.done, prog.total, force=True)
        bar.close()


def _train(input_path, vocab_size, special_tokens=None, *, pattern="gpt2", num_threads=None,
           min_frequency=None, progress=False, block_size=0, parallel_words=0, long_word=0,
           **options):
    """train_bpe plus timings: returns (vocab, merges, stats) where stats has count_seconds,
    merge_seconds and n_words.  block_size (bytes per read; 0: 4 MiB) and parallel_words
    (words per thread before a merge runs on threads; 0: 2048) and long_word (words of at
    least this many bytes are merged by position; 0: 64) are for tests.  options: the
    issue-#6 options of train_bpe."""
    specials = _check_specials(special_tokens)
    opts = _Options(**options)
    _refuse_specials_in_alphabet(specials, opts)
    vocab_size = _check_int("vocab_size", vocab_size)
    if opts.byte_level and vocab_size < 256 + len(specials):
        raise ValueError(f"vocab_size must be at least 256 + {len(specials)} special tokens "
                         f"= {256 + len(specials)}, got {vocab_size}")
    if vocab_size < len(specials) or vocab_size < 0:
        raise ValueError(f"vocab_size must be at least the {len(specials)} special tokens "
                         f"(and >= 0), got {vocab_size}")
    if vocab_size > 2**32 - 1:
        raise ValueError(f"vocab_size must be below 2**32, got {vocab_size}")
    if num_threads is not None:       # 0: one per core, as encode_batch / encode_file take it
        num_threads = _check_int("num_threads", num_threads, 0)
    if min_frequency is not None:
        min_frequency = _check_int("min_frequency", min_frequency, 0)
    _check_int("block_size", block_size, 0)
    _name, regex_str, cid = patterns.resolve(pattern)
    paths = _as_paths(input_path)

    _check_int("parallel_words", parallel_words, 0)
    _check_int("long_word", long_word, 0)
    trainer = _new_trainer(cid, vocab_size, specials, min_frequency, num_threads, block_size,
                           parallel_words, long_word, opts)
    prog = new_progress()
    bars = None
    if progress:
        bars = {lib.BPE_PHASE_READ: Bar("counting", "B"),
                lib.BPE_PHASE_MERGE: Bar("merging", "merges")}
    t0 = time.perf_counter()
    prog.total = sum(os.path.getsize(p) for p in paths)
    if cid:

        def count_files():
            for p in paths:
                rc = lib.bpe_trainer_count_file(trainer, os.fsencode(p), prog)
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
                total.update(_count_python(p, regex_str, specials, prog))
            if prog.total:                  # (characters counted fall short of bytes)
                prog.done = prog.total
            return total

        prog.phase = lib.BPE_PHASE_READ
        counts = run_cancellable(count_py, prog, bars)
        _add_words(trainer, counts)
    t1 = time.perf_counter()
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
              num_threads=None, min_frequency=None, progress=False, max_token_length=None,
              byte_level=True, initial_alphabet=None, limit_alphabet=None,
              continuing_subword_prefix=None, end_of_word_suffix=None):
    """Train a BPE vocabulary (byte-level by default) on the text of input_path.

    input_path: a path or a list of paths (UTF-8 text; see the module doc for invalid bytes).
    vocab_size: ids wanted in all, initial tokens + merges + special tokens (byte-level:
        >= 256 + specials).
    special_tokens: strings that split the text and get the last ids.
    pattern: "gpt2", "cl100k", "o200k" (C pre-tokenizers) or any regex string (Python `regex`).
    num_threads: worker threads (None or 0: one per core); the result does not depend on it.
    min_frequency: stop when the best pair occurs fewer times (default: no minimum).
    progress: draw counting and merging progress bars on stderr.
    max_token_length: no learned token covers more than this many bytes (byte-level) or
        characters (byte_level=False; prefix and suffix not counted).  Default: no limit.
    byte_level: False trains on characters (HF's char-level BpeTrainer); then:
      initial_alphabet: characters always in the vocabulary (a str or an iterable of chars);
      limit_alphabet: keep at most this many characters (the initial ones, then the most
          frequent); the others are dropped from the words;
      continuing_subword_prefix: put before every symbol that does not start a word ("##");
      end_of_word_suffix: put after the last symbol of a word ("</w>").
      A special token may not start with the prefix or end with the suffix (it could also
      be an ordinary token; ValueError before training).
    Returns (vocab {id: bytes}, merges [(left bytes, right bytes)] in learned order); with
    byte_level=False the bytes are the UTF-8 of the token strings, prefix/suffix included.
    Ctrl-C stops it within about a second with KeyboardInterrupt.
    """
    vocab, merges, _ = _train(input_path, vocab_size, special_tokens, pattern=pattern,
                              num_threads=num_threads, min_frequency=min_frequency,
                              progress=progress, max_token_length=max_token_length,
                              byte_level=byte_level, initial_alphabet=initial_alphabet,
                              limit_alphabet=limit_alphabet,
                              continuing_subword_prefix=continuing_subword_prefix,
                              end_of_word_suffix=end_of_word_suffix)
    return vocab, merges


def train_tokenizer(input_path, vocab_size, special_tokens=None, *, cls=None, **options):
    """Train (as train_bpe, same options) and return a Tokenizer (or an instance of cls, a
    Tokenizer subclass).  Tokenizer.train is this function as a classmethod:
    ``Tokenizer.train = classmethod(lambda cls, *a, **k: train_tokenizer(*a, cls=cls, **k))``.
    """
    if cls is None:
        from .tokenizer import Tokenizer as cls
    pattern = options.get("pattern", "gpt2")
    kwargs = {}
    if options.get("byte_level", True) is False:
        kwargs = char_level_kwargs(options)
        _check_char_level_tokenizer(cls)
    vocab, merges = train_bpe(input_path, vocab_size, special_tokens, **options)
    return cls(vocab, merges, list(special_tokens or []), pattern=pattern, **kwargs)


def char_level_kwargs(options) -> dict:
    """The Tokenizer keyword arguments that describe a char-level training's result: the same
    model options and decoder that formats.hf_json_char_level writes to tokenizer.json, so the
    tokenizer returned and the file saved encode and decode alike."""
    from . import hf_components
    prefix = options.get("continuing_subword_prefix") or None
    suffix = options.get("end_of_word_suffix") or None
    return {"byte_level": False, "continuing_subword_prefix": prefix,
            "end_of_word_suffix": suffix, "ignore_merges": False,
            "decoder": hf_components.decoder_from_json(formats.char_level_decoder(prefix,
                                                                                  suffix))}


def _check_char_level_tokenizer(cls) -> None:
    import inspect
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return
    if "byte_level" not in params and not any(
            p.kind is p.VAR_KEYWORD for p in params.values()):
        raise NotImplementedError(f"{cls.__name__} cannot encode with a character-level "
                                  "vocabulary (no byte_level argument); use train_bpe and "
                                  "save the result with bpe_cffi.formats.hf_json_char_level")
