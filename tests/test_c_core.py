"""Tests of the C encoder core at the ffi level (bpe_cffi._native's ffi and lib).

References are independent of the code under test: tiktoken (real vocabularies), and slow
pure-Python implementations of both merge rules (random small vocabularies), a naive search
for special tokens.
"""
import base64
import errno
import json
import os
import random
import threading

import pytest
import regex

from bpe_cffi._native import ffi, lib
from bpe_cffi import patterns

from conftest import LONG, read_corpus, tiktoken_encoding, vocab_path

# ---------------------------------------------------------------------------------------------
# building tokenizers from Python data


class CTok:
    """A bpe_tokenizer built from Python lists, with thin wrappers over the C calls."""

    def __init__(self, tokens, rule, merges=(), specials=(), pattern=0, ignore_merges=0,
                 cache=4096):
        # tokens: [(bytes, id)], merges: [(left_id, right_id)], specials: [(bytes, id)]
        self.rc, self.ptr, self.bad = build(tokens, rule, merges, specials, pattern,
                                            ignore_merges, cache)
        self.n_special = len(specials)

    def ok(self):
        assert self.rc == lib.BPE_OK, (self.rc, self.bad)
        return self

    def close(self):
        if self.ptr != ffi.NULL:
            lib.bpe_tokenizer_free(self.ptr)
            self.ptr = ffi.NULL

    def __del__(self):
        self.close()

    def pieces(self, pieces):
        """Encode a list of byte pieces through bpe_encode_pieces."""
        text = b"".join(pieces)
        ends, pos = [], 0
        for p in pieces:
            pos += len(p)
            ends.append(pos)
        out = ffi.new("bpe_ids *")
        buf = ffi.from_buffer("uint8_t[]", text) if text else ffi.NULL
        rc = lib.bpe_encode_pieces(self.ptr, buf, ffi.new("size_t[]", ends) if ends else ffi.NULL,
                                   len(ends), out)
        ids = list(out.ids[0:out.len])
        lib.bpe_ids_free(out)
        if rc:
            raise CError(rc)
        return ids

    def encode(self, text, mode=None, prefix=None):
        """bpe_encode (prefix None) or bpe_encode_prefix(final=prefix); returns ids or
        (ids, consumed) for prefix."""
        if isinstance(text, str):
            text = text.encode()
        out = ffi.new("bpe_ids *")
        info = ffi.new("size_t *", 12345)
        m = ffi.new("uint8_t[]", list(mode)) if mode is not None else ffi.NULL
        buf = ffi.from_buffer("uint8_t[]", text) if text else ffi.NULL
        if prefix is None:
            rc = lib.bpe_encode(self.ptr, buf, len(text), m, out, info)
        else:
            consumed = ffi.new("size_t *")
            rc = lib.bpe_encode_prefix(self.ptr, buf, len(text), m, int(prefix), out, consumed,
                                       info)
        ids = list(out.ids[0:out.len])
        lib.bpe_ids_free(out)
        if rc:
            raise CError(rc, info[0])
        return ids if prefix is None else (ids, consumed[0])

    def decode(self, ids):
        out = ffi.new("bpe_bytes *")
        bad = ffi.new("size_t *", 12345)
        rc = lib.bpe_decode(self.ptr, ffi.new("uint32_t[]", list(ids)) if ids else ffi.NULL,
                            len(ids), out, bad)
        data = bytes(ffi.buffer(out.data, out.len)) if out.len else b""
        lib.bpe_bytes_free(out)
        if rc:
            raise CError(rc, bad[0])
        return data


class CError(Exception):
    def __init__(self, code, info=None):
        super().__init__(code, info)
        self.code = code
        self.info = info


def build(tokens, rule, merges, specials, pattern, ignore_merges, cache):
    keep = []

    def arr(kind, values):
        a = ffi.new(kind, values) if values else ffi.NULL
        keep.append(a)
        return a

    def blob(items):
        data = b"".join(b for b, _ in items)
        offs = [0]
        for b, _ in items:
            offs.append(offs[-1] + len(b))
        d = ffi.new("uint8_t[]", max(len(data), 1))
        ffi.memmove(d, data, len(data))
        keep.append(d)
        return d, arr("size_t[]", offs), arr("uint32_t[]", [i for _, i in items])

    spec = ffi.new("bpe_spec *")
    spec.rule, spec.pattern, spec.ignore_merges, spec.cache_capacity = (rule, pattern,
                                                                         ignore_merges, cache)
    spec.n_tokens = len(tokens)
    spec.token_bytes, spec.token_offsets, spec.token_ids = blob(tokens)
    spec.n_merges = len(merges)
    spec.merges = arr("uint32_t[]", [x for m in merges for x in m])
    spec.n_special = len(specials)
    spec.special_bytes, spec.special_offsets, spec.special_ids = blob(specials)
    out = ffi.new("bpe_tokenizer **")
    bad = ffi.new("size_t *", 999999)
    rc = lib.bpe_tokenizer_new(spec, out, bad)
    return rc, out[0], bad[0]


# ---- the real vocabularies ------------------------------------------------------------------

def gpt2_byte_decoder():
    vocab_path("offline_tiktoken.py")
    from offline_tiktoken import gpt2_byte_decoder as dec  # conftest put it on sys.path
    return dec()


_CACHE = {}


def real_vocab(name, rule=None):
    """(tokens [(bytes, id)], rule, merges [(id, id)]) of a real vocabulary, read from the
    shared files: gpt2 as vocab.json + merges.txt unless rule asks for the tiktoken rule, the
    others (and gpt2 then) as tiktoken ranks."""
    tiktoken_encoding(name)   # puts offline_tiktoken on sys.path (or skips)
    if name == "gpt2" and rule != lib.BPE_RULE_TIKTOKEN:
        dec = gpt2_byte_decoder()
        vocab = json.loads(vocab_path("gpt2_vocab.json").read_text(encoding="utf-8"))
        tokens = [(bytes(dec[c] for c in t), i) for t, i in vocab.items() if t != "<|endoftext|>"]
        merges = []
        for line in vocab_path("gpt2_merges.txt").read_text(encoding="utf-8").splitlines():
            if line and not line.startswith("#version"):
                a, b = line.split(" ")
                merges.append((vocab[a], vocab[b]))
        return tokens, lib.BPE_RULE_MERGES, merges
    if name == "gpt2":
        from offline_tiktoken import load_ranks
        ranks = load_ranks("gpt2")
    else:
        ranks = {}
        for line in vocab_path(f"{name}.tiktoken").read_bytes().splitlines():
            if line:
                t, r = line.split()
                ranks[base64.b64decode(t)] = int(r)
    return list(ranks.items()), lib.BPE_RULE_TIKTOKEN, ()


def real_tokenizer(name, rule=None, specials=True, pattern=0, cache=4096):
    key = (name, rule, specials, pattern, cache)
    if key in _CACHE:
        return _CACHE[key]
    enc = tiktoken_encoding(name)
    special = sorted(enc._special_tokens.items()) if specials else []
    special = [(s.encode(), i) for s, i in special]
    tokens, rule, merges = real_vocab(name, rule)
    tok = CTok(tokens, rule, merges, special, pattern, int(rule == lib.BPE_RULE_TIKTOKEN),
               cache).ok()
    _CACHE[key] = (tok, enc)
    return tok, enc


PATTERN_OF = {"gpt2": patterns.GPT2, "cl100k_base": patterns.CL100K,
              "o200k_base": patterns.O200K}
PATTERN_ID = {"gpt2": lib.BPE_PATTERN_GPT2, "cl100k_base": lib.BPE_PATTERN_CL100K,
              "o200k_base": lib.BPE_PATTERN_O200K}


def split(name, text):
    return [m.group().encode() for m in regex.finditer(PATTERN_OF[name], text)]


ADVERSARIAL = [
    "a" * 1_000_000,
    " " * 1_000_000,
    "^" * 100_000,
    "\n" * 50_000 + "x",
    "ab" * 100_000,
    "👨‍👩‍👧‍👦🏳️‍🌈" * 300 + " 家族 👍🏽",
    "日本語のテキストと中文文本，한국어 텍스트도 있습니다。" * 50,
    "\x00\x01\x02\x1f\x7f tab\tnul\x00 end\r\n\u200b\u2028" * 100,
    "0123456789" * 5000,
    "'s 're 'LL 'Ve" * 1000,
    "x" + "\u0301" * 5000,
]

NAMES = ["gpt2", "cl100k_base", "o200k_base"]


@pytest.mark.parametrize("name", NAMES)
def test_pieces_match_tiktoken_on_corpus(name):
    tok, enc = real_tokenizer(name)
    for corpus in ["en_books", "multilingual", "code", "web"]:
        text = read_corpus(corpus, 60_000 if not LONG else 2_000_000, offset=12345)
        assert tok.pieces(split(name, text)) == enc.encode_ordinary(text), corpus


@pytest.mark.parametrize("name", NAMES)
def test_pieces_match_tiktoken_on_adversarial(name):
    tok, enc = real_tokenizer(name)
    for text in ADVERSARIAL:
        if len(text) > 200_000 and name != "gpt2":   # the 1 MB cases once (time budget)
            text = text[:200_000]
        pieces = split(name, text)
        try:
            expect = enc.encode_ordinary(text)
        except BaseException:   # tiktoken's regex overflows its stack on some of these
            expect = [i for p in pieces for i in enc._encode_single_piece(p)]
        assert tok.pieces(pieces) == expect, text[:20]
        # and as one single piece (the heap path on a very long piece)
        if len(text) <= 200_000:
            expect = enc._encode_single_piece(text.encode())
            assert tok.pieces([text.encode()]) == expect


def test_gpt2_tiktoken_rule_equals_merge_rule():
    """The GPT-2 vocab under both rules (merges.txt vs ranks) gives the same ids."""
    tok_m, enc = real_tokenizer("gpt2")
    tok_t, _ = real_tokenizer("gpt2", rule=lib.BPE_RULE_TIKTOKEN)
    text = read_corpus("web", 50_000, offset=999)
    p = split("gpt2", text)
    assert tok_m.pieces(p) == tok_t.pieces(p) == enc.encode_ordinary(text)


@pytest.mark.parametrize("cache", [0, 1, 7, 100000])
def test_cache_sizes_do_not_change_ids(cache):
    tok, enc = real_tokenizer("cl100k_base", cache=cache)
    text = read_corpus("en_books", 80_000, offset=5_000_000)
    p = split("cl100k_base", text)
    expect = enc.encode_ordinary(text)
    assert tok.pieces(p) == expect
    assert tok.pieces(p) == expect   # second pass: served from the cache


# ---- slow reference implementations on random small vocabularies ---------------------------

def ref_merges(piece, merge_rank, vocab):
    """GPT-2's original bpe(): repeatedly merge every occurrence of the best-ranked bigram."""
    word = [bytes([b]) for b in piece]
    while len(word) > 1:
        pairs = {(word[i], word[i + 1]) for i in range(len(word) - 1)}
        best = min(pairs, key=lambda p: merge_rank.get(p, float("inf")))
        if best not in merge_rank:
            break
        new, i = [], 0
        while i < len(word):
            if i < len(word) - 1 and (word[i], word[i + 1]) == best:
                new.append(word[i] + word[i + 1])
                i += 2
            else:
                new.append(word[i])
                i += 1
        word = new
    return [vocab[w] for w in word]


def ref_tiktoken(piece, ranks, ignore_merges):
    """tiktoken's rule (as in its _educational.py): merge the adjacent pair whose concatenation
    has the lowest rank, leftmost on ties."""
    if ignore_merges and piece in ranks:
        return [ranks[piece]]
    parts = [bytes([b]) for b in piece]
    while True:
        best = None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and (best is None or r < best[0]):
                best = (r, i)
        if best is None:
            break
        i = best[1]
        parts[i:i + 2] = [parts[i] + parts[i + 1]]
    return [ranks[p] for p in parts]


def random_text(rng, alphabet, n):
    return bytes(rng.choice(alphabet) for _ in range(n))


def random_merge_vocab(rng, alphabet, n_merges):
    tokens = [bytes([b]) for b in range(256)]
    ids = list(range(256))
    rng.shuffle(ids)
    vocab = dict(zip(tokens, ids))
    merges, merge_rank = [], {}
    pool = [bytes([b]) for b in alphabet]
    next_id = 256
    while len(merges) < n_merges:
        a, b = rng.choice(pool), rng.choice(pool)
        if (a, b) in merge_rank or a + b in vocab or len(a + b) > 12:
            continue
        merge_rank[(a, b)] = len(merges)
        merges.append((vocab[a], vocab[b]))
        vocab[a + b] = next_id + rng.randrange(3)   # gaps in the id space
        next_id = vocab[a + b] + 1
        pool.append(a + b)
    return vocab, merges, merge_rank


def random_tiktoken_vocab(rng, alphabet, n_tokens):
    toks = [bytes([b]) for b in range(256)]
    pool = [bytes([b]) for b in alphabet]
    seen = set(toks)
    while len(toks) < 256 + n_tokens:
        if rng.random() < 0.1:   # a token that no merge of two tokens produces
            t = random_text(rng, alphabet, rng.randrange(2, 6))
        else:
            t = rng.choice(pool) + rng.choice(pool)
        if t in seen or len(t) > 12:
            continue
        seen.add(t)
        toks.append(t)
        pool.append(t)
    ranks = list(range(len(toks)))
    rng.shuffle(ranks)
    return dict(zip(toks, ranks))


SEEDS = range(60 if not LONG else 2000)


@pytest.mark.parametrize("seed", SEEDS)
def test_merge_rule_vs_reference(seed):
    rng = random.Random(seed)
    alphabet = rng.sample(b"abcde xyz", rng.randrange(2, 6))
    vocab, merges, merge_rank = random_merge_vocab(rng, alphabet, rng.randrange(1, 60))
    tok = CTok(list(vocab.items()), lib.BPE_RULE_MERGES, merges, cache=rng.choice([0, 3, 64])).ok()
    pieces = [random_text(rng, alphabet, rng.choice([1, 2, 3, 5, 8, 20, 24, 25, 40, 90]))
              for _ in range(40)]
    pieces += pieces[:10]   # repeats hit the cache
    expect = [i for p in pieces for i in ref_merges(p, merge_rank, vocab)]
    assert tok.pieces(pieces) == expect
    tok.close()


@pytest.mark.parametrize("seed", SEEDS)
def test_tiktoken_rule_vs_reference(seed):
    rng = random.Random(1000 + seed)
    alphabet = rng.sample(b"abcde xyz", rng.randrange(2, 6))
    ranks = random_tiktoken_vocab(rng, alphabet, rng.randrange(1, 80))
    ignore = rng.randrange(2)
    tok = CTok(list(ranks.items()), lib.BPE_RULE_TIKTOKEN, ignore_merges=ignore,
               cache=rng.choice([0, 3, 64])).ok()
    pieces = [random_text(rng, alphabet, rng.choice([1, 2, 3, 5, 8, 20, 24, 25, 40, 90]))
              for _ in range(40)]
    pieces += [t for t in rng.sample(sorted(ranks), 10)]   # whole tokens (ignore_merges)
    pieces += pieces[:10]
    expect = [i for p in pieces for i in ref_tiktoken(p, ranks, ignore)]
    assert tok.pieces(pieces) == expect
    tok.close()


def test_narrated_merge_example():
    """'hello' with merges l+l, he, ll+o, he+llo: h e l l o -> h e ll o -> he ll o ->
    he llo -> hello."""
    tokens = [(bytes([b]), b) for b in range(256)]
    tokens += [(b"ll", 300), (b"he", 301), (b"llo", 302), (b"hello", 303)]
    merges = [(108, 108), (104, 101), (300, 111), (301, 302)]
    tok = CTok(tokens, lib.BPE_RULE_MERGES, merges).ok()
    assert tok.pieces([b"hello"]) == [303]
    assert tok.pieces([b"hell"]) == [301, 300]
    # "lllo": l l l o -> (ll) l o [leftmost] -> ll l o has no (l,o) merge -> [300, 108, 111]
    assert tok.pieces([b"lllo"]) == [300, 108, 111]
    tok.close()


# ---- errors in the spec ---------------------------------------------------------------------

def byte_tokens():
    return [(bytes([b]), b) for b in range(256)]


def test_spec_errors():
    E = lib
    # duplicate id
    t = CTok(byte_tokens() + [(b"ab", 5)], E.BPE_RULE_TIKTOKEN)
    assert (t.rc, t.bad) == (E.BPE_ERR_VOCAB, 256)
    # duplicate bytes
    t = CTok(byte_tokens() + [(b"ab", 300), (b"ab", 301)], E.BPE_RULE_TIKTOKEN)
    assert (t.rc, t.bad) == (E.BPE_ERR_VOCAB, 257)
    # empty token
    t = CTok(byte_tokens() + [(b"", 300)], E.BPE_RULE_TIKTOKEN)
    assert (t.rc, t.bad) == (E.BPE_ERR_VOCAB, 256)
    # empty special, duplicate special bytes, special id clashing with another token
    t = CTok(byte_tokens(), E.BPE_RULE_TIKTOKEN, specials=[(b"", 400)])
    assert (t.rc, t.bad) == (E.BPE_ERR_VOCAB, 256)
    t = CTok(byte_tokens(), E.BPE_RULE_TIKTOKEN, specials=[(b"<s>", 400), (b"<s>", 401)])
    assert (t.rc, t.bad) == (E.BPE_ERR_VOCAB, 257)
    t = CTok(byte_tokens(), E.BPE_RULE_TIKTOKEN, specials=[(b"<s>", 7)])
    assert (t.rc, t.bad) == (E.BPE_ERR_VOCAB, 256)
    # merge with an unknown id, merge whose result is not a token
    toks = byte_tokens() + [(b"ab", 300)]
    t = CTok(toks, E.BPE_RULE_MERGES, merges=[(97, 98), (97, 999)])
    assert (t.rc, t.bad) == (E.BPE_ERR_MERGE, 1)
    t = CTok(toks, E.BPE_RULE_MERGES, merges=[(97, 98), (98, 97)])
    assert (t.rc, t.bad) == (E.BPE_ERR_MERGE, 1)
    # bad rule / pattern
    assert CTok(toks, 7).rc == E.BPE_ERR_ARG
    assert CTok(toks, 0, pattern=9).rc == E.BPE_ERR_ARG
    # an absurd id
    assert CTok([(b"a", 2**32 - 1)], 1).rc == E.BPE_ERR_TOOBIG
    # NULL arguments
    assert lib.bpe_tokenizer_new(ffi.NULL, ffi.new("bpe_tokenizer **"), ffi.NULL) == E.BPE_ERR_ARG
    lib.bpe_tokenizer_free(ffi.NULL)


def test_missing_byte_is_nobyte():
    toks = [(bytes([b]), b) for b in range(256) if b != ord("q")] + [(b"qq", 300)]
    t = CTok(toks, lib.BPE_RULE_TIKTOKEN, ignore_merges=1).ok()
    assert t.pieces([b"ab"]) == [97, 98]
    assert t.pieces([b"qq"]) == [300]   # a whole token needs no bytes
    for p in [b"q", b"aq", b"q" * 50]:
        with pytest.raises(CError) as e:
            t.pieces([b"ab", p])
        assert e.value.code == lib.BPE_ERR_NOBYTE


def test_whole_token_lookup_of_long_tokens():
    """A token longer than a table slot holds is found through the offset and length its slot
    keeps (three length bytes: from 2**24 - 1 bytes on, through by_id); a string differing
    from it in length or in its last byte is not it.  ignore_merges and no merges: a piece
    that is a token is one id."""
    lengths = [7, 8, 9, 2**24 - 2, 2**24 - 1, 2**24]
    tokens = byte_tokens() + [(b"%c" % (65 + k) * n, 256 + k) for k, n in enumerate(lengths)]
    tok = CTok(tokens, lib.BPE_RULE_MERGES, ignore_merges=1).ok()

    def token_id(data):
        idp = ffi.new("uint32_t *")
        rc = lib.bpe_token_id(tok.ptr, ffi.from_buffer("uint8_t[]", data), len(data), idp)
        return idp[0] if rc == 0 else None

    for k, n in enumerate(lengths):
        word = b"%c" % (65 + k) * n
        assert tok.pieces([word]) == [256 + k]
        assert token_id(word) == 256 + k
        assert token_id(word[:-1] + b".") is None
        assert token_id(word[:-1]) is None
        assert token_id(word + word[:1]) is None
        if n < 100:
            assert tok.pieces([word[:-1] + b"."]) == list(word[:-1]) + [ord(".")]


def test_token_lookup_and_id_limit():
    tok, enc = real_tokenizer("cl100k_base")
    assert lib.bpe_tokenizer_id_limit(tok.ptr) == enc.n_vocab
    b = ffi.new("uint8_t **")
    n = ffi.new("size_t *")
    for i in [0, 255, 1000, 100255, 100257]:
        assert lib.bpe_token_bytes(tok.ptr, i, ffi.cast("const uint8_t **", b), n) == 0
        data = bytes(ffi.buffer(b[0], n[0]))
        assert data == enc.decode_single_token_bytes(i)
        idp = ffi.new("uint32_t *")
        assert lib.bpe_token_id(tok.ptr, ffi.from_buffer("uint8_t[]", data), len(data), idp) == 0
        assert idp[0] == i
    assert lib.bpe_token_bytes(tok.ptr, 100256, ffi.cast("const uint8_t **", b), n) == \
        lib.BPE_ERR_ID   # a hole in cl100k's id space
    assert lib.bpe_token_bytes(tok.ptr, 10**7, ffi.cast("const uint8_t **", b), n) == \
        lib.BPE_ERR_ID
    assert lib.bpe_token_id(tok.ptr, ffi.from_buffer("uint8_t[]", b"zzqqzzqq!!"), 10,
                            ffi.new("uint32_t *")) == lib.BPE_ERR_ID


def test_decode():
    tok, enc = real_tokenizer("o200k_base")
    text = read_corpus("multilingual", 30_000, offset=777)
    ids = enc.encode(text, allowed_special="all") + [199999]
    assert tok.decode(ids) == enc.decode_bytes(ids)
    assert tok.decode([]) == b""
    with pytest.raises(CError) as e:
        tok.decode([1, 2, 3, 10**8, 5])
    assert (e.value.code, e.value.info) == (lib.BPE_ERR_ID, 3)


# ---- bpe_encode: the C pre-tokenizer + specials, against tiktoken ---------------------------

def native_tokenizer(name, cache=4096):
    return real_tokenizer(name, pattern=PATTERN_ID[name], cache=cache)


def special_modes(tok, enc, mode):
    names = sorted(enc._special_tokens)
    return names, [mode] * len(names)


@pytest.mark.parametrize("name", NAMES)
def test_encode_matches_tiktoken(name):
    tok, enc = native_tokenizer(name)
    names, allowed = special_modes(tok, enc, lib.BPE_SPECIAL_ALLOWED)
    for corpus in ["en_books", "multilingual", "code", "web"]:
        text = read_corpus(corpus, 50_000 if not LONG else 3_000_000, offset=54321)
        text += "<|endoftext|>" + names[-1] + " tail<|endoftext|>"
        assert tok.encode(text) == enc.encode_ordinary(text), corpus
        assert tok.encode(text, mode=[0] * len(names)) == enc.encode_ordinary(text)
        assert tok.encode(text, mode=allowed) == enc.encode(text, allowed_special="all")
    for text in ADVERSARIAL[2:]:
        assert tok.encode(text) == enc.encode_ordinary(text), text[:20]


def test_encode_adversarial_long_pieces_whole():
    """1 MB of 'a' through bpe_encode (pre-tokenizer included) equals tiktoken; spaces at
    200 KB (tiktoken itself is slow on 1 MB of them)."""
    tok, enc = native_tokenizer("cl100k_base")
    for text in [ADVERSARIAL[0], ADVERSARIAL[1][:200_000] + "x"]:
        assert tok.encode(text) == enc.encode_ordinary(text)


def test_disallowed_special():
    tok, enc = native_tokenizer("cl100k_base")
    names, _ = special_modes(tok, enc, 0)
    i = names.index("<|fim_middle|>")
    mode = [lib.BPE_SPECIAL_ALLOWED] * len(names)
    mode[i] = lib.BPE_SPECIAL_DISALLOWED
    assert tok.encode("no special here <|endoftext|>", mode=mode) == \
        enc.encode("no special here <|endoftext|>", allowed_special="all")
    for text in ["<|fim_middle|>", "x" * 5000 + "<|endoftext|> a <|fim_middle|>b"]:
        with pytest.raises(CError) as e:
            tok.encode(text, mode=mode)
        assert (e.value.code, e.value.info) == (lib.BPE_ERR_DISALLOWED, i)
        with pytest.raises(ValueError):
            enc.encode(text, allowed_special=set(names) - {"<|fim_middle|>"})
    with pytest.raises(CError) as e:
        tok.encode("x", mode=[3] * len(names))
    assert e.value.code == lib.BPE_ERR_ARG


def naive_specials(text, specials, mode):
    """Segments of text: a list of bytes (ordinary text) and ints (index of an allowed special),
    or ('disallowed', index)."""
    dis = [(s, -len(specials[i]), i) for i in range(len(specials)) if mode[i] == 2
           for s in range(len(text)) if text.startswith(specials[i], s)]
    if dis:
        return ("disallowed", min(dis)[2])
    out, pos = [], 0
    while True:
        hits = [(s, -len(specials[i]), i) for i in range(len(specials)) if mode[i] == 1
                for s in range(pos, len(text)) if text.startswith(specials[i], s)]
        if not hits:
            out.append(text[pos:])
            return out
        s, _, i = min(hits)
        out += [text[pos:s], i]
        pos = s + len(specials[i])


@pytest.mark.parametrize("seed", range(40))
def test_special_scanner_vs_naive(seed):
    rng = random.Random(seed)
    alpha = b"ab<|>x "
    specials = set()
    while len(specials) < rng.randrange(1, 7):
        specials.add(random_text(rng, alpha, rng.randrange(1, 5)))
    specials = sorted(specials)
    if rng.random() < 0.3:
        specials.append(specials[0] + specials[0])
    sp = [(s, 1000 + i) for i, s in enumerate(specials)]
    tok = CTok(byte_tokens() + [(b"ab", 300), (b" x", 301)], lib.BPE_RULE_TIKTOKEN,
               specials=sp, pattern=lib.BPE_PATTERN_GPT2, ignore_merges=1).ok()
    for _ in range(20):
        text = random_text(rng, alpha, rng.randrange(0, 40))
        mode = [rng.choice([0, 1, 1, 2]) for _ in specials]
        if rng.random() < 0.5:
            mode = [m if m != 2 else 1 for m in mode]
        expect = naive_specials(text, specials, mode)
        if isinstance(expect, tuple):
            with pytest.raises(CError) as e:
                tok.encode(text, mode=mode)
            assert (e.value.code, e.value.info) == (lib.BPE_ERR_DISALLOWED, expect[1])
            continue
        ids = []
        for seg in expect:
            ids += [1000 + seg] if isinstance(seg, int) else (tok.encode(seg) if seg else [])
        assert tok.encode(text, mode=mode) == ids, (text, specials, mode)
    tok.close()


def test_longest_special_wins():
    tok, enc = native_tokenizer("gpt2")
    sp = [(b"<|endoftext|>", 50256), (b"<|endoftext|><|endoftext|>", 50257)]
    t = CTok(byte_tokens(), lib.BPE_RULE_TIKTOKEN, specials=sp, pattern=lib.BPE_PATTERN_GPT2).ok()
    ids = t.encode("a<|endoftext|><|endoftext|><|endoftext|>b", mode=[1, 1])
    assert ids == [97, 50257, 50256, 98]
    assert t.encode("<|endoftext|><|endoftext|>", mode=[1, 0]) == [50256, 50256]


# ---- streaming: bpe_encode_prefix ------------------------------------------------------------

def stream(tok, data, cuts, mode):
    ids, buf, pos = [], b"", 0
    for c in cuts + [len(data)]:
        buf += data[pos:c]
        pos = c
        got, consumed = tok.encode(buf, mode=mode, prefix=False)
        assert 0 <= consumed <= len(buf)
        ids += got
        buf = buf[consumed:]
    got, consumed = tok.encode(buf, mode=mode, prefix=True)
    assert consumed == len(buf)
    return ids + got


@pytest.mark.parametrize("name", NAMES)
def test_prefix_streaming_equals_whole(name):
    tok, enc = native_tokenizer(name)
    names, allowed = special_modes(tok, enc, lib.BPE_SPECIAL_ALLOWED)
    rng = random.Random(7)
    text = read_corpus("multilingual", 20_000, offset=31337)
    text = text[:5000] + "<|endoftext|>" * 3 + text[5000:9000] + "  \n\n  " + names[-1] + \
        text[9000:] + " " * 300 + "<|endo"
    data = text.encode()
    for mode in [None, allowed]:
        whole = tok.encode(data, mode=mode)
        for trial in range(4):
            cuts = sorted(rng.sample(range(1, len(data)), [3, 30, 300, 1000][trial]))
            assert stream(tok, data, cuts, mode) == whole


def test_prefix_holds_back_possible_special():
    tok, enc = native_tokenizer("gpt2")
    for tail in ["<", "<|", "<|endoftext", "<|endoftext|"]:
        text = ("hello world " + tail).encode()
        ids, consumed = tok.encode(text, mode=[1], prefix=False)
        assert consumed <= text.index(b"<")
        ids, consumed = tok.encode(text, mode=[0], prefix=False)   # plain text: no hold
        buf = ffi.from_buffer("uint8_t[]", text)
        assert consumed == lib.bpe_pretok_safe_cut(lib.BPE_PATTERN_GPT2, buf, len(text))
    ids, consumed = tok.encode(b"x<|endoftext|>", mode=[1], prefix=False)
    assert consumed == 14 and ids == [87, 50256]


# ---- batch, threads, fork ---------------------------------------------------------------------

def batch(tok, texts, mode=None, n_threads=0):
    n = len(texts)
    keep = [ffi.from_buffer("uint8_t[]", t) if t else ffi.NULL for t in texts]
    ptrs = ffi.new("uint8_t *[]", keep)
    lens = ffi.new("size_t[]", [len(t) for t in texts])
    outs = ffi.new("bpe_ids[]", n)
    info = ffi.new("size_t *", 12345)
    m = ffi.new("uint8_t[]", list(mode)) if mode is not None else ffi.NULL
    rc = lib.bpe_encode_batch(tok.ptr, n, ffi.cast("const uint8_t *const *", ptrs), lens, m,
                              n_threads, outs, info)
    res = [list(outs[i].ids[0:outs[i].len]) for i in range(n)]
    for i in range(n):
        lib.bpe_ids_free(ffi.addressof(outs, i))
    if rc:
        assert all(r == [] for r in res)
        raise CError(rc, info[0])
    return res


def corpus_texts(n, size):
    text = read_corpus("web", n * size, offset=4242)
    return [text[i * size:(i + 1) * size].encode() for i in range(n)]


def test_batch_equals_single():
    tok, enc = native_tokenizer("o200k_base")
    texts = corpus_texts(40, 5000) + [b"", b"<|endoftext|>x", b"a" * 100_000]
    expect = [tok.encode(t) for t in texts]
    for n_threads in [0, 1, 2, 5]:
        assert batch(tok, texts, n_threads=n_threads) == expect
    mode = [1, 1]
    assert batch(tok, texts, mode=mode)[41] == enc.encode("<|endoftext|>x",
                                                          allowed_special="all")
    bad = [b"fine"] * 30 + [b"<|endoftext|>"] + [b"ok"] * 5 + [b"<|endoftext|>"]
    with pytest.raises(CError) as e:
        batch(tok, bad, mode=[2, 2], n_threads=3)
    assert (e.value.code, e.value.info) == (lib.BPE_ERR_DISALLOWED, 30)


def flat_batch(tok, texts, mode=None, n_threads=2):
    """bpe_encode_batch_flat on texts laid end to end: (per-text id lists, rc, info, ids in
    the output buffer)."""
    ends = ffi.new("size_t[]", [sum(map(len, texts[:i + 1])) for i in range(len(texts))])
    out_ends = ffi.new("size_t[]", max(1, len(texts)))
    out = ffi.new("bpe_ids *")
    info = ffi.new("size_t *")
    cmode = ffi.new("uint8_t[]", mode) if mode else ffi.NULL
    rc = lib.bpe_encode_batch_flat(tok.ptr, len(texts), b"".join(texts), ends, cmode,
                                   n_threads, out, out_ends, info)
    flat = ffi.unpack(out.ids, out.len) if out.len else []
    lists, start = [], 0
    if rc == lib.BPE_OK:
        for i in range(len(texts)):
            lists.append(flat[start:out_ends[i]])
            start = out_ends[i]
    lib.bpe_ids_free(out)
    return lists, rc, info[0], flat


def test_flat_batch_equals_single():
    tok, enc = native_tokenizer("o200k_base")
    texts = corpus_texts(40, 5000) + [b"", b"<|endoftext|>x", b"", b"a" * 100_000]
    expect = [tok.encode(t) for t in texts]
    for n_threads in [0, 1, 2, 5]:
        lists, rc, _, _ = flat_batch(tok, texts, n_threads=n_threads)
        assert rc == lib.BPE_OK
        assert lists == expect
    lists, rc, _, _ = flat_batch(tok, texts, mode=[1, 1])
    assert lists[41] == enc.encode("<|endoftext|>x", allowed_special="all")
    assert flat_batch(tok, [])[:2] == ([], lib.BPE_OK)


def test_flat_batch_errors_leave_the_output_alone():
    tok, _ = native_tokenizer("o200k_base")
    bad = [b"fine"] * 30 + [b"<|endoftext|>"] + [b"ok"] * 5
    _, rc, info, left = flat_batch(tok, bad, mode=[2, 2], n_threads=3)
    assert (rc, info, left) == (lib.BPE_ERR_DISALLOWED, 30, [])
    # ends that go backwards are an argument error, not a huge length and a crash
    ends = ffi.new("size_t[]", [4, 2])
    out = ffi.new("bpe_ids *")
    out_ends = ffi.new("size_t[]", 2)
    rc = lib.bpe_encode_batch_flat(tok.ptr, 2, b"abcd", ends, ffi.NULL, 1, out, out_ends,
                                   ffi.NULL)
    assert rc == lib.BPE_ERR_ARG and out.len == 0
    lib.bpe_ids_free(out)


@pytest.mark.parametrize("n_threads,pad", [(1, 0), (1, 100_000), (3, 100_000)])
def test_flat_batch_appends_and_fails_back_to_its_length(n_threads, pad):
    """The ids are appended after what *out already holds, and a failure (here the last
    text, after others were encoded into *out) cuts it back to that length; on one thread
    (the texts straight into *out) as on several (a buffer per text, then gathered)."""
    tok, _ = native_tokenizer("o200k_base")
    mode = ffi.new("uint8_t[]", [2, 2])
    out, info = ffi.new("bpe_ids *"), ffi.new("size_t *")
    first = [b"kept " * 3]
    assert lib.bpe_encode_batch_flat(tok.ptr, 1, first[0], ffi.new("size_t[]", [15]), mode,
                                     n_threads, out, ffi.new("size_t[]", 1), info) == 0
    kept = ffi.unpack(out.ids, out.len)
    assert kept == tok.encode(first[0])
    for texts in ([b"x" * pad + b"ok", b"more", b"<|endoftext|>"],
                  [b"x" * pad + b"ok", b"more", b"fine"]):
        ends = ffi.new("size_t[]", [sum(map(len, texts[:i + 1])) for i in range(len(texts))])
        out_ends = ffi.new("size_t[]", len(texts))
        rc = lib.bpe_encode_batch_flat(tok.ptr, len(texts), b"".join(texts), ends, mode,
                                       n_threads, out, out_ends, info)
        if texts[-1] == b"fine":
            assert rc == lib.BPE_OK
            got = ffi.unpack(out.ids, out.len)
            assert got[:len(kept)] == kept
            starts = [len(kept)] + [out_ends[i] for i in range(len(texts) - 1)]
            assert [got[a:out_ends[i]] for i, a in enumerate(starts)] == \
                [tok.encode(t) for t in texts]
        else:
            assert (rc, info[0]) == (lib.BPE_ERR_DISALLOWED, 2)
            assert ffi.unpack(out.ids, out.len) == kept
    lib.bpe_ids_free(out)


def str_storage(text):
    """(buffer, code units, BPE_TEXT_* kind) holding a str as CPython does: ASCII as UTF-8,
    else one unit of 1, 2 or 4 bytes per character, by the widest character (lone surrogates
    stay units of their own)."""
    top = max(map(ord, text), default=0)
    if top < 0x80:
        return ffi.new("uint8_t[]", text.encode("ascii") or b"\0"), len(text), lib.BPE_TEXT_UTF8
    kind, ctype = ((lib.BPE_TEXT_LATIN1, "uint8_t[]") if top < 0x100 else
                   (lib.BPE_TEXT_UCS2, "uint16_t[]") if top < 0x10000 else
                   (lib.BPE_TEXT_UCS4, "uint32_t[]"))
    return ffi.new(ctype, [ord(c) for c in text]), len(text), kind


def job_batch(tok, texts, mode=None, n_threads=2, stop_after=None, scattered=False,
              units=False, poll=False, steps=None, opened=None, released=None):
    """bpe_batch_start/next/finish: (per-text id lists, rc, info).  stop_after: finish the
    job after that many groups (an early exit) and return what was collected.  scattered:
    each text in its own buffer, given by `starts`, instead of all end to end.  units: texts
    are strs, each given as CPython stores it (str_storage).  poll: bpe_batch_poll first,
    bpe_batch_next only when it says BPE_BATCH_PENDING.  steps: a list, to take the groups
    with bpe_batch_poll and bpe_batch_step (as the id-list helper does) and append to it the
    number of BPE_BATCH_PENDING steps before each group.  opened: bpe_batch_open (told of
    that many texts) and bpe_batch_begin instead of bpe_batch_start.  released (with
    scattered): a list, to append to it the *info of each group returned (1: no encoder reads
    its texts any more), and then at once overwrite the buffers of those texts with "Z"s."""
    assert released is None or scattered
    data, starts, kinds, lengths = b"".join(texts) if not units else ffi.NULL, ffi.NULL, \
        ffi.NULL, [len(t) for t in texts]
    if scattered:
        buffers = [ffi.new("uint8_t[]", t) for t in texts]   # kept alive until the end
        data, starts = ffi.NULL, ffi.new("uint8_t *[]", buffers)
    if units:
        stored = [str_storage(t) for t in texts]             # kept alive until the end
        starts = ffi.new("uint8_t *[]", [ffi.cast("uint8_t *", b) for b, _, _ in stored])
        kinds = ffi.new("uint8_t[]", [kind for _, _, kind in stored])
    ends = ffi.new("size_t[]", [sum(lengths[:i + 1]) for i in range(len(texts))])
    cmode = ffi.new("uint8_t[]", mode) if mode else ffi.NULL
    job_p = ffi.new("bpe_batch_job **")
    if opened is None:
        rc = lib.bpe_batch_start(tok.ptr, len(texts), data, starts, ends, kinds, cmode,
                                 n_threads, job_p)
    else:
        assert lib.bpe_batch_open(tok.ptr, n_threads, opened, job_p) == lib.BPE_OK
        rc = lib.bpe_batch_begin(job_p[0], len(texts), data, starts, ends, kinds, cmode)
        if rc:
            lib.bpe_batch_finish(job_p[0])
    if rc:
        return [], rc, None
    first, count = ffi.new("size_t *"), ffi.new("size_t *")
    ids, id_ends, info = ffi.new("uint32_t **"), ffi.new("size_t **"), ffi.new("size_t *")
    lists, groups = [None] * len(texts), 0
    try:
        while stop_after is None or groups < stop_after:
            rc = lib.BPE_BATCH_PENDING
            if poll:
                rc = lib.bpe_batch_poll(job_p[0], first, count, ids, id_ends, info)
                assert rc != lib.BPE_BATCH_PENDING or count[0] == 0
            if steps is not None:
                rc = lib.bpe_batch_poll(job_p[0], first, count, ids, id_ends, info)
                steps.append(0)
                while rc == lib.BPE_BATCH_PENDING:
                    rc = lib.bpe_batch_step(job_p[0], first, count, ids, id_ends, info)
                    steps[-1] += rc == lib.BPE_BATCH_PENDING
            if rc == lib.BPE_BATCH_PENDING:
                rc = lib.bpe_batch_next(job_p[0], first, count, ids, id_ends, info)
            if rc:
                return lists, rc, info[0]
            if count[0] == 0:
                break
            start = 0
            for k in range(count[0]):                  # groups come in any order
                end = id_ends[0][k]
                assert lists[first[0] + k] is None     # ... each exactly once
                lists[first[0] + k] = ffi.unpack(ids[0] + start, end - start) \
                    if end > start else []
                start = end
            if released is not None:
                released.append(info[0])
            for k in range(first[0], first[0] + count[0]) if released and info[0] else ():
                ffi.memmove(buffers[k], b"Z" * len(texts[k]), len(texts[k]))
                buffers[k] = None     # freed: a read after it is the sanitizer's to report
            groups += 1
        assert stop_after is not None or None not in lists
    finally:
        lib.bpe_batch_finish(job_p[0])
    return lists, lib.BPE_OK, None


def test_job_batch_equals_single():
    tok, enc = native_tokenizer("o200k_base")
    texts = corpus_texts(300, 3000) + [b"", b"<|endoftext|>x", b""] + \
        corpus_texts(5, 200_000) + [b"a" * 100_000]          # many groups, and big texts
    expect = [tok.encode(t) for t in texts]
    for n_threads in [0, 1, 2, 5, 2, 3, 5]:   # repeated: groups finish in varied orders,
        assert job_batch(tok, texts, n_threads=n_threads) == (expect, lib.BPE_OK, None)
    for n_threads in [1, 2, 3]:               # each text where it lies
        assert job_batch(tok, texts, n_threads=n_threads, scattered=True) == \
            (expect, lib.BPE_OK, None)
    for n_threads, opened in [(2, len(texts)), (3, len(texts)), (0, len(texts)), (3, 1),
                              (1, len(texts))]:   # workers started before the texts come
        assert job_batch(tok, texts, n_threads=n_threads, opened=opened) == \
            (expect, lib.BPE_OK, None)
    slow_tail = corpus_texts(200, 2000) + [b"x" * 300_000, b"y" * 300_000]
    for n_threads in [2, 3]:                  # workers busy at the end: the caller re-encodes
        assert job_batch(tok, slow_tail, n_threads=n_threads)[0] == \
            [tok.encode(t) for t in slow_tail]
    lists, rc, _ = job_batch(tok, texts, mode=[1, 1])
    assert rc == lib.BPE_OK and lists[301] == enc.encode("<|endoftext|>x",
                                                         allowed_special="all")
    assert job_batch(tok, []) == ([], lib.BPE_OK, None)
    assert job_batch(tok, [b"", b""]) == ([[], []], lib.BPE_OK, None)


def test_job_batch_texts_said_released_are_read_no_more():
    """A group comes back with *info 1 when no encoder reads its texts any more: the caller
    may let them go (encode_batch drops its references to the strs).  Here they are
    overwritten and freed at once, and every text's ids must still be its own (and the
    sanitizer run sees any read of a freed one, also by a copy whose ids are thrown away:
    the slow tail makes the caller encode groups a second time).  Only a group that the
    caller encoded a second time while a worker was still at it (at the tail: at most one
    per worker) may come back with 0; one thread alone never does that."""
    tok, _ = native_tokenizer("gpt2")
    texts = corpus_texts(300, 3000) + corpus_texts(2, 1_200_000) + \
        [b"", b"x" * 300_000, b"y" * 300_000]
    expect = [tok.encode(t) for t in texts]       # the 1.2 MB ones are cut into parts
    for n_threads in [1, 2, 3, 5, 2, 3]:
        released = []
        assert job_batch(tok, texts, n_threads=n_threads, scattered=True,
                         released=released) == (expect, lib.BPE_OK, None)
        assert set(released) <= {0, 1}
        assert released.count(0) <= n_threads - 1
        assert released.count(1) > len(released) // 2


def random_str(rng, n):
    """n characters drawn from every storage width: ASCII, Latin-1, the BMP, astral planes,
    and surrogates alone, in pairs and out of order."""
    pools = ["abc xyz.,!\n", "éßñ\xa0ÿ", "漢字Жא\u2019\u2014", "\U0001F600\U00010348\U0010FFFF",
             "\ud800\udbff\udc00\udfff", "\ud83d\ude00"]
    return "".join(rng.choice(rng.choice(pools)) for _ in range(n))


def test_job_batch_reads_strs_where_python_keeps_them():
    """Texts given as CPython stores a str (kinds: Latin-1, UCS-2, UCS-4 code units): the
    encoders' UTF-8 is Python's (lone surrogates as U+FFFD, a high and a low one as their
    pair's character, bpe_cffi's rule for a str), on any number of threads."""
    from bpe_cffi.tokenizer import _utf8
    tok, _ = native_tokenizer("o200k_base")
    rng = random.Random(11)
    texts = [random_str(rng, rng.choice([0, 1, 2, 3, 7, 40, 300])) for _ in range(400)]
    texts += [t.decode() for t in corpus_texts(40, 3000)] + ["", "ÿ" * 70_000, "a\ud800"]
    texts += ["\ud800", "\udc00x", "x\ud800\udc00", "\U0001F600\ud800", "\U0001F600\udfff"]
    kinds = {str_storage(t)[2] for t in texts}
    assert kinds == {lib.BPE_TEXT_UTF8, lib.BPE_TEXT_LATIN1, lib.BPE_TEXT_UCS2,
                     lib.BPE_TEXT_UCS4}
    expect = [tok.encode(_utf8(t)) for t in texts]
    for n_threads in [1, 2, 3]:
        assert job_batch(tok, texts, n_threads=n_threads, units=True) == \
            (expect, lib.BPE_OK, None)


def test_job_batch_refuses_a_code_point_above_unicode():
    """A UCS-4 text holding a value above U+10FFFF (no str can) fails with BPE_ERR_TEXT,
    naming the first such text."""
    tok, _ = native_tokenizer("cl100k_base")
    good = ffi.new("uint32_t[]", [0x1F600, ord("a")])
    bad = ffi.new("uint32_t[]", [ord("a"), 0x110000])
    where = [good, bad, good, bad]
    starts = ffi.new("uint8_t *[]", [ffi.cast("uint8_t *", b) for b in where])
    kinds = ffi.new("uint8_t[]", [lib.BPE_TEXT_UCS4] * 4)
    ends = ffi.new("size_t[]", [2, 4, 6, 8])
    job_p = ffi.new("bpe_batch_job **")
    for n_threads in [1, 2]:
        assert lib.bpe_batch_start(tok.ptr, 4, ffi.NULL, starts, ends, kinds, ffi.NULL,
                                   n_threads, job_p) == lib.BPE_OK
        first, count = ffi.new("size_t *"), ffi.new("size_t *")
        ids, id_ends, info = ffi.new("uint32_t **"), ffi.new("size_t **"), ffi.new("size_t *")
        try:
            rc = lib.bpe_batch_next(job_p[0], first, count, ids, id_ends, info)
            assert (rc, info[0]) == (lib.BPE_ERR_TEXT, 1)
        finally:
            lib.bpe_batch_finish(job_p[0])


def test_job_batch_reports_the_first_failing_text():
    tok, _ = native_tokenizer("o200k_base")
    texts = [t.replace(b"<|endoftext|>", b"") for t in corpus_texts(200, 3000)]
    for bad_at in [[0], [150], [199], [120, 40, 180], [41, 42]]:
        t = list(texts)
        for i in bad_at:
            t[i] = t[i][:1000] + b"<|endoftext|>" + t[i][1000:]
        for n_threads in [1, 2, 4]:
            lists, rc, info = job_batch(tok, t, mode=[2, 2], n_threads=n_threads)
            assert (rc, info) == (lib.BPE_ERR_DISALLOWED, min(bad_at))
            assert all(lists[i] is None for i in bad_at)   # what came before is right
            assert all(x is None or x == tok.encode(t[i])
                       for i, x in enumerate(lists))


def outcome_within(fn, seconds=60):
    """fn() run on a thread of its own: "done", the repr of what it raised, or "never ended"
    when it has not returned within `seconds` (a hung job is left behind instead of hanging
    the test run)."""
    outcome = []

    def run():
        try:
            fn()
            outcome.append("done")
        except Exception as exc:                  # noqa: BLE001 - the outcome
            outcome.append(repr(exc))

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    runner.join(seconds)
    return outcome[0] if outcome else "never ended"


def test_job_batch_collected_step_by_step_never_waits_for_nothing():
    """Jobs of two equal groups on two threads, taken with bpe_batch_poll and bpe_batch_step
    as the id-list helper takes them, doing little with each group (so that the worker
    often publishes the last group, and ends, just after the caller found nothing to take
    and before it waits).  The caller must still see that group: it used to wait for a
    further one, for ever (within ~1500 jobs here).  A job that does not end within a minute
    fails the test instead of hanging it."""
    tok, _ = native_tokenizer("gpt2")
    texts = [(b"The quick brown fox jumps over the lazy dog. " * 1500)[:66_000]] * 2
    assert job_batch(tok, texts, steps=[]) == ([tok.encode(t) for t in texts], lib.BPE_OK,
                                                None)
    data = b"".join(texts)
    ends = ffi.new("size_t[]", [len(texts[0]), len(data)])
    first, count = ffi.new("size_t *"), ffi.new("size_t *")
    ids, id_ends, info = ffi.new("uint32_t **"), ffi.new("size_t **"), ffi.new("size_t *")
    job_p = ffi.new("bpe_batch_job **")

    def one_job():
        assert lib.bpe_batch_start(tok.ptr, 2, data, ffi.NULL, ends, ffi.NULL, ffi.NULL, 2,
                                   job_p) == lib.BPE_OK
        texts_got = 0
        try:
            while True:
                rc = lib.bpe_batch_poll(job_p[0], first, count, ids, id_ends, info)
                while rc == lib.BPE_BATCH_PENDING:
                    rc = lib.bpe_batch_step(job_p[0], first, count, ids, id_ends, info)
                if rc or count[0] == 0:
                    return rc, texts_got
                texts_got += count[0]
        finally:
            lib.bpe_batch_finish(job_p[0])

    def jobs():
        for _ in range(4000 if not LONG else 40_000):
            got = one_job()
            assert got == (lib.BPE_OK, 2), got

    assert outcome_within(jobs) == "done"


def test_job_batch_opened_before_its_texts():
    """bpe_batch_open starts the workers, which wait for bpe_batch_begin.  A job finished
    without ever being begun ends (its waiting workers woken), as does one cancelled before
    its texts come (then BPE_ERR_CANCELLED); nothing is taken from a job not begun, a job is
    begun once, and a refused begin leaves it to be finished.  Each within seconds: a job
    that never ends fails the test instead of hanging it."""
    tok, _ = native_tokenizer("gpt2")
    texts = corpus_texts(50, 20_000)
    data = b"".join(texts)
    ends = ffi.new("size_t[]", [sum(map(len, texts[:i + 1])) for i in range(len(texts))])
    first, count = ffi.new("size_t *"), ffi.new("size_t *")
    ids, id_ends, info = ffi.new("uint32_t **"), ffi.new("size_t **"), ffi.new("size_t *")

    def cases():
        job_p = ffi.new("bpe_batch_job **")
        assert lib.bpe_batch_open(ffi.NULL, 2, 10, job_p) == lib.BPE_ERR_ARG
        assert job_p[0] == ffi.NULL
        for _ in range(20):                       # never begun
            assert lib.bpe_batch_open(tok.ptr, 3, 50, job_p) == lib.BPE_OK
            assert lib.bpe_batch_next(job_p[0], first, count, ids, id_ends,
                                      info) == lib.BPE_ERR_ARG
            lib.bpe_batch_finish(job_p[0])
        for _ in range(20):                       # cancelled, then begun
            assert lib.bpe_batch_open(tok.ptr, 2, 50, job_p) == lib.BPE_OK
            lib.bpe_batch_cancel(job_p[0])
            assert lib.bpe_batch_begin(job_p[0], len(texts), data, ffi.NULL, ends, ffi.NULL,
                                       ffi.NULL) == lib.BPE_OK
            rc = lib.bpe_batch_next(job_p[0], first, count, ids, id_ends, info)
            assert rc == lib.BPE_ERR_CANCELLED, rc
            lib.bpe_batch_finish(job_p[0])
        assert lib.bpe_batch_open(tok.ptr, 2, 50, job_p) == lib.BPE_OK
        assert lib.bpe_batch_begin(job_p[0], 1, data, ffi.NULL, ends, ffi.NULL,
                                   ffi.new("uint8_t[]", [7])) == lib.BPE_ERR_ARG   # bad mode
        assert lib.bpe_batch_begin(job_p[0], len(texts), data, ffi.NULL, ends, ffi.NULL,
                                   ffi.NULL) == lib.BPE_ERR_ARG    # only once, even then
        assert lib.bpe_batch_next(job_p[0], first, count, ids, id_ends,
                                  info) == lib.BPE_ERR_ARG
        lib.bpe_batch_finish(job_p[0])
        assert lib.bpe_batch_open(tok.ptr, 2, 50, job_p) == lib.BPE_OK
        assert lib.bpe_batch_begin(job_p[0], len(texts), data, ffi.NULL, ends, ffi.NULL,
                                   ffi.NULL) == lib.BPE_OK
        assert lib.bpe_batch_begin(job_p[0], len(texts), data, ffi.NULL, ends, ffi.NULL,
                                   ffi.NULL) == lib.BPE_ERR_ARG
        lib.bpe_batch_finish(job_p[0])

    assert outcome_within(cases) == "done"


def test_job_batch_early_finish_and_bad_arguments():
    tok, _ = native_tokenizer("gpt2")
    texts = corpus_texts(400, 4000)
    for stop_after in [0, 1, 3]:                 # finish while workers are still encoding
        lists, rc, _ = job_batch(tok, texts, n_threads=3, stop_after=stop_after)
        got = [(i, x) for i, x in enumerate(lists) if x is not None]
        assert rc == lib.BPE_OK and len(got) < 100
        assert all(x == tok.encode(texts[i]) for i, x in got)
    job_p = ffi.new("bpe_batch_job **")
    ends = ffi.new("size_t[]", [4, 2])             # decreasing ends
    assert lib.bpe_batch_start(tok.ptr, 2, b"abcd", ffi.NULL, ends, ffi.NULL, ffi.NULL, 2,
                               job_p) == lib.BPE_ERR_ARG
    assert job_p[0] == ffi.NULL
    assert lib.bpe_batch_start(tok.ptr, 1, b"abcd", ffi.NULL, ends, ffi.NULL,
                               ffi.new("uint8_t[]", [7]), 2, job_p) == lib.BPE_ERR_ARG
    ends = ffi.new("size_t[]", [2, 4])
    assert lib.bpe_batch_start(tok.ptr, 2, ffi.NULL, ffi.NULL, ends, ffi.NULL, ffi.NULL, 2,
                               job_p) == lib.BPE_ERR_ARG    # neither data nor starts
    kinds = ffi.new("uint8_t[]", [lib.BPE_TEXT_UTF8] * 2)
    assert lib.bpe_batch_start(tok.ptr, 2, b"abcd", ffi.NULL, ends, kinds, ffi.NULL, 2,
                               job_p) == lib.BPE_ERR_ARG    # kinds without starts
    wide = ffi.new("uint32_t[]", [ord("a")] * 3)
    one = ffi.new("uint8_t *[]", [ffi.cast("uint8_t *", wide)])
    odd = ffi.new("uint8_t *[]", [ffi.cast("uint8_t *", wide) + 1])
    for kind, where, rc in [(3, one, lib.BPE_ERR_ARG), (lib.BPE_TEXT_UCS4, odd, lib.BPE_ERR_ARG),
                            (lib.BPE_TEXT_UCS2, odd, lib.BPE_ERR_ARG),
                            (lib.BPE_TEXT_UCS4, one, lib.BPE_OK)]:
        assert lib.bpe_batch_start(tok.ptr, 1, ffi.NULL, where, ffi.new("size_t[]", [2]),
                                   ffi.new("uint8_t[]", [kind]), ffi.NULL, 2, job_p) == rc
        lib.bpe_batch_finish(job_p[0] if rc == lib.BPE_OK else ffi.NULL)
    lib.bpe_batch_finish(ffi.NULL)


def test_python_threads_share_one_tokenizer():
    tok, enc = native_tokenizer("cl100k_base", cache=512)
    texts = [t.decode("utf-8", "ignore") for t in corpus_texts(16, 20_000)]
    expect = [enc.encode_ordinary(t) for t in texts]
    errors = []

    def work(k):
        try:
            for r in range(3):
                for i in range(k, len(texts), 8):
                    if tok.encode(texts[i]) != expect[i]:
                        errors.append((k, i))
        except Exception as exc:   # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_fork_after_batch():
    tok, enc = native_tokenizer("gpt2")
    texts = corpus_texts(8, 40_000)
    expect = batch(tok, texts, n_threads=2)
    pid = os.fork()
    if pid == 0:   # the child: single and batch encoding must still work
        ok = 0
        try:
            ok = int(batch(tok, texts, n_threads=2) == expect and
                     [tok.encode(t) for t in texts] == expect)
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert batch(tok, texts, n_threads=2) == expect


# ---- bpe_encode_file ---------------------------------------------------------------------------

def encode_file(tok, src, dst, width=4, mode=None, n_threads=2, cancel=False):
    prog = ffi.new("bpe_progress *")
    prog.cancel = int(cancel)
    n = ffi.new("uint64_t *")
    info = ffi.new("size_t *", 12345)
    m = ffi.new("uint8_t[]", list(mode)) if mode is not None else ffi.NULL
    with open(dst, "wb") as out:    # C writes into the caller's descriptor
        rc = lib.bpe_encode_file(tok.ptr, str(src).encode(), out.fileno(), width, m, n_threads,
                                 prog, n, info)
    if rc:
        raise CError(rc, info[0])
    return n[0], prog.done, prog.total


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setenv("BPE_CFFI_FILE_CHUNK", "997")


def read_ids(path, width):
    import numpy as np
    return np.fromfile(path, dtype="<u2" if width == 2 else "<u4").tolist()


def utf8_replacement_is_built(tmp_path):
    """False while csrc/utf8.c is still the weak stand-in (it copies bytes unchanged)."""
    tok, _ = native_tokenizer("gpt2")
    src, dst = tmp_path / "probe.txt", tmp_path / "probe.bin"
    src.write_bytes(b"\xff")
    encode_file(tok, src, dst)
    ok = read_ids(dst, 4) == tok.encode("\ufffd")
    dst.unlink()
    src.unlink()
    return ok


def check_file(tmp_path, tok, raw, mode, width):
    src = tmp_path / "in.txt"
    src.write_bytes(raw)
    text = raw.decode("utf-8", errors="replace").encode()
    expect = tok.encode(text, mode=mode)
    for threads in [1, 2, 3]:
        dst = tmp_path / f"out{threads}.bin"
        n, done, total = encode_file(tok, src, dst, width, mode, threads)
        assert read_ids(dst, width) == expect and n == len(expect)
        assert done == total == len(raw)
    assert [p.name for p in tmp_path.iterdir() if "tmp" in p.name] == []


@pytest.mark.parametrize("name", ["gpt2", "o200k_base"])
def test_encode_file_equals_encode(tmp_path, small_chunks, name):
    tok, enc = native_tokenizer(name)
    names, allowed = special_modes(tok, enc, lib.BPE_SPECIAL_ALLOWED)
    raw = read_corpus("multilingual", 30_000, offset=2024).encode()
    raw = raw[:9000] + b"<|endoftext|>" + b" " * 3000 + raw[9000:] + b"<|endo"
    for mode in [None, allowed]:
        check_file(tmp_path, tok, raw, mode, 2 if name == "gpt2" else 4)


def test_encode_file_replaces_invalid_utf8(tmp_path, small_chunks):
    if not utf8_replacement_is_built(tmp_path):
        pytest.skip("csrc/utf8.c not merged yet (weak stand-in)")
    tok, enc = native_tokenizer("cl100k_base")
    raw = read_corpus("multilingual", 30_000, offset=2024).encode()
    # invalid UTF-8 scattered around, some on chunk boundaries, and a truncated tail
    raw = raw[:996] + b"\xe2\x82" + raw[996:5000] + b"\xff\xfe" + raw[5000:9000] + \
        b"\xed\xa0\x80" + raw[9000:] + b"\xf0\x9f\x98"
    check_file(tmp_path, tok, raw, None, 4)


def test_encode_file_errors(tmp_path):
    tok, enc = native_tokenizer("cl100k_base")
    src = tmp_path / "in.txt"
    src.write_bytes(b"hello <|endoftext|> world " * 1000)
    dst = tmp_path / "out.bin"
    with pytest.raises(CError) as e:   # cl100k ids do not fit in 16 bits
        encode_file(tok, src, dst, width=2)
    assert e.value.code == lib.BPE_ERR_ARG
    with pytest.raises(CError) as e:
        encode_file(tok, src, dst, cancel=True)
    assert e.value.code == lib.BPE_ERR_CANCELLED
    names, _ = special_modes(tok, enc, 0)
    mode = [2 if n == "<|endoftext|>" else 0 for n in names]
    with pytest.raises(CError) as e:
        encode_file(tok, src, dst, mode=mode)
    assert (e.value.code, e.value.info) == (lib.BPE_ERR_DISALLOWED, names.index("<|endoftext|>"))
    with pytest.raises(CError) as e:
        encode_file(tok, tmp_path / "missing.txt", dst)
    assert e.value.code == lib.BPE_ERR_IO
    with open(src, "rb") as read_only:           # a descriptor not open for writing
        rc = lib.bpe_encode_file(tok.ptr, str(src).encode(), read_only.fileno(), 4, ffi.NULL,
                                 1, ffi.NULL, ffi.new("uint64_t *"), ffi.NULL)
    assert rc == lib.BPE_ERR_IO and ffi.errno == errno.EBADF
    assert lib.bpe_encode_file(tok.ptr, str(src).encode(), -1, 4, ffi.NULL, 1, ffi.NULL,
                               ffi.new("uint64_t *"), ffi.NULL) == lib.BPE_ERR_ARG
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    assert encode_file(tok, empty, dst)[0] == 0 and dst.read_bytes() == b""


def test_tokenizers_created_and_freed_from_many_threads():
    """Caches belong to their tokenizer: building, using and freeing many tokenizers from
    several threads at once gives correct ids (and no cross-talk between instances)."""
    rng = random.Random(5)
    vocabs = []
    for k in range(6):
        ranks = random_tiktoken_vocab(rng, b"abc ", 40)
        pieces = [random_text(rng, b"abc ", rng.randrange(1, 30)) for _ in range(60)]
        vocabs.append((ranks, pieces, [i for p in pieces for i in ref_tiktoken(p, ranks, 1)]))
    errors = []

    def work(k):
        for r in range(15):
            ranks, pieces, expect = vocabs[(k + r) % len(vocabs)]
            t = CTok(list(ranks.items()), lib.BPE_RULE_TIKTOKEN, ignore_merges=1, cache=16)
            try:
                if t.ok().pieces(pieces + pieces) != expect + expect:
                    errors.append((k, r))
            finally:
                t.close()

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_large_tables_right_and_released():
    """A vocabulary big enough for tables of over 1 MiB (which bpe_table_alloc maps itself and
    bpe_table_free unmaps) encodes as the reference does, and building and freeing it again and
    again does not grow the process (a wrong unmap size would leak or crash)."""
    psutil = pytest.importorskip("psutil")
    rng = random.Random(11)
    letters = [bytes([b]) for b in b"abcdefghijklmnop"]
    longer = [a + b for a in letters for b in letters]
    longer += [a + b for a in longer for b in letters]
    longer += rng.sample([a + b for a in longer[256:] for b in letters], 60000)
    rng.shuffle(longer)   # ranks in random order: many tokens have several splits
    ranks = {bytes([b]): b for b in range(256)}
    ranks.update((t, 256 + k) for k, t in enumerate(longer))
    items = list(ranks.items())
    pieces = [random_text(rng, b"abcdefghijklmnop", rng.randrange(2, 16)) for _ in range(300)]
    expect = [i for p in pieces for i in ref_tiktoken(p, ranks, 0)]
    tok = CTok(items, lib.BPE_RULE_TIKTOKEN, ignore_merges=0).ok()
    assert tok.pieces(pieces) == expect
    tok.close()
    if "ASAN_OPTIONS" in os.environ:
        return   # scripts/sanitize.sh: AddressSanitizer holds freed memory in quarantine
    rss = psutil.Process().memory_info().rss
    for _ in range(8):
        CTok(items, lib.BPE_RULE_TIKTOKEN).ok().close()
    assert psutil.Process().memory_info().rss - rss < 16 << 20


def test_encode_file_cancel_midway(tmp_path, small_chunks):
    """A cancel set while the call runs (seen through progress.done moving) stops it before
    the end; what it wrote is a whole number of ids (the output file is the caller's)."""
    tok, enc = native_tokenizer("gpt2")
    src, dst = tmp_path / "in.txt", tmp_path / "out.bin"
    src.write_bytes(read_corpus("en_books", 400_000).encode() * 20)
    prog = ffi.new("bpe_progress *")
    result = {}

    def run():
        result["rc"] = lib.bpe_encode_file(tok.ptr, str(src).encode(), out.fileno(), 4,
                                           ffi.NULL, 1, prog, ffi.new("uint64_t *"), ffi.NULL)

    with open(dst, "wb") as out:
        t = threading.Thread(target=run)
        t.start()
        while prog.done == 0 and t.is_alive():
            pass
        prog.cancel = 1
        t.join()
    assert result["rc"] == lib.BPE_ERR_CANCELLED
    assert 0 < prog.done < prog.total == src.stat().st_size
    assert dst.stat().st_size % 4 == 0


def test_default_thread_count_follows_cpu_affinity():
    """n_threads=0 means the cores this process may use (taskset, a container's cpuset), not
    every core of the machine: a 64-core host's count in a 2-core container overcommits."""
    import os
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("no CPU affinity on this system")
    old = os.sched_getaffinity(0)
    assert lib.bpe_cores_available() == len(old)
    try:
        os.sched_setaffinity(0, {min(old)})     # this thread's set, which C reads
        assert lib.bpe_cores_available() == 1
    finally:
        os.sched_setaffinity(0, old)


@pytest.mark.parametrize("n_threads", [1, 2, 3])
def test_job_batch_polled_gives_every_text(n_threads):
    """bpe_batch_poll (a finished group, or BPE_BATCH_PENDING, never a wait) mixed with
    bpe_batch_next gives each text's ids once, as bpe_encode of it; an error too."""
    tok, _ = native_tokenizer("gpt2")
    texts = corpus_texts(300, 3000)
    lists, rc, _ = job_batch(tok, texts, n_threads=n_threads, poll=True)
    assert rc == lib.BPE_OK and lists == [tok.encode(t) for t in texts]
    t = [b"plain text " * 50] * 40
    t[25] = b"x <|endoftext|> y"
    lists, rc, info = job_batch(tok, t, mode=[2], n_threads=n_threads, poll=True)
    assert (rc, info) == (lib.BPE_ERR_DISALLOWED, 25)


@pytest.mark.parametrize("n_threads", [1, 2, 3])
def test_job_batch_stepped_gives_every_text(n_threads):
    """bpe_batch_step (one group encoded or waited for, then what is ready or
    BPE_BATCH_PENDING) gives each text's ids once, as bpe_encode of it; an error too."""
    tok, _ = native_tokenizer("gpt2")
    texts = corpus_texts(300, 3000)
    lists, rc, _ = job_batch(tok, texts, n_threads=n_threads, steps=[])
    assert rc == lib.BPE_OK and lists == [tok.encode(t) for t in texts]
    t = [b"plain text " * 50] * 40
    t[25] = b"x <|endoftext|> y"
    lists, rc, info = job_batch(tok, t, mode=[2], n_threads=n_threads, steps=[])
    assert (rc, info) == (lib.BPE_ERR_DISALLOWED, 25)


def test_job_batch_steps_return_inside_a_cut_text():
    """A text cut into parts comes back whole once its last part is encoded; meanwhile each
    bpe_batch_step returns (BPE_BATCH_PENDING) after one part, so that a caller looking for
    Ctrl-C between steps is not kept in C for the whole text (bpe_batch_next is)."""
    tok, _ = native_tokenizer("gpt2")
    big = b"".join(corpus_texts(40, 100_000))                 # ~4 MB: 8 parts or so
    steps = []
    lists, rc, _ = job_batch(tok, [big], n_threads=2, steps=steps)
    assert rc == lib.BPE_OK and lists == [tok.encode(big)]
    assert steps[0] >= 2, steps                # the caller came back between its parts


@pytest.mark.parametrize("n_threads,n_texts", [(1, 1), (2, 2), (3, 5)])
def test_job_batch_cancel_stops_long_texts(n_threads, n_texts):
    """bpe_batch_cancel from another thread (Ctrl-C while a helper thread collects) stops
    the encoders inside their text: bpe_batch_next returns BPE_ERR_CANCELLED, where each
    text here takes far longer than the 50 ms before the cancel to encode.  Used to be:
    the caller waited for every text it or a worker had started."""
    import threading
    tok, _ = native_tokenizer("gpt2")
    big = b"".join(corpus_texts(40, 100_000)) * 4             # ~16 MB a text
    texts = [big] * n_texts
    ends = ffi.new("size_t[]", [len(big) * (i + 1) for i in range(n_texts)])
    data = b"".join(texts)
    job_p = ffi.new("bpe_batch_job **")
    assert lib.bpe_batch_start(tok.ptr, n_texts, data, ffi.NULL, ends, ffi.NULL, ffi.NULL,
                               n_threads, job_p) == lib.BPE_OK
    assert lib.bpe_batch_size(job_p[0]) == len(data)
    first, count = ffi.new("size_t *"), ffi.new("size_t *")
    ids, id_ends, info = ffi.new("uint32_t **"), ffi.new("size_t **"), ffi.new("size_t *")
    timer = threading.Timer(0.05, lib.bpe_batch_cancel, (job_p[0],))
    try:
        timer.start()
        rc = lib.bpe_batch_next(job_p[0], first, count, ids, id_ends, info)
        assert rc == lib.BPE_ERR_CANCELLED and count[0] == 0
        assert lib.bpe_batch_poll(job_p[0], first, count, ids, id_ends, info) == lib.BPE_OK
        assert count[0] == 0                                    # the job has ended
    finally:
        timer.join()
        lib.bpe_batch_finish(job_p[0])


def test_job_batch_cancel_after_the_end_changes_nothing():
    tok, _ = native_tokenizer("gpt2")
    texts = corpus_texts(20, 500)
    job_p = ffi.new("bpe_batch_job **")
    data = b"".join(texts)
    ends = ffi.new("size_t[]", [sum(map(len, texts[:i + 1])) for i in range(len(texts))])
    assert lib.bpe_batch_start(tok.ptr, len(texts), data, ffi.NULL, ends, ffi.NULL,
                               ffi.NULL, 2, job_p) == lib.BPE_OK
    first, count = ffi.new("size_t *"), ffi.new("size_t *")
    ids, id_ends, info = ffi.new("uint32_t **"), ffi.new("size_t **"), ffi.new("size_t *")
    try:
        got = 0
        while True:
            assert lib.bpe_batch_next(job_p[0], first, count, ids, id_ends, info) == 0
            if count[0] == 0:
                break
            got += count[0]
        assert got == len(texts)
        lib.bpe_batch_cancel(job_p[0])
        assert lib.bpe_batch_next(job_p[0], first, count, ids, id_ends, info) == lib.BPE_OK
        assert count[0] == 0
    finally:
        lib.bpe_batch_finish(job_p[0])
    lib.bpe_batch_cancel(ffi.NULL)                              # NULL is fine

