"""HuggingFace-compatible pre-tokenizers, normalizers and decoders, in pure Python.

Each class behaves like the HF `tokenizers` object of the same name (tokenizers 0.23) and has
its method protocol, so either can be handed to `Tokenizer(pre_tokenizer=..., normalizer=...,
decoder=...)`:
  - pre-tokenizer: `pre_tokenize_str(text) -> [(piece, (start, end))]`, the pieces in order
    with their CHARACTER offsets into `text` (HF's offsets: the range of `text` a piece came
    from, even when the piece holds inserted or replaced characters);
  - normalizer: `normalize_str(text) -> str`;
  - decoder: `decode(tokens: [str]) -> str` (and `decode_chain(tokens) -> [str]`, the
    per-token form that `Sequence` chains, as HF does).
Each also has `from_json(dict)` (the object's form inside a tokenizer.json) and `to_json()`;
`pre_tokenizer_from_json`, `normalizer_from_json` and `decoder_from_json` dispatch on "type"
and raise `UnsupportedComponent` (a ValueError) naming what they do not know.

Data structure of pre-tokenization.  A pre-tokenizer works on a list of `_Piece`s: the text
of a piece and, for every character of it, the range of the input it stands for.  The common
case (a slice of the input, perhaps with characters replaced one for one and a prefix of
`pre` added characters) stores only `base` and `pre` (`align` is None: the first `pre`
characters stand for [base, base+1), character k >= pre for [base+k-pre, base+k-pre+1)).
Once a piece is changed otherwise (characters mapped to several, a prefix on a piece that
already has an explicit alignment), `align` is the explicit list of (start, end) per
character.  Invariants: len(align) == len(text) when align is set; the
ranges are non-decreasing; a piece is never empty (empty pieces are dropped, as HF drops
them); the piece's offsets are (start of its first char, end of its last char).

Split behaviours follow HF's NormalizedString::split: the pattern cuts the piece into
alternating match / non-match spans covering it, and
  removed: matches are dropped; isolated: every span is a piece; contiguous: runs of spans of
  the same kind are joined; merged_with_previous: a match joins the span before it;
  merged_with_next: a match joins the span after it.
`invert` swaps match and non-match first.

Regex semantics.  HF runs regexes with Oniguruma; here they run with the `regex` module,
rewritten where the two read the same pattern differently (^ $ \\w \\W \\b \\B), and refused
(ValueError) where no rewrite is exact (X{m,n}+, \\h, nested classes, the m flag): see
bpe_cffi/regex_dialects.py.  Successive matches are found as HF's iterator finds them (an
empty match right after a match is skipped, unlike Python's finditer: see _onig_matches).
The Unicode version of character properties (\\p{L}, \\s, ...) is the `regex` module's, not
Oniguruma's, and the categories used by Punctuation/Digits/Lowercase/NFC are Python's
`unicodedata` and the `regex` module's; characters assigned in recent Unicode versions may be
classified differently.  The tests compare every class with HF's own on real corpora.
"""
import unicodedata

import regex

from .offsets import WHITE_SPACE

__all__ = [
    "UnsupportedComponent",
    # pre-tokenizers
    "Whitespace", "WhitespaceSplit", "Metaspace", "Split", "ByteLevel", "Punctuation",
    "Digits", "PreTokenizerSequence", "TextPieces",
    # normalizers
    "NFC", "NFD", "NFKC", "NFKD", "Lowercase", "Strip", "Replace", "Prepend",
    "NormalizerSequence",
    # decoders
    "ByteLevelDecoder", "MetaspaceDecoder", "BPEDecoder", "WordPieceDecoder", "ByteFallback",
    "Fuse", "StripDecoder", "ReplaceDecoder", "DecoderSequence",
    # dispatch
    "pre_tokenizer_from_json", "normalizer_from_json", "decoder_from_json",
]


class UnsupportedComponent(ValueError):
    """A tokenizer.json component (or an option of one) that this module does not implement."""


# ---- shared helpers -----------------------------------------------------------------------

# Rust's char::is_whitespace: the Unicode White_Space property.
_WHITE_SPACE = "".join(sorted(WHITE_SPACE))
_WS_CLASS = "[" + "".join(f"\\u{ord(c):04x}" for c in _WHITE_SPACE) + "]"

# HF's ByteLevel regex (GPT-2's, as HF writes it).
GPT2_HF_REGEX = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

_BEHAVIORS = {
    "removed": "removed", "isolated": "isolated", "contiguous": "contiguous",
    "merged_with_previous": "merged_with_previous", "merged_with_next": "merged_with_next",
    "Removed": "removed", "Isolated": "isolated", "Contiguous": "contiguous",
    "MergedWithPrevious": "merged_with_previous", "MergedWithNext": "merged_with_next",
}
_BEHAVIOR_JSON = {"removed": "Removed", "isolated": "Isolated", "contiguous": "Contiguous",
                  "merged_with_previous": "MergedWithPrevious",
                  "merged_with_next": "MergedWithNext"}



def _behavior(value) -> str:
    b = _BEHAVIORS.get(value)
    if b is None:
        raise UnsupportedComponent(f"split behavior {value!r} is not one of "
                                   f"{sorted(_BEHAVIOR_JSON)}")
    return b


def compile_onig(pattern: str):
    """An Oniguruma (HF) regex compiled with the `regex` module, rewritten where the two read
    it differently (bpe_cffi.regex_dialects); UnsupportedComponent where no rewrite is
    exact."""
    from .regex_dialects import onig_to_ours
    if not isinstance(pattern, str):
        raise UnsupportedComponent(f"regex must be a string, not {type(pattern).__name__}")
    try:
        ours = onig_to_ours(pattern)
    except ValueError as exc:
        raise UnsupportedComponent(str(exc)) from None
    try:
        return regex.compile(ours)
    except regex.error as exc:
        raise UnsupportedComponent(f"regex {pattern!r} does not compile: {exc}") from None


class _Pattern:
    """A Split/Replace pattern: a literal string or a regex, as in HF's {"String": s} /
    {"Regex": r}."""
    __slots__ = ("kind", "source", "compiled")

    def __init__(self, pattern, is_regex=None):
        if hasattr(pattern, "pattern") and not isinstance(pattern, str):  # a compiled regex
            pattern, is_regex = pattern.pattern, True
        if not isinstance(pattern, str):
            raise TypeError(f"pattern must be a str or a compiled regex, not "
                            f"{type(pattern).__name__}")
        self.kind = "Regex" if is_regex else "String"
        self.source = pattern
        self.compiled = compile_onig(pattern) if is_regex else regex.compile(regex.escape(pattern))

    @classmethod
    def from_json(cls, d, where):
        if not isinstance(d, dict) or len(d) != 1 or next(iter(d)) not in ("String", "Regex"):
            raise UnsupportedComponent(f"{where}: pattern {d!r} is not {{\"String\": ...}} or "
                                       f"{{\"Regex\": ...}}")
        kind, src = next(iter(d.items()))
        if not isinstance(src, str):
            raise UnsupportedComponent(f"{where}: pattern {d!r} is not a string")
        return cls(src, kind == "Regex")

    def to_json(self):
        return {self.kind: self.source}

    def spans(self, text):
        """[(start, end, is_match)] covering text (HF's find_matches); empty spans included."""
        return _spans(self.compiled, text)


def _onig_matches(compiled, text):
    """[(start, end)] of the successive matches, as HF's regex iterators give them: after a
    match ending at e, an empty match at e is skipped; after an empty match the search goes
    on one character later.  (Python's finditer also reports an empty match right after a
    non-empty one, and may find a non-empty match where an empty one was found.)"""
    found = [m.span() for m in compiled.finditer(text)]
    if all(s != e for s, e in found):
        return found
    out = []
    pos = 0
    last_match = None
    n = len(text)
    while pos <= n:
        m = compiled.search(text, pos)
        if m is None:
            break
        s, e = m.span()
        if s == e:
            pos = e + 1
            if e == last_match:
                continue
        else:
            pos = e
        last_match = e
        out.append((s, e))
    return out


def _spans(compiled, text):
    """[(start, end, is_match)] covering text, alternating non-match / match spans (HF's
    Pattern::find_matches); an empty text gives one empty non-match span."""
    if not text:
        return [(0, 0, False)]
    out = []
    prev = 0
    for s, e in _onig_matches(compiled, text):
        if prev != s:
            out.append((prev, s, False))
        out.append((s, e, True))
        prev = e
    if prev != len(text):
        out.append((prev, len(text), False))
    return out


def _check_keys(d, allowed, where):
    extra = set(d) - set(allowed) - {"type"}
    if extra:
        raise UnsupportedComponent(f"{where}: unknown field(s) {sorted(extra)}")


def _get_bool(d, key, default, where):
    v = d.get(key, default)
    if not isinstance(v, bool):
        raise UnsupportedComponent(f"{where}: {key} must be true or false, not {v!r}")
    return v


def _get_str(d, key, default, where):
    v = d.get(key, default)
    if not isinstance(v, str):
        raise UnsupportedComponent(f"{where}: {key} must be a string, not {v!r}")
    return v


# ---- pre-tokenization machinery ---------------------------------------------------------

class _Piece:
    """One piece of pre-tokenized text (see the module comment for the invariants).

    Alignment forms: `align` set: explicit; else the first `pre` characters (added by a
    prepend) stand for [base, base+1) and character k >= pre for [base+k-pre, base+k-pre+1)."""
    __slots__ = ("text", "base", "align", "pre")

    def __init__(self, text, base, align=None, pre=0):
        self.text = text
        self.base = base
        self.align = align
        self.pre = pre

    def with_text(self, text):
        """The same alignment for a 1:1 replacement of the characters."""
        return _Piece(text, self.base, self.align, self.pre)

    def offsets(self):
        if self.align is not None:
            return (self.align[0][0], self.align[-1][1])
        n = len(self.text) - self.pre
        return (self.base, self.base + (n if n > 0 else 1))

    def starts_at(self):
        return self.base if self.align is None else self.align[0][0]

    def slice(self, s, e):
        if self.align is not None:
            return _Piece(self.text[s:e], 0, self.align[s:e])
        pre = self.pre
        if s >= pre:
            return _Piece(self.text[s:e], self.base + s - pre)
        return _Piece(self.text[s:e], self.base, None, min(e, pre) - s)

    def explicit(self):
        if self.align is not None:
            return self.align
        b = self.base
        head = [(b, b + 1)] * self.pre
        return head + [(b + k, b + k + 1) for k in range(len(self.text) - self.pre)]

    def prepend(self, s):
        """HF's NormalizedString::prepend: nothing on an empty piece; the new characters
        stand for the range of the first character."""
        if not self.text or not s:
            return self
        if self.align is None:
            return _Piece(s + self.text, self.base, None, self.pre + len(s))
        al = self.align
        return _Piece(s + self.text, 0, [al[0]] * len(s) + list(al))


def _split_piece(piece, spans, behavior):
    """Cut one piece by spans [(start, end, is_match)] with a behaviour; empty pieces dropped."""
    if behavior == "isolated":
        keep = [(s, e) for s, e, _ in spans]
    elif behavior == "removed":
        keep = [(s, e) for s, e, m in spans if not m]
    elif behavior == "contiguous":
        keep = []
        prev = False
        for s, e, m in spans:
            if keep and m == prev:
                keep[-1] = (keep[-1][0], e)
            else:
                keep.append((s, e))
            prev = m
    elif behavior == "merged_with_previous":
        keep = []
        prev = False
        for s, e, m in spans:
            if m and not prev and keep:
                keep[-1] = (keep[-1][0], e)
            else:
                keep.append((s, e))
            prev = m
    elif behavior == "merged_with_next":
        keep = []
        prev = False
        for s, e, m in reversed(spans):
            if m and not prev and keep:
                keep[-1] = (s, keep[-1][1])
            else:
                keep.append((s, e))
            prev = m
        keep.reverse()
    else:  # pragma: no cover - constructors check the behaviour
        raise ValueError(behavior)
    if len(keep) == 1 and keep[0] == (0, len(piece.text)):
        return [piece] if piece.text else []
    return [piece.slice(s, e) for s, e in keep if e > s]


class _PreTokenizer:
    """Base: subclasses implement `_apply(pieces) -> pieces`.  One whose pieces are exactly
    the matches of one regex, wherever the text starts, names it `_pieces_re`."""
    _pieces_re = None

    def piece_texts(self, text, offset=0):
        """The texts of pre_tokenize_str(text, offset)'s pieces (what an encoder needs): the
        matches of _pieces_re (one C loop), else through the pieces."""
        if self._pieces_re is not None:
            return self._pieces_re.findall(text)
        return [p.text for p in self._apply([_Piece(text, offset)] if text else [])]

    def pre_tokenize_str(self, text, offset=0):
        """[(piece, (start, end))]: HF's pre_tokenize_str.  `offset` (ours; HF's objects do not
        take it) is where `text` starts in a longer input, for a caller that pre-tokenizes
        the segments between special tokens one by one as HF does: offsets are shifted by
        it, and Metaspace(prepend_scheme="first") prepends only when it is 0."""
        if not isinstance(text, str):
            raise TypeError(f"pre_tokenize_str needs a str, not {type(text).__name__}")
        if type(offset) is not int or offset < 0:
            raise ValueError(f"offset must be an int >= 0, not {offset!r}")
        pieces = [_Piece(text, offset)] if text else []
        return [(p.text, p.offsets()) for p in self._apply(pieces)]

    def _split_all(self, pieces, spans_of, behavior):
        out = []
        for p in pieces:
            out.extend(_split_piece(p, spans_of(p.text), behavior))
        return out

    def __repr__(self):
        return f"{type(self).__name__}({self.to_json()!r})"

    def __eq__(self, other):
        return type(self) is type(other) and self.to_json() == other.to_json()

    __hash__ = None


class Whitespace(_PreTokenizer):
    r"""Pieces are the matches of `\w+|[^\w\s]+`; whitespace is dropped."""
    _re = _pieces_re = regex.compile(r"\w+|[^\w\s]+")

    def _apply(self, pieces):
        pat = self._re
        return self._split_all(
            pieces, lambda t: [(s, e, not m) for s, e, m in _spans(pat, t)],
            "removed")

    @classmethod
    def from_json(cls, d):
        _check_keys(d, (), "Whitespace")
        return cls()

    def to_json(self):
        return {"type": "Whitespace"}


class WhitespaceSplit(_PreTokenizer):
    """Split on each whitespace character (Unicode White_Space), which is dropped."""
    _re = regex.compile(_WS_CLASS)
    _pieces_re = regex.compile("[^" + _WS_CLASS[1:] + "+")

    def _apply(self, pieces):
        pat = self._re
        return self._split_all(pieces, lambda t: _spans(pat, t), "removed")

    @classmethod
    def from_json(cls, d):
        _check_keys(d, (), "WhitespaceSplit")
        return cls()

    def to_json(self):
        return {"type": "WhitespaceSplit"}


class Punctuation(_PreTokenizer):
    """Split on each punctuation character (ASCII punctuation or Unicode category P*)."""
    _re = regex.compile(r"[!-/:-@\[-`{-~\p{P}]")

    def __init__(self, behavior="isolated"):
        self.behavior = _behavior(behavior)

    def _apply(self, pieces):
        pat = self._re
        return self._split_all(pieces, lambda t: _spans(pat, t), self.behavior)

    @classmethod
    def from_json(cls, d):
        _check_keys(d, ("behavior",), "Punctuation")
        return cls(d.get("behavior", "Isolated"))

    def to_json(self):
        return {"type": "Punctuation", "behavior": _BEHAVIOR_JSON[self.behavior]}


class Digits(_PreTokenizer):
    """Split out numeric characters (categories Nd, Nl, No): runs of them, or each one."""
    _re = regex.compile(r"[\p{Nd}\p{Nl}\p{No}]")

    def __init__(self, individual_digits=False):
        self.individual_digits = bool(individual_digits)

    def _apply(self, pieces):
        pat = self._re
        return self._split_all(pieces, lambda t: _spans(pat, t),
                               "isolated" if self.individual_digits else "contiguous")

    @classmethod
    def from_json(cls, d):
        _check_keys(d, ("individual_digits",), "Digits")
        return cls(_get_bool(d, "individual_digits", False, "Digits"))

    def to_json(self):
        return {"type": "Digits", "individual_digits": self.individual_digits}


class Split(_PreTokenizer):
    """Split by a literal string or a regex, with a behaviour (see the module comment)."""

    def __init__(self, pattern, behavior, invert=False, *, is_regex=None):
        if isinstance(pattern, _Pattern):
            self.pattern = pattern
        else:
            self.pattern = _Pattern(pattern, is_regex)
        self.behavior = _behavior(behavior)
        self.invert = bool(invert)

    def _apply(self, pieces):
        pat = self.pattern
        if self.invert:
            def spans_of(t):
                return [(s, e, not m) for s, e, m in pat.spans(t)]
        else:
            spans_of = pat.spans
        return self._split_all(pieces, spans_of, self.behavior)

    @classmethod
    def from_json(cls, d):
        _check_keys(d, ("pattern", "behavior", "invert"), "Split")
        if "pattern" not in d or "behavior" not in d:
            raise UnsupportedComponent("Split: needs pattern and behavior")
        return cls(_Pattern.from_json(d["pattern"], "Split"), d["behavior"],
                   _get_bool(d, "invert", False, "Split"))

    def to_json(self):
        return {"type": "Split", "pattern": self.pattern.to_json(),
                "behavior": _BEHAVIOR_JSON[self.behavior], "invert": self.invert}


class Metaspace(_PreTokenizer):
    """Spaces become `replacement`; a replacement is prepended (prepend_scheme "always":
    to every piece not starting with one; "first": only to a piece starting at offset 0;
    "never"); with split, pieces are cut before each replacement (merged_with_next)."""

    def __init__(self, replacement="\u2581", prepend_scheme="always", split=True):
        if not isinstance(replacement, str) or len(replacement) != 1:
            raise UnsupportedComponent(f"Metaspace: replacement must be one character, not "
                                       f"{replacement!r}")
        if prepend_scheme not in ("always", "first", "never"):
            raise UnsupportedComponent(f"Metaspace: prepend_scheme {prepend_scheme!r} is not "
                                       f"always, first or never")
        self.replacement = replacement
        self.prepend_scheme = prepend_scheme
        self.split = bool(split)
        self._re = regex.compile(regex.escape(replacement))
        # merged_with_next pieces: a replacement with what follows it up to the next one,
        # or a run before the first
        r = regex.escape(replacement)
        self._split_re = regex.compile(f"{r}[^{r}]*|[^{r}]+")

    def piece_texts(self, text, offset=0):
        """The pieces' texts alone (what encoding needs), found in one C loop after the
        replacement and the prepend (which depends on the offset)."""
        if not text:
            return []
        rep = self.replacement
        text = text.replace(" ", rep)
        if not text.startswith(rep) and (
                self.prepend_scheme == "always"
                or (self.prepend_scheme == "first" and offset == 0)):
            text = rep + text
        return self._split_re.findall(text) if self.split else [text]

    def _apply(self, pieces):
        rep = self.replacement
        out = []
        for p in pieces:
            p = p.with_text(p.text.replace(" ", rep))   # 1:1, alignment kept
            if not p.text.startswith(rep) and (
                    self.prepend_scheme == "always"
                    or (self.prepend_scheme == "first" and p.starts_at() == 0)):
                p = p.prepend(rep)
            if self.split:
                out.extend(_split_piece(p, _spans(self._re, p.text),
                                        "merged_with_next"))
            elif p.text:
                out.append(p)
        return out

    @classmethod
    def from_json(cls, d):
        _check_keys(d, ("replacement", "prepend_scheme", "split", "add_prefix_space",
                        "str_rep"), "Metaspace")
        return cls(**_metaspace_args(d, "Metaspace"))

    def to_json(self):
        return {"type": "Metaspace", "replacement": self.replacement,
                "prepend_scheme": self.prepend_scheme, "split": self.split}


def _metaspace_args(d, where):
    rep = _get_str(d, "replacement", "\u2581", where)
    if "prepend_scheme" in d:
        scheme = d["prepend_scheme"]
        if isinstance(scheme, str):
            scheme = scheme.lower()
    else:   # files from before prepend_scheme: add_prefix_space (default true)
        scheme = "always" if _get_bool(d, "add_prefix_space", True, where) else "never"
    return {"replacement": rep, "prepend_scheme": scheme,
            "split": _get_bool(d, "split", True, where)}


_BYTE_CHARS = None
_LATIN1_TABLE = None


def _latin1_to_alphabet():
    """str.translate table: code point b (< 256) -> the alphabet character of byte b."""
    global _LATIN1_TABLE
    if _LATIN1_TABLE is None:
        _LATIN1_TABLE = {b: c for b, c in enumerate(_byte_chars())}
    return _LATIN1_TABLE


def _byte_chars():
    global _BYTE_CHARS
    if _BYTE_CHARS is None:
        from .formats import byte_to_unicode
        _BYTE_CHARS = byte_to_unicode()
    return _BYTE_CHARS


class ByteLevel(_PreTokenizer):
    """HF's ByteLevel pre-tokenizer: an optional space prefix (when the piece does not start
    with a space), the GPT-2 regex split (use_regex), then every piece's UTF-8 bytes are
    written in GPT-2's byte-to-unicode alphabet (each mapped character stands for the input
    character whose byte it is).  trim_offsets is kept for the JSON form only (it concerns
    HF's post-processor).

    `text_pieces(text)` gives the same split without the byte mapping: the raw text of each
    piece, which is what a byte-level Tokenizer expects from its pre-tokenizer."""

    def __init__(self, add_prefix_space=True, use_regex=True, trim_offsets=True):
        self.add_prefix_space = bool(add_prefix_space)
        self.use_regex = bool(use_regex)
        self.trim_offsets = bool(trim_offsets)

    _re = regex.compile(GPT2_HF_REGEX)

    def _split_only(self, pieces):
        out = []
        for p in pieces:
            if self.add_prefix_space and not p.text.startswith(" "):
                p = p.prepend(" ")
            if self.use_regex:
                out.extend(_split_piece(p, _spans(self._re, p.text), "isolated"))
            elif p.text:
                out.append(p)
        return out

    def _apply(self, pieces):
        table = _latin1_to_alphabet()
        out = []
        for p in self._split_only(pieces):
            text = p.text
            if text.isascii():                      # one byte a character: alignment kept
                out.append(p.with_text(text.translate(table)))
                continue
            data = text.encode("utf-8", "surrogatepass")
            al = p.explicit()
            new_al = []
            for c, a in zip(text, al):
                o = ord(c)
                new_al.extend([a] * (1 if o < 0x80 else 2 if o < 0x800 else 3 if o < 0x10000
                                     else 4))
            out.append(_Piece(data.decode("latin-1").translate(table), 0, new_al))
        return out

    @classmethod
    def from_json(cls, d):
        _check_keys(d, ("add_prefix_space", "use_regex", "trim_offsets"), "ByteLevel")
        return cls(_get_bool(d, "add_prefix_space", True, "ByteLevel"),
                   _get_bool(d, "use_regex", True, "ByteLevel"),
                   _get_bool(d, "trim_offsets", True, "ByteLevel"))

    def to_json(self):
        return {"type": "ByteLevel", "add_prefix_space": self.add_prefix_space,
                "trim_offsets": self.trim_offsets, "use_regex": self.use_regex}


class CharDelimiterSplit(_PreTokenizer):
    """Split on one character, which is dropped."""

    def __init__(self, delimiter):
        if not isinstance(delimiter, str) or len(delimiter) != 1:
            raise UnsupportedComponent(f"CharDelimiterSplit: delimiter must be one character, "
                                       f"not {delimiter!r}")
        self.delimiter = delimiter
        self._re = regex.compile(regex.escape(delimiter))
        self._pieces_re = regex.compile(f"[^{regex.escape(delimiter)}]+")

    def _apply(self, pieces):
        pat = self._re
        return self._split_all(pieces, lambda t: _spans(pat, t), "removed")

    @classmethod
    def from_json(cls, d):
        _check_keys(d, ("delimiter",), "CharDelimiterSplit")
        return cls(_get_str(d, "delimiter", None, "CharDelimiterSplit"))

    def to_json(self):
        return {"type": "CharDelimiterSplit", "delimiter": self.delimiter}


class BertPreTokenizer(_PreTokenizer):
    """BERT's split (HF's CharBPETokenizer uses it too): on whitespace (dropped), then on
    each punctuation character (kept alone): WhitespaceSplit, then Punctuation."""
    _steps = (WhitespaceSplit(), Punctuation("isolated"))
    # a punctuation character alone, or a run of characters neither whitespace nor punctuation
    _pieces_re = regex.compile(Punctuation._re.pattern + "|[^" + _WS_CLASS[1:-1]
                               + Punctuation._re.pattern[1:-1] + "]+")

    def _apply(self, pieces):
        for step in self._steps:
            pieces = step._apply(pieces)
        return pieces

    @classmethod
    def from_json(cls, d):
        _check_keys(d, (), "BertPreTokenizer")
        return cls()

    def to_json(self):
        return {"type": "BertPreTokenizer"}


class PreTokenizerSequence(_PreTokenizer):
    """The pre-tokenizers applied in turn, each to the pieces of the one before."""

    def __init__(self, pretokenizers):
        self.pretokenizers = list(pretokenizers)

    def _apply(self, pieces):
        for p in self.pretokenizers:
            pieces = p._apply(pieces)
        return pieces

    @classmethod
    def from_json(cls, d):
        return cls(_sequence_items(d, "pretokenizers", "pre_tokenizer", pre_tokenizer_from_json))

    def to_json(self):
        return {"type": "Sequence", "pretokenizers": [p.to_json() for p in self.pretokenizers]}


class TextPieces(_PreTokenizer):
    """A pre-tokenizer without its byte-level mapping: every ByteLevel inside `inner` only
    splits (prefix space and regex), so the pieces are raw text.  This is what a byte-level
    Tokenizer takes as `pre_tokenizer` (it maps the bytes itself).  to_json gives the inner
    pre-tokenizer's JSON."""

    def __init__(self, inner):
        self.inner = inner

    def _apply(self, pieces):
        return _apply_text_only(self.inner, pieces)

    def to_json(self):
        return self.inner.to_json()


def _apply_text_only(pre, pieces):
    if isinstance(pre, ByteLevel):
        return pre._split_only(pieces)
    if isinstance(pre, PreTokenizerSequence):
        for p in pre.pretokenizers:
            pieces = _apply_text_only(p, pieces)
        return pieces
    return pre._apply(pieces)


_PRE_TOKENIZERS = {
    "Whitespace": Whitespace, "WhitespaceSplit": WhitespaceSplit, "Metaspace": Metaspace,
    "Split": Split, "ByteLevel": ByteLevel, "Punctuation": Punctuation, "Digits": Digits,
    "BertPreTokenizer": BertPreTokenizer, "CharDelimiterSplit": CharDelimiterSplit,
    "Sequence": PreTokenizerSequence,
}


def pre_tokenizer_from_json(d):
    """A pre-tokenizer from its tokenizer.json form; UnsupportedComponent names an unknown
    type ("pre_tokenizer BertPreTokenizer") or option."""
    return _dispatch(d, _PRE_TOKENIZERS, "pre_tokenizer")


def _sequence_items(d, key, what, item_from_json):
    """The components listed under `key` in a Sequence's tokenizer.json form, each read by
    item_from_json; UnsupportedComponent if they are not a list."""
    _check_keys(d, (key,), "Sequence")
    items = d.get(key)
    if not isinstance(items, list):
        raise UnsupportedComponent(f"{what} Sequence: {key} must be a list")
    return [item_from_json(x) for x in items]


def _dispatch(d, table, what):
    if not isinstance(d, dict) or not isinstance(d.get("type"), str):
        raise UnsupportedComponent(f"{what} {d!r} has no \"type\"")
    cls = table.get(d["type"])
    if cls is None:
        raise UnsupportedComponent(f"{what} {d['type']} is not supported (supported: "
                                   f"{', '.join(sorted(table))})")
    try:
        return cls.from_json(d)
    except UnsupportedComponent as exc:
        msg = str(exc)
        if not msg.startswith(what):
            msg = f"{what} {msg}"
        raise UnsupportedComponent(msg) from None


# ---- normalizers ---------------------------------------------------------------------------

class _Normalizer:
    def normalize_str(self, text):
        if not isinstance(text, str):
            raise TypeError(f"normalize_str needs a str, not {type(text).__name__}")
        return self._normalize(text)

    def __repr__(self):
        return f"{type(self).__name__}({self.to_json()!r})"

    def __eq__(self, other):
        return type(self) is type(other) and self.to_json() == other.to_json()

    __hash__ = None


def _unicode_form(form):
    class _Form(_Normalizer):
        __doc__ = f"Unicode normalization form {form} (Python's unicodedata tables)."

        def _normalize(self, text):
            return unicodedata.normalize(form, text)

        @classmethod
        def from_json(cls, d):
            _check_keys(d, (), form)
            return cls()

        def to_json(self):
            return {"type": form}
    _Form.__name__ = _Form.__qualname__ = form
    return _Form


NFC = _unicode_form("NFC")
NFD = _unicode_form("NFD")
NFKC = _unicode_form("NFKC")
NFKD = _unicode_form("NFKD")


class Lowercase(_Normalizer):
    """Each character lowercased on its own (Rust's char::to_lowercase: no final-sigma rule)."""

    def _normalize(self, text):
        low = text.lower()
        if "\u03a3" not in text:    # only the final-sigma rule makes str.lower context-aware
            return low
        return "".join(c.lower() for c in text)

    @classmethod
    def from_json(cls, d):
        _check_keys(d, (), "Lowercase")
        return cls()

    def to_json(self):
        return {"type": "Lowercase"}


class Strip(_Normalizer):
    """Remove leading and/or trailing whitespace (Unicode White_Space)."""

    def __init__(self, left=True, right=True):
        self.left = bool(left)
        self.right = bool(right)

    def _normalize(self, text):
        if self.left:
            text = text.lstrip(_WHITE_SPACE)
        if self.right:
            text = text.rstrip(_WHITE_SPACE)
        return text

    @classmethod
    def from_json(cls, d):
        _check_keys(d, ("strip_left", "strip_right"), "Strip")
        return cls(_get_bool(d, "strip_left", True, "Strip"),
                   _get_bool(d, "strip_right", True, "Strip"))

    def to_json(self):
        return {"type": "Strip", "strip_left": self.left, "strip_right": self.right}


class Replace(_Normalizer):
    """Replace every match of a literal string or regex by `content` (no group references:
    the content is literal, as in HF)."""

    def __init__(self, pattern, content, *, is_regex=None):
        self.pattern = pattern if isinstance(pattern, _Pattern) else _Pattern(pattern, is_regex)
        if not isinstance(content, str):
            raise UnsupportedComponent(f"Replace: content must be a string, not {content!r}")
        self.content = content

    def _normalize(self, text):
        if not text:
            return text
        content = self.content
        return "".join(content if m else text[s:e] for s, e, m in self.pattern.spans(text))

    @classmethod
    def from_json(cls, d):
        _check_keys(d, ("pattern", "content"), "Replace")
        return cls(_Pattern.from_json(d.get("pattern"), "Replace"),
                   _get_str(d, "content", None, "Replace"))

    def to_json(self):
        return {"type": "Replace", "pattern": self.pattern.to_json(), "content": self.content}


class Prepend(_Normalizer):
    """Prepend a string to a non-empty text."""

    def __init__(self, prepend):
        if not isinstance(prepend, str):
            raise UnsupportedComponent(f"Prepend: prepend must be a string, not {prepend!r}")
        self.prepend = prepend

    def _normalize(self, text):
        return self.prepend + text if text else text

    @classmethod
    def from_json(cls, d):
        _check_keys(d, ("prepend",), "Prepend")
        return cls(_get_str(d, "prepend", None, "Prepend"))

    def to_json(self):
        return {"type": "Prepend", "prepend": self.prepend}


# BERT's character classes, as HF's normalizer applies them (checked against it for every
# code point; categories from the `regex` module's tables, newer than HF's, so a character
# given a category in recent Unicode versions may differ): whitespace is \t \n \r or
# White_Space; a control character is one of categories Cc Cf Co but \t \n \r (not Cn);
# the CJK ideograph blocks get spaces around them.
_BERT_CONTROL = regex.compile(r"[\x00\ufffd\p{Cc}\p{Cf}\p{Co}--[\t\n\r]]", flags=regex.V1)
_BERT_SPACE = regex.compile("[" + "".join(f"\\u{ord(c):04x}" for c in _WHITE_SPACE if c != " ")
                            + "]")     # (not " " itself: replacing every space took 3x longer)
_BERT_CJK = regex.compile("([\u4e00-\u9fff\u3400-\u4dbf\U00020000-\U0002a6df"
                          "\U0002a700-\U0002b73f\U0002b740-\U0002b81f\U0002b920-\U0002ceaf"
                          "\uf900-\ufaff\U0002f800-\U0002fa1f])")
_NONSPACING_MARK = regex.compile(r"\p{Mn}")
_MARK = regex.compile(r"\p{M}")


# HF's Nmt normalizer, as probed code point by code point: these characters are dropped, and
# these become a space.
_NMT_TABLE = dict.fromkeys([*range(0x01, 0x09), 0x0B, *range(0x0E, 0x20), 0x7F, 0x8F, 0x9F])
_NMT_TABLE.update(dict.fromkeys([0x09, 0x0A, 0x0C, 0x0D, 0x1680, *range(0x200B, 0x2010), 0x2028,
                                 0x2029, 0x2581, 0xFEFF, 0xFFFD], " "))


class Nmt(_Normalizer):
    """SentencePiece's NMT rule: some control characters dropped, some space-like ones (and
    U+2581, U+FFFD) made a space."""

    def _normalize(self, text):
        return text.translate(_NMT_TABLE)

    @classmethod
    def from_json(cls, d):
        _check_keys(d, (), "Nmt")
        return cls()

    def to_json(self):
        return {"type": "Nmt"}


class StripAccents(_Normalizer):
    """Remove every mark (categories Mn, Mc, Me: HF's StripAccents, unlike BertNormalizer's
    strip_accents, which keeps Mc and Me); with NFD before it, the accents of letters."""

    def _normalize(self, text):
        return _MARK.sub("", text)

    @classmethod
    def from_json(cls, d):
        _check_keys(d, (), "StripAccents")
        return cls()

    def to_json(self):
        return {"type": "StripAccents"}


class BertNormalizer(_Normalizer):
    """BERT's normalizer, in HF's order: clean_text drops NUL, U+FFFD and control characters
    and makes every whitespace character a space; handle_chinese_chars puts a space on each
    side of a CJK ideograph; strip_accents (None: as lowercase) is NFD and then no
    nonspacing marks; lowercase as Lowercase."""

    def __init__(self, clean_text=True, handle_chinese_chars=True, strip_accents=None,
                 lowercase=True):
        self.clean_text = bool(clean_text)
        self.handle_chinese_chars = bool(handle_chinese_chars)
        self.strip_accents = None if strip_accents is None else bool(strip_accents)
        self.lowercase = bool(lowercase)

    def _normalize(self, text):
        if self.clean_text:
            text = _BERT_SPACE.sub(" ", _BERT_CONTROL.sub("", text))
        if self.handle_chinese_chars:
            text = _BERT_CJK.sub(r" \1 ", text)
        strip = self.lowercase if self.strip_accents is None else self.strip_accents
        if strip:
            text = _NONSPACING_MARK.sub("", unicodedata.normalize("NFD", text))
        if self.lowercase:
            text = Lowercase()._normalize(text)
        return text

    @classmethod
    def from_json(cls, d):
        where = "BertNormalizer"
        _check_keys(d, ("clean_text", "handle_chinese_chars", "strip_accents", "lowercase"),
                    where)
        accents = d.get("strip_accents")
        if accents is not None and not isinstance(accents, bool):
            raise UnsupportedComponent(f"{where}: strip_accents must be true, false or null, "
                                       f"not {accents!r}")
        return cls(_get_bool(d, "clean_text", True, where),
                   _get_bool(d, "handle_chinese_chars", True, where), accents,
                   _get_bool(d, "lowercase", True, where))

    def to_json(self):
        return {"type": "BertNormalizer", "clean_text": self.clean_text,
                "handle_chinese_chars": self.handle_chinese_chars,
                "strip_accents": self.strip_accents, "lowercase": self.lowercase}


class NormalizerSequence(_Normalizer):
    """The normalizers applied in turn."""

    def __init__(self, normalizers):
        self.normalizers = list(normalizers)

    def _normalize(self, text):
        for n in self.normalizers:
            text = n._normalize(text)
        return text

    @classmethod
    def from_json(cls, d):
        return cls(_sequence_items(d, "normalizers", "normalizer", normalizer_from_json))

    def to_json(self):
        return {"type": "Sequence", "normalizers": [n.to_json() for n in self.normalizers]}


_NORMALIZERS = {
    "NFC": NFC, "NFD": NFD, "NFKC": NFKC, "NFKD": NFKD, "Lowercase": Lowercase, "Strip": Strip,
    "Replace": Replace, "Prepend": Prepend, "StripAccents": StripAccents,
    "BertNormalizer": BertNormalizer, "Nmt": Nmt, "Sequence": NormalizerSequence,
}


def normalizer_from_json(d):
    """A normalizer from its tokenizer.json form; UnsupportedComponent names an unknown type
    ("normalizer BertNormalizer") or option."""
    return _dispatch(d, _NORMALIZERS, "normalizer")


# ---- decoders ----------------------------------------------------------------------------

class _Decoder:
    def decode(self, tokens):
        return "".join(self.decode_chain(_check_tokens(tokens)))

    def decode_chain(self, tokens):
        return self._chain(list(_check_tokens(tokens)))

    def __repr__(self):
        return f"{type(self).__name__}({self.to_json()!r})"

    def __eq__(self, other):
        return type(self) is type(other) and self.to_json() == other.to_json()

    __hash__ = None


def _check_tokens(tokens):
    tokens = list(tokens)
    for t in tokens:
        if not isinstance(t, str):
            raise TypeError(f"decoder tokens must be str, not {type(t).__name__}")
    return tokens


class ByteLevelDecoder(_Decoder):
    """Each token read back as the bytes its characters stand for in GPT-2's alphabet (a
    token with a character outside the alphabet: its own UTF-8), all tokens' bytes joined
    and decoded as UTF-8 with U+FFFD for invalid sequences."""

    def __init__(self, add_prefix_space=True, trim_offsets=True, use_regex=True):
        self.add_prefix_space = bool(add_prefix_space)
        self.trim_offsets = bool(trim_offsets)
        self.use_regex = bool(use_regex)

    def _chain(self, tokens):
        from .formats import _decode_table
        table = _decode_table()
        parts = []
        for t in tokens:
            try:
                parts.append(t.translate(table).encode("latin-1"))
            except UnicodeEncodeError:
                parts.append(t.encode("utf-8", "surrogatepass"))
        return [b"".join(parts).decode("utf-8", "replace")]

    from_json = classmethod(lambda cls, d: cls(**_bytelevel_args(d)))

    def to_json(self):
        return {"type": "ByteLevel", "add_prefix_space": self.add_prefix_space,
                "trim_offsets": self.trim_offsets, "use_regex": self.use_regex}


def _bytelevel_args(d):
    _check_keys(d, ("add_prefix_space", "use_regex", "trim_offsets"), "ByteLevel")
    return {k: _get_bool(d, k, True, "ByteLevel")
            for k in ("add_prefix_space", "trim_offsets", "use_regex")}


class MetaspaceDecoder(_Decoder):
    """Replacement characters become spaces; in the first token they are dropped (unless
    prepend_scheme is "never")."""

    def __init__(self, replacement="\u2581", prepend_scheme="always", split=True):
        Metaspace(replacement, prepend_scheme, split)      # validates
        self.replacement = replacement
        self.prepend_scheme = prepend_scheme
        self.split = bool(split)

    def _chain(self, tokens):
        rep = self.replacement
        out = []
        for i, t in enumerate(tokens):
            if i == 0 and self.prepend_scheme != "never":
                out.append(t.replace(rep, ""))
            else:
                out.append(t.replace(rep, " "))
        return out

    @classmethod
    def from_json(cls, d):
        _check_keys(d, ("replacement", "prepend_scheme", "split", "add_prefix_space",
                        "str_rep"), "Metaspace")
        return cls(**_metaspace_args(d, "Metaspace"))

    def to_json(self):
        return {"type": "Metaspace", "replacement": self.replacement,
                "prepend_scheme": self.prepend_scheme, "split": self.split}


class BPEDecoder(_Decoder):
    """The end-of-word suffix becomes a space (removed from the last token)."""

    def __init__(self, suffix="</w>"):
        if not isinstance(suffix, str):
            raise UnsupportedComponent(f"BPEDecoder: suffix must be a string, not {suffix!r}")
        self.suffix = suffix

    def _chain(self, tokens):
        if not self.suffix:
            return tokens
        n = len(tokens)
        return [t.replace(self.suffix, "" if i == n - 1 else " ") for i, t in enumerate(tokens)]

    @classmethod
    def from_json(cls, d):
        _check_keys(d, ("suffix",), "BPEDecoder")
        return cls(_get_str(d, "suffix", "</w>", "BPEDecoder"))

    def to_json(self):
        return {"type": "BPEDecoder", "suffix": self.suffix}


def _wordpiece_cleanup(s):
    for a, b in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"),
                 (" n't", "n't"), (" 'm", "'m"), (" do not", " don't"), (" 's", "'s"),
                 (" 've", "'ve"), (" 're", "'re")):
        s = s.replace(a, b)
    return s


class WordPieceDecoder(_Decoder):
    """Tokens after the first lose a leading `prefix` or else gain a space; `cleanup` joins
    some punctuation and contractions to the word before."""

    def __init__(self, prefix="##", cleanup=True):
        if not isinstance(prefix, str):
            raise UnsupportedComponent(f"WordPiece: prefix must be a string, not {prefix!r}")
        self.prefix = prefix
        self.cleanup = bool(cleanup)

    def _chain(self, tokens):
        out = []
        for i, t in enumerate(tokens):
            if i:
                t = t.replace(self.prefix, "", 1) if t.startswith(self.prefix) else " " + t
            out.append(_wordpiece_cleanup(t) if self.cleanup else t)
        return out

    @classmethod
    def from_json(cls, d):
        _check_keys(d, ("prefix", "cleanup"), "WordPiece")
        return cls(_get_str(d, "prefix", "##", "WordPiece"),
                   _get_bool(d, "cleanup", True, "WordPiece"))

    def to_json(self):
        return {"type": "WordPiece", "prefix": self.prefix, "cleanup": self.cleanup}


_HEX = frozenset("0123456789abcdefABCDEF")


def _fallback_byte(t):
    """The byte of a `<0xXX>` token (as Rust's u8::from_str_radix(.., 16) reads XX), or
    None."""
    if len(t) == 6 and t.startswith("<0x") and t.endswith(">"):
        a, b = t[3], t[4]
        if b in _HEX and (a in _HEX or a == "+"):
            return int(b, 16) if a == "+" else int(a + b, 16)
    return None


class ByteFallback(_Decoder):
    """Runs of `<0xXX>` tokens become the text of their bytes if valid UTF-8, else one U+FFFD
    per byte."""

    def _chain(self, tokens):
        out = []
        run = bytearray()

        def flush():
            if run:
                try:
                    out.append(bytes(run).decode("utf-8"))
                except UnicodeDecodeError:
                    out.extend(["\ufffd"] * len(run))
                run.clear()
        for t in tokens:
            b = _fallback_byte(t)
            if b is None:
                flush()
                out.append(t)
            else:
                run.append(b)
        flush()
        return out

    @classmethod
    def from_json(cls, d):
        _check_keys(d, (), "ByteFallback")
        return cls()

    def to_json(self):
        return {"type": "ByteFallback"}


class Fuse(_Decoder):
    """All tokens joined into one."""

    def _chain(self, tokens):
        return ["".join(tokens)]

    @classmethod
    def from_json(cls, d):
        _check_keys(d, (), "Fuse")
        return cls()

    def to_json(self):
        return {"type": "Fuse"}


class StripDecoder(_Decoder):
    """From every token, up to `start` leading and `stop` trailing `content` characters are
    removed."""

    def __init__(self, content=" ", start=0, stop=0):
        if not isinstance(content, str) or len(content) != 1:
            raise UnsupportedComponent(f"Strip: content must be one character, not "
                                       f"{content!r}")
        for name, v in (("start", start), ("stop", stop)):
            if type(v) is not int or v < 0:
                raise UnsupportedComponent(f"Strip: {name} must be an integer >= 0, not {v!r}")
        self.content, self.start, self.stop = content, start, stop

    def _chain(self, tokens):
        c = self.content
        out = []
        for t in tokens:
            n = len(t)
            a = 0
            while a < self.start and a < n and t[a] == c:
                a += 1
            z = n
            while n - z < self.stop and z > a and t[z - 1] == c:
                z -= 1
            out.append(t[a:z])
        return out

    @classmethod
    def from_json(cls, d):
        _check_keys(d, ("content", "start", "stop"), "Strip")
        return cls(_get_str(d, "content", None, "Strip"), d.get("start", 0), d.get("stop", 0))

    def to_json(self):
        return {"type": "Strip", "content": self.content, "start": self.start,
                "stop": self.stop}


class ReplaceDecoder(_Decoder):
    """Replace (as the normalizer) applied to each token."""

    def __init__(self, pattern, content, *, is_regex=None):
        self._rep = Replace(pattern, content, is_regex=is_regex)

    def _chain(self, tokens):
        norm = self._rep._normalize
        return [norm(t) for t in tokens]

    @classmethod
    def from_json(cls, d):
        r = Replace.from_json(d)
        return cls(r.pattern, r.content)

    def to_json(self):
        return self._rep.to_json()


class SpaceJoin(_Decoder):
    """What HF does when a tokenizer.json has no decoder: the token strings joined by single
    spaces.  to_json() is None, so a tokenizer saved with it has no "decoder" again."""

    def decode(self, tokens):
        return " ".join(_check_tokens(tokens))

    def _chain(self, tokens):
        return [" ".join(tokens)]

    def to_json(self):
        return None


class DecoderSequence(_Decoder):
    """The decoders' decode_chain applied in turn."""

    def __init__(self, decoders):
        self.decoders = list(decoders)

    def _chain(self, tokens):
        for d in self.decoders:
            tokens = d._chain(tokens)
        return tokens

    @classmethod
    def from_json(cls, d):
        return cls(_sequence_items(d, "decoders", "decoder", decoder_from_json))

    def to_json(self):
        return {"type": "Sequence", "decoders": [d.to_json() for d in self.decoders]}


_DECODERS = {
    "ByteLevel": ByteLevelDecoder, "Metaspace": MetaspaceDecoder, "BPEDecoder": BPEDecoder,
    "WordPiece": WordPieceDecoder, "ByteFallback": ByteFallback, "Fuse": Fuse,
    "Strip": StripDecoder, "Replace": ReplaceDecoder, "Sequence": DecoderSequence,
}


def decoder_from_json(d):
    """A decoder from its tokenizer.json form; UnsupportedComponent names an unknown type
    ("decoder CTC") or option."""
    return _dispatch(d, _DECODERS, "decoder")
