"""encode_with_offsets against HF `tokenizers`, decode_with_offsets against tiktoken.

The HF reference is bytelevel_ref.hf_gpt2(): it first has to give tiktoken's GPT-2 ids on the
corpora (test_hf_config_gives_tiktoken_ids), and only then are its offsets the reference.  For
cl100k/o200k (no HF file) the reference is the slow per-byte table of bytelevel_ref.
Each test runs on the tiktoken stand-in and, once merged, on the real bpe_cffi.Tokenizer.
"""
import os
import random
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from bytelevel_ref import (ENCODINGS, byte_spans, byte_to_char_spans, hf_gpt2,  # noqa: E402
                           tokenizer, utf8_chars)
from conftest import CORPORA, LONG, read_corpus, tiktoken_encoding  # noqa: E402

from bpe_cffi.offsets import decode_with_offsets, encode_with_offsets  # noqa: E402

KINDS = ["standin", "real"]
SLICE = 400_000 if LONG else 60_000
OFFSETS = [0, 5_000_000, 17_000_000] if LONG else [0, 3_000_000]

TRICKY = [
    "a",
    "hello world",
    "Hello wörld, naïve café — “quotes” ‘single’",
    "e\u0301 a\u0300\u0316 Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319",  # combining
    "👨\u200d👩\u200d👧\u200d👦 family, 👍🏽 tone, 🇫🇷🇯🇵 flags, 🏳️\u200d🌈",
    "日本語のテキスト、中文文本，한국어 텍스트",
    "हिन्दी पाठ, العربية نص, עברית, ไทย",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟘𝟙𝟚 \U0010fffd \U0001f600\U0001f600\U0001f600",
    "tabs\tand\r\nnewlines\n\n\n   trailing   ",
    "   leading spaces and a lone é",
    "x<|endoftext|>y <|endoftext|>\n<|endoftext|>",
    "\x00\x01\x7f\u0080\u00ff\u0100\u07ff\u0800\uffff\U00010000",
    "'s 'll 'VE IT'S it’s",
    "1234567890 3.14159 ١٢٣",
    "^" * 300 + "é" * 300,
]


def _tok(kind, name):
    return tokenizer(kind, name)


def _corpus(name, offset):
    return read_corpus(name, SLICE, offset)


# --- the HF configuration ------------------------------------------------------------------

@pytest.mark.parametrize("offset", OFFSETS)
@pytest.mark.parametrize("corpus", CORPORA)
def test_hf_config_gives_tiktoken_ids(corpus, offset):
    text = _corpus(corpus, offset)
    enc = tiktoken_encoding("gpt2")
    a = hf_gpt2("bytelevel").encode(text, add_special_tokens=False)
    b = hf_gpt2("split").encode(text, add_special_tokens=False)
    assert a.ids == enc.encode(text, allowed_special="all")
    assert b.ids == a.ids
    assert b.offsets == a.offsets


# --- encode_with_offsets -------------------------------------------------------------------

@pytest.mark.parametrize("offset", OFFSETS)
@pytest.mark.parametrize("corpus", CORPORA)
@pytest.mark.parametrize("kind", KINDS)
def test_encode_offsets_equal_hf_on_corpora(kind, corpus, offset):
    tok = _tok(kind, "gpt2")
    text = _corpus(corpus, offset)
    ids, offsets = encode_with_offsets(tok, text)
    ref = hf_gpt2().encode(text, add_special_tokens=False)
    assert ids == ref.ids
    assert offsets == ref.offsets


@pytest.mark.parametrize("kind", KINDS)
def test_encode_offsets_equal_hf_on_tricky(kind):
    tok = _tok(kind, "gpt2")
    hf = hf_gpt2()
    for text in TRICKY:
        ids, offsets = encode_with_offsets(tok, text)
        ref = hf.encode(text, add_special_tokens=False)
        assert ids == ref.ids, text
        assert offsets == ref.offsets, text


@pytest.mark.parametrize("name", ENCODINGS)
@pytest.mark.parametrize("kind", KINDS)
def test_encode_offsets_equal_reference_on_tricky(kind, name):
    tok = _tok(kind, name)
    for text in TRICKY:
        for ordinary in (False, True):
            ids, offsets = encode_with_offsets(tok, text, ordinary=ordinary)
            assert ids == (tok.encode_ordinary(text) if ordinary else tok.encode(text))
            assert offsets == byte_to_char_spans(text, byte_spans(tok, ids)), (text, ordinary)
            # every token's span covers the text its bytes decode to
            for (s, e) in offsets:
                assert 0 <= s < e <= len(text)


@pytest.mark.parametrize("corpus", CORPORA)
@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
@pytest.mark.parametrize("kind", KINDS)
def test_encode_offsets_equal_reference_on_corpora(kind, name, corpus):
    tok = _tok(kind, name)
    text = _corpus(corpus, OFFSETS[-1])
    ids, offsets = encode_with_offsets(tok, text)
    assert ids == tok.encode(text)
    assert offsets == byte_to_char_spans(text, byte_spans(tok, ids))


def test_encode_offsets_split_character_reports_whole_character():
    # GPT-2 splits "日" (e6 97 a5) as b" \xe6", b"\x97", b"\xa5": all three report it.
    tok = _tok("standin", "gpt2")
    ids, offsets = encode_with_offsets(tok, "a 日")
    assert [tok.decode_single_token_bytes(i) for i in ids] == [b"a", b" \xe6", b"\x97", b"\xa5"]
    assert offsets == [(0, 1), (1, 3), (2, 3), (2, 3)]


def test_encode_offsets_random_text_against_hf():
    hypothesis = pytest.importorskip("hypothesis")
    from hypothesis import strategies as st
    tok = _tok("standin", "gpt2")
    hf = hf_gpt2()
    alphabet = st.characters(blacklist_categories=("Cs",))

    @hypothesis.settings(max_examples=1000 if LONG else 100, deadline=None)
    @hypothesis.given(st.text(alphabet=alphabet, max_size=60))
    def check(text):
        ids, offsets = encode_with_offsets(tok, text)
        ref = hf.encode(text, add_special_tokens=False)
        if ref.ids == ids:     # HF's regex is another engine; compare offsets when ids agree
            assert offsets == ref.offsets
        assert offsets == byte_to_char_spans(text, byte_spans(tok, ids))
    check()


@pytest.mark.parametrize("kind", KINDS)
def test_encode_offsets_surrogates(kind):
    tok = _tok(kind, "cl100k_base")
    text = "a\ud800b \ud83d\ude00 c\udfff"     # lone high, a pair, lone low
    try:
        expected_ids = tok.encode(text)
    except (ValueError, UnicodeError) as exc:   # a tokenizer may refuse surrogates
        with pytest.raises(type(exc)):
            encode_with_offsets(tok, text)
        return
    ids, offsets = encode_with_offsets(tok, text)
    assert ids == expected_ids
    repaired = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    assert repaired == "a\ufffdb \U0001f600 c\ufffd"
    # char index in `repaired` -> index in `text`: the pair is two code units of `text`
    to_text = [0, 1, 2, 3, 4, 6, 7, 8, 9]
    ref = byte_to_char_spans(repaired, byte_spans(tok, ids))
    assert offsets == [(to_text[s], to_text[e]) for s, e in ref]


@pytest.mark.parametrize("kind", KINDS)
def test_encode_offsets_empty(kind):
    tok = _tok(kind, "gpt2")
    assert encode_with_offsets(tok, "") == ([], [])
    assert encode_with_offsets(tok, "", ordinary=True) == ([], [])


def test_encode_offsets_rejects_non_str():
    tok = _tok("standin", "gpt2")
    with pytest.raises(TypeError):
        encode_with_offsets(tok, b"bytes")


# --- decode_with_offsets -------------------------------------------------------------------

@pytest.mark.parametrize("corpus", CORPORA)
@pytest.mark.parametrize("name", ENCODINGS)
@pytest.mark.parametrize("kind", KINDS)
def test_decode_offsets_equal_tiktoken_on_corpora(kind, name, corpus):
    tok = _tok(kind, name)
    enc = tiktoken_encoding(name)
    ids = enc.encode(_corpus(corpus, 0), allowed_special="all")
    assert decode_with_offsets(tok, ids) == enc.decode_with_offsets(ids)


@pytest.mark.parametrize("name", ENCODINGS)
@pytest.mark.parametrize("kind", KINDS)
def test_decode_offsets_equal_tiktoken_on_slices(kind, name):
    """Id windows that start or end inside a character: tiktoken's max(0, ...) and its
    strict errors both have to be matched."""
    tok = _tok(kind, name)
    enc = tiktoken_encoding(name)
    rng = random.Random(1234)
    ids = enc.encode(" ".join(TRICKY), allowed_special="all")
    for _ in range(400):
        a = rng.randrange(len(ids))
        b = rng.randrange(a, len(ids) + 1)
        window = ids[a:b]
        try:
            expected = enc.decode_with_offsets(window)
        except UnicodeDecodeError:
            with pytest.raises(UnicodeDecodeError):
                decode_with_offsets(tok, window)
            continue
        assert decode_with_offsets(tok, window) == expected, window


def _random_byte_ids(enc, rng, n):
    """Ids mixing single-byte tokens (any byte, so often invalid UTF-8) and random tokens."""
    single = [enc.encode_single_token(bytes([b])) for b in range(256)]
    out = []
    for _ in range(n):
        if rng.random() < 0.6:
            out.append(rng.choice(single))
        else:
            out.append(rng.randrange(enc.max_token_value + 1))
            try:
                enc.decode_single_token_bytes(out[-1])
            except KeyError:
                out.pop()
    return out


@pytest.mark.parametrize("name", ENCODINGS)
@pytest.mark.parametrize("kind", KINDS)
def test_decode_offsets_replace_on_invalid_utf8(kind, name):
    tok = _tok(kind, name)
    enc = tiktoken_encoding(name)
    rng = random.Random(99)
    n_invalid = 0
    for _ in range(300 if LONG else 80):
        ids = _random_byte_ids(enc, rng, rng.randrange(0, 40))
        data = b"".join(enc.decode_single_token_bytes(i) for i in ids)
        text, offsets = decode_with_offsets(tok, ids, errors="replace")
        assert text == tok.decode(ids) == data.decode("utf-8", "replace")
        chars = utf8_chars(data)
        assert len(chars) == len(text)
        owner = [ci for ci, (s, e) in enumerate(chars) for _ in range(s, e)]
        assert offsets == [owner[b0] for b0, _ in byte_spans(tok, ids)]
        try:
            data.decode("utf-8")
            assert decode_with_offsets(tok, ids) == enc.decode_with_offsets(ids)
        except UnicodeDecodeError:
            n_invalid += 1
            with pytest.raises(UnicodeDecodeError):
                decode_with_offsets(tok, ids)
    assert n_invalid > 10    # the generator does produce invalid UTF-8


def test_decode_offsets_replace_examples():
    tok = _tok("standin", "gpt2")
    enc = tiktoken_encoding("gpt2")
    one = {b: enc.encode_single_token(bytes([b])) for b in range(256)}
    # b"\xe6\x97" then "a": the truncated character is one U+FFFD
    ids = [one[0xE6], one[0x97], one[ord("a")]]
    assert decode_with_offsets(tok, ids, errors="replace") == ("\ufffda", [0, 0, 1])
    # a stray continuation byte is a character of its own
    ids = [one[ord("a")], one[0x80], one[0x80], one[ord("b")]]
    assert decode_with_offsets(tok, ids, errors="replace") == ("a\ufffd\ufffdb", [0, 1, 2, 3])
    # \xe0\x80: \x80 cannot follow \xe0, so two replacement characters
    ids = [one[0xE0], one[0x80]]
    assert decode_with_offsets(tok, ids, errors="replace") == ("\ufffd\ufffd", [0, 1])
    # leading continuation of a valid character: tiktoken's max(0, ...) for the strict case
    ids = [one[0xE6], one[0x97], one[0xA5], one[ord("x")]]
    assert decode_with_offsets(tok, ids) == ("日x", [0, 0, 0, 1])


def test_decode_offsets_edge_cases():
    tok = _tok("standin", "gpt2")
    assert decode_with_offsets(tok, []) == ("", [])
    assert decode_with_offsets(tok, iter([31373, 995])) == ("hello world", [0, 5])
    with pytest.raises(ValueError):
        decode_with_offsets(tok, [31373], errors="ignore")


@pytest.mark.parametrize("kind", KINDS)
def test_decode_offsets_integer_like_ids(kind):
    np = pytest.importorskip("numpy")
    tok = _tok(kind, "cl100k_base")
    ids = tok.encode("naïve 日本 🙂 <|endoftext|>")
    expected = tiktoken_encoding("cl100k_base").decode_with_offsets(ids)
    assert decode_with_offsets(tok, np.array(ids, dtype=np.int64)) == expected


@pytest.mark.parametrize("path", ["numpy", "python"])
def test_both_table_paths(path, monkeypatch):
    """The numpy path (long id lists) and the pure-Python one give the reference offsets,
    including on a fresh tokenizer whose tables grow (copy on write) call after call."""
    from bpe_cffi import offsets as mod
    from bytelevel_ref import TiktokenStandIn
    if path == "numpy":
        pytest.importorskip("numpy")
        monkeypatch.setattr(mod, "_NP_MIN", 0)
    else:
        monkeypatch.setattr(mod, "_numpy", lambda: None)    # as without numpy installed
    tok = TiktokenStandIn(tiktoken_encoding("o200k_base"))     # fresh, empty tables
    texts = TRICKY + ["", _corpus("multilingual", 0)[:20_000], "\U0001f600 " * 50, "日本"]
    for text in texts:
        ids, offsets = encode_with_offsets(tok, text)
        assert offsets == byte_to_char_spans(text, byte_spans(tok, ids)), text[:50]
        assert decode_with_offsets(tok, ids) == tok.enc.decode_with_offsets(ids)
    if path == "numpy":
        assert mod._tables(tok).arrays is not None
        assert len(mod._tables(tok).arrays[0]) > 100_000    # grew to the largest id seen


def test_numpy_is_imported_only_for_the_offsets_of_a_long_text():
    """import bpe_cffi (and its daemon), loading, encoding and decoding leave numpy
    unimported: it cost every process ~60 ms and numpy's BLAS threads."""
    import subprocess
    pytest.importorskip("numpy")
    script = (
        "import sys, bpe_cffi, bpe_cffi.daemon, bpe_cffi.daemon.server\n"
        "vocab = {i: bytes([i]) for i in range(256)}\n"
        "t = bpe_cffi.Tokenizer(vocab, [], ['<|endoftext|>'], pattern='gpt2')\n"
        "ids = t.encode('hello world<|endoftext|>'); t.decode(ids)\n"
        "t.encode_batch(['a b'] * 1000); t.encode_with_offsets('short')\n"
        "print('numpy' in sys.modules)\n"
        "t.encode_with_offsets('long text ' * 500)\n"
        "print('numpy' in sys.modules)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["False", "True"]


def test_tokenizer_methods_are_the_module_functions():
    """The Tokenizer methods give what the module functions give (they are thin wrappers)."""
    from bpe_cffi import StreamDecoder
    from bpe_cffi.offsets import decode_with_offsets, encode_with_offsets
    from pyapi_helpers import ours
    tok = ours("gpt2")
    text = "héllo wörld 🏳️‍🌈 <|endoftext|> done"
    assert tok.encode_with_offsets(text) == encode_with_offsets(tok, text)
    ids = tok.encode(text)
    assert tok.decode_with_offsets(ids) == decode_with_offsets(tok, ids)
    dec = tok.stream_decoder()
    assert isinstance(dec, StreamDecoder)
    assert "".join(dec.feed(i) for i in ids) + dec.flush() == tok.decode(ids)


def _trimming_post_processors():
    from tokenizers import processors as PP
    return {
        "bytelevel": PP.ByteLevel(trim_offsets=True, add_prefix_space=False),
        "bytelevel-prefix": PP.ByteLevel(trim_offsets=True, add_prefix_space=True),
        "roberta": PP.RobertaProcessing(("</s>", 50258), ("<s>", 50257), trim_offsets=True,
                                        add_prefix_space=False),
        "sequence": PP.Sequence([PP.ByteLevel(trim_offsets=True, add_prefix_space=False),
                                 PP.TemplateProcessing(single="<s> $A",
                                                       special_tokens=[("<s>", 50257)])]),
        "no-trim": PP.ByteLevel(trim_offsets=False),
    }


@pytest.mark.parametrize("post", ["bytelevel", "bytelevel-prefix", "roberta", "sequence",
                                  "no-trim"])
def test_loaded_post_processor_trims_offsets_as_hf(tmp_path, post):
    """A tokenizer.json whose post-processor trims offsets (GPT-NeoX-style ByteLevel, or
    RobertaProcessing): HF reports spans without the spaces a token starts or ends with; we
    gave the untrimmed spans.  Added tokens whose text has spaces are trimmed too."""
    tokenizers = pytest.importorskip("tokenizers")
    import warnings
    from bpe_cffi import load
    hf = tokenizers.Tokenizer.from_str(hf_gpt2().to_str())
    hf.add_special_tokens(["<s>", "</s>", " sp\u3000"])
    hf.post_processor = _trimming_post_processors()[post]
    path = tmp_path / "t.json"
    hf.save(str(path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tok = load(path)
    texts = TRICKY + [" x", "  two  spaces  ", "a\n\n b", "q sp\u3000z", " sp\u3000x",
                      "x <|endoftext|> y", "   "]
    texts += [read_corpus(c, 20_000) for c in ("code", "web", "multilingual")]
    for text in texts:
        ids, spans = tok.encode_with_offsets(text)
        ref = hf.encode(text, add_special_tokens=False)
        assert ids == ref.ids, text[:40]
        assert spans == ref.offsets, text[:40]
