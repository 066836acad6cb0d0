"""Issue #6's trainer options: max_token_length, and character-level training (byte_level=False)
with initial_alphabet, limit_alphabet, continuing_subword_prefix, end_of_word_suffix.

The C trainer must equal the slow reference (tests/reference_trainer.py) for each option alone
and combined, for every thread count and block size; the alphabet and token-shape rules must be
HuggingFace's (checked against HF's BpeTrainer where its result is deterministic)."""
import json
import os
import random
import subprocess
import sys
from collections import Counter

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from conftest import LONG, REPO, read_corpus  # noqa: E402
from reference_trainer import (count_pretokens, initial_symbols, train_from_counts,  # noqa: E402
                               train_reference)

from bpe_cffi import formats, train_bpe  # noqa: E402
from bpe_cffi._native import ffi, lib  # noqa: E402
from bpe_cffi.patterns import GPT2  # noqa: E402
from bpe_cffi.train import _add_words, _new_trainer, _Options, _result, _train  # noqa: E402
from test_train import assert_same  # noqa: E402

EOT = "<|endoftext|>"
GPT2_PY = "(?:" + GPT2 + ")"      # split by Python's regex, merged by C
CORPORA = ["en_books", "multilingual", "code", "web"]
SLICE = 10_000 if not LONG else 60_000
MERGES = 120 if not LONG else 400

# Each option alone, then combined.  "##" and "</w>" occur in the code corpus, so prefix and
# suffix strings also collide with text there (a string is one token however it is spelled).
OPTION_SETS = {
    "max_len": dict(max_token_length=3),
    "max_len_min_freq": dict(max_token_length=5, min_frequency=3),
    "char": dict(byte_level=False),
    "char_prefix": dict(byte_level=False, continuing_subword_prefix="##"),
    "char_suffix": dict(byte_level=False, end_of_word_suffix="</w>"),
    "char_limit": dict(byte_level=False, limit_alphabet=40, initial_alphabet="qxzé€"),
    "char_all": dict(byte_level=False, limit_alphabet=60, initial_alphabet=["~", "ß"],
                     continuing_subword_prefix="##", end_of_word_suffix="</w>",
                     max_token_length=4, min_frequency=2),
}


def write_text(tmp_path, text, name="t.txt"):
    p = tmp_path / name
    p.write_bytes(text.encode("utf-8"))
    return p


def n_initial(counts, opts) -> int:
    """How many initial tokens the reference starts from."""
    if opts.get("byte_level", True):
        return 256
    tokens, _ = initial_symbols(counts, opts.get("initial_alphabet") or (),
                                opts.get("limit_alphabet"),
                                opts.get("continuing_subword_prefix"),
                                opts.get("end_of_word_suffix"))
    return len(tokens)


def ref_options(opts):
    """train_from_counts takes initial_alphabet as any iterable of characters."""
    return {k: v for k, v in opts.items() if k != "min_frequency"}


def units(token: bytes, opts) -> int:
    """A token's length as max_token_length counts it: bytes, or characters without the
    prefix and suffix (valid when neither string occurs in the text)."""
    if opts.get("byte_level", True):
        return len(token)
    s = token.decode("utf-8")
    pre, suf = opts.get("continuing_subword_prefix"), opts.get("end_of_word_suffix")
    if pre and s.startswith(pre):
        s = s[len(pre):]
    if suf and s.endswith(suf):
        s = s[:-len(suf)]
    return len(s)


# ---- C == reference on every corpus ----------------------------------------------------

@pytest.mark.parametrize("opt_name", list(OPTION_SETS))
@pytest.mark.parametrize("name", CORPORA)
def test_corpus_matches_reference(tmp_path, name, opt_name):
    opts = OPTION_SETS[opt_name]
    text = read_corpus(name, SLICE, offset=hash(opt_name) % 50_000 if LONG else 0)
    specials = [EOT] if name != "code" else []
    text = text.replace("\n\n", "\n" + EOT, 3) if specials else text
    p = write_text(tmp_path, text)
    counts = count_pretokens(text, GPT2, specials)
    vocab = n_initial(counts, opts) + len(specials) + MERGES
    want = train_reference(p, vocab, specials, pattern=GPT2,
                           min_frequency=opts.get("min_frequency"), **ref_options(opts))
    assert len(want[1]) > 20, "the case should learn something"
    # Python counting + C merging, then C counting in tiny blocks, with 1 and 2 threads and
    # every word merged by position (long_word=2) or by scanning
    runs = [(GPT2_PY, 1, 0, 0), (GPT2_PY, 2, 0, 2), ("gpt2", 2, 777, 0), ("gpt2", 1, 64, 3)]
    for pattern, threads, block, long_word in runs:
        got = _train(p, vocab, specials, pattern=pattern, num_threads=threads,
                     block_size=block, parallel_words=1, long_word=long_word, **opts)[:2]
        assert_same(got, want)


# ---- random corpora and random word counts ------------------------------------------------

def random_options(rng: random.Random) -> dict:
    opts = {}
    if rng.random() < 0.5:
        opts["max_token_length"] = rng.choice([0, 1, 2, 3, 5, 9])
    if rng.random() < 0.7:
        opts["byte_level"] = False
        if rng.random() < 0.5:
            opts["continuing_subword_prefix"] = rng.choice(["##", "#", "▁", "a"])
        if rng.random() < 0.5:
            opts["end_of_word_suffix"] = rng.choice(["</w>", "#", "ab", "é"])
        if rng.random() < 0.4:
            opts["initial_alphabet"] = rng.sample("abcxyz#é中", rng.randrange(0, 4))
        if rng.random() < 0.4:
            opts["limit_alphabet"] = len(opts.get("initial_alphabet", ())) + rng.randrange(0, 6)
    if rng.random() < 0.2:
        opts["min_frequency"] = rng.randrange(1, 4)
    return opts


def random_text(rng: random.Random) -> str:
    """Small alphabets that include the prefix and suffix characters: many ties and
    collisions between decorated symbols and merged tokens."""
    alphabet = rng.choice(["ab ", "a#b </w>", "aé中 \n.!1ßд😀'", "ab#c w<>/ ", "xyz "])
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 400)))


@pytest.mark.parametrize("seed", range(40 if not LONG else 1500))
def test_random_corpora(tmp_path, seed):
    rng = random.Random(seed)
    opts = random_options(rng)
    text = random_text(rng)
    specials = [] if seed % 3 else ["<s>"]
    if specials:
        text = text.replace(" ", "<s>", rng.randrange(4))
    p = write_text(tmp_path, text)
    counts = count_pretokens(text, GPT2, specials)
    vocab = max(len(specials), n_initial(counts, opts) + len(specials) + rng.randrange(-3, 60))
    if opts.get("byte_level", True):
        vocab = max(vocab, 256 + len(specials))
    want = train_reference(p, vocab, specials, pattern=GPT2_PY,
                           min_frequency=opts.get("min_frequency"), **ref_options(opts))
    for threads, long_word in ((1, 0), (2, 2), (3, 4)):
        got = _train(p, vocab, specials, pattern=GPT2_PY, num_threads=threads,
                     parallel_words=1, long_word=long_word, **opts)[:2]
        assert_same(got, want)


@pytest.mark.parametrize("seed", range(30 if not LONG else 1000))
def test_random_word_counts(seed):
    """Straight from counts (bpe_trainer_add_words): random words, big counts."""
    rng = random.Random(5000 + seed)
    opts = random_options(rng)
    counts = {}
    for _ in range(rng.randrange(1, 50)):
        w = "".join(rng.choice("ab#</w>é") for _ in range(rng.randrange(1, 14))).encode()
        counts[w] = counts.get(w, 0) + rng.choice([1, 2, 3, 10**12, 2**40 + 7])
    vocab = n_initial(counts, opts) + rng.randrange(0, 50)
    want = train_from_counts(counts, vocab, min_frequency=opts.get("min_frequency"),
                             **ref_options(opts))
    o = _Options(**{k: v for k, v in opts.items() if k != "min_frequency"})
    for threads, long_word in ((1, 0), (2, 2), (4, 5)):
        t = _new_trainer(0, vocab, [], opts.get("min_frequency"), threads, 0, 1, long_word, o)
        _add_words(t, counts)
        assert lib.bpe_trainer_merge(t, ffi.NULL) == lib.BPE_OK
        assert_same(_result(t, []), want)


# ---- the rules spelled out by hand -------------------------------------------------------

def test_max_token_length_bytes(tmp_path):
    p = write_text(tmp_path, "aaaaaaaa abababab " * 5 + "héé héé")
    for m in (2, 3, 4):
        vocab, merges = train_bpe(p, 400, pattern=GPT2_PY, max_token_length=m)
        assert max(len(t) for t in vocab.values()) == m      # reaches the bound, never passes
        assert all(len(a + b) <= m for a, b in merges)
    full = train_bpe(p, 400, pattern=GPT2_PY)
    assert max(len(t) for t in full[0].values()) > 4
    for m in (0, 1):     # nothing can be learned
        vocab, merges = train_bpe(p, 400, [EOT], pattern=GPT2_PY, max_token_length=m)
        assert merges == [] and len(vocab) == 257 and vocab[256] == EOT.encode()
    assert train_bpe(p, 400, pattern=GPT2_PY, max_token_length=None) == full


def test_max_token_length_counts_characters_when_char_level(tmp_path):
    # "é" is 2 bytes but one character; the prefix does not count either
    p = write_text(tmp_path, "ééé ééé ééé abc abc")
    vocab, merges = train_bpe(p, 100, pattern=GPT2_PY, byte_level=False, max_token_length=3,
                              continuing_subword_prefix="##")
    toks = {t.decode() for t in vocab.values()}
    assert "ééé" in toks and " abc" not in toks     # 3 characters (6 bytes) yes, 4 no
    assert max(units(t, {"byte_level": False, "continuing_subword_prefix": "##"})
               for t in vocab.values()) == 3


def test_char_level_layout(tmp_path):
    # pre-tokens " ab" x2 and " ba": symbols " " "##a" "##b</w>" and " " "##b" "##a</w>"
    p = write_text(tmp_path, " ab ab ba")
    kw = dict(pattern=GPT2_PY, byte_level=False, continuing_subword_prefix="##",
              end_of_word_suffix="</w>")
    vocab, merges = train_bpe(p, 0, **kw)
    # the characters in code point order, then the decorated symbols in byte order
    assert [vocab[i].decode() for i in range(len(vocab))] == [
        " ", "a", "b", "##a", "##a</w>", "##b", "##b</w>"]
    assert merges == []
    vocab, merges = train_bpe(p, 8, **kw)
    # pairs: ( , ##a) x2, (##a, ##b</w>) x2, ( , ##b) x1, (##b, ##a</w>) x1; the tie goes to
    # the greatest bytes ("##a" > " "); the merged token drops the right part's prefix
    assert merges == [(b"##a", b"##b</w>")]
    assert vocab[7] == b"##ab</w>" and len(vocab) == 8


def test_limit_alphabet_drops_characters_keeping_positions(tmp_path):
    # "x" is rare and dropped; the word "xab" keeps "a" as a non-first symbol ("##a"), and the
    # word "abx" gives no symbol the suffix (its last character is gone), as HF does
    p = write_text(tmp_path, "ab ab ab xab abx")
    vocab, _ = train_bpe(p, 0, pattern=GPT2_PY, byte_level=False, limit_alphabet=3,
                         continuing_subword_prefix="##", end_of_word_suffix="!")
    toks = [t.decode() for t in vocab.values()]
    assert toks[:3] == [" ", "a", "b"]
    assert toks[3:] == ["##a", "##b", "##b!"]     # "ab" "##b!" | " " "##a" "##b!" | ... "##b"
    # frequency ties go to the smaller code point; the initial alphabet always stays
    vocab, _ = train_bpe(p, 0, pattern=GPT2_PY, byte_level=False, limit_alphabet=2,
                         initial_alphabet="z")
    assert sorted(vocab.values()) == [b"a", b"z"]       # a and b tie (6 each): a wins


def test_char_level_vocab_smaller_than_alphabet(tmp_path):
    p = write_text(tmp_path, "hello world")
    vocab, merges = train_bpe(p, 3, [EOT], pattern=GPT2_PY, byte_level=False)
    chars = sorted(set("hello world"))
    assert [vocab[i].decode() for i in range(len(chars))] == chars
    assert vocab[len(chars)] == EOT.encode() and merges == []


def test_empty_corpus_char_level(tmp_path):
    p = write_text(tmp_path, "")
    assert train_bpe(p, 10, pattern=GPT2_PY, byte_level=False) == ({}, [])
    vocab, _ = train_bpe(p, 10, [EOT], byte_level=False, initial_alphabet="ba")
    assert vocab == {0: b"a", 1: b"b", 2: EOT.encode()}


# ---- bad values ---------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs,exc,words", [
    (dict(max_token_length=-1), ValueError, "max_token_length"),
    (dict(max_token_length=2.0), TypeError, "max_token_length"),
    (dict(byte_level="no"), TypeError, "byte_level"),
    (dict(limit_alphabet=10), ValueError, "byte_level=False"),
    (dict(continuing_subword_prefix="##"), ValueError, "byte_level=False"),
    (dict(byte_level=False, limit_alphabet=-1), ValueError, "limit_alphabet"),
    (dict(byte_level=False, limit_alphabet=1, initial_alphabet="ab"), ValueError,
     "initial_alphabet"),
    (dict(byte_level=False, initial_alphabet=["ab"]), ValueError, "single characters"),
    (dict(byte_level=False, initial_alphabet=[1]), TypeError, "initial_alphabet"),
    (dict(byte_level=False, initial_alphabet=b"ab"), TypeError, "bytes"),
    (dict(byte_level=False, initial_alphabet=["\ud800"]), ValueError, "surrogate"),
    (dict(byte_level=False, end_of_word_suffix=3), TypeError, "end_of_word_suffix"),
])
def test_bad_values(tmp_path, kwargs, exc, words):
    p = write_text(tmp_path, "hello")
    with pytest.raises(exc, match=words):
        train_bpe(p, 300, **kwargs)


@pytest.mark.parametrize("special, ok", [("##l", False), ("ll</w>", False), ("##", True),
                                         ("</w>", True), ("<s>", True)])
def test_special_token_shaped_like_a_symbol_refused_before_training(tmp_path, special, ok):
    """A character-level special token with the prefix or suffix the trainer's symbols carry
    ("##l" is the symbol of an "l" inside a word) could also come out as an ordinary token:
    refused before training, not after it (it was: "vocab: tokens 22 and 58 have the same
    bytes" once the training had run).  The prefix or suffix alone is never a symbol."""
    p = write_text(tmp_path, "hello all, well well\n" * 50)
    kw = dict(byte_level=False, continuing_subword_prefix="##", end_of_word_suffix="</w>")
    if not ok:
        with pytest.raises(ValueError, match=f"special token {special!r} has the"):
            train_bpe(p, 300, [special], **kw)
        return
    from bpe_cffi import Tokenizer
    tok = Tokenizer.train(p, 300, [special], **kw)
    assert tok.encode(f"well{special}all") == \
        tok.encode("well") + [tok.special_tokens[special]] + tok.encode("all")


def test_vocab_size_limits(tmp_path):
    p = write_text(tmp_path, "hello")
    with pytest.raises(ValueError, match="256"):
        train_bpe(p, 100)
    with pytest.raises(ValueError, match="special"):
        train_bpe(p, 1, [EOT, "<x>"], byte_level=False)
    assert len(train_bpe(p, 2, [EOT, "<x>"], byte_level=False)[0]) == 6   # h e l o + 2


def test_c_rejects_bad_config_and_invalid_utf8():
    cfg = ffi.new("bpe_trainer_config *")
    cfg.vocab_size = 300
    out = ffi.new("bpe_trainer **")
    cfg.has_limit_alphabet = 1          # a char-level option without char_level
    assert lib.bpe_trainer_new(cfg, out) == lib.BPE_ERR_ARG and out[0] == ffi.NULL
    cfg.char_level = 1
    alpha = ffi.new("uint32_t[]", [ord("a"), 0xD800])
    cfg.initial_alphabet, cfg.n_initial_alphabet = alpha, 2
    cfg.limit_alphabet = 5
    assert lib.bpe_trainer_new(cfg, out) == lib.BPE_ERR_ARG     # a surrogate
    cfg.n_initial_alphabet = 1
    bad = ffi.new("uint8_t[]", b"\xff")
    cfg.prefix, cfg.prefix_len = bad, 1
    assert lib.bpe_trainer_new(cfg, out) == lib.BPE_ERR_ARG     # prefix not UTF-8
    cfg.prefix_len = 0
    cfg.limit_alphabet = 0
    assert lib.bpe_trainer_new(cfg, out) == lib.BPE_ERR_ARG     # limit below the initial
    cfg.limit_alphabet = 1
    assert lib.bpe_trainer_new(cfg, out) == lib.BPE_OK
    t = ffi.gc(out[0], lib.bpe_trainer_free)
    data = ffi.new("uint8_t[]", b"ab\xff")
    offs = ffi.new("size_t[]", [0, 3])
    cnt = ffi.new("uint64_t[]", [1])
    assert lib.bpe_trainer_add_words(t, data, offs, cnt, 1) == lib.BPE_ERR_ARG
    assert lib.bpe_trainer_n_words(t) == 0


# ---- against HuggingFace's BpeTrainer --------------------------------------------------------

def hf_train(texts, vocab_size, **kw):
    tk = pytest.importorskip("tokenizers")
    tok = tk.Tokenizer(tk.models.BPE())
    tok.pre_tokenizer = tk.pre_tokenizers.Split(tk.Regex(formats.onig_regex(GPT2)),
                                                behavior="isolated")
    tr = tk.trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False, **kw)
    tok.train_from_iterator(texts, tr)
    return tok


def boundary_limit(counts, wanted: int, initial=()) -> int:
    """A limit near `wanted` where the frequencies of the last kept and the first dropped
    character differ (HF breaks ties in hash order)."""
    freq = Counter()
    for w, c in counts.items():
        for ch in w.decode():
            freq[ch] += c
    for ch in initial:
        freq[ch] = float("inf")
    ranked = sorted(freq.values(), reverse=True)
    for limit in range(min(wanted, len(ranked) - 1), 1, -1):
        if ranked[limit - 1] != ranked[limit]:
            return limit
    pytest.skip("no tie-free limit")


@pytest.mark.parametrize("name", CORPORA)
def test_alphabet_and_initial_symbols_equal_hf(tmp_path, name):
    text = read_corpus(name, 30_000 if not LONG else 500_000)
    p = write_text(tmp_path, text)
    counts = count_pretokens(text, GPT2, [])
    pre, suf = "\u2047", "\u204b"             # strings absent from the corpora
    assert pre not in text and suf not in text
    for kw in (dict(), dict(continuing_subword_prefix=pre),
               dict(end_of_word_suffix=suf, initial_alphabet=["Ω", "q"]),
               dict(continuing_subword_prefix=pre, end_of_word_suffix=suf,
                    limit_alphabet=boundary_limit(counts, 50, "Ω"), initial_alphabet=["Ω"]),
               dict(limit_alphabet=boundary_limit(counts, 30))):
        hf = hf_train([text], 1, **kw)        # vocab_size 1: the initial tokens only
        ours, merges = train_bpe(p, 0, pattern=GPT2_PY, byte_level=False, **kw)
        assert merges == []
        assert {t.decode() for t in ours.values()} == set(hf.get_vocab()), kw
        # the plain characters come first, in code point order, as in HF
        n_chars = sum(1 for t in ours.values() if len(t.decode()) == 1)
        hf_chars = sorted((i, s) for s, i in hf.get_vocab().items() if len(s) == 1)
        assert [ours[i].decode() for i in range(n_chars)] == [s for _, s in hf_chars]


@pytest.mark.parametrize("name", CORPORA)
def test_max_token_length_like_hf(tmp_path, name):
    text = read_corpus(name, 20_000)
    p = write_text(tmp_path, text)
    pre = "\u2047"
    assert pre not in text
    for m in (2, 4, 6):
        kw = dict(max_token_length=m, continuing_subword_prefix=pre)
        ours, _ = train_bpe(p, 900, pattern=GPT2_PY, byte_level=False, **kw)
        hf = hf_train([text], 900, **kw)
        opts = dict(byte_level=False, continuing_subword_prefix=pre)
        assert max(units(t, opts) for t in ours.values()) == m
        assert max(units(s.encode(), opts) for s in hf.get_vocab()) <= m
    # byte-level: HF counts characters of the byte-to-unicode strings, i.e. bytes
    tk = pytest.importorskip("tokenizers")
    tok = tk.Tokenizer(tk.models.BPE())
    tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator([text], tk.trainers.BpeTrainer(
        vocab_size=900, show_progress=False, max_token_length=4,
        initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet()))
    assert max(len(s) for s in tok.get_vocab()) <= 4
    ours, _ = train_bpe(p, 900, max_token_length=4)
    assert max(len(t) for t in ours.values()) == 4


def merge_list_encode(word: str, ranks: dict, vocab_ids: dict, pre, suf) -> list:
    """Merge-list BPE of one char-level pre-token: HF's BPE model (each character a symbol,
    decorated; merge the lowest-ranked pair, leftmost first)."""
    parts = [(pre if pre and i else "") + c + (suf if suf and i == len(word) - 1 else "")
             for i, c in enumerate(word)]
    while len(parts) > 1:
        best = min(range(len(parts) - 1),
                   key=lambda i: ranks.get((parts[i], parts[i + 1]), float("inf")))
        if (parts[best], parts[best + 1]) not in ranks:
            break
        right = parts[best + 1]
        if pre and right.startswith(pre):
            right = right[len(pre):]
        parts[best:best + 2] = [parts[best] + right]
    return [vocab_ids[p] for p in parts]


@pytest.mark.parametrize("pre,suf", [(None, None), ("##", None), (None, "</w>"),
                                     ("##", "</w>")])
def test_char_level_tokenizer_json_loads_in_hf(tmp_path, pre, suf):
    """HF's BPE model reads our char-level tokenizer.json and, with our merges, splits every
    pre-token exactly as merge-list BPE with HF's prefix/suffix rules; decoding restores the
    text, "##" and "</w>" of the text itself included (a string Replace decoder dropped them
    everywhere; the prefix goes only where it starts a token, the suffix where it ends one),
    for HF and for our own decode of the file.  (A pre-token that itself begins with the
    prefix, "##" without a space before it, cannot be told from a continuing token: it
    loses it, as with HF's WordPiece decoder.)"""
    from bpe_cffi import load
    tk = pytest.importorskip("tokenizers")
    literal = "\n x ## heading ## and </w>tags</w> #\n"
    text = read_corpus("web", 40_000) + literal * 3
    p = write_text(tmp_path, text)
    vocab, merges = train_bpe(p, 1500, [EOT], byte_level=False, continuing_subword_prefix=pre,
                              end_of_word_suffix=suf)
    ordinary = {i: b for i, b in vocab.items() if i < len(vocab) - 1}
    doc = formats.hf_json_char_level(ordinary, merges, {EOT: len(vocab) - 1}, GPT2, "gpt2",
                                     pre, suf)
    tok = tk.Tokenizer.from_str(json.dumps(doc))
    ranks = {(a.decode(), b.decode()): r for r, (a, b) in enumerate(merges)}
    ids = {b.decode(): i for i, b in vocab.items()}
    sample = text[:6000]
    pieces = count_pretokens(sample, GPT2, [EOT])
    n_merged = 0
    for piece in pieces:
        word = piece.decode()
        want = merge_list_encode(word, ranks, ids, pre, suf)
        assert tok.encode(word).ids == want, word
        n_merged += len(want) < len(word)
    assert n_merged > len(pieces) // 2
    whole = sample + EOT + sample[:100] + literal
    assert tok.decode(tok.encode(whole).ids, skip_special_tokens=False) == whole
    (tmp_path / "t.json").write_text(json.dumps(doc), encoding="utf-8")
    ours = load(tmp_path / "t.json")
    assert ours.decode(ours.encode(whole)) == whole


# ---- Tokenizer.train and the CLI ---------------------------------------------------------------

def test_tokenizer_train_max_token_length(tmp_path):
    from bpe_cffi import Tokenizer
    p = write_text(tmp_path, read_corpus("en_books", 20_000))
    tok = Tokenizer.train(p, 600, [EOT], max_token_length=3)
    want = train_bpe(p, 600, [EOT], max_token_length=3)[0]
    assert {i: tok.decode_single_token_bytes(i) for i in range(600)} == want
    assert max(len(want[i]) for i in range(599)) == 3


def test_tokenizer_train_char_level(tmp_path):
    """Tokenizer.train(byte_level=False) holds the trained vocabulary, decodes its own ids back
    to the text (the prefix and suffix removed), and equals the tokenizer.json it saves, as
    loaded by us and by HF."""
    import tokenizers
    from bpe_cffi import Tokenizer, load
    text = read_corpus("en_books", 200_000)
    p = write_text(tmp_path, text)
    kw = dict(byte_level=False, continuing_subword_prefix="##", end_of_word_suffix="</w>")
    tok = Tokenizer.train(p, 600, [EOT], **kw)
    want = train_bpe(p, 600, [EOT], **kw)[0]
    assert {i: tok.decode_single_token_bytes(i) for i in want} == want
    sample = text[:20_000]
    ids = tok.encode(sample)
    assert tok.decode(ids) == sample          # every character was seen in training
    tok.save(tmp_path / "t.json")
    assert load(tmp_path / "t.json").encode(sample) == ids
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "t.json"))
    assert hf.encode(sample, add_special_tokens=False).ids == ids
    assert hf.decode(ids) == sample


ENV = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def cli(*args):
    return subprocess.run([sys.executable, "-m", "bpe_cffi", "train", "-q", *map(str, args)],
                          capture_output=True, text=True, env=ENV)


def test_cli_help_lists_options():
    r = subprocess.run([sys.executable, "-m", "bpe_cffi", "train", "--help"],
                       capture_output=True, text=True, env=ENV)
    assert r.returncode == 0
    for flag in ("--max-token-length", "--char-level", "--initial-alphabet",
                 "--limit-alphabet", "--continuing-subword-prefix", "--end-of-word-suffix"):
        assert flag in r.stdout


def test_cli_char_level(tmp_path):
    tk = pytest.importorskip("tokenizers")
    text = read_corpus("en_books", 20_000)
    p = write_text(tmp_path, text)
    out = tmp_path / "c.json"
    r = cli(p, "--vocab-size", 500, "--special-token", EOT, "--char-level",
            "--limit-alphabet", 70, "--initial-alphabet", "ÆØ", "--continuing-subword-prefix",
            "##", "--end-of-word-suffix", "</w>", "--max-token-length", 5, "-o", out)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    want, merges = train_bpe(p, 500, [EOT], byte_level=False, limit_alphabet=70,
                             initial_alphabet="ÆØ", continuing_subword_prefix="##",
                             end_of_word_suffix="</w>", max_token_length=5)
    assert doc["model"]["vocab"] == {b.decode(): i for i, b in want.items()}
    assert doc["model"]["merges"] == [[a.decode(), b.decode()] for a, b in merges]
    assert doc["model"]["continuing_subword_prefix"] == "##"
    assert doc["model"]["end_of_word_suffix"] == "</w>"
    tok = tk.Tokenizer.from_file(str(out))
    assert tok.token_to_id(EOT) == 499 and tok.token_to_id("Æ") is not None
    r = cli(p, "--vocab-size", 300, "--max-token-length", 2, "-o", tmp_path / "b.json")
    assert r.returncode == 0, r.stderr
    vocab = json.loads((tmp_path / "b.json").read_text())["model"]["vocab"]
    assert max(len(s) for s in vocab) == 2      # byte-level strings: one char per byte


@pytest.mark.parametrize("args,words", [
    (["--limit-alphabet", 5], "needs --char-level"),
    (["--char-level", "--format", "gpt2"], "--format hf"),
    (["--char-level", "--format", "tiktoken"], "--format hf"),
    (["--max-token-length", -2], "--max-token-length"),
    (["--char-level", "--limit-alphabet", 1, "--initial-alphabet", "xy"], "--limit-alphabet"),
])
def test_cli_errors(tmp_path, args, words):
    p = write_text(tmp_path, "hello")
    out = tmp_path / "o.json"
    r = cli(p, "--vocab-size", 300, *args, "-o", out)
    assert r.returncode == 1 and words in r.stderr, r.stderr
    assert not out.exists()
