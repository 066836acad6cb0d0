"""bpe_cffi.hf_import: tokenizer.json files built and trained with HF's own library are read
into what Tokenizer needs (checked against HF's objects), refused with a message naming the
unsupported part, and (where this Tokenizer has the options) encode like HF."""
import json
import warnings

import pytest

from conftest import CORPORA, LONG, read_corpus

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import Regex, decoders as D, models, normalizers as N  # noqa: E402
from tokenizers import pre_tokenizers as P, processors, trainers  # noqa: E402

from bpe_cffi import Tokenizer, formats, hf_components as C, hf_import, load  # noqa: E402
from bpe_cffi.hf_import import read_hf_tokenizer_json  # noqa: E402

MODEL_OPTIONS = {"byte_level", "pre_tokenizer", "normalizer", "decoder", "unk_token",
                 "byte_fallback", "fuse_unk", "dropout", "continuing_subword_prefix",
                 "end_of_word_suffix"}

PARITY_BYTES = 1_000_000 if LONG else 40_000
SPECIALS = ["<unk>", "<s>", "</s>"]


@pytest.fixture(scope="module")
def train_lines():
    return read_corpus("en_books", 250_000).splitlines() + \
        read_corpus("multilingual", 100_000).splitlines()


@pytest.fixture(scope="module")
def built(tmp_path_factory, train_lines):
    """name -> path of a tokenizer.json built and trained by HF (made once, on demand)."""
    cache = {}
    d = tmp_path_factory.mktemp("hfjson")

    def make(name):
        if name not in cache:
            t = BUILDERS[name](train_lines)
            p = d / f"{name}.json"
            t.save(str(p))
            cache[name] = p
        return cache[name]
    return make


def _train(model, lines, pre=None, norm=None, dec=None, vocab_size=700, **tkw):
    t = tokenizers.Tokenizer(model)
    if pre is not None:
        t.pre_tokenizer = pre
    if norm is not None:
        t.normalizer = norm
    if dec is not None:
        t.decoder = dec
    t.train_from_iterator(lines, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False, **tkw))
    return t


def _whitespace(lines):
    t = _train(models.BPE(unk_token="<unk>"), lines, P.Whitespace())
    t.add_tokens(["hello there"])                       # a non-special added token
    return t


def _llama(lines):
    """SentencePiece/Llama style: Prepend+Replace normalizer, no pre-tokenizer, byte
    fallback, the Replace/ByteFallback/Fuse/Strip decoder, a BOS post-processor."""
    t = _train(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True), lines,
               norm=N.Sequence([N.Prepend("\u2581"), N.Replace(" ", "\u2581")]),
               dec=D.Sequence([D.Replace("\u2581", " "), D.ByteFallback(), D.Fuse(),
                               D.Strip(" ", 1, 0)]))
    t.post_processor = processors.TemplateProcessing(single="<s> $A",
                                                     special_tokens=[("<s>", 1)])
    doc = json.loads(t.to_str())
    vocab = doc["model"]["vocab"]
    top = max(vocab.values()) + 1
    for b in range(256):                                # byte-fallback tokens, as in Llama
        vocab[f"<0x{b:02X}>"] = top + b
    return tokenizers.Tokenizer.from_str(json.dumps(doc))


def _metaspace(lines):
    return _train(models.BPE(), lines, P.Metaspace(prepend_scheme="first"),
                  dec=D.Metaspace(prepend_scheme="first"))


def _suffix(lines):
    """Character-level with an end-of-word suffix and a continuing-subword prefix."""
    return _train(models.BPE(unk_token="<unk>", end_of_word_suffix="</w>",
                             continuing_subword_prefix="##"), lines,
                  P.Sequence([P.WhitespaceSplit(), P.Punctuation()]), dec=D.BPEDecoder("</w>"),
                  end_of_word_suffix="</w>", continuing_subword_prefix="##")


_GAPPY_REGEX = r"\p{L}+|\p{N}"          # leaves spaces and punctuation as gaps


def _bytelevel_regex(lines):
    """Byte-level with a custom Split regex (not one of ours): a plain regex split."""
    return _train(models.BPE(), lines,
                  P.Sequence([P.Split(Regex(_GAPPY_REGEX), "isolated"),
                              P.ByteLevel(add_prefix_space=False, use_regex=False)]),
                  dec=D.ByteLevel(), initial_alphabet=P.ByteLevel.alphabet())


def _bytelevel_prefix(lines):
    """RoBERTa-style byte-level with add_prefix_space=True and a Digits step."""
    return _train(models.BPE(), lines,
                  P.Sequence([P.Digits(True), P.ByteLevel(add_prefix_space=True)]),
                  dec=D.ByteLevel(), initial_alphabet=P.ByteLevel.alphabet())


def _bytelevel_partial(lines):
    """GPT-2 style byte-level trained without initial_alphabet, on English only: the
    vocabulary lacks the bytes English did not use (most UTF-8 lead bytes among them), which
    HF's model drops when it meets them."""
    english = lines[:len(lines) * 2 // 3]
    return _train(models.BPE(), english, P.ByteLevel(add_prefix_space=False),
                  dec=D.ByteLevel())


def _charbpe(lines):
    """HF's CharBPETokenizer layout: BertNormalizer, BertPreTokenizer, a "</w>" suffix and
    the BPEDecoder; a cased one with accents kept would differ only in the normalizer's
    options."""
    return _train(models.BPE(unk_token="<unk>", end_of_word_suffix="</w>"), lines,
                  P.BertPreTokenizer(), N.BertNormalizer(), D.BPEDecoder(suffix="</w>"),
                  end_of_word_suffix="</w>")


BUILDERS = {"whitespace": _whitespace, "llama": _llama, "metaspace": _metaspace,
            "suffix": _suffix, "bytelevel-regex": _bytelevel_regex,
            "bytelevel-prefix": _bytelevel_prefix, "bytelevel-partial": _bytelevel_partial,
            "charbpe": _charbpe}


def _read(p):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return read_hf_tokenizer_json(p)


def _hf_vocab(p):
    return json.loads(p.read_text("utf-8"))["model"]["vocab"]


def _hf_added(p):
    return json.loads(p.read_text("utf-8"))["added_tokens"]


# ---- what the reader returns ------------------------------------------------------------

def test_read_whitespace(built):
    p = built("whitespace")
    r = _read(p)
    added = {t["content"]: t["id"] for t in _hf_added(p)}
    assert r["special"] == added and "hello there" in added
    assert r["added_non_special"] == ["hello there"]
    assert r["byte_level"] is False and r["pattern"] is None
    assert r["vocab"] == {i: s.encode("utf-8") for s, i in _hf_vocab(p).items()
                          if s not in added}
    raw_merges = json.loads(p.read_text("utf-8"))["model"]["merges"]
    assert r["merges"] == [(a.encode(), b.encode()) for a, b in raw_merges]
    assert r["options"] == {"unk_token": "<unk>", "byte_level": False,
                            "pre_tokenizer": C.Whitespace(), "decoder": C.SpaceJoin()}
    assert r["warnings"] == [] and r["ignore_merges"] is False


def test_read_llama(built):
    p = built("llama")
    with pytest.warns(UserWarning, match="TemplateProcessing is ignored"):
        load(p)
    r = _read(p)
    assert r["byte_level"] is False
    assert r["vocab"][max(r["vocab"])] == b"<0xFF>"
    o = r["options"]
    assert o["unk_token"] == "<unk>" and o["byte_fallback"] is True and o["fuse_unk"] is True
    assert o["pre_tokenizer"].pre_tokenize_str("a b") == [("a b", (0, 3))]   # no splitting
    assert o["normalizer"] == C.NormalizerSequence([C.Prepend("\u2581"),
                                                    C.Replace(" ", "\u2581")])
    assert o["decoder"].decode(["\u2581Hi", "<0xC3>", "<0xA9>", "\u2581x"]) == "Hi\u00e9 x"
    assert any("TemplateProcessing is ignored" in w for w in r["warnings"])
    assert r["post_processor"]["type"] == "TemplateProcessing"


def test_read_metaspace_and_suffix(built):
    r = _read(built("metaspace"))
    assert r["options"]["pre_tokenizer"] == C.Metaspace(prepend_scheme="first")
    assert r["options"]["decoder"] == C.MetaspaceDecoder(prepend_scheme="first")
    assert "unk_token" not in r["options"]
    r = _read(built("suffix"))
    o = r["options"]
    assert o["end_of_word_suffix"] == "</w>" and o["continuing_subword_prefix"] == "##"
    assert any(b.endswith(b"</w>") for b in r["vocab"].values())


def test_read_bytelevel_custom_regex(built):
    """A byte-level Split regex that is not ours: a plain pattern, no new options."""
    p = built("bytelevel-regex")
    r = _read(p)
    assert r["byte_level"] is True and r["pattern"] == _GAPPY_REGEX and r["options"] == {}
    ids = {s: i for s, i in _hf_vocab(p).items()}
    assert r["vocab"] == {i: formats.token_str_to_bytes(s, "t") for s, i in ids.items()
                          if s not in SPECIALS}


def test_read_bytelevel_prefix_space(built):
    """ByteLevel(add_prefix_space=True) after Digits: handed over as a pre-tokenizer whose
    pieces are raw text (the Tokenizer maps bytes), splitting exactly as HF's."""
    r = _read(built("bytelevel-prefix"))
    assert r["byte_level"] is True and r["pattern"] is None
    pre = r["options"]["pre_tokenizer"]
    assert isinstance(pre, C.TextPieces) and "byte_level" not in r["options"]
    hf = P.Sequence([P.Digits(True), P.ByteLevel(add_prefix_space=True)])
    for t in ["Hello 123 w\u00f6rld", " x", read_corpus("web", 20_000)]:
        ours = pre.pre_tokenize_str(t)
        theirs = hf.pre_tokenize_str(t)
        assert [o for _, o in ours] == [o for _, o in theirs]
        assert [formats.bytes_to_token_str(s.encode()) for s, _ in ours] == \
            [s for s, _ in theirs]


def test_builtin_patterns_recognised(tmp_path):
    """A tokenizer.json without our "bpe_cffi" key but with our Split regex (as HF-side
    tools keep it) loads with the built-in C pattern; so does HF's ByteLevel(use_regex)."""
    base = {i: bytes([i]) for i in range(256)} | {256: b"ab"}
    for name in ("cl100k", "o200k", "gpt2"):
        tok = Tokenizer(base, [(b"a", b"b")], ["<|endoftext|>"], pattern=name)
        p = tmp_path / f"{name}.json"
        tok.save(p)
        doc = json.loads(p.read_text("utf-8"))
        del doc["model"]["bpe_cffi"]
        p.write_text(json.dumps(doc), "utf-8")
        r = read_hf_tokenizer_json(p)
        assert r["pattern"] == name and r["options"] == {} and r["byte_level"] is True
        back = load(p)
        assert back.pattern == name
        assert back.encode("ab abc<|endoftext|>") == tok.encode("ab abc<|endoftext|>")
    doc["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False,
                            "trim_offsets": True, "use_regex": True}
    p.write_text(json.dumps(doc), "utf-8")
    assert read_hf_tokenizer_json(p)["pattern"] == "gpt2"
    # the older cl100k regex found in hub files is not ours (it splits trailing whitespace
    # after a newline differently), so it stays a regex run in Python
    doc["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": OLD_CL100K}, "behavior": "Isolated",
         "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
         "use_regex": False}]}
    p.write_text(json.dumps(doc), "utf-8")
    assert read_hf_tokenizer_json(p)["pattern"] == OLD_CL100K
    hf = tokenizers.Tokenizer.from_file(str(p))
    text = "a  \r\n\r\n  b \n " + read_corpus("code", 20_000)
    assert load(p).encode(text) == hf.encode(text).ids


OLD_CL100K = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?"""
              r"""[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")


def test_merges_in_both_forms(built, tmp_path):
    p = built("whitespace")
    doc = json.loads(p.read_text("utf-8"))
    assert all(isinstance(m, list) for m in doc["model"]["merges"])
    doc["model"]["merges"] = [" ".join(m) for m in doc["model"]["merges"]]
    q = tmp_path / "strings.json"
    q.write_text(json.dumps(doc), "utf-8")
    assert _read(q)["merges"] == _read(p)["merges"]
    assert tokenizers.Tokenizer.from_file(str(q)).encode("hello world").ids == \
        tokenizers.Tokenizer.from_file(str(p)).encode("hello world").ids


# ---- refusals -------------------------------------------------------------------------------

def _mutated(p, tmp_path, change, name="bad.json"):
    doc = json.loads(p.read_text("utf-8"))
    change(doc)
    q = tmp_path / name
    q.write_text(json.dumps(doc), "utf-8")
    return q


def _set(path, value):
    def change(doc):
        d = doc
        for k in path[:-1]:
            d = d[k]
        d[path[-1]] = value
    return change


REFUSALS = [
    ("normalizer", {"type": "Precompiled", "precompiled_charsmap": ""},
     "normalizer Precompiled is not supported"),
    ("pre_tokenizer", {"type": "UnicodeScripts"}, "pre_tokenizer UnicodeScripts"),
    ("pre_tokenizer", {"type": "Sequence", "pretokenizers": [
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
         "use_regex": False}, {"type": "Digits", "individual_digits": True}]},
     "ByteLevel followed by Digits"),
    ("decoder", {"type": "CTC", "pad_token": "<pad>", "word_delimiter_token": "|",
                 "cleanup": True}, "decoder CTC is not supported"),
    ("post_processor", {"type": "Mystery"}, "post_processor Mystery is not supported"),
    ("chat_template", "{{ x }}", r"unknown top-level field\(s\) \['chat_template'\]"),
]


@pytest.mark.parametrize("key, value, match", REFUSALS, ids=[r[2][:30] for r in REFUSALS])
def test_refusals_name_the_part(built, tmp_path, key, value, match):
    q = _mutated(built("whitespace"), tmp_path, _set([key], value))
    with pytest.raises(ValueError, match=match) as exc:
        read_hf_tokenizer_json(q)
    assert "bad.json" in str(exc.value)
    with pytest.raises(ValueError, match=match):
        load(q)


def test_byte_fallback_tokens_listed_as_added_tokens(tmp_path, train_lines):
    """HF's trainer puts special_tokens (here the 256 <0xNN> tokens, as some recipes do) in
    added_tokens and in the model vocab; the model's byte fallback uses them from there.
    They used to be taken out of our model, which then gave <unk> instead of the bytes."""
    from tokenizers import Tokenizer as HFTokenizer
    specials = ["<unk>"] + [f"<0x{b:02X}>" for b in range(256)]
    hf = HFTokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    hf.pre_tokenizer = P.Metaspace()
    hf.train_from_iterator(train_lines[:2000], trainers.BpeTrainer(
        vocab_size=700, special_tokens=specials, show_progress=False))
    path = tmp_path / "bf.json"
    hf.save(str(path))
    ours = load(path)
    texts = ["hello é", "naïve 日本語 ☃ 🎉", "<0xC3> typed as text"] + train_lines[2000:2100]
    for t in texts:
        assert ours.encode(t) == hf.encode(t, add_special_tokens=False).ids, t[:40]


def _drop_merges(doc):
    del doc["model"]["merges"]


@pytest.mark.parametrize("change", [_set(["model", "merges"], None), _drop_merges],
                         ids=["null", "absent"])
def test_merges_null_or_absent_refused(built, tmp_path, change):
    """HF refuses a BPE model without a merges list; taking it as "no merges" would encode
    byte by byte, silently."""
    q = _mutated(built("whitespace"), tmp_path, change)
    with pytest.raises(ValueError, match="model.merges") as exc:
        load(q)
    assert "bad.json" in str(exc.value)
    from tokenizers import Tokenizer as HFTokenizer
    with pytest.raises(Exception):
        HFTokenizer.from_file(str(q))


@pytest.mark.parametrize("flag, value, match", [
    ("lstrip", 1, r"added_tokens\[0\] \('<unk>'\): lstrip must be true or false, not 1"),
    ("normalized", "yes", "normalized must be true or false"),
    ("extra", 1, r"unknown field\(s\) \['extra'\]"),
])
def test_added_token_refusals(built, tmp_path, flag, value, match):
    q = _mutated(built("whitespace"), tmp_path, lambda d: d["added_tokens"][0].update(
        {flag: value}))
    with pytest.raises(ValueError, match=match):
        read_hf_tokenizer_json(q)


def test_added_token_options_read(built, tmp_path):
    """The options HF applies when finding added tokens are read (added_tokens.py applies
    them; tests/test_added_tokens.py checks the ids against HF)."""
    def change(d):
        d["normalizer"] = {"type": "Lowercase"}
        d["added_tokens"][0].update(lstrip=True, normalized=True)
        d["added_tokens"][1].update(single_word=True, rstrip=True, normalized=False)
    parts = _read(_mutated(built("whitespace"), tmp_path, change))
    flags = parts["added_flags"]
    assert flags["<unk>"] == (True, False, False, True)
    assert flags["<s>"] == (False, True, True, False)


def test_added_token_id_clashes_refused(built, tmp_path):
    p = built("whitespace")
    vocab = _hf_vocab(p)
    added = {t["content"] for t in _hf_added(p)}
    some, some_id = next((s, i) for s, i in vocab.items() if len(s) > 2 and s not in added)
    q = _mutated(p, tmp_path, lambda d: d["added_tokens"].append(
        {"id": some_id, "content": "<new>", "single_word": False, "lstrip": False,
         "rstrip": False, "normalized": False, "special": True}))
    with pytest.raises(ValueError, match=rf"added token '<new>' has id {some_id}, which is "
                                         rf"the model's token"):
        read_hf_tokenizer_json(q)
    q = _mutated(p, tmp_path, lambda d: d["added_tokens"].append(
        {"id": 99999, "content": some, "single_word": False, "lstrip": False,
         "rstrip": False, "normalized": False, "special": True}))
    with pytest.raises(ValueError, match=rf"\(id 99999\) is also the model's token {some_id}"):
        read_hf_tokenizer_json(q)


def test_wordpiece_and_unigram_models_refused(tmp_path):
    t = tokenizers.Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1, "##b": 2},
                                              unk_token="[UNK]"))
    t.normalizer = N.BertNormalizer()
    p = tmp_path / "wp.json"
    t.save(str(p))
    with pytest.raises(ValueError, match=r"wp.json: model type 'WordPiece' is not BPE"):
        read_hf_tokenizer_json(p)
    with pytest.raises(ValueError, match="WordPiece"):
        load(p)
    t = tokenizers.Tokenizer(models.Unigram([("<unk>", 0.0), ("a", -1.0)], 0))
    p = tmp_path / "uni.json"
    t.save(str(p))
    with pytest.raises(ValueError, match="model type 'Unigram' is not BPE"):
        load(p)


def test_unknown_model_field_and_bad_options(built, tmp_path):
    p = built("whitespace")
    for change, match in [
            (_set(["model", "sparkle"], True), r"unknown model field\(s\) \['sparkle'\]"),
            (_set(["model", "dropout"], 2.0), "dropout must be a number in"),
            (_set(["model", "byte_fallback"], "yes"), "byte_fallback must be true or false"),
            (_set(["model", "merges"], [["a", "b", "c"]]), r"merges\[0\] must be two tokens"),
            (_set(["model", "vocab"], {"": 5}), "the empty string is not a token"),
            (_set(["pre_tokenizer"], {"type": "Split", "behavior": "Isolated", "invert": False,
                                      "pattern": {"Regex": r"\d{1,3}+"}}), r"X\{m,n\}\+")]:
        with pytest.raises(ValueError, match=match):
            read_hf_tokenizer_json(_mutated(p, tmp_path, change))


def test_truncation_padding_warn(built, tmp_path):
    def change(d):
        d["truncation"] = {"direction": "Right", "max_length": 8, "strategy": "LongestFirst",
                           "stride": 0}
    r = read_hf_tokenizer_json(_mutated(built("bytelevel-regex"), tmp_path, change))
    assert r["warnings"] == ["truncation is ignored: bpe_cffi encodes the whole text and "
                             "does not pad"]


# ---- loading ---------------------------------------------------------------------------------

def test_tokenizer_takes_every_option_a_tokenizer_json_can_carry():
    accepted = hf_import.tokenizer_keywords(Tokenizer)
    assert accepted is None or MODEL_OPTIONS <= accepted


def test_check_options_reads_the_signature():
    class Old:
        def __init__(self, vocab, merges, special_tokens=None, *, pattern="gpt2"):
            pass

    class New(Old):
        def __init__(self, vocab, merges, special_tokens=None, *, pattern="gpt2",
                     byte_level=True, pre_tokenizer=None):
            pass
    with pytest.raises(ValueError, match=r"f.json: option byte_level=False is not supported"):
        hf_import.check_options_supported(Old, {"byte_level": False}, "f.json")
    hf_import.check_options_supported(New, {"byte_level": False,
                                            "pre_tokenizer": C.Whitespace()}, "f.json")


def _parity_texts():
    texts = [read_corpus(c, PARITY_BYTES) for c in CORPORA]
    texts += ["", " ", "Hello world", "  two  spaces ", "x<s>y</s> z <unk>", "123 4567",
              "\u00e9\u0301 \U0001F44D\U0001F3FD", "a\r\nb\n\n", "hello there, hello there"]
    return texts


def _assert_parity(tok, hf, texts):
    for t in texts:
        ours = tok.encode(t)
        theirs = hf.encode(t, add_special_tokens=False).ids
        if ours != theirs:
            k = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b),
                     min(len(ours), len(theirs)))
            pytest.fail(f"encode differs on {t[:40]!r} at token {k}: ours "
                        f"{ours[k:k + 5]} HF {theirs[k:k + 5]}")
        ids = theirs[:3000]
        assert tok.decode(ids) == hf.decode(ids, skip_special_tokens=False), t[:40]


def test_bytelevel_custom_regex_encodes_like_hf(built):
    """Runs today: a byte-level custom regex needs no new Tokenizer option."""
    p = built("bytelevel-regex")
    tok = load(p)
    assert tok.pattern == _GAPPY_REGEX
    _assert_parity(tok, tokenizers.Tokenizer.from_file(str(p)), _parity_texts())


@pytest.mark.parametrize("name", ["whitespace", "llama", "metaspace", "suffix",
                                  "bytelevel-prefix", "bytelevel-partial", "charbpe"])
def test_model_options_encode_like_hf(built, name):
    p = built(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tok = load(p)
    _assert_parity(tok, tokenizers.Tokenizer.from_file(str(p)), _parity_texts())


@pytest.mark.parametrize("name", ["llama", "whitespace"])
def test_save_keeps_what_only_hf_applies(built, tmp_path, name):
    """load() then save() gives a file that HF runs as it ran the original: the
    post-processor (BOS here), truncation, padding and the non-special added tokens (which
    HF's decode keeps with skip_special_tokens) used to be dropped or made special."""
    import pickle
    hf = tokenizers.Tokenizer.from_file(str(built(name)))
    hf.enable_truncation(max_length=12)
    hf.enable_padding(pad_id=2, pad_token="</s>")
    orig = tmp_path / "orig.json"
    hf.save(str(orig))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = load(orig)
        again = tmp_path / "again.json"
        ours.save(again)
        pickle.loads(pickle.dumps(ours)).save(tmp_path / "pickled.json")
        assert load(again).encode("hello there, world") == ours.encode("hello there, world")
    texts = ["hello there, world", "a b", "the quick brown fox jumps over the lazy dog " * 3]
    for path in (again, tmp_path / "pickled.json"):
        back = tokenizers.Tokenizer.from_file(str(path))
        for a, b in zip(hf.encode_batch(texts), back.encode_batch(texts)):
            assert (a.ids, a.attention_mask) == (b.ids, b.attention_mask)
        ids = hf.encode("hello there, world").ids
        assert back.decode(ids) == hf.decode(ids)


@pytest.mark.parametrize("name", ["gpt2", "suffix"])
def test_added_token_that_the_model_also_has(built, tmp_path, name):
    """add_tokens(["ing"]) of a token the model already has: HF keeps its id, splits it out of
    the text first, and the model still merges into it elsewhere.  load() refused the file,
    blaming a merge (the token was taken out of the model)."""
    from conftest import vocab_path
    if name == "gpt2":
        hf = tokenizers.Tokenizer(models.BPE.from_file(str(vocab_path("gpt2_vocab.json")),
                                                       str(vocab_path("gpt2_merges.txt"))))
        hf.pre_tokenizer = P.ByteLevel(add_prefix_space=False)
        hf.decoder = D.ByteLevel()
        words = ["ing", "the", "ation"]
    else:
        hf = tokenizers.Tokenizer.from_file(str(built("suffix")))
        vocab = hf.get_vocab()
        words = [w for w in ("th", "in", "e</w>", "##er") if w in vocab][:2]
        # and a token only a merge makes, cutting the right part's "##" ("thin" + "##k</w>")
        merges = [m if isinstance(m, list) else m.split(" ")
                  for m in json.loads(hf.to_str())["model"]["merges"]]
        parts = {p for m in merges for p in m}
        words += [a + b[2:] for a, b in merges if b.startswith("##") and
                  a + b[2:] not in parts][-1:]
        assert len(words) == 3
    before = {w: hf.get_vocab()[w] for w in words}
    hf.add_tokens(words)
    hf.add_special_tokens(["<x>"])
    assert {w: hf.token_to_id(w) for w in words} == before     # HF keeps the model's ids
    path = tmp_path / "added.json"
    hf.save(str(path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tok = load(path)
    texts = _parity_texts() + ["testing the nation<x>ing", "<x><x>ation"]
    _assert_parity(tok, hf, texts)
    assert tok.encode_batch(texts[:3]) == [tok.encode(t) for t in texts[:3]]
    tok.save(tmp_path / "again.json")
    again = tokenizers.Tokenizer.from_file(str(tmp_path / "again.json"))
    for t in texts[:4]:
        assert again.encode(t, add_special_tokens=False).ids == \
            hf.encode(t, add_special_tokens=False).ids


def test_added_token_that_is_a_model_symbol_merges_never_name(tmp_path):
    """add_tokens of a token that is one of the model's initial symbols and in no merge: it
    was taken out of the model, so where the added token does not match (single_word), or
    for the byte a byte-level symbol stands for, the text lost it: "xab" gave [3] where HF
    gives [2, 3], and "\u9000" two of its three bytes.  A character symbol now stays in the
    model; a byte-level one whose added text is other bytes ("\u00e9" is the symbol of byte
    0xE9) is refused, as it already was when a merge named it."""
    hf = tokenizers.Tokenizer(models.BPE(vocab={"a": 0, "b": 1, "x": 2, "ab": 3},
                                         merges=[("a", "b")]))
    hf.pre_tokenizer = P.Whitespace()
    hf.add_tokens([tokenizers.AddedToken("x", single_word=True)])
    hf.save(str(tmp_path / "sw.json"))
    tok = load(tmp_path / "sw.json")
    for text in ("xab", "abx", "x ab", "x", "ab x ab", "xx"):
        assert tok.encode(text) == hf.encode(text).ids, text
    alphabet = {formats.bytes_to_token_str(bytes([b])): b for b in range(256)}
    hf = tokenizers.Tokenizer(models.BPE(vocab=alphabet, merges=[]))
    hf.pre_tokenizer = P.ByteLevel(add_prefix_space=False)
    hf.add_tokens(["\u00e9"])
    hf.save(str(tmp_path / "e.json"))
    with pytest.raises(ValueError, match=r"added token '\u00e9' has id 233, which is the "
                                         r"model's token b'\\xe9': unsupported"):
        load(tmp_path / "e.json")


def _tiny_bytelevel():
    hf = tokenizers.Tokenizer(models.BPE())
    hf.pre_tokenizer = P.ByteLevel(add_prefix_space=False)
    hf.decoder = D.ByteLevel()
    hf.train_from_iterator(["hello world. a b"] * 5, trainers.BpeTrainer(
        vocab_size=270, show_progress=False, initial_alphabet=P.ByteLevel.alphabet()))
    return hf


@pytest.mark.parametrize("added", [" ", "\n", "\t"])
def test_a_one_byte_added_token_outside_the_byte_alphabet_saves_and_loads(tmp_path, added):
    """save() lists an added token in model.vocab as its raw text (HF then keeps our id);
    reading such a file back took the one-character ' ' for a byte-level token string, which
    ' ' is not (it is 'Ġ'), and refused the file we had written."""
    hf = _tiny_bytelevel()
    hf.add_tokens([tokenizers.AddedToken(added, normalized=False)])
    hf.save(str(tmp_path / "in.json"))
    tok = load(tmp_path / "in.json")
    tok.save(tmp_path / "out.json")
    back, hf_back = load(tmp_path / "out.json"), tokenizers.Tokenizer.from_file(
        str(tmp_path / "out.json"))
    for text in ("a. b\n c", " \t\n x", ""):
        want = hf.encode(text).ids
        assert tok.encode(text) == want and back.encode(text) == want, text
        assert hf_back.encode(text).ids == want, text


def test_an_added_token_with_the_text_of_another_model_token_is_refused(tmp_path):
    """HF gives an added token whose text is a model token's the model's id (warning in
    Rust's log only) and numbers the added tokens after it anew: '.' at 267 and '<tool>' at
    268 in the file encode "a.<tool>" as [64, 13, 267] there; we used the file's ids."""
    hf = _tiny_bytelevel()
    hf.save(str(tmp_path / "t.json"))
    dot = hf.token_to_id(".")

    def add(d):
        n = len(d["model"]["vocab"])
        d["added_tokens"] += [{"id": n, "content": ".", "single_word": False, "lstrip": False,
                               "rstrip": False, "normalized": False, "special": False},
                              {"id": n + 1, "content": "<tool>", "single_word": False,
                               "lstrip": False, "rstrip": False, "normalized": False,
                               "special": True}]
    q = _mutated(tmp_path / "t.json", tmp_path, add)
    hf2 = tokenizers.Tokenizer.from_file(str(q))
    assert hf2.encode("a.<tool>").ids[1] == dot            # what HF does with it
    with pytest.raises(ValueError, match=rf"added token '\.' \(id \d+\) has the text of the "
                                         rf"model's token {dot}"):
        load(q)


def test_a_one_character_added_token_the_model_lacks_stays_out_of_the_model(tmp_path):
    """A character-level file whose added token is a character its model does not have: where
    the added-token scanner does not take it (single_word), HF's model gives <unk> or the
    byte-fallback token; ours gave the added token's id ("a\u00e9" -> [1, 3], HF [1, 0])."""
    hf = tokenizers.Tokenizer(models.BPE(vocab={"<unk>": 0, "a": 1, "b": 2}, merges=[],
                                         unk_token="<unk>"))
    hf.pre_tokenizer = P.WhitespaceSplit()
    hf.add_tokens([tokenizers.AddedToken("\u00e9", single_word=True)])
    hf.save(str(tmp_path / "sw.json"))
    tok = load(tmp_path / "sw.json")
    for text in ("\u00e9", "a \u00e9 b", "a\u00e9", "\u00e9b"):
        assert tok.encode(text) == hf.encode(text).ids, text
    assert tok.encode_ordinary("a\u00e9") == [1, 0]
    hf = tokenizers.Tokenizer(models.BPE(vocab={"<unk>": 0, "<0x0A>": 1, "a": 2, "b": 3},
                                         merges=[], unk_token="<unk>", byte_fallback=True))
    hf.add_tokens([tokenizers.AddedToken("\n", single_word=True)])
    hf.save(str(tmp_path / "bf.json"))
    tok = load(tmp_path / "bf.json")
    for text in ("a\nb", "\n", "a \n b", "\n\n"):
        assert tok.encode(text) == hf.encode(text).ids, text


@pytest.mark.parametrize("name", ["whitespace", "llama", "bytelevel-prefix"])
def test_decode_skips_special_tokens_as_hf(built, name):
    """decode(skip_special_tokens=True), HF's default: the special tokens left out, an added
    token marked "special": false ("hello there" in the whitespace file) kept."""
    p = built(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tok = load(p)
    hf = tokenizers.Tokenizer.from_file(str(p))
    for t in ["<s>hello there</s> world <unk>", "x</s></s>y", "plain text, no specials"] + \
            [t[:3000] for t in _parity_texts()[:4]]:
        ids = hf.encode(t, add_special_tokens=False).ids
        assert tok.decode(ids, skip_special_tokens=True) == \
            hf.decode(ids, skip_special_tokens=True), t[:40]
        assert tok.decode(ids) == hf.decode(ids, skip_special_tokens=False), t[:40]


def test_missing_bytes_dropped_on_every_path(built, tmp_path):
    """A byte-level vocabulary lacking single bytes (HF trained without its initial alphabet)
    drops them as HF does, and every encoding path agrees with encode; offsets are refused
    only when a dropped byte would shift them."""
    p = built("bytelevel-partial")
    tok = load(p)
    hf = tokenizers.Tokenizer.from_file(str(p))
    texts = [read_corpus("multilingual", 30_000, offset=k * 400_000) for k in range(3)]
    texts += ["日本語 and English", "é", "\u00e9\u0301\U0001F600 x"]
    want = [hf.encode(t, add_special_tokens=False).ids for t in texts]
    assert any(len(tok.decode_bytes(w)) < len(t.encode()) for w, t in zip(want, texts)), \
        "no byte was dropped: the test vocabulary is not partial"
    assert [tok.encode(t) for t in texts] == want
    assert tok.encode_batch(texts, num_threads=2) == want
    assert list(tok.encode_iterable(iter(texts[0].splitlines(keepends=True)))) == want[0]
    src = tmp_path / "in.txt"
    src.write_text(texts[0], encoding="utf-8")
    n = tok.encode_file(src, tmp_path / "out.bin", progress=False)
    import numpy as np
    got = np.fromfile(tmp_path / "out.bin", dtype=np.uint16 if tok.n_vocab <= 65536
                      else np.uint32).tolist()
    assert n == len(got) and got == want[0]
    with pytest.raises(ValueError, match="dropped"):
        tok.encode_with_offsets("日本")        # lead bytes English never used
    plain = hf.encode("plain English words", add_special_tokens=False)
    ids, spans = tok.encode_with_offsets("plain English words")
    assert ids == plain.ids and spans == [tuple(o) for o in plain.offsets]


@pytest.mark.parametrize("name", list(BUILDERS))
def test_reader_output_reproduces_hf_ids(built, name):
    """A slow Python pipeline fed only the reader's output gives HF's ids: the vocabulary,
    merges, added tokens, options and components carry everything (runs before the C core
    has the model options)."""
    from hf_pipeline_ref import ReferencePipeline
    p = built(name)
    ref = ReferencePipeline(_read(p))
    hf = tokenizers.Tokenizer.from_file(str(p))
    texts = [t[:REF_CHARS] for t in _parity_texts()]
    for t in texts:
        ours, theirs = ref.encode(t), hf.encode(t, add_special_tokens=False).ids
        assert ours == theirs, f"{name} on {t[:40]!r}"


REF_CHARS = 200_000 if LONG else 12_000


def test_load_hands_options_to_tokenizer(built, monkeypatch):
    """The wiring `load` uses once Tokenizer takes the model options, checked with a stand-in
    that records its arguments: the whole vocabulary with added tokens at their ids, the
    merges, the added tokens, the options, and the pattern when the file has a plain one."""
    import bpe_cffi.tokenizer as tokmod
    calls = []

    class Recorder:
        def __init__(self, vocab, merges, special_tokens=None, **kw):
            calls.append((vocab, merges, special_tokens, kw))

        def _use_added_flags(self, flags):
            pass

    monkeypatch.setattr(tokmod, "Tokenizer", Recorder)
    for name in ("whitespace", "llama", "bytelevel-prefix", "suffix"):
        p = built(name)
        r = _read(p)
        calls.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert isinstance(load(p), Recorder)
        (vocab, merges, special, kw), = calls
        assert vocab == r["vocab"] | {i: s.encode() for s, i in r["special"].items()}
        assert merges == r["merges"] and special == r["special"]
        assert kw.pop("ignore_merges") is r["ignore_merges"]
        assert "pattern" not in kw                 # the pre_tokenizer option splits
        assert kw == r["options"]
    # a user pattern replaces the file's pre-tokenizer
    calls.clear()
    load(built("whitespace"), pattern="gpt2")
    kw = calls[0][3]
    assert kw["pattern"] == "gpt2" and "pre_tokenizer" not in kw and kw["byte_level"] is False
