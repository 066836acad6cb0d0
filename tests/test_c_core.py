"""Tests of the C encoder core at the ffi level (bpe_cffi._native's ffi and lib).

References are independent of the code under test: tiktoken (real vocabularies), and slow
pure-Python implementations of both merge rules (random small vocabularies), a naive search
for special tokens.
"""
import base64
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


def real_tokenizer(name, rule=None, specials=True, pattern=0, cache=4096):
    key = (name, rule, specials, pattern, cache)
    if key in _CACHE:
        return _CACHE[key]
    enc = tiktoken_encoding(name)   # also puts offline_tiktoken on sys.path
    special = sorted(enc._special_tokens.items()) if specials else []
    special = [(s.encode(), i) for s, i in special]
    if name == "gpt2" and rule != lib.BPE_RULE_TIKTOKEN:
        dec = gpt2_byte_decoder()
        vocab = json.loads(vocab_path("gpt2_vocab.json").read_text(encoding="utf-8"))
        tokens = [(bytes(dec[c] for c in t), i) for t, i in vocab.items() if t != "<|endoftext|>"]
        merges = []
        for line in vocab_path("gpt2_merges.txt").read_text(encoding="utf-8").splitlines():
            if line and not line.startswith("#version"):
                a, b = line.split(" ")
                merges.append((vocab[a], vocab[b]))
        tok = CTok(tokens, lib.BPE_RULE_MERGES, merges, special, pattern, 0, cache).ok()
    else:
        if name == "gpt2":
            from offline_tiktoken import load_ranks
            ranks = load_ranks("gpt2")
        else:
            ranks = {}
            for line in vocab_path(f"{name}.tiktoken").read_bytes().splitlines():
                if line:
                    t, r = line.split()
                    ranks[base64.b64decode(t)] = int(r)
        tok = CTok(list(ranks.items()), lib.BPE_RULE_TIKTOKEN, (), special, pattern, 1,
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
