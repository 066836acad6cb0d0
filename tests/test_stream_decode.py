"""StreamDecoder: the streamed text equals tok.decode(ids), and it is emitted as early as
possible and never too early.

The reference for "as early as possible, never too early" is written from the Unicode rule, not
from Python's codec (bytelevel_ref.incomplete_tail_len / utf8_replace_decode): after the bytes P
have been fed, the output so far must be exactly decode(P minus its trailing incomplete-but-
well-formed character prefix).  Anything less is late; anything more emitted a U+FFFD (or a
character) that later bytes could still change.
"""
import itertools
import os
import random
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from bytelevel_ref import (ENCODINGS, hf_gpt2, incomplete_tail_len, tokenizer,  # noqa: E402
                           utf8_chars, utf8_replace_decode)
from conftest import CORPORA, LONG, read_corpus, tiktoken_encoding  # noqa: E402

from bpe_cffi.stream_decode import StreamDecoder  # noqa: E402

KINDS = ["standin", "real"]
SLICE = 400_000 if LONG else 40_000
# bytes that matter to UTF-8: ASCII, every class of continuation byte, each kind of lead byte
# (including the restricted E0/ED/F0/F4), and bytes that never appear in UTF-8
INTERESTING = [0x41, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC2, 0xDF, 0xE0, 0xE1, 0xED,
               0xEF, 0xF0, 0xF1, 0xF4, 0xF5, 0xFF]


def _byte_ids(name):
    enc = tiktoken_encoding(name)
    return [enc.encode_single_token(bytes([b])) for b in range(256)]


def _stream_checked(tok, ids):
    """Feed ids one at a time, checking after every id that the output so far is exactly the
    determined part of the bytes so far; returns the list of pieces (flush last)."""
    dec = StreamDecoder(tok)
    fed = b""
    out = ""
    pieces = []
    for i in ids:
        piece = dec.feed(i)
        pieces.append(piece)
        out += piece
        fed += tok.decode_single_token_bytes(i)
        k = incomplete_tail_len(fed)
        assert out == utf8_replace_decode(fed[:len(fed) - k]), (ids, fed)
        assert dec.pending == fed[len(fed) - k:]
    pieces.append(dec.flush())
    assert dec.pending == b""
    return pieces


@pytest.mark.parametrize("kind", KINDS)
def test_every_short_byte_sequence(kind):
    """Every sequence of 1 or 2 bytes, and of 3 (LONG: 4) interesting bytes, one single-byte
    token each (the decoding logic is the same for both kinds: the real tokenizer gets the
    longer ones only under LONG)."""
    tok = tokenizer(kind, "gpt2")
    one = _byte_ids("gpt2")
    longest = 4 if LONG else 3 if kind == "standin" else 2
    seqs = itertools.chain(itertools.product(range(256), repeat=1),
                           itertools.product(range(256), repeat=2),
                           *(itertools.product(INTERESTING, repeat=n)
                             for n in range(3, longest + 1)))
    for seq in seqs:
        ids = [one[b] for b in seq]
        pieces = _stream_checked(tok, ids)
        assert "".join(pieces) == tok.decode(ids) == bytes(seq).decode("utf-8", "replace")


def _random_ids(name, rng, n):
    enc = tiktoken_encoding(name)
    one = _byte_ids(name)
    out = []
    while len(out) < n:
        r = rng.random()
        if r < 0.5:
            out.append(one[rng.randrange(256)])
        elif r < 0.7:       # bytes of a real multi-byte character, possibly cut short later
            ch = chr(rng.choice([rng.randrange(0x80, 0x800), rng.randrange(0x800, 0xD800),
                                 rng.randrange(0xE000, 0x10000), rng.randrange(0x10000, 0x110000)]))
            out.extend(one[b] for b in ch.encode("utf-8")[:rng.randrange(1, 5)])
        else:
            i = rng.randrange(enc.max_token_value + 1)
            try:
                enc.decode_single_token_bytes(i)
                out.append(i)
            except KeyError:
                pass
    return out[:n]


@pytest.mark.parametrize("name", ENCODINGS)
@pytest.mark.parametrize("kind", KINDS)
def test_random_byte_level_ids(kind, name):
    tok = tokenizer(kind, name)
    rng = random.Random(2024)
    n_invalid = 0
    for _ in range(400 if LONG else 60):
        ids = _random_ids(name, rng, rng.randrange(0, 60))
        data = tok.decode_bytes(ids)
        pieces = _stream_checked(tok, ids)
        assert "".join(pieces) == tok.decode(ids) == utf8_replace_decode(data)
        n_invalid += "\ufffd" in tok.decode(ids)
    assert n_invalid > 10     # the generator does produce invalid UTF-8


@pytest.mark.parametrize("corpus", CORPORA)
@pytest.mark.parametrize("name", ENCODINGS)
@pytest.mark.parametrize("kind", KINDS)
def test_corpus_one_id_at_a_time(kind, name, corpus):
    tok = tokenizer(kind, name)
    text = read_corpus(corpus, SLICE, 1_000_000)
    ids = tok.encode(text)
    data = tok.decode_bytes(ids)
    chars = utf8_chars(data)          # (valid text: one span per character)
    assert len(chars) == len(text)
    dec = StreamDecoder(tok)
    out = []
    emitted = 0                       # characters emitted so far
    c = 0                             # characters that end within the bytes fed so far
    fed = 0
    for i in ids:
        piece = dec.feed(i)
        fed += len(tok.decode_single_token_bytes(i))
        while c < len(chars) and chars[c][1] <= fed:
            c += 1
        # exactly the complete characters are out: none late, no partial one early
        assert text[emitted:emitted + len(piece)] == piece
        emitted += len(piece)
        assert emitted == c
        out.append(piece)
    out.append(dec.flush())
    assert "".join(out) == tok.decode(ids) == text


@pytest.mark.parametrize("kind", KINDS)
def test_feed_many_equals_feed(kind):
    tok = tokenizer(kind, "cl100k_base")
    rng = random.Random(7)
    for _ in range(40):
        ids = _random_ids("cl100k_base", rng, rng.randrange(0, 80))
        single = StreamDecoder(tok)
        expected = [single.feed(i) for i in ids]
        chunked = StreamDecoder(tok)
        pos = 0
        while pos < len(ids):
            step = rng.randrange(1, 6)
            got = chunked.feed_many(ids[pos:pos + step])
            assert got == "".join(expected[pos:pos + step])
            pos += step
        assert chunked.pending == single.pending
        assert chunked.flush() == single.flush()
    assert StreamDecoder(tok).feed_many([]) == ""


def test_flush_and_reset():
    tok = tokenizer("standin", "gpt2")
    one = _byte_ids("gpt2")
    dec = StreamDecoder(tok)
    assert dec.feed(one[ord("a")]) == "a"
    assert dec.feed(one[0xE6]) == ""
    assert dec.feed(one[0x97]) == ""
    assert dec.pending == b"\xe6\x97"
    assert dec.flush() == "\ufffd"          # a truncated character at the end: one U+FFFD
    assert dec.pending == b""
    assert dec.feed(one[0xA5]) == "\ufffd"  # fresh state: a stray continuation byte
    assert dec.feed(one[0xE6]) == ""
    dec.reset()                              # dropped, not emitted
    assert dec.pending == b""
    assert dec.feed(one[0x97]) == "\ufffd"
    assert dec.flush() == ""
    assert "pending" in repr(dec)


def test_invalid_byte_is_emitted_at_once():
    tok = tokenizer("standin", "gpt2")
    one = _byte_ids("gpt2")
    dec = StreamDecoder(tok)
    assert dec.feed(one[0xF0]) == ""
    assert dec.feed(one[0x9F]) == ""
    # "A" ends the truncated F0 9F: one U+FFFD for both bytes, then "A", nothing held back
    assert dec.feed(one[ord("A")]) == "\ufffdA"
    assert dec.feed(one[0xE0]) == ""
    assert dec.feed(one[0x80]) == "\ufffd\ufffd"   # 80 can never follow E0: decided now
    assert dec.feed(one[0xFF]) == "\ufffd"
    assert dec.feed(one[0xED]) == ""
    assert dec.feed(one[0xA0]) == "\ufffd\ufffd"   # ED A0 would be a surrogate
    assert dec.flush() == ""


@pytest.mark.parametrize("kind", KINDS)
def test_unknown_id_leaves_state(kind):
    tok = tokenizer(kind, "gpt2")
    one = _byte_ids("gpt2")
    dec = StreamDecoder(tok)
    assert dec.feed(one[0xE6]) == ""
    for bad in (10 ** 9, -1):
        with pytest.raises((ValueError, KeyError, IndexError, OverflowError)):
            dec.feed(bad)
        with pytest.raises((ValueError, KeyError, IndexError, OverflowError)):
            dec.feed_many([one[0x97], bad])
        assert dec.pending == b"\xe6"
    assert dec.feed(one[0x97]) + dec.feed(one[0xA5]) == "日"


@pytest.mark.parametrize("corpus", CORPORA)
def test_never_behind_hf_decode_stream(corpus):
    """HF DecodeStream waits until the decoded window does not end in U+FFFD; we emit every
    complete character at once.  So at every step HF's output so far is a prefix of ours,
    and on complete text both end equal to the text."""
    pytest.importorskip("tokenizers")
    from tokenizers.decoders import DecodeStream
    hf = hf_gpt2()
    tok = tokenizer("standin", "gpt2")
    text = read_corpus(corpus, 20_000 if not LONG else 200_000, 2_000_000)
    ids = tok.encode(text)
    ours = StreamDecoder(tok)
    theirs = DecodeStream(skip_special_tokens=False)
    a = b = ""
    for i in ids:
        a += ours.feed(i)
        b += theirs.step(hf, i) or ""
        assert a.startswith(b)
    assert a + ours.flush() == b == text


def test_never_behind_hf_decode_stream_on_invalid_utf8():
    """The same on random byte-level ids (invalid UTF-8 included); HF's decode (Rust's lossy
    UTF-8, the same maximal-subpart rule) equals ours."""
    pytest.importorskip("tokenizers")
    from tokenizers.decoders import DecodeStream
    hf = hf_gpt2()
    tok = tokenizer("standin", "gpt2")
    rng = random.Random(11)
    lagged = 0
    for _ in range(300 if LONG else 60):
        ids = _random_ids("gpt2", rng, rng.randrange(1, 30))
        ours = StreamDecoder(tok)
        theirs = DecodeStream(skip_special_tokens=False)
        a = b = ""
        for i in ids:
            a += ours.feed(i)
            b += theirs.step(hf, i) or ""
            assert a.startswith(b), ids
            lagged += len(a) > len(b)
        assert a + ours.flush() == hf.decode(ids) == tok.decode(ids)
    assert lagged > 0        # HF does wait where we need not (e.g. b"a\xe6" -> "a" at once)


def test_token_bytes_are_cached_per_tokenizer():
    """Two tokenizers give the same id different bytes; their decoders must not mix them."""
    a = tokenizer("standin", "gpt2")
    b = tokenizer("standin", "cl100k_base")
    da, db = StreamDecoder(a), StreamDecoder(b)
    differ = 0
    for i in range(0, 50_000, 499):
        for _ in range(2):                       # the second time from the cache
            assert da.feed(i) + da.flush() == a.decode([i])
            assert db.feed(i) + db.flush() == b.decode([i])
        differ += a.decode([i]) != b.decode([i])
    assert differ > 50


@pytest.mark.parametrize("kind", KINDS)
def test_integer_like_ids(kind):
    np = pytest.importorskip("numpy")
    tok = tokenizer(kind, "gpt2")
    ids = tok.encode("naïve 日本 🙂")
    dec = StreamDecoder(tok)
    assert "".join(dec.feed(i) for i in np.array(ids, dtype=np.int64)) + dec.flush() == \
        tok.decode(ids)
    assert dec.feed_many(np.array(ids, dtype=np.uint32)) + dec.flush() == tok.decode(ids)
    for bad in (True, 1.0, "1", None):
        with pytest.raises(TypeError):
            dec.feed(bad)
