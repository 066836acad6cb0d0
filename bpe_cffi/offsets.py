"""Character offsets for byte-level BPE tokens, in both directions.

A byte-level token is a byte string, and its boundaries need not fall on UTF-8 character
boundaries: "日" (e6 97 a5) may be split into the tokens b" \\xe6", b"\\x97", b"\\xa5".  Offsets
are reported in characters (Python str indices), so a token that covers part of a character
is given that whole character:

* `encode_with_offsets` returns, per token, the span (start, end) of the characters its bytes
  touch: the same as HF `tokenizers` `Encoding.offsets` for a byte-level vocabulary.  Two
  tokens that share one character both report that character.
* `decode_with_offsets` returns, per token, the index in the decoded text of the first
  character that holds a byte of the token: tiktoken's `Encoding.decode_with_offsets`.

How it is computed (one pass, no per-token decoding).  In valid UTF-8 a character starts at
every byte that is not a continuation byte (0x80-0xBF).  So for each token id we need only two
numbers, cached per tokenizer: how many characters start inside the token (its non-continuation
bytes) and whether its first byte is a continuation byte.  Walking the ids with a running count
`pos` of the characters started so far, a token covers characters [pos - first_is_cont,
pos + starts).

Invalid UTF-8 (only possible when decoding ids) follows Python's errors="replace" rule: each
maximal invalid subpart becomes one U+FFFD, which is one character.  Such a subpart is either a
lead byte with the continuation bytes that were valid after it (it starts where a character
would start anyway) or a single stray continuation byte; the latter is the one extra place
where a character starts, and the slow path counts those separately.
"""
import codecs
import operator
import threading
import weakref
from functools import lru_cache
from itertools import accumulate, chain
from operator import sub

__all__ = ["encode_with_offsets", "decode_with_offsets", "trimming_steps",
           "trim_spaces"]

_CONT = bytes(range(0x80, 0xC0))   # UTF-8 continuation bytes
_NP_MIN = 512                      # fewer ids: the pure-Python path is as fast
_NP_MAX_ID = 1 << 22               # larger ids are not vocabulary ids: pure-Python path


@lru_cache(maxsize=None)
def _numpy():
    """numpy, which vectorises the per-token work when it is installed (else None),
    imported at the first offsets of a long text: importing it with bpe_cffi cost every
    process ~60 ms and started numpy's BLAS threads."""
    try:
        import numpy
    except ImportError:            # pragma: no cover - numpy is a test dependency
        return None
    return numpy


class _Tables:
    """Per-tokenizer caches, filled lazily with the ids met so far (at most the vocabulary):
    starts[id] = characters starting in the token's bytes (its non-continuation bytes),
    cont[id] = 1 if its first byte is a continuation byte else 0, nbytes[id] = its length.
    arrays = (starts, starts + cont) as numpy int32 arrays indexed by id, -1 where not known
    yet; replaced whole (copy on write, under `lock`) so a reader always sees a matching
    pair.  Only used when numpy is importable."""

    __slots__ = ("starts", "cont", "nbytes", "arrays", "lock", "__weakref__")

    def __init__(self):
        self.starts = {}
        self.cont = {}
        self.nbytes = {}
        self.arrays = None
        self.lock = threading.Lock()

    def fill(self, tok, ids) -> None:
        """Add every id of `ids` not cached yet; raises what tok.decode_single_token_bytes
        raises for an unknown id."""
        for i in set(ids).difference(self.starts):
            b = tok.decode_single_token_bytes(i if type(i) is int else operator.index(i))
            self.cont[i] = 1 if b and 0x80 <= b[0] < 0xC0 else 0
            self.nbytes[i] = len(b)
            self.starts[i] = len(b.translate(None, _CONT))

    def fill_arrays(self, tok, new_ids: list, size: int) -> tuple:
        """Cache `new_ids` (fill) and return arrays covering ids < size that hold them."""
        self.fill(tok, new_ids)
        with self.lock:
            old = self.arrays
            known = list(self.starts)       # may hold larger ids, from the pure-Python path
            have = len(old[0]) if old is not None else 0
            need = max(size, int(max(known)) + 1)
            n = have if need <= have else max(need, 2 * have)
            np = _numpy()
            starts = np.full(n, -1, dtype=np.int32)
            back = np.zeros(n, dtype=np.int32)
            if old is not None:
                starts[:len(old[0])] = old[0]
                back[:len(old[1])] = old[1]
            starts[known] = [self.starts[i] for i in known]
            back[known] = [self.starts[i] + self.cont[i] for i in known]
            self.arrays = (starts, back)
            return self.arrays


# tokenizer -> _Tables; dropped with the tokenizer.
_TABLES = weakref.WeakKeyDictionary()


def _tables(tok) -> _Tables:
    """The caches for `tok` (fresh ones each call if tok cannot be weakly referenced)."""
    try:
        t = _TABLES.get(tok)
        if t is None:
            t = _TABLES[tok] = _Tables()
        return t
    except TypeError:
        return _Tables()


def _ends_begins(tok, ids: list):
    """For `ids` as if decoded as one valid UTF-8 string: (ends, begins), token k covering
    characters [begins[k], ends[k]).  begins[k] is -1 only before any character started
    (a leading continuation byte; never in valid UTF-8).

    Performance: this runs on every encode_with_offsets, so the per-token work is never a
    Python loop: with numpy, two table lookups by fancy indexing and a cumsum; without it,
    C iterators (map over dict lookups, accumulate): ends is the running sum of starts,
    begins[k] = ends[k] - starts[k] - cont[k].
    """
    t = _tables(tok)
    if len(ids) >= _NP_MIN and _numpy() is not None:
        got = _ends_begins_np(t, tok, ids)
        if got is not None:
            return got
    try:
        ends = list(accumulate(map(t.starts.__getitem__, ids)))
    except KeyError:
        t.fill(tok, ids)
        ends = list(accumulate(map(t.starts.__getitem__, ids)))
    begins = list(map(sub, chain((0,), ends), map(t.cont.__getitem__, ids)))
    return ends, begins


def _ends_begins_np(t: _Tables, tok, ids: list):
    """_ends_begins with numpy, or None to use the pure-Python path (ids that are not all
    small non-negative integers: that path reports them through the tokenizer)."""
    np = _numpy()
    try:
        a = np.asarray(ids)
    except (ValueError, TypeError, OverflowError):
        return None
    if (a.ndim != 1 or a.size == 0 or a.dtype.kind not in "iu" or a.min() < 0
            or a.max() >= _NP_MAX_ID):
        return None
    arrays = t.arrays
    size = int(a.max()) + 1
    if arrays is None or size > len(arrays[0]):
        arrays = t.fill_arrays(tok, np.unique(a).tolist(), size)
    s = arrays[0][a]
    if (s < 0).any():
        arrays = t.fill_arrays(tok, np.unique(a[s < 0]).tolist(), size)
        s = arrays[0][a]
    ends = np.cumsum(s, dtype=np.int64)
    begins = ends - arrays[1][a]
    return ends.tolist(), begins.tolist()


def encode_with_offsets(tok, text: str, *, ordinary: bool = False, **encode_kwargs):
    """Encode `text` and return (ids, offsets), offsets[k] = (start, end) in `text` of the
    characters that token k's bytes belong to (HF `Encoding.offsets` for byte-level BPE).

    `ordinary=True` encodes with tok.encode_ordinary (special tokens are plain text);
    otherwise tok.encode(text, **encode_kwargs).  Raises TypeError for a non-str `text` and
    whatever the tokenizer's encode raises.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, not {type(text).__name__}")
    ids = tok.encode_ordinary(text) if ordinary else tok.encode(text, **encode_kwargs)
    if not isinstance(ids, list):
        ids = list(ids)
    ends, begins = _ends_begins(tok, ids)
    spans = list(zip(begins, ends))
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:          # surrogates: the tokenizer encoded a repair
            encoded = tok.decode_bytes(ids).decode("utf-8", errors="replace")
            spans = surrogate_spans(encoded, text, spans)
    return ids, spans


def surrogate_spans(encoded: str, text: str, spans: list) -> list:
    """Map spans over `encoded`, the text the tokenizer actually encoded (surrogates repaired
    the way tiktoken does: a lone one becomes U+FFFD, a high+low pair the character it
    encodes), back to indices in the caller's `text`.  Rare, so simple: one entry per encoded
    character."""
    first = []                              # encoded char index -> first index in `text`
    i = 0
    for ch in encoded:
        first.append(i)
        pair = (i + 1 < len(text) and "\ud800" <= text[i] <= "\udbff"
                and "\udc00" <= text[i + 1] <= "\udfff" and ord(ch) > 0xFFFF)
        i += 2 if pair else 1
    if i != len(text):
        raise ValueError("encode_with_offsets: the tokenizer changed the text in a way that "
                         "cannot be mapped back to character offsets")
    first.append(i)
    return [(first[s], first[e]) for s, e in spans]


def decode_with_offsets(tok, ids, errors: str = "strict"):
    """Decode `ids` and return (text, offsets), offsets[k] = index in `text` of the first
    character holding a byte of token k (tiktoken `Encoding.decode_with_offsets`).

    errors="strict" (tiktoken's behaviour) raises UnicodeDecodeError when the bytes are not
    valid UTF-8.  errors="replace" returns the text tok.decode gives (each maximal invalid
    subpart -> one U+FFFD) with offsets counted in that text.  Other values: ValueError.
    """
    if errors not in ("strict", "replace"):
        raise ValueError(f"errors must be 'strict' or 'replace', not {errors!r}")
    ids = list(ids)
    data = tok.decode_bytes(ids)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        if errors == "strict":
            raise
        return data.decode("utf-8", errors="replace"), _replace_offsets(tok, ids, data)
    begins = _ends_begins(tok, ids)[1]
    if begins and begins[0] < 0:            # tiktoken's max(0, ...); unreachable when valid
        begins = [max(0, b) for b in begins]
    return text, begins


def _stray_continuations(data: bytes) -> list:
    """Sorted byte positions of continuation bytes that Python's UTF-8 decoder replaces on
    their own (each one is then a character of the decoded text)."""
    stray = []
    view = memoryview(data)
    pos = 0
    n = len(data)
    while pos < n:
        try:
            codecs.utf_8_decode(view[pos:], "strict", True)   # no copy; stops at an error
            break
        except UnicodeDecodeError as exc:
            start = pos + exc.start
            if 0x80 <= data[start] < 0xC0:
                stray.append(start)
            pos += exc.end
    return stray


def _replace_offsets(tok, ids, data: bytes) -> list:
    """decode_with_offsets offsets for invalid UTF-8 under errors="replace"."""
    stray = _stray_continuations(data)
    t = _tables(tok)
    t.fill(tok, ids)
    out = []
    pos = 0          # characters started before the current token (lead bytes + strays)
    byte = 0         # byte offset of the current token
    k = 0            # next unread entry of `stray`
    for i in ids:
        first_stray = k < len(stray) and stray[k] == byte
        out.append(max(0, pos - (t.cont[i] and not first_stray)))
        pos += t.starts[i]
        byte += t.nbytes[i]
        while k < len(stray) and stray[k] < byte:
            pos += 1
            k += 1
    if byte != len(data):   # pragma: no cover - decode_bytes disagrees with the tokens
        raise ValueError("decode_with_offsets: token bytes do not add up to decode_bytes")
    return out


# ---- HF's ByteLevel offset trimming ------------------------------------------------------
# A tokenizer.json whose post-processor is ByteLevel or RobertaProcessing with trim_offsets
# (GPT-NeoX-style files) has HF report each token's span without the spaces its token
# string starts or ends with: " world" spans "world".  Spaces are the byte-level alphabet's
# character for b" " (U+0120) and the characters Unicode calls White_Space (as Rust's
# char::is_whitespace; in an added token's text).

_ALPHABET_SPACE = "\u0120"
# Rust's char::is_whitespace: the Unicode White_Space property (hf_components and
# added_tokens use it too).
WHITE_SPACE = frozenset(map(chr, [*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680,
                                  *range(0x2000, 0x200B), 0x2028, 0x2029, 0x202F, 0x205F,
                                  0x3000]))


def trimming_steps(post_processor) -> list:
    """add_prefix_space of each step of a tokenizer.json post-processor (its JSON) that trims
    offsets, in the order HF applies them; [] when none does."""
    if not isinstance(post_processor, dict):
        return []
    kind = post_processor.get("type")
    if kind == "Sequence":
        return [a for step in post_processor.get("processors") or []
                for a in trimming_steps(step)]
    if kind in ("ByteLevel", "RobertaProcessing") and post_processor.get("trim_offsets", True):
        return [bool(post_processor.get("add_prefix_space", True))]
    return []


def _space_run(chars) -> int:
    n = 0
    for c in chars:
        if c != _ALPHABET_SPACE and c not in WHITE_SPACE:
            break
        n += 1
    return n


def trim_spaces(spans, token_strs, add_prefix_space: bool) -> list:
    """spans with the leading and trailing spaces of each token string taken off, as HF's
    ByteLevel post-processor does: a span never inverts (an all-space token keeps an empty
    span at its end), and with add_prefix_space the first token keeps one leading space (the
    one HF's pre-tokenizer would have added)."""
    out = []
    for i, ((start, end), s) in enumerate(zip(spans, token_strs)):
        lead = _space_run(s)
        trail = _space_run(reversed(s))
        if lead:
            if (i == 0 or start == 0) and add_prefix_space and lead == 1:
                lead = 0
            start = min(start + lead, end)
        if trail and end >= trail:
            end = max(end - trail, start)
        out.append((start, end))
    return out
