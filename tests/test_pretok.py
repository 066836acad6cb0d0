"""The C pre-tokenizers (csrc/pretok.c) against the `regex` module, the reference they copy.

Every expected output here comes from `regex.finditer(pattern, text)`, never from the C code.
The default run is fast; BPE_CFFI_LONG=1 runs millions of random cases and whole corpora.
"""
import random

import pytest
import regex
from hypothesis import given, settings, strategies as st

from bpe_cffi._native import ffi, lib
from bpe_cffi.patterns import CL100K, GPT2, O200K
from conftest import CORPORA, LONG, needs_tables_regex, read_corpus

PATTERNS = {"gpt2": (lib.BPE_PATTERN_GPT2, regex.compile(GPT2)),
            "cl100k": (lib.BPE_PATTERN_CL100K, regex.compile(CL100K)),
            "o200k": (lib.BPE_PATTERN_O200K, regex.compile(O200K))}
NAMES = list(PATTERNS)


def c_ends(pid: int, data: bytes) -> list:
    ends = ffi.new("bpe_ids *")
    try:
        rc = lib.bpe_pretokenize(pid, data, len(data), ends)
        assert rc == lib.BPE_OK, ffi.string(lib.bpe_strerror(rc))
        return list(ffi.unpack(ends.ids, ends.len)) if ends.len else []
    finally:
        lib.bpe_ids_free(ends)


def c_pieces(name: str, text: str) -> list:
    data = text.encode("utf-8")
    out, prev = [], 0
    for e in c_ends(PATTERNS[name][0], data):
        out.append(data[prev:e].decode("utf-8"))
        prev = e
    return out


def re_pieces(name: str, text: str) -> list:
    return [m.group() for m in PATTERNS[name][1].finditer(text)]


def check(name: str, text: str) -> None:
    want = re_pieces(name, text)
    assert "".join(want) == text  # the pattern tiles the text (so comparing pieces suffices)
    got = c_pieces(name, text)
    if got != want:
        # report the first differing piece with some context
        i = next(i for i, (a, b) in enumerate(zip(got + [None], want + [None])) if a != b)
        raise AssertionError(f"{name}: text {text[:200]!r}...: piece {i}: C {got[i:i + 3]!r} "
                             f"regex {want[i:i + 3]!r}")


# ---- characters of every class the patterns distinguish -----------------------------------

SPACES = list(" \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000") + \
    [chr(c) for c in range(0x2000, 0x200B)]
ALPHABET = (
    list("aAbBzZsSdDmMtTlLvVeErR") + ["\u017f", "\u212a", "\u212b", "\u0130", "\u0131"]  # case
    + list("éÉßÿŸαΩωЖжשא中文字ひカ한ไ") + ["\u01c5", "\u1f88", "\u02b0", "\u3005", "\u0e46"]  # Lt Lm
    + ["\u0301", "\u0308", "\u0903", "\u20dd", "\u0e31", "\ufe0f"]                  # marks
    + list("0123456789") + ["\u0663", "\u0967", "\u2167", "\u00bd", "\u2460", "\uff11", "\U0001d7ce"]
    + SPACES + ["'"] * 6 + ["\u2019", "\u02bc"] + list(".,;:!?/\\-_()[]{}<>@#$%^&*+=|~`\"")
    + ["\U0001F600", "\u200d", "\U0001F469", "\u200b", "\u00ad", "\x00", "\x01", "\x7f",
       "\ufeff", "\U0010FFFF", "\ue000"]
)
WORDS = ["'s", "'S", "'ll", "'LL", "'lL", "'ve", "'Re", "'d", "'M", "'t", "'\u017f", "don't",
         "DON'T", "  ", "\r\n", "\n\n", " \n", "...", " 123", "12345", "HTTPServer", "iPhone",
         "CamelCase", "\u0301\u0301", "A\u0301B", "//", "\n/"]


def random_text(rng: random.Random, n: int) -> str:
    out = []
    for _ in range(n):
        if rng.random() < 0.15:
            out.append(rng.choice(WORDS))
        else:
            out.append(rng.choice(ALPHABET))
    return "".join(out)


@pytest.mark.parametrize("name", NAMES)
def test_random_mixed_classes(name):
    rng = random.Random(1234 + NAMES.index(name))
    cases = 2_000_000 if LONG else 20_000
    for _ in range(cases):
        check(name, random_text(rng, rng.randint(1, 14)))


@needs_tables_regex
@settings(max_examples=5000 if LONG else 300, deadline=None)
@given(st.lists(st.sampled_from(ALPHABET + WORDS), max_size=12) | st.text(max_size=20))
def test_hypothesis_texts(parts):
    text = "".join(parts)
    for name in NAMES:
        check(name, text)


@pytest.mark.parametrize("name", NAMES)
def test_random_long_texts(name):
    rng = random.Random(99 + NAMES.index(name))
    for _ in range(200 if LONG else 20):
        check(name, random_text(rng, rng.randint(100, 5000)))


@pytest.mark.parametrize("name", NAMES)
def test_every_short_string_over_a_small_alphabet(name):
    """Exhaustive: all strings of length <= 4 over characters of every distinct role."""
    alpha = ["a", "A", "\u02b0", "\u0301", "1", " ", "\t", "\n", "\r", "'", "s", "/", "."]
    if LONG:
        alpha += ["\u01c5", "\u3000", "L", "e", "v", "\u017f"]
    import itertools
    for n in range(1, 5 if not LONG else 6):
        for tup in itertools.product(alpha, repeat=n):
            check(name, "".join(tup))


@pytest.mark.parametrize("name", NAMES)
def test_end_of_segment_rules(name):
    for t in ["a ", "a  ", "a \n", "a\n", "a \n ", "  ", "\n", " \n\n", "x\t\t", "x \u3000",
              "x'", "x's", "'", "''s", "a  b", "a\n\nb", "a \n b", "1234567", " 1", "  1",
              "\u0301", "a\u0301", " \u0301A", "ABC\u0301", "\u0301ABC", "AʰB.", "!!!\n\n/x",
              ".\n/.", "\r\n\r\n", "x\r\n  y", "é", "A's", "ABC'S", "a'LL", "a'\u017f"]:
        check(name, t)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("corpus", CORPORA)
def test_corpora(name, corpus):
    """Slices of every corpus (whole corpora under BPE_CFFI_LONG=1, in 8 MB blocks)."""
    if LONG:
        import lzma
        from conftest import CORPORA_DIR
        path = CORPORA_DIR / f"{corpus}.txt.xz"
        if not path.exists():
            pytest.skip(f"corpus {path} not found (set BPE_CFFI_CORPORA_DIR)")
        with lzma.open(path, "rb") as f:        # one pass, 8 MB blocks
            while True:
                block = f.read(8 << 20)
                if not block:
                    break
                check(name, block.decode("utf-8", errors="ignore"))
    else:
        for offset in (0, 1 << 20, 5 << 20):
            check(name, read_corpus(corpus, 64 << 10, offset))


@pytest.mark.parametrize("name", NAMES)
def test_repetitive_inputs(name):
    """Catastrophic repetition stays correct (and linear: these are MBs, scanned once)."""
    n = (10 << 20) if LONG else (256 << 10)
    rng = random.Random(5)
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    texts = ["x" * n, " " * n, "^" * n, "\n" * n, "".join(rng.choice(letters) for _ in range(n)),
             "\U0001F600" * (n // 4), "1" * n, " \t" * (n // 2), "\u0301" * (n // 2), "A" * n,
             "'s" * (n // 2), "A\u02b0" * (n // 3), " \n" * (n // 2), "\u3000" * (n // 3)]
    for t in texts:
        check(name, t)


def test_errors():
    ends = ffi.new("bpe_ids *")
    assert lib.bpe_pretokenize(0, b"abc", 3, ends) == lib.BPE_ERR_ARG
    assert lib.bpe_pretokenize(4, b"abc", 3, ends) == lib.BPE_ERR_ARG
    assert lib.bpe_pretokenize(1, b"abc", 3, ffi.NULL) == lib.BPE_ERR_ARG
    assert lib.bpe_pretokenize(1, ffi.NULL, 3, ends) == lib.BPE_ERR_ARG
    # the size check happens before the text is read
    assert lib.bpe_pretokenize(1, b"abc", 1 << 32, ends) == lib.BPE_ERR_TOOBIG
    assert ends.len == 0
    assert lib.bpe_pretokenize(1, ffi.NULL, 0, ends) == lib.BPE_OK and ends.len == 0


def test_appends_to_existing_ends():
    ends = ffi.new("bpe_ids *")
    try:
        assert lib.bpe_pretokenize(1, b"a b", 3, ends) == lib.BPE_OK
        assert lib.bpe_pretokenize(1, b"cd e", 4, ends) == lib.BPE_OK
        assert list(ffi.unpack(ends.ids, ends.len)) == [1, 3, 2, 4]
    finally:
        lib.bpe_ids_free(ends)


# ---- safe cuts ---------------------------------------------------------------------------------

def re_pieces_b(name: str, data: bytes) -> list:
    return re_pieces(name, data.decode("utf-8"))


def check_cut(name: str, data: bytes, continuations) -> int:
    """p = safe_cut(data); then for every continuation X the pieces of data+X are the pieces
    of data[:p] followed by those of data[p:]+X (all pieces from regex)."""
    p = lib.bpe_pretok_safe_cut(PATTERNS[name][0], data, len(data))
    assert 0 <= p <= len(data)
    if p == 0:
        return p
    head = data[:p].decode("utf-8")        # raises if p is not a character boundary
    head_pieces = re_pieces(name, head)
    for x in continuations:
        whole = re_pieces_b(name, data + x)
        tail = re_pieces_b(name, data[p:] + x)
        assert head_pieces + tail == whole, (name, data, p, x)
    return p


def continuations(rng: random.Random) -> list:
    xs = [b"", b" ", b"\n", b"\r\n", b"a", b"A", b"'s", b"'", b"1", b"/", b".", b"\xcc\x81",
          b"  x", b"\n\n", " \u3000".encode()]
    xs += [random_text(rng, rng.randint(1, 6)).encode("utf-8") for _ in range(6)]
    return xs


@pytest.mark.parametrize("name", NAMES)
def test_safe_cut_random_texts(name):
    rng = random.Random(77 + NAMES.index(name))
    found = 0
    for _ in range(200_000 if LONG else 1_500):
        data = random_text(rng, rng.randint(1, 16)).encode("utf-8")
        found += check_cut(name, data, continuations(rng)) > 0
    assert found > 50  # the rule is not vacuous on mixed text


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("corpus", CORPORA)
def test_safe_cut_corpora(name, corpus):
    """Cut corpus slices at random lengths; also: real text has a safe cut within 4 KB."""
    rng = random.Random(hash((name, corpus)) & 0xFFFF)
    text = read_corpus(corpus, (4 << 20) if LONG else (256 << 10), 1 << 20)
    data = text.encode("utf-8")
    xs = continuations(rng)
    misses = trials = 0
    for _ in range(2000 if LONG else 60):
        start = rng.randrange(len(data) // 2)
        n = rng.randrange(1, 8192)
        chunk = data[start:start + n].decode("utf-8", "ignore").encode("utf-8")
        p = check_cut(name, chunk, xs[:6] if not LONG else xs)
        if len(chunk) >= 4096:
            trials += 1
            misses += p == 0
    assert misses <= trials // 20, f"{misses} of {trials} 4 KB+ slices had no safe cut"


def test_safe_cut_simple_cases():
    g, c, o = (PATTERNS[n][0] for n in NAMES)
    cut = lib.bpe_pretok_safe_cut
    assert cut(g, b"hello world", 11) == 5          # before the space
    assert cut(c, b"hello world", 11) == 5
    assert cut(o, b"hello world", 11) == 5
    for pid in (g, c, o):
        assert cut(pid, b"", 0) == 0
        assert cut(pid, b"x", 1) == 0
        assert cut(pid, b"   \n\n  ", 7) == 0      # only whitespace: never safe
        assert cut(pid, b"1234567", 7) == 0         # inside a number
        assert cut(pid, b"abcdef", 6) == 0          # inside a word
    assert cut(0, b"a b", 3) == 0 and cut(4, b"a b", 3) == 0
    # o200k: a letter followed by an apostrophe can still become a contraction
    assert cut(o, b"don't", 5) == 0
    assert cut(g, b"don't", 5) == 3 and cut(c, b"don't", 5) == 3


def test_safe_cut_is_cheap_backwards_on_long_text():
    data = ("word " * 200_000).encode()
    for pid in (1, 2, 3):
        assert lib.bpe_pretok_safe_cut(pid, data, len(data)) == len(data) - 1


def test_invalid_utf8_never_crashes():
    """The contract asks for valid UTF-8, but bad bytes must not crash or hang the scanner:
    pieces stay non-empty, in order, and tile the input."""
    rng = random.Random(11)
    pool = [0x00, 0x20, 0x27, 0x41, 0x61, 0x0A, 0x0D, 0x80, 0xBF, 0xC2, 0xCC, 0xE0, 0xED, 0xF0,
            0xF4, 0xFF]
    for _ in range(3000):
        data = bytes(rng.choice(pool) if rng.random() < 0.7 else rng.randrange(256)
                     for _ in range(rng.randint(1, 30)))
        for pid in (1, 2, 3):
            ends = c_ends(pid, data)
            assert ends and ends[-1] == len(data)
            assert all(a < b for a, b in zip([0] + ends, ends))
            assert 0 <= lib.bpe_pretok_safe_cut(pid, data, len(data)) <= len(data)


@pytest.mark.parametrize("pattern", [1, 2, 3])
def test_safe_cut_when_len_ends_inside_a_character(pattern):
    """Callers that read blocks of bytes may pass a length that ends inside a UTF-8 sequence.
    The bytes seen so far must not be classed as a character of their own: a cut returned for
    such a prefix must still be safe for the complete text."""
    import random as _random
    from bpe_cffi import patterns as _patterns
    regex_of = {1: _patterns.GPT2, 2: _patterns.CL100K, 3: _patterns.O200K}[pattern]
    rng = _random.Random(7 + pattern)
    alphabet = ["a", "b", " ", "é", "中", "\n", "'", "1", "😀", "Z", ".", "\u0301"]
    for _ in range(400):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 24)))
        data = text.encode()
        whole = [m.group() for m in regex.finditer(regex_of, text)]
        for n in range(1, len(data) + 1):
            cut = lib.bpe_pretok_safe_cut(pattern, data, n)
            if not cut:
                continue
            assert cut <= n
            left, right = data[:cut].decode(), data[cut:].decode()   # on a character boundary
            parts = ([m.group() for m in regex.finditer(regex_of, left)]
                     + [m.group() for m in regex.finditer(regex_of, right)])
            assert parts == whole, (text, n, cut)
