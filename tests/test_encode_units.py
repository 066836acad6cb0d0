"""encode / encode_ordinary of a long str that is not all ASCII: C reads its characters where
CPython keeps them (Latin-1, UCS-2 or UCS-4) and converts them to UTF-8 a part at a time as
it encodes (csrc/encode_units.c), cutting where bpe_text_cuts cuts.  Checked against
tiktoken's ids, with special tokens and surrogates placed where the parts end, and against
the unsplit path (encode_batch on one thread converts a text whole) where tiktoken cannot
follow: a word longer than a part, BPE-dropout's random stream."""
import random

import pytest

from bpe_cffi._native import ffi, lib

from conftest import LONG
from pyapi_helpers import VOCABS, ours, reference
from test_batch_cut import SPECIALS, corpus_text, text_cuts, units_of, with_specials

PART_UNITS = 128 * 1024        # csrc/encode_units.c PART_UNITS
SIZE = 1_500_000 if LONG else 700_000


def stored_as(text, kind):
    """text stored as kind (a width of 1, 2 or 4 bytes): characters wider dropped, its letter
    e made a character of that width."""
    limit = {1: 0x100, 2: 0x10000, 4: 0x110000}[kind]
    text = "".join(c for c in text if ord(c) < limit)
    return text.replace("e", {1: "\xe9", 2: "\u0435", 4: "\U0001F600"}[kind])


@pytest.mark.parametrize("vocab", VOCABS)
def test_every_storage_kind_gives_tiktoken_ids(vocab):
    """Latin-1, UCS-2 and UCS-4 texts several parts long, special tokens straddling every
    place a part aims to end: encode (all special tokens allowed) and encode_ordinary give
    tiktoken's ids; a disallowed special token raises."""
    tok, enc = ours(vocab), reference(vocab)
    rng = random.Random(11)
    bases = (PART_UNITS, PART_UNITS // 2, 50_000)
    for kind in (1, 2, 4):
        text = stored_as(corpus_text("en_books", SIZE, seed=kind), kind)
        units, got_kind = units_of(text)
        assert got_kind == kind
        cuts = text_cuts(tok, units, len(text), kind, ffi.NULL, PART_UNITS)
        assert len(cuts) >= len(text) // PART_UNITS - 1      # it is cut into parts
        assert tok.encode_ordinary(text) == enc.encode_ordinary(text), (vocab, kind)
        marked = with_specials(text, SPECIALS[vocab], rng, bases)
        assert tok.encode(marked) == enc.encode(marked, allowed_special="all"), (vocab, kind)
        with pytest.raises(ValueError):
            tok.encode(marked, allowed_special=set(), disallowed_special="all")


@pytest.mark.parametrize("corpus", ["multilingual", "code", "web"])
def test_corpora_give_tiktoken_ids(corpus):
    tok, enc = ours("o200k_base"), reference("o200k_base")
    text = corpus_text(corpus, SIZE) + " \u2014 \U0001F600"      # UCS-4 whatever came before
    assert tok.encode_ordinary(text) == enc.encode_ordinary(text)


def test_surrogates_near_every_cut_give_tiktoken_ids():
    """Lone surrogates and high + low pairs (one character, as tiktoken reads them) around
    every place a part aims to end."""
    tok, enc = ours("cl100k_base"), reference("cl100k_base")
    rng = random.Random(4)
    chars = list(stored_as(corpus_text("en_books", SIZE), 2))
    for k in range(1, len(chars) // (PART_UNITS // 4)):
        for d in range(-30, 6):
            chars[k * (PART_UNITS // 4) + d] = rng.choice(["\ud83d\ude00"[d % 2]] * 4 +
                                                          ["\udfff", " ", "a"])
    text = "".join(chars)
    assert tok.encode_ordinary(text) == enc.encode_ordinary(text)


def test_word_longer_than_a_part_and_disallowed_token_in_a_later_part():
    """A word of 300K letters (no cut inside it) between prose: the ids of the unsplit path.
    A disallowed special token in the last part raises what the unsplit path raises."""
    tok = ours("gpt2")
    rng = random.Random(6)
    prose = stored_as(corpus_text("en_books", 400_000), 2)
    word = "".join(rng.choice("abcd\u0435fgh") for _ in range(300_000))
    text = prose + word + prose
    assert tok.encode(text) == tok.encode_batch([text], num_threads=1)[0]
    bad = text + "<|endoftext|>"
    with pytest.raises(ValueError) as whole:
        tok.encode_batch([bad], num_threads=1, allowed_special=set(), disallowed_special="all")
    with pytest.raises(ValueError) as parts:
        tok.encode(bad, allowed_special=set(), disallowed_special="all")
    assert str(parts.value) == str(whole.value)


def test_dropout_stream_is_that_of_one_call():
    """With BPE-dropout a call draws from a stream of its own: a text long enough for parts is
    still encoded as one call (the same ids as the unsplit path, from the same seed)."""
    from bpe_cffi import Tokenizer, formats
    from conftest import vocab_path
    vocab = formats.read_gpt2_vocab(vocab_path("gpt2_vocab.json"))
    merges = formats.read_gpt2_merges(vocab_path("gpt2_merges.txt"))
    a = Tokenizer(vocab, merges, dropout=0.3, seed=5)
    b = Tokenizer(vocab, merges, dropout=0.3, seed=5)
    text = stored_as(corpus_text("en_books", 600_000), 2)
    got = a.encode(text)
    assert got == b.encode_batch([text], num_threads=1)[0]
    assert a.decode(got) == text


def test_bad_arguments():
    tok = ours("gpt2")
    out = ffi.new("bpe_ids *")
    info = ffi.new("size_t *")
    data = "h\u0435llo".encode("utf-16-le")
    odd = ffi.from_buffer(b"x" + data)                      # UCS-2 units at an odd address
    assert lib.bpe_encode_units(tok._handle(), odd + 1, 5, 2, ffi.NULL, ffi.NULL, out,
                                info) == lib.BPE_ERR_ARG
    assert lib.bpe_encode_units(tok._handle(), data, 5, 3, ffi.NULL, ffi.NULL, out,
                                info) == lib.BPE_ERR_ARG
    assert lib.bpe_encode_units(ffi.NULL, data, 5, 2, ffi.NULL, ffi.NULL, out,
                                info) == lib.BPE_ERR_ARG
    too_high = (0x110000).to_bytes(4, "little")              # no str holds it
    assert lib.bpe_encode_units(tok._handle(), too_high, 1, 4, ffi.NULL, ffi.NULL, out,
                                info) == lib.BPE_ERR_TEXT
    assert out.len == 0
    assert lib.bpe_encode_units(tok._handle(), data, 5, 2, ffi.NULL, ffi.NULL, out,
                                info) == lib.BPE_OK
    assert [out.ids[i] for i in range(out.len)] == tok.encode_ordinary("h\u0435llo")
    lib.bpe_ids_free(out)
