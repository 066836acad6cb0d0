"""HF BPE model options (csrc/model.c; Tokenizer kwargs byte_level, dropout, seed, unk_token,
fuse_unk, byte_fallback, continuing_subword_prefix, end_of_word_suffix, and the pipeline
components pre_tokenizer / normalizer / decoder) against HuggingFace `tokenizers` configured
with the same vocabulary, merges and options.

The reference is always HF itself (never our own output): `tokenizers.Tokenizer(models.BPE(
vocab, merges, **options))` with the matching pre-tokenizer.  Vocabularies: GPT-2's (byte-level)
and character-level ones TRAINED HERE with HF's BpeTrainer on a slice of the corpora (small
vocabularies, so unknown characters, byte fallback and unk fusing all happen on the
multilingual text).  Text: a slice of every corpus; BPE_CFFI_LONG=1 takes more.
"""
import json
import os
import pickle
import statistics

import pytest

from conftest import CORPORA, LONG, read_corpus, vocab_path

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers  # noqa: E402

import bpe_cffi  # noqa: E402

N_TEXT = 2_000_000 if LONG else 50_000       # bytes of each corpus per comparison
OFFSET = 3_000_000                           # past the slice the vocabularies are trained on

_CACHE = {}


def text_of(corpus: str, n: int = None) -> str:
    key = ("text", corpus, n)
    if key not in _CACHE:
        _CACHE[key] = read_corpus(corpus, n or N_TEXT, OFFSET)
    return _CACHE[key]


def hf_ids(hf, text):
    return hf.encode(text, add_special_tokens=False).ids


def first_difference(a, b):
    k = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
    return f"first difference at {k} of {len(a)}/{len(b)}: HF {a[k:k + 5]} ours {b[k:k + 5]}"


def assert_same(hf, ours, text):
    a, b = hf_ids(hf, text), ours.encode(text)
    assert a == b, first_difference(a, b)


# ---- vocabularies ----------------------------------------------------------------------------

def gpt2_files():
    return str(vocab_path("gpt2_vocab.json")), str(vocab_path("gpt2_merges.txt"))


def trained(prefix=None, suffix=None, metaspace=False, vocab_size=700):
    """A character-level vocabulary trained by HF on 200 KB of multilingual + 100 KB of English
    text: ({token str: id}, [(str, str)]).  limit_alphabet keeps many characters out."""
    key = ("trained", prefix, suffix, metaspace, vocab_size)
    if key not in _CACHE:
        affix = {}
        if prefix:
            affix["continuing_subword_prefix"] = prefix
        if suffix:
            affix["end_of_word_suffix"] = suffix
        hf = tokenizers.Tokenizer(models.BPE(unk_token="<unk>", **affix))
        hf.pre_tokenizer = (pre_tokenizers.Metaspace() if metaspace
                            else pre_tokenizers.Whitespace())
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<unk>"],
                                      limit_alphabet=150, show_progress=False, **affix)
        hf.train_from_iterator([read_corpus("multilingual", 200_000),
                                read_corpus("en_books", 100_000)], trainer)
        model = json.loads(hf.to_str())["model"]
        merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" "))
                  for m in model["merges"]]
        _CACHE[key] = (model["vocab"], merges)
    return _CACHE[key]


def with_byte_tokens(vocab, drop=""):
    """vocab plus "<0x00>".."<0xFF>" (new ids), leaving out those whose first hex digit is in
    `drop` (e.g. "EF": the lead bytes of 3- and 4-byte characters)."""
    out = dict(vocab)
    for b in range(256):
        name = f"<0x{b:02X}>"
        if name[3] not in drop:
            out.setdefault(name, len(out) + 1000)
    return out


def char_pair(vocab, merges, hf_pre, ours_pre, **opts):
    """(HF tokenizer, ours) for a character-level vocab with the same options.  HF's
    models.BPE defaults to ignore_merges=False; ours to True: pass HF's."""
    hf = tokenizers.Tokenizer(models.BPE(vocab, merges, **opts))
    hf.pre_tokenizer = hf_pre
    ours = bpe_cffi.Tokenizer({i: s.encode() for s, i in vocab.items()},
                              [(a.encode(), b.encode()) for a, b in merges],
                              byte_level=False, pre_tokenizer=ours_pre,
                              ignore_merges=opts.get("ignore_merges", False), **{
                                  k: v for k, v in opts.items() if k != "ignore_merges"})
    return hf, ours


# ---- character level: prefix, suffix, unk, fuse_unk -------------------------------------------

AFFIXES = [(None, None), ("##", None), (None, "</w>"), ("##", "</w>")]
UNK = [{}, {"unk_token": "<unk>"}, {"unk_token": "<unk>", "fuse_unk": True}]


@pytest.mark.parametrize("prefix,suffix", AFFIXES)
@pytest.mark.parametrize("unk", UNK, ids=["no-unk", "unk", "fuse"])
def test_char_level_matches_hf(prefix, suffix, unk):
    vocab, merges = trained(prefix, suffix)
    affix = {k: v for k, v in (("continuing_subword_prefix", prefix),
                               ("end_of_word_suffix", suffix)) if v}
    hf, ours = char_pair(vocab, merges, pre_tokenizers.Whitespace(),
                         pre_tokenizers.Whitespace(), **affix, **unk)
    unknown = 0
    for corpus in CORPORA:
        text = text_of(corpus)
        assert_same(hf, ours, text)
        unknown += ours.encode(text).count(vocab["<unk>"])
    if unk:
        assert unknown > 100, "the vocabulary is too large to exercise unknown characters"


@pytest.mark.parametrize("ignore_merges", [False, True])
def test_char_level_ignore_merges_and_builtin_pattern(ignore_merges):
    """ignore_merges looks the raw piece up (no prefix/suffix), as HF does; the built-in
    gpt2 pattern in C equals HF's Split with the same regex."""
    from bpe_cffi.patterns import GPT2
    vocab, merges = trained("##", "</w>")
    opts = dict(continuing_subword_prefix="##", end_of_word_suffix="</w>",
                unk_token="<unk>", ignore_merges=ignore_merges)
    hf, ours = char_pair(vocab, merges, pre_tokenizers.Whitespace(),
                         pre_tokenizers.Whitespace(), **opts)
    for corpus in ("en_books", "multilingual"):
        assert_same(hf, ours, text_of(corpus))
    hf.pre_tokenizer = pre_tokenizers.Split(tokenizers.Regex(GPT2), behavior="isolated")
    builtin = bpe_cffi.Tokenizer({i: s.encode() for s, i in vocab.items()},
                                 [(a.encode(), b.encode()) for a, b in merges],
                                 byte_level=False, pattern="gpt2", **opts)
    for corpus in CORPORA:
        assert_same(hf, builtin, text_of(corpus))


# ---- byte fallback ---------------------------------------------------------------------------

@pytest.mark.parametrize("drop,unk", [("", {})] + [("EF", u) for u in UNK],
                         ids=["all-bytes", "missing-bytes", "missing-bytes-unk",
                              "missing-bytes-fuse"])
@pytest.mark.parametrize("prefix", [None, "##"])
def test_byte_fallback_matches_hf(drop, unk, prefix):
    """With every byte token there is never an unk, so unk_token matters only when some
    "<0xNN>" is missing."""
    vocab, merges = trained(prefix)
    vocab = with_byte_tokens(vocab, drop)
    affix = {"continuing_subword_prefix": prefix} if prefix else {}
    hf, ours = char_pair(vocab, merges, pre_tokenizers.Whitespace(),
                         pre_tokenizers.Whitespace(), byte_fallback=True, **affix, **unk)
    fallback = {vocab[f"<0x{b:02X}>"] for b in range(256) if f"<0x{b:02X}>" in vocab}
    used = 0
    for corpus in CORPORA:
        text = text_of(corpus)
        assert_same(hf, ours, text)
        used += sum(i in fallback for i in ours.encode(text))
    assert used > 100


def test_byte_fallback_small_cases():
    """Narrated: 'é' (c3 a9) has no token but both its byte tokens exist -> <0xC3> <0xA9>;
    '中' (e4 b8 ad) lacks <0xE4> -> <unk>.  HF emits a pending unk only when a character with
    a token follows, so '中é' gives the byte tokens BEFORE the unk; ours must agree."""
    vocab = {"<unk>": 0, "a": 1, "<0xC3>": 2, "<0xA9>": 3, "<0xB8>": 4, "<0xAD>": 5}
    for fuse in (False, True):
        hf, ours = char_pair(vocab, [], pre_tokenizers.Whitespace(),
                             pre_tokenizers.Whitespace(), byte_fallback=True,
                             unk_token="<unk>", fuse_unk=fuse)
        for text in ["é", "aéa", "中", "中é", "中中é", "a中中a", "é中", "中é中a", "x中y"]:
            assert ours.encode(text) == hf_ids(hf, text), text
        assert ours.encode("中é") == [2, 3, 0]
    hf, ours = char_pair(vocab, [], pre_tokenizers.Whitespace(), pre_tokenizers.Whitespace(),
                         byte_fallback=True)
    assert ours.encode("中é a") == hf_ids(hf, "中é a") == [2, 3, 1]   # no unk: dropped


# ---- byte level (GPT-2) ------------------------------------------------------------------------

def hf_gpt2(**opts):
    v, m = gpt2_files()
    hf = tokenizers.Tokenizer(models.BPE.from_file(v, m, **opts))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    return hf


def ours_gpt2(**opts):
    if "gpt2" not in _CACHE:
        from bpe_cffi import formats
        v, m = gpt2_files()
        _CACHE["gpt2"] = formats.read_gpt2_vocab(v), formats.read_gpt2_merges(m)
    vocab, merges = _CACHE["gpt2"]
    return bpe_cffi.Tokenizer(vocab, merges, **opts)


def small_byte_level():
    """A byte-level vocabulary of 1000 tokens trained by HF (ByteLevel pre-tokenizer, GPT-2
    alphabet): ({token str: id}, [(str, str)]).  Cheap to build, for tests that build many
    tokenizers."""
    if "small" not in _CACHE:
        hf = tokenizers.Tokenizer(models.BPE())
        hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        trainer = trainers.BpeTrainer(vocab_size=1000, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        hf.train_from_iterator([read_corpus("en_books", 200_000),
                                read_corpus("multilingual", 100_000)], trainer)
        model = json.loads(hf.to_str())["model"]
        _CACHE["small"] = model["vocab"], [tuple(m) if isinstance(m, list)
                                           else tuple(m.split(" ")) for m in model["merges"]]
    return _CACHE["small"]


def small_pair(**opts):
    """(HF, ours) on the small byte-level vocabulary, with ByteLevel pre-tokenization."""
    from bpe_cffi import formats
    vocab, merges = small_byte_level()
    hf_keys = ("dropout", "unk_token", "fuse_unk", "byte_fallback", "ignore_merges")
    hf = tokenizers.Tokenizer(models.BPE(vocab, merges,
                                         **{k: v for k, v in opts.items() if k in hf_keys}))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    t = formats.token_str_to_bytes
    ours = bpe_cffi.Tokenizer({i: t(s, "vocab") for s, i in vocab.items()},
                              [(t(a, "m"), t(b, "m")) for a, b in merges],
                              ignore_merges=opts.get("ignore_merges", False),
                              **{k: v for k, v in opts.items() if k != "ignore_merges"})
    return hf, ours


@pytest.mark.parametrize("opts", [
    dict(dropout=0.0, ignore_merges=False),
    dict(dropout=1.0, ignore_merges=False),
    dict(dropout=1.0, ignore_merges=True),        # dropout bypasses ignore_merges (HF)
    dict(unk_token="<|endoftext|>", fuse_unk=True, ignore_merges=True),
    dict(byte_fallback=True, ignore_merges=True),
], ids=["dropout0", "dropout1", "dropout1-ignore", "unk", "byte_fallback"])
def test_gpt2_options_match_hf(opts):
    hf, ours = hf_gpt2(**opts), ours_gpt2(**opts)
    for corpus in CORPORA:
        assert_same(hf, ours, text_of(corpus, 40_000 if not LONG else None))


def small(**opts):
    return small_pair(**opts)[1]


def test_dropout_1_is_bytes_and_dropout_0_is_plain():
    text = text_of("multilingual", 20_000)
    plain = small()
    assert small(dropout=1.0).encode(text) == [plain.token_to_id(bytes([b]))
                                               for b in text.encode()]
    assert small(dropout=0.0).encode(text) == plain.encode(text)


def test_byte_level_with_a_pre_tokenizer():
    """byte_level + pre_tokenizer: the pieces are plain text and our model maps them to bytes;
    in HF the same is Sequence([Whitespace, ByteLevel(use_regex=False)])."""
    hf, _ = small_pair()
    hf.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Whitespace(), pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                              use_regex=False)])
    ours = small(pre_tokenizer=pre_tokenizers.Whitespace(), ignore_merges=False)
    for corpus in CORPORA:
        assert_same(hf, ours, text_of(corpus, 60_000))


def trained_byte_level(**affix):
    """A byte-level vocabulary (GPT-2 alphabet) trained by HF with a prefix or suffix."""
    key = ("trained-bl", tuple(sorted(affix.items())))
    if key not in _CACHE:
        hf = tokenizers.Tokenizer(models.BPE(**affix))
        hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        trainer = trainers.BpeTrainer(vocab_size=1000, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                      **affix)
        hf.train_from_iterator([read_corpus("en_books", 200_000),
                                read_corpus("multilingual", 100_000)], trainer)
        model = json.loads(hf.to_str())["model"]
        _CACHE[key] = model["vocab"], [tuple(m) for m in model["merges"]]
    return _CACHE[key]


def byte_level_pair(vocab, merges, **opts):
    from bpe_cffi import formats
    hf = tokenizers.Tokenizer(models.BPE(vocab, merges, **opts))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t = formats.token_str_to_bytes
    ours = bpe_cffi.Tokenizer({i: t(s, "vocab") for s, i in vocab.items()},
                              [(t(a, "m"), t(b, "m")) for a, b in merges],
                              ignore_merges=False, **opts)
    return hf, ours


@pytest.mark.parametrize("affix", [{"continuing_subword_prefix": "##"},
                                   {"end_of_word_suffix": "</w>"}], ids=["prefix", "suffix"])
def test_byte_level_affixes_match_hf(affix):
    """Byte-level symbols with a prefix / suffix: the lookup strings are prefix + byte +
    suffix in the byte alphabet."""
    vocab, merges = trained_byte_level(**affix)
    vocab = dict(vocab)
    vocab.setdefault("<unk>", len(vocab) + 10)
    hf, ours = byte_level_pair(vocab, merges, unk_token="<unk>", **affix)
    for corpus in CORPORA:
        assert_same(hf, ours, text_of(corpus, 40_000))


@pytest.mark.parametrize("drop", ["", "C"], ids=["all-bytes", "missing-bytes"])
def test_byte_level_byte_fallback_matches_hf(drop):
    """A byte-level vocabulary without the bytes 0x80-0x9F (and every token holding one):
    HF's byte fallback then emits "<0xNN>" of the UTF-8 of the byte's ALPHABET character
    (e.g. byte 0x80 is 'Ā' = c4 80), which ours reproduces."""
    from bpe_cffi import formats
    vocab, merges = trained_byte_level()
    gone = {formats.byte_to_unicode()[b] for b in range(0x80, 0xA0)}
    vocab = {s: i for s, i in vocab.items() if not set(s) & gone}
    merges = [(a, b) for a, b in merges if a in vocab and b in vocab and a + b in vocab]
    for b in range(256):
        if f"{b:02X}"[0] not in drop:
            vocab.setdefault(f"<0x{b:02X}>", len(vocab) + 2000)
    hf, ours = byte_level_pair(vocab, merges, byte_fallback=True, unk_token="<0x41>",
                               fuse_unk=True)
    for corpus in CORPORA:
        assert_same(hf, ours, text_of(corpus, 40_000))


# ---- normalizer, pre_tokenizer, decoder: a SentencePiece-style vocabulary ------------------------

def test_metaspace_pipeline_matches_hf():
    vocab, merges = trained(metaspace=True)
    vocab = with_byte_tokens(vocab)
    opts = dict(byte_fallback=True, unk_token="<unk>", fuse_unk=True)
    hf, _ = char_pair(vocab, merges, pre_tokenizers.Metaspace(), None, **opts)
    hf.normalizer = normalizers.NFKC()
    hf.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace()])
    ours = bpe_cffi.Tokenizer({i: s.encode() for s, i in vocab.items()},
                              [(a.encode(), b.encode()) for a, b in merges],
                              byte_level=False, ignore_merges=False,
                              normalizer=normalizers.NFKC(),
                              pre_tokenizer=pre_tokenizers.Metaspace(),
                              decoder=decoders.Sequence([decoders.ByteFallback(),
                                                         decoders.Metaspace()]), **opts)
    for corpus in CORPORA:
        text = text_of(corpus, 60_000)
        ids = hf_ids(hf, text)
        assert ours.encode(text) == ids
        assert ours.decode(ids[:3000]) == hf.decode(ids[:3000])
    assert ours.encode_batch([text_of("web", 5000), "x"], num_threads=2) == [
        hf_ids(hf, text_of("web", 5000)), hf_ids(hf, "x")]


def test_special_tokens_are_matched_before_the_normalizer():
    vocab, merges = trained("##")
    opts = dict(continuing_subword_prefix="##", unk_token="<unk>")
    hf, _ = char_pair(vocab, merges, pre_tokenizers.Whitespace(), None, **opts)
    hf.normalizer = normalizers.Lowercase()
    hf.add_special_tokens([tokenizers.AddedToken("<SEP>", special=True, normalized=False)])
    ours = bpe_cffi.Tokenizer({i: s.encode() for s, i in vocab.items()},
                              [(a.encode(), b.encode()) for a, b in merges], ["<SEP>"],
                              byte_level=False, ignore_merges=False,
                              normalizer=normalizers.Lowercase(),
                              pre_tokenizer=pre_tokenizers.Whitespace(), **opts)
    assert ours.special_tokens["<SEP>"] == hf.token_to_id("<SEP>")
    text = "Hello World<SEP>SECOND Part <SEP> Ünïcode"
    assert ours.encode(text) == hf_ids(hf, text)


# ---- dropout statistics and seeds ------------------------------------------------------------

def test_dropout_distribution_matches_hf():
    """Tokens per word under BPE-dropout, ours vs HF, over N words.  Each word's encoding is
    an independent random draw, so the mean over N words has standard error sd / sqrt(N):
    with sd <= 1.4 (p = 0.5) and N = 20000 that is <= 0.01, and the difference of the two
    means has SE <= 0.014.  Tolerance 0.07 = 5 SE: a false failure has odds below 1e-6, while
    a mistake in the semantics moves the mean much further (dropping the skipped merges
    instead of pushing them back when a merge is applied fails this test: checked by
    mutation).  The spread (sd) of the counts is compared with the same tolerance: its SE is
    about sd / sqrt(2N) times a kurtosis factor, well under 0.02."""
    words = [" " + w for w in text_of("en_books", 400_000).split()[:20000]]
    for p in (0.1, 0.5):
        hf = hf_gpt2(dropout=p)
        ours = ours_gpt2(dropout=p, seed=1234)
        a = [len(e.ids) for e in hf.encode_batch(words, add_special_tokens=False)]
        b = [len(ids) for ids in ours.encode_batch(words, num_threads=1)]
        assert abs(statistics.mean(a) - statistics.mean(b)) < 0.07, (p, statistics.mean(a),
                                                                      statistics.mean(b))
        assert abs(statistics.pstdev(a) - statistics.pstdev(b)) < 0.07
        assert statistics.mean(b) > 1.05       # dropout did split words


def test_dropout_seed_reproducible():
    text = text_of("en_books", 20_000)
    a = small(dropout=0.3, seed=7)
    b = small(dropout=0.3, seed=7)
    c = small(dropout=0.3, seed=8)
    first = a.encode(text)
    assert first == b.encode(text)                  # same seed, same call sequence
    assert first != c.encode(text)                  # another seed
    assert a.encode(text) != first                  # the next call draws anew (as HF)
    assert a.encode(text) == (b.encode(text), b.encode(text))[1]
    assert a.decode(first) == text                  # dropout never changes the text
    d, e = small(dropout=0.3, seed=9), small(dropout=0.3, seed=9)
    assert d.encode_batch([text[:5000]] * 3, num_threads=1) == \
        e.encode_batch([text[:5000]] * 3, num_threads=1)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_forked_children_draw_their_own_dropout_stream():
    """A random seed (seed=None) was copied into every forked child: fork-based data-loader
    workers all produced the same "random" segmentation, and the parent's next call too.
    Each child now draws a new seed; a given seed is still repeated (as asked)."""
    text = text_of("en_books", 5_000)

    def children_outputs(tok, n=4):
        tok.encode("warm up")                  # the parent has drawn from its stream
        outs = []
        for _ in range(n):
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:                        # the child: its first encode, to the pipe
                try:
                    os.write(w, json.dumps(tok.encode(text)).encode())
                finally:
                    os._exit(0)
            os.close(w)
            with os.fdopen(r, "rb") as f:
                outs.append(json.loads(f.read()))
            os.waitpid(pid, 0)
        return outs, tok.encode(text)

    outs, parent_next = children_outputs(small(dropout=0.3))
    assert len({json.dumps(o) for o in outs}) == len(outs)
    assert all(o != parent_next for o in outs)
    outs, parent_next = children_outputs(small(dropout=0.3, seed=11))
    assert all(o == parent_next for o in outs)      # a given seed: the parent's stream


def test_dropout_with_batch_file_iterable(tmp_path):
    text = text_of("web", 100_000)
    tok = small(dropout=1.0)
    expect = tok.encode(text)
    assert tok.encode_batch([text, text], num_threads=2) == [expect, expect]
    assert list(tok.encode_iterable(text[i:i + 777] for i in range(0, len(text), 777))) == \
        expect
    src = tmp_path / "in.txt"
    src.write_text(text, encoding="utf-8")
    n = tok.encode_file(src, tmp_path / "out.bin", progress=False, num_threads=2)
    import numpy
    assert numpy.fromfile(tmp_path / "out.bin", dtype=numpy.uint16).tolist() == expect
    assert n == len(expect)
    half = small(dropout=0.5, seed=3)
    assert half.decode(half.encode_batch([text], num_threads=2)[0]) == text


# ---- the other entry points with character-level options ---------------------------------------

def test_char_level_entry_points(tmp_path):
    vocab, merges = trained("##")
    tok = bpe_cffi.Tokenizer({i: s.encode() for s, i in vocab.items()},
                             [(a.encode(), b.encode()) for a, b in merges], ["<|endoftext|>"],
                             byte_level=False, pattern="gpt2", unk_token="<unk>",
                             continuing_subword_prefix="##", fuse_unk=True)
    text = text_of("multilingual", 100_000)
    expect = tok.encode(text)
    assert tok.encode_batch([text, text[:999]], num_threads=2) == [expect,
                                                                   tok.encode(text[:999])]
    assert list(tok.encode_iterable(text[i:i + 500] for i in range(0, len(text), 500))) == \
        expect
    src = tmp_path / "in.txt"
    src.write_text(text, encoding="utf-8")
    tok.encode_file(src, tmp_path / "out.bin", progress=False, num_threads=2)
    import numpy
    assert numpy.fromfile(tmp_path / "out.bin", dtype=numpy.uint16).tolist() == expect
    with pytest.raises(ValueError, match="encode_with_offsets"):
        tok.encode_with_offsets(text)
    # tokens are text: decode concatenates them (no decoder: "##" stays)
    assert tok.decode(tok.encode("abc")) == "".join(tok.id_to_tokens(tok.encode("abc")))


def test_offsets_char_level_without_affixes():
    vocab, merges = trained()
    tok = bpe_cffi.Tokenizer({i: s.encode() for s, i in vocab.items()},
                             [(a.encode(), b.encode()) for a, b in merges],
                             byte_level=False, pattern="gpt2")
    text = "Hello,the cat.sat"            # (the vocabulary has no space: Whitespace)
    ids, spans = tok.encode_with_offsets(text.replace(" ", ""))
    text = text.replace(" ", "")
    assert [text[s:e] for s, e in spans] == [tok.decode([i]) for i in ids]
    with pytest.raises(ValueError, match="dropped"):
        tok.encode_with_offsets("hello 中文")        # no unk: unknown characters vanish


def test_components_refused_where_unsupported(tmp_path):
    tok = small(pre_tokenizer=pre_tokenizers.Whitespace(), decoder=decoders.ByteLevel())
    with pytest.raises(ValueError, match="encode_iterable"):
        list(tok.encode_iterable(["a b", "c"]))
    src = tmp_path / "in.txt"
    src.write_text("a b c", encoding="utf-8")
    with pytest.raises(ValueError, match="encode_file"):
        tok.encode_file(src, tmp_path / "out.bin", progress=False)
    with pytest.raises(ValueError, match="stream_decoder"):
        tok.stream_decoder()
    with pytest.raises(ValueError, match="decode_with_offsets"):
        tok.decode_with_offsets([1, 2])
    assert tok.decode(tok.encode("héllo wörld")) == "héllowörld"   # Whitespace drops spaces


# ---- saving, loading, pickling -----------------------------------------------------------------

def test_save_load_pickle_byte_level(tmp_path):
    opts = dict(unk_token="Ġthe", fuse_unk=True, dropout=0.0, ignore_merges=False)
    ours = small(**opts)
    path = tmp_path / "t.json"
    ours.save(path)
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert doc["model"]["unk_token"] == "Ġthe" and doc["model"]["dropout"] == 0.0
    assert doc["model"]["fuse_unk"] is True and doc["model"]["ignore_merges"] is False
    text = text_of("multilingual", 60_000)
    hf = tokenizers.Tokenizer.from_file(str(path))
    assert hf_ids(hf, text) == ours.encode(text)
    back = bpe_cffi.load(path)
    assert back.model_options["unk_token"] == "Ġthe"
    assert back.encode(text) == ours.encode(text)
    assert pickle.loads(pickle.dumps(ours)).encode(text) == ours.encode(text)
    drop = small(dropout=0.25, seed=11)
    clone = pickle.loads(pickle.dumps(drop))
    assert clone.model_options == drop.model_options
    assert clone.encode(text) == small(dropout=0.25, seed=11).encode(text)


@pytest.mark.parametrize("with_components", [False, True])
def test_save_load_pickle_char_level(tmp_path, with_components):
    vocab, merges = trained("##", "</w>")
    vocab = with_byte_tokens(vocab, "EF")
    comps = dict(pre_tokenizer=pre_tokenizers.Whitespace(), normalizer=normalizers.NFC(),
                 decoder=decoders.WordPiece()) if with_components else dict(pattern="gpt2")
    ours = bpe_cffi.Tokenizer({i: s.encode() for s, i in vocab.items()},
                              [(a.encode(), b.encode()) for a, b in merges],
                              byte_level=False, continuing_subword_prefix="##",
                              end_of_word_suffix="</w>", unk_token="<unk>", fuse_unk=True,
                              byte_fallback=True, ignore_merges=False, **comps)
    path = tmp_path / "c.json"
    ours.save(path)
    text = text_of("multilingual", 60_000)
    expect = ours.encode(text)
    hf = tokenizers.Tokenizer.from_file(str(path))
    assert hf_ids(hf, text) == expect
    assert pickle.loads(pickle.dumps(ours)).encode(text) == expect
    if with_components:
        assert hf.decode(expect[:500]) == ours.decode(expect[:500])
        loaded = bpe_cffi.load(path)        # hf_import reads the components back
        assert loaded.encode(text) == expect
        assert loaded.decode(expect[:500]) == ours.decode(expect[:500])
    else:
        assert bpe_cffi.load(path).encode(text) == expect


def test_from_files_char_level(tmp_path):
    vocab, merges = trained("##")
    (tmp_path / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), "utf-8")
    (tmp_path / "merges.txt").write_text(
        "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges), "utf-8")
    tok = bpe_cffi.load(tmp_path / "vocab.json", byte_level=False,
                        continuing_subword_prefix="##", unk_token="<unk>",
                        ignore_merges=False, pre_tokenizer=pre_tokenizers.Whitespace())
    hf = tokenizers.Tokenizer(models.BPE.from_file(
        str(tmp_path / "vocab.json"), str(tmp_path / "merges.txt"),
        continuing_subword_prefix="##", unk_token="<unk>"))
    hf.pre_tokenizer = pre_tokenizers.Whitespace()
    assert_same(hf, tok, text_of("multilingual", 30_000))
    with pytest.raises(ValueError, match="merges.txt:2"):
        bpe_cffi.load(tmp_path / "vocab.json", byte_level=False)   # no prefix: "##x" merges


# ---- bad options -----------------------------------------------------------------------------

@pytest.mark.parametrize("opts,exc,match", [
    (dict(dropout=1.5), ValueError, "dropout must be in"),
    (dict(dropout=-0.1), ValueError, "dropout must be in"),
    (dict(dropout=float("nan")), ValueError, "dropout must be in"),
    (dict(dropout="0.1"), TypeError, "dropout"),
    (dict(dropout=True), TypeError, "dropout"),
    (dict(seed=-1), ValueError, "seed"),
    (dict(seed=2 ** 64), ValueError, "seed"),
    (dict(unk_token="<nope>"), ValueError, "unk_token '<nope>' is not in the vocabulary"),
    (dict(unk_token=""), ValueError, "unk_token must not be empty"),
    (dict(unk_token=3), TypeError, "unk_token"),
    (dict(fuse_unk=1), TypeError, "fuse_unk must be a bool"),
    (dict(byte_level="no"), TypeError, "byte_level must be a bool"),
    (dict(continuing_subword_prefix=""), ValueError, "must not be empty"),
    (dict(continuing_subword_prefix="##"), ValueError, "merges"),
    (dict(pre_tokenizer=object()), TypeError, "pre_tokenize_str"),
    (dict(normalizer="NFC"), TypeError, "normalize_str"),
    (dict(decoder=42), TypeError, "decode"),
])
def test_bad_options_raise(opts, exc, match):
    vocab = {0: b"a", 1: b"b", 2: b"ab", 3: b"<unk>"}
    with pytest.raises(exc, match=match):
        bpe_cffi.Tokenizer(vocab, [(b"a", b"b")], **opts)


def test_bad_options_elsewhere():
    with pytest.raises(ValueError, match="not UTF-8 text"):
        bpe_cffi.Tokenizer({0: b"a", 1: b"\xff"}, [], byte_level=False)
    with pytest.raises(ValueError, match="tiktoken"):
        bpe_cffi.Tokenizer._from_parts("tiktoken", {0: b"a", 1: b"b", 2: b"ab"}, [], {},
                                       "gpt2", dropout=0.5)
    # a prefix longer than a merge's right part (HF would panic): a clear error
    with pytest.raises(ValueError, match="shorter than the continuing-subword prefix"):
        bpe_cffi.Tokenizer({0: b"a", 1: b"b", 2: b"ab"}, [(b"a", b"b")],
                           byte_level=False, continuing_subword_prefix="###")


# ---- the C API directly ------------------------------------------------------------------------

def _c_spec(**fields):
    from bpe_cffi._native import ffi, lib
    keep = [ffi.new("uint8_t[]", b"abab"), ffi.new("size_t[]", [0, 1, 2, 4]),
            ffi.new("uint32_t[]", [0, 1, 2]), ffi.new("uint32_t[]", [0, 1])]
    spec = ffi.new("bpe_spec *")
    spec.rule, spec.pattern = lib.BPE_RULE_MERGES, lib.BPE_PATTERN_EXTERNAL
    spec.n_tokens, spec.token_bytes, spec.token_offsets, spec.token_ids = 3, keep[0], \
        keep[1], keep[2]
    spec.n_merges, spec.merges = 1, keep[3]
    for k, v in fields.items():
        setattr(spec, k, v)
    out = ffi.new("bpe_tokenizer **")
    return lib.bpe_tokenizer_new(spec, out, ffi.NULL), out, keep


@pytest.mark.parametrize("fields", [dict(dropout=1.5), dict(dropout=-0.5),
                                    dict(dropout=float("nan")), dict(has_unk=1, unk_id=7),
                                    dict(rule=1, dropout=0.5), dict(subword_prefix_len=2)])
def test_c_api_rejects_bad_options(fields):
    from bpe_cffi._native import ffi, lib
    rc, out, _ = _c_spec(**fields)
    assert rc == lib.BPE_ERR_ARG and out[0] == ffi.NULL


def test_c_api_options_default_off():
    """A spec with the new fields left zero is the plain byte-level tokenizer; dropout 1
    leaves the bytes; an unk with char_level maps unknown characters."""
    from bpe_cffi._native import ffi, lib

    def encode(out, data):
        ids = ffi.new("bpe_ids *")
        ends = ffi.new("size_t[]", [len(data)])
        assert lib.bpe_encode_pieces(out[0], data, ends, 1, ids) == lib.BPE_OK
        res = ffi.unpack(ids.ids, ids.len)
        lib.bpe_ids_free(ids)
        lib.bpe_tokenizer_free(out[0])
        return res

    rc, out, _ = _c_spec()
    assert rc == lib.BPE_OK and encode(out, b"abab") == [2, 2]
    rc, out, _ = _c_spec(dropout=1.0)
    assert rc == lib.BPE_OK and encode(out, b"abab") == [0, 1, 0, 1]
    rc, out, _ = _c_spec(char_level=1, has_unk=1, unk_id=2, fuse_unk=1)
    assert rc == lib.BPE_OK and encode(out, "aé€b".encode()) == [0, 2, 1]   # é€: one unk


def test_a_merge_listed_twice_ranks_by_its_last_line_as_hf():
    """HF ranks a merge that merges.txt lists twice by its later line; so must we (the first
    line's rank would merge that pair too early)."""
    import random
    rng = random.Random(7)
    letters = "abcde"
    for trial in range(30):
        vocab = {c: i for i, c in enumerate(letters)}
        merges = []
        while len(merges) < 25:
            a, b = rng.choice(list(vocab)), rng.choice(list(vocab))
            if len(a + b) > 6 or (a, b) in merges:
                continue
            merges.append((a, b))
            vocab.setdefault(a + b, len(vocab))
        for _ in range(rng.randrange(1, 6)):         # repeat earlier merges further down
            merges.insert(rng.randrange(len(merges) // 2, len(merges) + 1),
                          merges[rng.randrange(len(merges) // 2)])
        hf = tokenizers.Tokenizer(models.BPE(vocab, merges, ignore_merges=False))
        ours = bpe_cffi.Tokenizer({i: s.encode() for s, i in vocab.items()},
                                  [(a.encode(), b.encode()) for a, b in merges],
                                  ignore_merges=False)
        for _ in range(40):
            word = "".join(rng.choice(letters) for _ in range(rng.randrange(1, 14)))
            assert ours.encode(word) == hf.encode(word).ids, (trial, word, merges)
