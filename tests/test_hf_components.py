"""bpe_cffi.hf_components against HF's own objects (tokenizers.pre_tokenizers / normalizers /
decoders): identical pieces and offsets, identical normalized text, identical decoded text,
on every corpus plus adversarial strings; and the JSON forms against HF's serialization."""
import json
import random

import pytest

from conftest import CORPORA, LONG, read_corpus

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import Regex  # noqa: E402
from tokenizers import decoders as D  # noqa: E402
from tokenizers import normalizers as N  # noqa: E402
from tokenizers import pre_tokenizers as P  # noqa: E402

from bpe_cffi import hf_components as C  # noqa: E402

MAIN_BYTES = 2_000_000 if LONG else 100_000      # per corpus, main components
MATRIX_BYTES = 500_000 if LONG else 25_000       # per corpus, the Split behaviour matrix

ADVERSARIAL = [
    "", " ", "   ", "\t", "\n\n", "\r\n", "a\r\nb\r\n\r\nc", " \u00a0 \u3000 ", "a",
    "Hello  world", " leading space", "trailing  ", "  both  ", "e\u0301 cafe\u0301 \u0301x",
    "\U0001F44D\U0001F3FD emoji \U0001F468\u200d\U0001F469\u200d\U0001F467 \U0001F1EB\U0001F1F7",
    "123 4567 89012 \u0661\u0662\u0663 \u00bd \u216b \u2460", "!!!...,,;;--", "a!b?c.d",
    "don't I'm we'll they've 'S 'LL", "\u2581already\u2581 x\u2581", "x\u00a0y\u3000z\u200bw",
    "\u03a3\u0391\u03a3 \u1f48\u0394\u03a5\u03a3\u03a3\u0395\u038e\u03a3 \u0130stanbul",
    "\u01c5 \u00df \ufb01 \u212b", "<0x41> <s> </s>", "a  \n  b\t\tc", "'s 's' ''",
    "\x1c\x1d\x1e\x1f\x85\x0b\x0c", "\u0915\u094d\u0937 \u0e01\u0e34 \u4e2d\u6587\u5b57",
    "tab\there", "x" * 300, " " * 50 + "y",
    "\x00a\ufffdb\ue000c\u200bd\x7fe\u00adf \u2028g\x85h",        # controls, private use
    "\u4e00x\u3400y\U00020000z\uf900\U0002f800 \u3042\uac00 CJK",     # ideograph blocks
    "Caf\u00e9 NA\u00cfVE \u1e9e \u0915\u093f \u20dd\u0301",         # accents and marks
]


@pytest.fixture(scope="module")
def main_texts():
    return ADVERSARIAL + [read_corpus(c, MAIN_BYTES) for c in CORPORA]


@pytest.fixture(scope="module")
def matrix_texts():
    return ADVERSARIAL + [read_corpus(c, MATRIX_BYTES, offset=MAIN_BYTES) for c in CORPORA]


def first_diff(a, b):
    """A short description of where two sequences first differ."""
    for k, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"at {k}: ours {x!r} HF {y!r}"
    return f"lengths {len(a)} vs {len(b)}"


def hf_json(obj):
    return json.loads(obj.__getstate__())


# ---- pre-tokenizers ---------------------------------------------------------------------

PRE = {
    "Whitespace": (C.Whitespace, P.Whitespace),
    "WhitespaceSplit": (C.WhitespaceSplit, P.WhitespaceSplit),
    "Metaspace": (C.Metaspace, P.Metaspace),
    "Metaspace-first": (lambda: C.Metaspace(prepend_scheme="first"),
                        lambda: P.Metaspace(prepend_scheme="first")),
    "Metaspace-never-nosplit": (lambda: C.Metaspace(prepend_scheme="never", split=False),
                                lambda: P.Metaspace(prepend_scheme="never", split=False)),
    "Metaspace-underscore": (lambda: C.Metaspace("_", "always", False),
                             lambda: P.Metaspace("_", "always", False)),
    "Punctuation": (C.Punctuation, P.Punctuation),
    "Punctuation-removed": (lambda: C.Punctuation("removed"), lambda: P.Punctuation("removed")),
    "Digits": (C.Digits, P.Digits),
    "Digits-individual": (lambda: C.Digits(True), lambda: P.Digits(True)),
    "ByteLevel": (C.ByteLevel, P.ByteLevel),
    "ByteLevel-noprefix": (lambda: C.ByteLevel(False), lambda: P.ByteLevel(False)),
    "ByteLevel-noregex": (lambda: C.ByteLevel(True, False),
                          lambda: P.ByteLevel(True, use_regex=False)),
    "Split-cl100k-ByteLevel": (
        lambda: C.PreTokenizerSequence([
            C.Split(r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?"""
                    r"""[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""", "isolated",
                    is_regex=True),
            C.ByteLevel(False, False)]),
        lambda: P.Sequence([
            P.Split(Regex(r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?"""
                          r"""[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""), "isolated"),
            P.ByteLevel(False, use_regex=False)])),
    "Sequence-digits-metaspace": (
        lambda: C.PreTokenizerSequence([C.Split(r"\p{N}{1,3}", "isolated", is_regex=True),
                                        C.Metaspace(prepend_scheme="first"), C.Digits(True)]),
        lambda: P.Sequence([P.Split(Regex(r"\p{N}{1,3}"), "isolated"),
                            P.Metaspace(prepend_scheme="first"), P.Digits(True)])),
    "Sequence-split-in-bytes": (
        lambda: C.PreTokenizerSequence([C.WhitespaceSplit(), C.ByteLevel(use_regex=False),
                                        C.Split("\u00c3", "isolated")]),
        lambda: P.Sequence([P.WhitespaceSplit(), P.ByteLevel(use_regex=False),
                            P.Split("\u00c3", "isolated")])),
    "Sequence-punct-ws": (
        lambda: C.PreTokenizerSequence([C.Punctuation("contiguous"), C.Whitespace()]),
        lambda: P.Sequence([P.Punctuation("contiguous"), P.Whitespace()])),
    "BertPreTokenizer": (C.BertPreTokenizer, P.BertPreTokenizer),
    "CharDelimiterSplit": (lambda: C.CharDelimiterSplit("e"), lambda: P.CharDelimiterSplit("e")),
    "CharDelimiterSplit-space": (lambda: C.CharDelimiterSplit(" "),
                                 lambda: P.CharDelimiterSplit(" ")),
    "Split-empty-matches": (lambda: C.Split(r"\s*", "isolated", is_regex=True),
                            lambda: P.Split(Regex(r"\s*"), "isolated")),
    "Split-empty-string": (lambda: C.Split("", "removed"), lambda: P.Split("", "removed")),
}


# patterns matching the empty string are slow in both; they get the shorter texts
SHORT = {"Split-empty-matches", "Split-empty-string", "Replace-empty-matches",
         "Replace-empty-string"}


@pytest.mark.parametrize("name", list(PRE))
def test_pre_tokenizer_matches_hf(name, main_texts, matrix_texts):
    ours, hf = PRE[name][0](), PRE[name][1]()
    for t in (matrix_texts if name in SHORT else main_texts):
        a, b = ours.pre_tokenize_str(t), hf.pre_tokenize_str(t)
        assert a == b, f"{name} on {t[:40]!r}: {first_diff(a, b)}"


@pytest.mark.parametrize("name", list(PRE))
def test_piece_texts_are_the_pieces(name, main_texts, matrix_texts):
    """piece_texts (what the Tokenizer encodes; one regex for Whitespace, WhitespaceSplit,
    BertPreTokenizer and Metaspace) gives the texts of pre_tokenize_str's pieces, at the
    start of a text and after it (Metaspace's prepend_scheme "first")."""
    ours = PRE[name][0]()
    for t in (matrix_texts if name in SHORT else main_texts):
        for offset in (0, 5):
            assert ours.piece_texts(t, offset) == \
                [p for p, _ in ours.pre_tokenize_str(t, offset)], (offset, t[:40])


BEHAVIORS = ["removed", "isolated", "merged_with_previous", "merged_with_next", "contiguous"]


@pytest.mark.parametrize("behavior", BEHAVIORS)
@pytest.mark.parametrize("invert", [False, True])
@pytest.mark.parametrize("pattern", [r"\s+", " ", r"\p{P}", "ab"])
def test_split_behaviours_match_hf(pattern, behavior, invert, matrix_texts):
    is_regex = pattern not in (" ", "ab")
    ours = C.Split(pattern, behavior, invert, is_regex=is_regex)
    hf = P.Split(Regex(pattern) if is_regex else pattern, behavior, invert)
    for t in matrix_texts + ["abab xab aab abb", "ababab"]:
        a, b = ours.pre_tokenize_str(t), hf.pre_tokenize_str(t)
        assert a == b, f"Split({pattern!r}, {behavior}, {invert}) on {t[:40]!r}: {first_diff(a, b)}"


# Constructs Oniguruma reads differently from the regex module (bpe_cffi/regex_dialects.py),
# on text with several lines and the characters where their \w differ
DIALECT_TEXT = ["ab  \ncd  \n  ef", "x\u00b2 10\u00bd a\u200db \u0663 \u00b2", "line\n\nnext ",
                "می\u200cخواهم کتاب\u200cها", "  \n", "word_under score-dash",
                "aab a \U0001F600\U0001F600\n\nxx  x\n",
                # \w of the two engines: Other_Number, circled letters, letter numbers
                "a\u2460 \u24b6b \u216b x\u00b2 \u00bc\u09f4 \u16ee\n", "ab\n", "ab\n\n"]
DIALECT_PATTERNS = [r"^\s+", r"\s+$", r"^", r"$", r"\w+", r"\W+", r"[\w']+", r"\b", r"\B",
                    r"\b\w+\b", r"^\w|\w$", r"\p{^L}+|^\p{L}",
                    r"(?m)^x.|.", r"(?m:.)+", r"(?<n>a)\k<n>|.", r"(?<n>a)\g<n>|.",
                    r"\x{20}+|\x{1F600}", r"[\w]+", r"[^\w\s]+", r"\w\Z|\z", r"b\Z",
                    r"\W\z|\Z"]


@pytest.mark.parametrize("pattern", DIALECT_PATTERNS)
def test_regex_dialect_differences_match_hf(pattern, matrix_texts):
    """^ $ are line anchors in HF and \\w is Letter|Mark|Number|Pc there: our Split and
    Replace read HF's regexes as HF does."""
    texts = DIALECT_TEXT + matrix_texts[:6]
    ours = C.Split(pattern, "isolated", is_regex=True)
    hf = P.Split(Regex(pattern), "isolated")
    for t in texts:
        assert ours.pre_tokenize_str(t) == hf.pre_tokenize_str(t), (pattern, t[:40])
    ours_r, hf_r = C.Replace(pattern, "#", is_regex=True), N.Replace(Regex(pattern), "#")
    for t in texts:
        assert ours_r.normalize_str(t) == hf_r.normalize_str(t), (pattern, t[:40])


@pytest.mark.parametrize("pattern", [r"[a[b]]", r"[[:punct:]]", r"[a-z&&b]", r"[\W]",
                                     r"\p{XDigit}", r"\p{Word}+", r"[\p{Extended_Pictographic}]"])
def test_regex_dialect_constructs_without_a_rewrite_are_refused(pattern):
    with pytest.raises(C.UnsupportedComponent, match="uses"):
        C.Split(pattern, "isolated", is_regex=True)


def _isolated_pieces(pattern, text):
    """Split(pattern, "isolated") as the regex module reads pattern: each match and each gap
    between matches, in order."""
    import regex
    out, at = [], 0
    for m in regex.finditer(pattern, text):
        if m.start() > at:
            out.append((text[at:m.start()], (at, m.start())))
        if m.end() > m.start():
            out.append((m.group(), m.span()))
        at = max(at, m.end())
    if at < len(text):
        out.append((text[at:], (at, len(text))))
    return out


# The regex module's own syntax, as a tokenizer.json we write must say it to HF: \N{NAME}
# (Oniguruma's \N is "not a newline": HF had split '  ' where we matched spaces), (?P<n>,
# (?s), (?u), \p{^X}; with \w and anchors beside them
OURS_SYNTAX = [r"\N{SPACE}+|.", r"[\N{EM DASH}\N{SPACE}]+|\w+", r"(?s).", r"(?s:a.)|.",
               r"(?P<w>\w+)|\s+|.", r"(?P<n>a)(?P=n)|.", r"(?u)\w+|.", r"(?iu:A+)|.",
               r"\p{^L}+|\p{L}+", r"(?V0)\s+$|\S+", r"(?i)x+|.", r"\U0001F600+|.",
               r"[\U0001F600-\U0001F64F\u2014]+|\x20+|.", r"\w+\Z|\w+|.", r"[\w]+\z|."]


@pytest.mark.parametrize("pattern", OURS_SYNTAX)
def test_patterns_in_our_syntax_are_written_for_hf_alike(pattern):
    import regex
    from bpe_cffi.regex_dialects import ours_to_onig
    try:
        regex.compile(pattern)
    except regex.error as exc:   # regex 2026.1.15, the last for Python 3.9, lacks \z
        pytest.skip(f"regex {regex.__version__} does not read {pattern!r}: {exc}")
    onig = ours_to_onig(pattern)
    texts = ["a   b\nc\n\n d", "aa a\u2014 \u2014b XXx x", "\u00e9t\u00e9 1\u00b2 \u0663\n", "  \n",
             "AaA aaa\na", "word_under score-dash  ", "xU0001F600 \U0001F600\U0001F601\U0001F64F!",
             "a\u2460 \u24b6b \u216b x\u00b2 \u00bc\u09f4\n", "ab\n"]
    for t in texts:
        assert P.Split(Regex(onig), "isolated").pre_tokenize_str(t) == \
            _isolated_pieces(pattern, t), (pattern, onig, t)
        # and read back from a tokenizer.json by us (Oniguruma's \x{...} as \u / \U)
        assert C.Split(onig, "isolated", is_regex=True).pre_tokenize_str(t) == \
            _isolated_pieces(pattern, t), (pattern, onig, t)


@pytest.mark.parametrize("pattern", [r"(?a)\w+", r"(?V1)a", r"(?L)a", r"\p{L&}", r"\p{IsLatin}",
                                     r"\p{XDigit}", r"\p{^Word}",
                                     r"\p{sc=Latin}", r"\p{Script=Greek}", r"\N{NO SUCH NAME}",
                                     r"\p{InGreek}", r"(?|a|b)"])
def test_our_syntax_without_an_oniguruma_form_is_refused(pattern):
    """Written as they are, these made a tokenizer.json that HF refused to load."""
    from bpe_cffi.regex_dialects import ours_to_onig
    with pytest.raises(ValueError, match="uses|cannot be written for HF"):
        ours_to_onig(pattern)


@pytest.mark.parametrize("name", list(PRE))
def test_pre_tokenizer_json_matches_hf(name):
    ours, hf = PRE[name][0](), PRE[name][1]()
    assert ours.to_json() == hf_json(hf)
    back = C.pre_tokenizer_from_json(hf_json(hf))
    assert back == ours
    assert back.pre_tokenize_str("Hello, world 123!") == hf.pre_tokenize_str("Hello, world 123!")


def test_pre_tokenize_offset_argument():
    """offset= (ours) shifts offsets and tells Metaspace(first) that the text is not the start,
    as HF does for a piece after the first."""
    hf = P.Sequence([P.Split(" ", "merged_with_previous"), P.Metaspace(prepend_scheme="first")])
    whole = hf.pre_tokenize_str("ab cd")
    assert whole == [("\u2581ab", (0, 2)), ("\u2581", (2, 3)), ("cd", (3, 5))]
    ms = C.Metaspace(prepend_scheme="first")
    assert ms.pre_tokenize_str("cd", offset=3) == [("cd", (3, 5))]
    assert ms.pre_tokenize_str("cd") == [("\u2581cd", (0, 2))]
    assert C.Metaspace().pre_tokenize_str("cd", offset=3) == [("\u2581cd", (3, 5))]
    with pytest.raises(ValueError, match="offset"):
        ms.pre_tokenize_str("cd", offset=-1)
    with pytest.raises(TypeError):
        ms.pre_tokenize_str(b"cd")


def test_text_pieces_are_raw_text():
    """TextPieces(pre) splits as pre does but leaves the text unmapped (byte-level Tokenizers
    map bytes themselves)."""
    pre = C.PreTokenizerSequence([C.Digits(True), C.ByteLevel(True, True)])
    tp = C.TextPieces(pre)
    for t in ADVERSARIAL:
        mapped = pre.pre_tokenize_str(t)
        raw = tp.pre_tokenize_str(t)
        assert [o for _, o in raw] == [o for _, o in mapped]
        assert [C.ByteLevel(False, False).pre_tokenize_str(p)[0][0] if p else ""
                for p, _ in raw] == [p for p, _ in mapped]
    assert tp.to_json() == pre.to_json()


@pytest.mark.parametrize("doc, match", [
    ({"type": "UnicodeScripts"}, "pre_tokenizer UnicodeScripts is not supported"),
    ({"type": "Split", "pattern": {"Regex": r"\p{N}{1,3}+"}, "behavior": "Isolated",
      "invert": False}, r"X\{m,n\}\+"),
    ({"type": "Split", "pattern": {"Regex": "("}, "behavior": "Isolated", "invert": False},
     "does not compile"),
    ({"type": "Split", "pattern": {"Regex": r"[\h]+"}, "behavior": "Isolated",
      "invert": False}, "hex digit in Oniguruma"),
    ({"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Sideways", "invert": False},
     "behavior"),
    ({"type": "Whitespace", "extra": 1}, r"unknown field\(s\) \['extra'\]"),
    ({"type": "Metaspace", "replacement": "ab"}, "one character"),
    ({"type": "Sequence", "pretokenizers": [{"type": "UnicodeScripts"}]}, "UnicodeScripts"),
    ({"type": "CharDelimiterSplit", "delimiter": "ab"}, "one character"),
    ({"nope": 1}, "no \"type\""),
])
def test_unsupported_pre_tokenizers_are_named(doc, match):
    with pytest.raises(C.UnsupportedComponent, match=match):
        C.pre_tokenizer_from_json(doc)


def test_old_metaspace_json():
    """Files from before prepend_scheme carry add_prefix_space (and str_rep)."""
    old = {"type": "Metaspace", "replacement": "\u2581", "str_rep": "\u2581",
           "add_prefix_space": False}
    assert C.pre_tokenizer_from_json(old).prepend_scheme == "never"
    old["add_prefix_space"] = True
    assert C.pre_tokenizer_from_json(old).prepend_scheme == "always"


# ---- normalizers --------------------------------------------------------------------------

NORM = {
    "NFC": (C.NFC, N.NFC), "NFD": (C.NFD, N.NFD), "NFKC": (C.NFKC, N.NFKC),
    "NFKD": (C.NFKD, N.NFKD), "Lowercase": (C.Lowercase, N.Lowercase),
    "Strip": (C.Strip, N.Strip), "Strip-right": (lambda: C.Strip(False, True),
                                                 lambda: N.Strip(False, True)),
    "Replace-space": (lambda: C.Replace(" ", "\u2581"), lambda: N.Replace(" ", "\u2581")),
    "Replace-regex": (lambda: C.Replace(r"\s+", " ", is_regex=True),
                      lambda: N.Replace(Regex(r"\s+"), " ")),
    "Replace-empty-matches": (lambda: C.Replace(r"\s*", "-", is_regex=True),
                              lambda: N.Replace(Regex(r"\s*"), "-")),
    "Replace-empty-string": (lambda: C.Replace("", "x"), lambda: N.Replace("", "x")),
    "Replace-dollar": (lambda: C.Replace("a", r"\1$0"), lambda: N.Replace("a", r"\1$0")),
    "Prepend": (lambda: C.Prepend("\u2581"), lambda: N.Prepend("\u2581")),
    "Sequence-llama": (
        lambda: C.NormalizerSequence([C.Prepend("\u2581"), C.Replace(" ", "\u2581")]),
        lambda: N.Sequence([N.Prepend("\u2581"), N.Replace(" ", "\u2581")])),
    "Sequence-nfkc-lower-strip": (
        lambda: C.NormalizerSequence([C.NFKC(), C.Lowercase(), C.Strip()]),
        lambda: N.Sequence([N.NFKC(), N.Lowercase(), N.Strip()])),
    "StripAccents": (C.StripAccents, N.StripAccents),
    "Nmt": (C.Nmt, N.Nmt),
    "Sequence-nfd-stripaccents": (lambda: C.NormalizerSequence([C.NFD(), C.StripAccents()]),
                                  lambda: N.Sequence([N.NFD(), N.StripAccents()])),
    "BertNormalizer": (C.BertNormalizer, N.BertNormalizer),
    "BertNormalizer-cased": (lambda: C.BertNormalizer(lowercase=False),
                             lambda: N.BertNormalizer(lowercase=False)),
    "BertNormalizer-accents-only": (
        lambda: C.BertNormalizer(False, False, True, False),
        lambda: N.BertNormalizer(clean_text=False, handle_chinese_chars=False,
                                 strip_accents=True, lowercase=False)),
    "BertNormalizer-lower-keep-accents": (
        lambda: C.BertNormalizer(True, True, False, True),
        lambda: N.BertNormalizer(strip_accents=False)),
}


@pytest.mark.parametrize("name", list(NORM))
def test_normalizer_matches_hf(name, main_texts, matrix_texts):
    ours, hf = NORM[name][0](), NORM[name][1]()
    for t in (matrix_texts if name in SHORT else main_texts):
        a, b = ours.normalize_str(t), hf.normalize_str(t)
        assert a == b, f"{name} on {t[:40]!r}: {first_diff(a, b)}"


@pytest.mark.parametrize("name", list(NORM))
def test_normalizer_json_matches_hf(name):
    ours, hf = NORM[name][0](), NORM[name][1]()
    assert ours.to_json() == hf_json(hf)
    assert C.normalizer_from_json(hf_json(hf)) == ours


def test_lowercase_has_no_final_sigma_rule():
    assert C.Lowercase().normalize_str("\u039f\u0394\u03a5\u03a3") == "\u03bf\u03b4\u03c5\u03c3"
    assert N.Lowercase().normalize_str("\u039f\u0394\u03a5\u03a3") == "\u03bf\u03b4\u03c5\u03c3"


@pytest.mark.parametrize("doc, match", [
    ({"type": "Precompiled", "precompiled_charsmap": ""},
     "normalizer Precompiled is not supported"),
    ({"type": "BertNormalizer", "strip_accents": "yes"}, "strip_accents must be"),
    ({"type": "StripAccents", "x": 1}, r"unknown field\(s\) \['x'\]"),
    ({"type": "Replace", "pattern": {"Glob": "a"}, "content": "b"}, "pattern"),
    ({"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "ByteLevel"}]},
     "normalizer ByteLevel is not supported"),
])
def test_unsupported_normalizers_are_named(doc, match):
    with pytest.raises(C.UnsupportedComponent, match=match):
        C.normalizer_from_json(doc)


# ---- decoders -----------------------------------------------------------------------------

def _chop(tokens, rng):
    out = []
    for t in tokens:
        while t:
            k = rng.randint(1, 4)
            out.append(t[:k])
            t = t[k:]
    return out


@pytest.fixture(scope="module")
def token_lists(main_texts):
    """Token sequences of several shapes: byte-level pieces, Metaspace pieces, byte-fallback
    runs (valid and broken UTF-8), WordPiece-ish and suffix-ish tokens."""
    rng = random.Random(7)
    lists = []
    for t in main_texts:
        t = t[:30_000]
        lists.append(_chop([p for p, _ in P.ByteLevel().pre_tokenize_str(t)], rng))
        lists.append(_chop([p for p, _ in P.Metaspace().pre_tokenize_str(t)], rng))
        fb = []
        for c in t[:5000]:
            fb += [f"<0x{b:02X}>" for b in c.encode()] if rng.random() < 0.5 else [c]
            if rng.random() < 0.01:
                fb.append("<0xE5>")
        lists.append(fb)
        words = t.split(" ")
        lists.append([w if k % 3 else "##" + w for k, w in enumerate(words) if w])
        lists.append([w + "</w>" if k % 2 else w for k, w in enumerate(words)])
    lists += [[], [""],
              ["<0x+5>", "<0x 5>", "<0x-5>", "<0x\u00e9>", "<0XAB>", "<0xab>", "<0x4>"],
              ["\u2581\u2581a\u2581", "\u2581", "b\u2581\u2581"],
              ["##a", "b", "##", " ,", "do not"],
              ["a</w>", "</w>", "b</w>c"],
              ["\u0120", "\u00c4", "\u0122", "\u20ac", "\u0100", "a b"]]
    return lists


DEC = {
    "ByteLevel": (C.ByteLevelDecoder, D.ByteLevel),
    "Metaspace": (C.MetaspaceDecoder, D.Metaspace),
    "Metaspace-never": (lambda: C.MetaspaceDecoder(prepend_scheme="never"),
                        lambda: D.Metaspace(prepend_scheme="never")),
    "Metaspace-first": (lambda: C.MetaspaceDecoder(prepend_scheme="first"),
                        lambda: D.Metaspace(prepend_scheme="first")),
    "BPEDecoder": (C.BPEDecoder, D.BPEDecoder),
    "BPEDecoder-a": (lambda: C.BPEDecoder("a"), lambda: D.BPEDecoder("a")),
    "WordPiece": (C.WordPieceDecoder, D.WordPiece),
    "WordPiece-nocleanup": (lambda: C.WordPieceDecoder("##", False),
                            lambda: D.WordPiece("##", False)),
    "ByteFallback": (C.ByteFallback, D.ByteFallback),
    "Fuse": (C.Fuse, D.Fuse),
    "Strip-start": (lambda: C.StripDecoder("\u2581", 1, 0), lambda: D.Strip("\u2581", 1, 0)),
    "Strip-a": (lambda: C.StripDecoder("a", 2, 0), lambda: D.Strip("a", 2, 0)),
    "Replace": (lambda: C.ReplaceDecoder("\u2581", " "), lambda: D.Replace("\u2581", " ")),
    "Replace-regex": (lambda: C.ReplaceDecoder(r"\s+", "_", is_regex=True),
                      lambda: D.Replace(Regex(r"\s+"), "_")),
    "Sequence-llama": (
        lambda: C.DecoderSequence([C.ReplaceDecoder("\u2581", " "), C.ByteFallback(), C.Fuse(),
                                   C.StripDecoder(" ", 1, 0)]),
        lambda: D.Sequence([D.Replace("\u2581", " "), D.ByteFallback(), D.Fuse(),
                            D.Strip(" ", 1, 0)])),
}


@pytest.mark.parametrize("name", list(DEC))
def test_decoder_matches_hf(name, token_lists):
    ours, hf = DEC[name][0](), DEC[name][1]()
    for toks in token_lists:
        a, b = ours.decode(toks), hf.decode(toks)
        assert a == b, f"{name} on {toks[:6]!r}: {first_diff(a, b)}"


@pytest.mark.parametrize("name", list(DEC))
def test_decoder_json_matches_hf(name):
    ours, hf = DEC[name][0](), DEC[name][1]()
    assert ours.to_json() == hf_json(hf)
    assert C.decoder_from_json(hf_json(hf)) == ours


def test_strip_decoder_stop():
    """Strip with stop > 0 (HF 0.23 panics when a token is shorter than `stop`; where it does
    not, the results agree, and ours never cuts into what `start` kept)."""
    toks = ["a  ", "   ", "b ", "cd"]
    assert C.StripDecoder(" ", 0, 2).decode(toks) == D.Strip(" ", 0, 2).decode(toks) == "a bcd"
    assert C.StripDecoder(" ", 1, 5).decode([" "]) == ""


@pytest.mark.parametrize("doc, match", [
    ({"type": "CTC", "pad_token": "<pad>", "word_delimiter_token": "|", "cleanup": True},
     "decoder CTC is not supported"),
    ({"type": "Strip", "content": " ", "start": -1, "stop": 0}, "start"),
    ({"type": "Sequence", "decoders": [{"type": "Fuse"}, {"type": "Wat"}]}, "Wat"),
])
def test_unsupported_decoders_are_named(doc, match):
    with pytest.raises(C.UnsupportedComponent, match=match):
        C.decoder_from_json(doc)


def test_decoder_rejects_non_str_tokens():
    with pytest.raises(TypeError):
        C.Fuse().decode(["a", 1])
