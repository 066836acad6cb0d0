"""encode_batch cuts a large text into parts that threads share (csrc/batch_cut.c and the
cut texts of csrc/batch_stream.c).  The cut points are checked against tiktoken directly
(encoding the two sides of each cut separately gives tiktoken's ids of the whole), and
encode_batch of large texts against tiktoken's ids, with special tokens put where the parts
would naturally end; texts Python keeps as Latin-1, UCS-2 (with surrogates) and UCS-4 too."""
import random

import pytest

from bpe_cffi._native import ffi, lib

from conftest import CORPORA, LONG
from pyapi_helpers import VOCABS, ours, reference

PART = 512 * 1024             # csrc/batch_stream.c PART_BYTES (a part's aim, in bytes)
SIZE = 6_000_000 if LONG else 2_600_000
SPECIALS = {"gpt2": ["<|endoftext|>"],
            "cl100k_base": ["<|endoftext|>", "<|fim_prefix|>", "<|endofprompt|>"],
            "o200k_base": ["<|endoftext|>", "<|endofprompt|>"]}


def corpus_text(name, size, seed=0):
    from conftest import read_corpus
    return read_corpus(name, size, offset=seed * 1_000_000)


def with_specials(text, specials, rng, bases=(PART, PART // 2, PART // 4, 100_000)):
    """text with special tokens: one straddling each multiple of each base (positions of the
    result, in characters: where a part aims to end), and one every ~300 characters."""
    targets = set()
    for base in bases:
        targets.update(range(base, len(text), base))
    targets.update(rng.randrange(len(text)) for _ in range(len(text) // 300))
    out, src, length = [], 0, 0
    for t in sorted(targets):
        s = rng.choice(specials)
        need = t - rng.randrange(len(s) + 1) - length      # so that s spans position t
        if need < 0 or src + need > len(text):
            continue
        out += [text[src:src + need], s]
        src += need
        length += need + len(s)
    out.append(text[src:])
    return "".join(out)


def units_of(text):
    """(bytes of the code units, kind) as CPython stores text: Latin-1, UCS-2 or UCS-4."""
    top = max(map(ord, text)) if text else 0
    if top < 0x100:
        return text.encode("latin-1"), lib.BPE_TEXT_LATIN1
    if top < 0x10000:
        return text.encode("utf-16-le", "surrogatepass"), lib.BPE_TEXT_UCS2
    return text.encode("utf-32-le", "surrogatepass"), lib.BPE_TEXT_UCS4


def text_cuts(tok, units, n, kind, mode, part_units):
    cuts = ffi.new("size_t[]", n // part_units + 1)
    scratch = ffi.new("bpe_bytes *")
    try:
        k = lib.bpe_text_cuts(tok._handle(), units, n, kind, mode, part_units, cuts,
                              n // part_units + 1, scratch)
        return [cuts[i] for i in range(k)]
    finally:
        lib.bpe_bytes_free(scratch)


def all_mode(tok):
    return tok._mode_for("all", ())


@pytest.mark.parametrize("corpus", CORPORA)
@pytest.mark.parametrize("vocab", VOCABS)
def test_cuts_leave_tiktoken_ids_unchanged(vocab, corpus):
    """Every cut bpe_text_cuts finds, in the UTF-8 and in the code units of a corpus text full
    of special tokens: tiktoken's ids of the two sides end to end are its ids of the whole."""
    tok, enc = ours(vocab), reference(vocab)
    rng = random.Random(hash((vocab, corpus)) & 0xffff)
    text = with_specials(corpus_text(corpus, 900_000), SPECIALS[vocab], rng)
    data = text.encode("utf-8")
    units, kind = units_of(text)
    width = {lib.BPE_TEXT_LATIN1: 1, lib.BPE_TEXT_UCS2: 2, lib.BPE_TEXT_UCS4: 4}[kind]
    mode = all_mode(tok)
    whole = enc.encode(text, allowed_special="all")
    for stored, k, n, part in [(data, lib.BPE_TEXT_UTF8, len(data), 100_000),
                               (units, kind, len(text), 100_000 // width)]:
        cuts = text_cuts(tok, stored, n, k, mode, part)
        assert len(cuts) >= n // part - 2, (k, len(cuts))     # real text cuts nearly always
        assert cuts == sorted(set(cuts)) and all(0 < c < n for c in cuts)
        bounds = [0] + cuts + [n]
        ids = []
        for a, b in zip(bounds, bounds[1:]):
            side = data[a:b].decode("utf-8") if k == lib.BPE_TEXT_UTF8 else text[a:b]
            ids += enc.encode(side, allowed_special="all")
        assert ids == whole, (vocab, corpus, k)


@pytest.mark.parametrize("vocab", VOCABS)
def test_encode_batch_of_large_texts_gives_tiktoken_ids(vocab):
    """Large texts (cut into parts) among small ones, every corpus, special tokens where the
    parts would end: the ids of each text are tiktoken's, in the batch's order, on 1, 2 and 3
    threads."""
    tok, enc = ours(vocab), reference(vocab)
    rng = random.Random(7)
    texts = []
    for i, corpus in enumerate(CORPORA):
        big = with_specials(corpus_text(corpus, SIZE, seed=i), SPECIALS[vocab], rng)
        texts += [big[:rng.randrange(1, 3000)], big]
    texts.append(texts[1][:1_100_000].encode("ascii", "ignore").decode())    # ASCII: UTF-8
    expect = [enc.encode(t, allowed_special="all") for t in texts]
    for threads in (1, 2, 3):
        got = tok.encode_batch(texts, num_threads=threads)
        assert len(got) == len(texts)
        for k, (a, b) in enumerate(zip(got, expect)):
            assert a == b, (vocab, threads, k, len(texts[k]))


def test_storage_kinds_and_surrogates_match_unsplit_encode():
    """Strs stored as Latin-1, UCS-2 and UCS-4, with lone surrogates and high + low pairs
    (one character to the encoder) near every place a part aims to end: encode_batch gives
    tiktoken's ids, as encode does."""
    tok, enc = ours("o200k_base"), reference("o200k_base")
    rng = random.Random(3)
    prose = corpus_text("en_books", 1_400_000)
    latin = prose.replace("e", "\xe9")
    ucs2 = prose.replace("e", "\u0435")
    ucs4 = prose.replace("e", "\U0001F600")
    surrogates = list(ucs2)            # one character replaced by one: positions stay
    for k in range(1, len(surrogates) // (PART // 8)):
        for d in range(-40, 8):
            # mostly high + low pairs, some lone ones, some spaces (cuts need them)
            surrogates[k * (PART // 8) + d] = rng.choice(["\ud83d\ude00"[d % 2]] * 4 +
                                                         ["\udfff", " ", "a"])
    texts = [latin, ucs2, ucs4, "".join(surrogates)]
    expect = [enc.encode(t, allowed_special="all") for t in texts]
    assert [tok.encode(t) for t in texts] == expect
    assert tok.encode_batch(texts, num_threads=2) == expect
    assert [tok.encode_batch([t], num_threads=3)[0] for t in texts] == expect


def test_text_without_cuts_and_overlapping_specials():
    """A long word has no cut (it stays one part); special tokens that overlap each other
    ("ab", "ba") around every goal leave no cut there; ids are those of encode either way."""
    from bpe_cffi import Tokenizer
    tok = ours("gpt2")
    rng = random.Random(5)
    word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(1_200_000))
    assert text_cuts(tok, word.encode(), len(word), lib.BPE_TEXT_UTF8, ffi.NULL, PART) == []
    assert tok.encode_batch(["x " + word, "y"], num_threads=2) == \
        [tok.encode("x " + word), tok.encode("y")]

    vocab = {i: bytes([i]) for i in range(256)}
    specials = {"ab": 256, "ba": 257}
    small = Tokenizer(vocab, [], specials, pattern="gpt2")
    chunks = []
    for k in range(6):
        chunks.append("The cat sat on the mat. " * (PART // 4 // 24))
        chunks.append("ab" * 40 + "a")
    text = "".join(chunks)
    assert small.encode_batch([text], num_threads=2) == [small.encode(text)]
    mode = all_mode(small)
    for c in text_cuts(small, text.encode(), len(text), lib.BPE_TEXT_UTF8, mode, PART // 4):
        assert "ab" not in text[max(0, c - 2):c + 2] and "ba" not in text[max(0, c - 2):c + 2]


def test_disallowed_special_in_a_later_part_raises_as_encode():
    """A disallowed special token deep inside a cut text fails the batch as encode fails."""
    tok = ours("gpt2")
    text = corpus_text("en_books", 2_000_000)
    text = text[:1_700_000] + "<|endoftext|>" + text[1_700_000:]
    with pytest.raises(ValueError) as single:
        tok.encode(text, allowed_special=set(), disallowed_special="all")
    with pytest.raises(ValueError) as batch:
        tok.encode_batch(["fine", text], num_threads=2, allowed_special=set(),
                         disallowed_special="all")
    assert str(batch.value) == str(single.value)


def test_text_cuts_refuses_bad_arguments():
    tok = ours("gpt2")
    data = b"hello world. " * 100_000
    scratch = ffi.new("bpe_bytes *")
    cuts = ffi.new("size_t[]", 64)
    assert lib.bpe_text_cuts(ffi.NULL, data, len(data), 0, ffi.NULL, 1000, cuts, 64,
                             scratch) == 0
    assert lib.bpe_text_cuts(tok._handle(), data, len(data), 3, ffi.NULL, 1000, cuts, 64,
                             scratch) == 0
    assert lib.bpe_text_cuts(tok._handle(), data, len(data), 0, ffi.NULL, 0, cuts, 64,
                             scratch) == 0
    assert lib.bpe_text_cuts(tok._handle(), data, len(data), 0, ffi.NULL, 1000, cuts, 5,
                             scratch) == 5        # no more than max_cuts
    lib.bpe_bytes_free(scratch)


@pytest.mark.parametrize("vocab", VOCABS)
def test_cuts_of_random_mixed_text(vocab):
    """Text mixing characters of every class the patterns tell apart (letters of many
    scripts and cases, marks, digits, every Unicode space, \\r, \\n, apostrophes, contractions,
    punctuation, emoji) and special tokens, cut into parts of 20-300 units: tiktoken's ids of
    the parts end to end are its ids of the whole, for the UTF-8 and the code units alike."""
    from test_pretok import random_text
    tok, enc = ours(vocab), reference(vocab)
    mode = all_mode(tok)
    n_cut = 0
    for seed in range(400 if LONG else 25):
        rng = random.Random(seed)
        pieces = []
        for _ in range(40):
            pieces.append(random_text(rng, rng.randrange(1, 120)))
            if rng.random() < 0.5:
                pieces.append(rng.choice(SPECIALS[vocab]))
        text = "".join(pieces)
        whole = enc.encode(text, allowed_special="all")
        data = text.encode("utf-8")
        units, kind = units_of(text)
        for stored, k, n in [(data, lib.BPE_TEXT_UTF8, len(data)), (units, kind, len(text))]:
            cuts = text_cuts(tok, stored, n, k, mode, rng.randrange(20, 300))
            n_cut += len(cuts)
            bounds = [0] + cuts + [n]
            ids = []
            for a, b in zip(bounds, bounds[1:]):
                side = data[a:b].decode("utf-8") if k == lib.BPE_TEXT_UTF8 else text[a:b]
                ids += enc.encode(side, allowed_special="all")
            assert ids == whole, (vocab, seed, k, cuts)
    assert n_cut > 100          # the texts do get cut
