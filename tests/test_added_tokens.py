"""Added tokens with HF's AddedToken options (lstrip, rstrip, single_word, normalized): a
tokenizer.json using them loads, and encodes as HF's own library does (ids, encode_batch,
and offsets where offsets are given), on hand-picked texts (RoBERTa's <mask>) and on seeded
random texts mixing the tokens with whitespace, word characters of several scripts and
punctuation, under random options; with and without a normalizer."""
import json
import pickle
import random
import warnings

import pytest

from conftest import LONG

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import AddedToken, decoders as D, models, normalizers as N  # noqa: E402
from tokenizers import pre_tokenizers as P, processors, trainers  # noqa: E402

from bpe_cffi import load  # noqa: E402

# training text without q or z, so that the added tokens made of them are not model tokens
WORDS = ["hello", "world", "the", "cat", "sat", "on", "mat", "and", "then", "ran", "home",
         "caf\u00e9", "na\u00efve", "\u65e5\u672c\u8a9e", "\u043f\u0440\u0438\u0432\u0435\u0442",
         "\u0928\u092e\u0938\u094d\u0924\u0947", "fish", "12", "345"]
# what the random texts are made of: the tokens, parts of them, whitespace of every kind
# (and a non-White_Space separator, U+180E), word characters as HF's \w sees them (letters,
# a combining mark, digits, "_", ZWJ) and characters that are not (superscript two, "-")
FRAGMENTS = ["<mask>", "<m>", "<ma", "<", ">", "qzq", "zq", "q", "z", "\t\t", "\t", "[X]",
             "X]", "<s>", " ", "  ", "\n", "\u00a0", "\u3000", "\u2003", "\u180e", "a", "\u00e9",
             "\u65e5", "\u0301", "_", "1", "\u00b2", "\u200d", "-", ".", "hello", "World",
             "\ufb01", "FI", "MASK", "the", " the"]
# " the": the bytes of the model's token "\u0120the" (a byte-level token string of its own)
TOKENS = ["<mask>", "<m>", "qzq", "zq", "\t\t", "[X]", "X]", "<s>", " the"]
# for a normalizer: no two tokens the same text once lowercased / NFKC-normalized
TOKENS_NORMALIZED = ["<MASK>", "<m>", "qzq", "zq", "\t\t", "[X]", "X]", "\ufb01"]

N_CONFIGS, N_TEXTS = (40, 2000) if LONG else (8, 250)


@pytest.fixture(scope="module")
def base_json():
    """A small byte-level BPE trained by HF (GPT-2's split), as tokenizer.json text."""
    rng = random.Random(7)
    lines = [" ".join(rng.choice(WORDS) for _ in range(12)) for _ in range(400)]
    t = tokenizers.Tokenizer(models.BPE())
    t.pre_tokenizer = P.ByteLevel(add_prefix_space=False)
    t.decoder = D.ByteLevel()
    t.train_from_iterator(lines, trainers.BpeTrainer(
        vocab_size=400, show_progress=False, initial_alphabet=P.ByteLevel.alphabet()))
    return t.to_str()


def _pair(base_json, tmp_path, added, normalizer=None, post=None, name="t.json"):
    """(HF's tokenizer, ours loaded from the file HF saved) with these AddedTokens."""
    hf = tokenizers.Tokenizer.from_str(base_json)
    if normalizer is not None:
        hf.normalizer = normalizer
    if post is not None:
        hf.post_processor = post
    hf.add_special_tokens(added)
    p = tmp_path / name
    hf.save(str(p))
    hf = tokenizers.Tokenizer.from_file(str(p))        # as a user's file is read
    with warnings.catch_warnings():        # a post-processor is HF's alone: a warning
        warnings.simplefilter("ignore")
        ours = load(p)
    return hf, ours


def _assert_like_hf(hf, ours, texts, offsets=True):
    texts = [s for s in texts if _hf_can(hf, s)]
    for s in texts:
        e = hf.encode(s, add_special_tokens=False)
        got = ours.encode(s)
        assert got == e.ids, f"{s!r}: ours {got} HF {e.ids}"
        if offsets:
            ids, spans = ours.encode_with_offsets(s)
            assert (ids, spans) == (e.ids, e.offsets), f"{s!r}: ours {spans} HF {e.offsets}"
    assert ours.encode_batch(texts, num_threads=2) == \
        [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]


def _hf_can(hf, s):
    """False where HF fails ("AddedVocabulary bad split": an lstrip token inside whitespace an
    earlier rstrip token took; ours drops that token, test_token_inside_taken_whitespace)."""
    try:
        hf.encode(s, add_special_tokens=False)
    except BaseException as exc:                  # pyo3's PanicException
        assert "bad split" in str(exc)
        return False
    return True


def _random_texts(rng, n):
    return ["".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(1, 12)))
            for _ in range(n)]


def _random_added(rng, contents, normalized_too):
    return [AddedToken(s, lstrip=rng.random() < 0.4, rstrip=rng.random() < 0.4,
                       single_word=rng.random() < 0.3,
                       normalized=normalized_too and rng.random() < 0.5, special=True)
            for s in contents]


def test_roberta_mask_takes_the_space_before_it(base_json, tmp_path):
    """RoBERTa's layout: <s> </s> <pad> <unk> normalized, <mask> lstrip; offsets trimmed by
    RobertaProcessing."""
    added = [AddedToken(s, special=True, normalized=True) for s in ("<s>", "</s>", "<pad>",
                                                                  "<unk>")]
    added.append(AddedToken("<mask>", lstrip=True, special=True, normalized=False))
    post = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), trim_offsets=True,
                                        add_prefix_space=False)
    hf, ours = _pair(base_json, tmp_path, added, post=post)
    texts = ["The cat <mask> on the mat.", "a  \t<mask>", "  <mask>  x", "<mask>",
             "\u00e9\u00e9\u00a0<mask> <mask><mask>", "<s>hello <mask></s>", "x\u3000<mask>"]
    _assert_like_hf(hf, ours, texts)
    # the space went into the token: one id fewer than the same text with a plain token
    assert len(ours.encode("cat <mask>")) == 2


def test_batch_with_a_text_that_is_not_a_str_names_it(base_json, tmp_path):
    _, ours = _pair(base_json, tmp_path, [AddedToken("<mask>", lstrip=True, special=True)])
    with pytest.raises(TypeError, match=r"texts\[2\] must be a str, not bytes"):
        ours.encode_batch(["a <mask>", "b", b"c <mask>"])


@pytest.mark.parametrize("seed", range(N_CONFIGS))
def test_random_options_like_hf(base_json, tmp_path, seed):
    rng = random.Random(seed)
    added = _random_added(rng, TOKENS, normalized_too=True)
    post = None if seed % 2 else processors.ByteLevel(trim_offsets=True)
    hf, ours = _pair(base_json, tmp_path, added, post=post)
    _assert_like_hf(hf, ours, _random_texts(rng, N_TEXTS))


@pytest.mark.parametrize("normalizer", ["lowercase", "nfkc", "nfkc+lowercase"])
@pytest.mark.parametrize("seed", range(3))
def test_normalized_tokens_found_in_normalized_text(base_json, tmp_path, normalizer, seed):
    """normalized=true: found after the others, in the normalized text, by their own text
    as the normalizer makes it ("\ufb01" is found as "fi" under NFKC, "<MASK>" as "<mask>"
    under Lowercase)."""
    norm = {"lowercase": N.Lowercase(), "nfkc": N.NFKC(),
            "nfkc+lowercase": N.Sequence([N.NFKC(), N.Lowercase()])}[normalizer]
    rng = random.Random(100 + seed)
    added = _random_added(rng, TOKENS_NORMALIZED, normalized_too=True)
    hf, ours = _pair(base_json, tmp_path, added, normalizer=norm)
    texts = _random_texts(rng, N_TEXTS // 2) + ["fish \ufb01sh <mask> <MASK>", "FI fi"]
    _assert_like_hf(hf, ours, texts, offsets=False)


def test_options_survive_save_and_pickle(base_json, tmp_path):
    added = [AddedToken("<mask>", lstrip=True, special=True),
             AddedToken("qzq", single_word=True, rstrip=True, special=True),
             AddedToken("<s>", normalized=True, special=True)]
    hf, ours = _pair(base_json, tmp_path, added)
    texts = ["a <mask> qzq  b", "xqzq <s>", "<s> qzq\t-"]
    out = tmp_path / "saved.json"
    ours.save(out)
    again = tokenizers.Tokenizer.from_file(str(out))
    for s in texts:
        assert again.encode(s, add_special_tokens=False).ids == \
            hf.encode(s, add_special_tokens=False).ids
    _assert_like_hf(hf, load(out), texts)
    _assert_like_hf(hf, pickle.loads(pickle.dumps(ours)), texts)


def test_single_word_match_hides_shorter_tokens_inside(base_json, tmp_path):
    """A single_word match touched by a word character is dropped, and HF does not look for
    another token inside the text it covered."""
    added = [AddedToken("qzq", single_word=True, special=True),
             AddedToken("zq", special=True)]
    hf, ours = _pair(base_json, tmp_path, added)
    zq = ours.special_tokens["zq"]
    assert zq not in ours.encode("xqzq")
    assert ours.encode("x zq") == hf.encode("x zq", add_special_tokens=False).ids
    assert zq in ours.encode("x zq")


def test_token_inside_taken_whitespace(base_json, tmp_path):
    """A whitespace token found inside the whitespace an rstrip token took: HF emits it if
    it keeps some of it, and drops it (or fails) if lstrip leaves it nothing; ours drops it
    in both of the latter."""
    r = AddedToken("<r>", rstrip=True, special=True)
    hf, ours = _pair(base_json, tmp_path, [r, AddedToken("\t\t", special=True)])
    _assert_like_hf(hf, ours, ["<r>\t\tx", "<r> \t\t x"])
    assert ours.encode("<r>\t\tx").count(ours.special_tokens["\t\t"]) == 1
    hf, ours = _pair(base_json, tmp_path, [r, AddedToken("\t\t", lstrip=True, special=True)])
    _assert_like_hf(hf, ours, ["<r>\t\t", "a\t\t"])
    assert not _hf_can(hf, "<r> \t\t x")
    assert ours.encode("<r> \t\t x") == [ours.special_tokens["<r>"]] + ours.encode("x")


def test_added_token_with_a_model_tokens_bytes(base_json, tmp_path):
    """HF's added " the" in a byte-level vocabulary whose model has "\u0120the" (GPT-2's
    "\n\n" added beside "\u010a\u010a", CodeGen's runs of spaces): found first, under its
    own id; encode_ordinary gives the model's token; saved, HF reads the same."""
    hf, ours = _pair(base_json, tmp_path, [AddedToken(" the", special=True)])
    added = ours.special_tokens[" the"]
    model = hf.get_vocab()["\u0120the"]
    assert added != model
    _assert_like_hf(hf, ours, ["and the cat", " the the", "then", "x  the"])
    assert ours.encode("a the") == ours.encode("a") + [added]
    assert ours.encode_ordinary("a the") == ours.encode_ordinary("a") + [model]
    out = tmp_path / "saved.json"
    ours.save(out)
    again = tokenizers.Tokenizer.from_file(str(out))
    assert again.encode("a the b", add_special_tokens=False).ids == ours.encode("a the b")


@pytest.mark.parametrize("seed", range(N_CONFIGS))
def test_encode_iterable_cut_anywhere_equals_encode(base_json, tmp_path, seed):
    """Chunks cut anywhere (inside a token, its whitespace, a word) give encode's ids of the
    whole text: the chunked encoder only consumes what later text cannot change."""
    rng = random.Random(1000 + seed)
    hf, ours = _pair(base_json, tmp_path, _random_added(rng, TOKENS, normalized_too=True))
    for s in _random_texts(rng, N_TEXTS // 10):
        s = s * rng.randint(1, 4)
        whole = ours.encode(s)
        if _hf_can(hf, s):          # (HF panics on some; see _hf_can)
            assert whole == hf.encode(s, add_special_tokens=False).ids
        for _ in range(5):
            cuts = sorted(rng.sample(range(len(s) + 1), min(3, len(s) + 1)))
            chunks = [s[a:b] for a, b in zip([0] + cuts, cuts + [len(s)])]
            assert list(ours.encode_iterable(chunks)) == whole, chunks
    s = "".join(_random_texts(rng, 6))
    whole = ours.encode(s)
    for k in range(len(s) + 1):
        assert list(ours.encode_iterable([s[:k], s[k:]])) == whole, (s[:k], s[k:])


def test_encode_file_like_encode(base_json, tmp_path, capsys):
    """encode_file of a RoBERTa-style file (read in blocks of 1 MiB, so tokens and their
    whitespace fall across block ends) writes encode's ids of the whole text, with a bar."""
    import numpy as np
    added = [AddedToken("<mask>", lstrip=True, special=True),
             AddedToken("<s>", normalized=True, special=True)]
    hf, ours = _pair(base_json, tmp_path, added)
    rng = random.Random(5)
    words = WORDS + ["<mask>", " <mask>", "   ", "\n", "<s>", "<ma"]
    text = "".join(rng.choice(words) + rng.choice(" \t") for _ in range(400_000))
    src = tmp_path / "in.txt"
    src.write_text(text, encoding="utf-8")
    assert src.stat().st_size > 2 << 20
    n = ours.encode_file(src, tmp_path / "out.bin")
    got = np.fromfile(tmp_path / "out.bin", dtype=np.uint16).tolist()
    assert n == len(got) and got == ours.encode(text)
    assert "100.0%" in capsys.readouterr().err


def test_chunked_encoders_refuse_a_regex_pattern(base_json, tmp_path):
    """With a regex pattern instead of a built-in one (a Split pre-tokenizer), the chunked
    encoders refuse added tokens' options (no cut is known to be safe there)."""
    doc = json.loads(base_json)
    doc["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r"\p{L}+|\p{N}+"}, "behavior": "Isolated",
         "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
         "use_regex": False}]}
    hf, ours = _pair(json.dumps(doc), tmp_path, [AddedToken("<mask>", lstrip=True,
                                                            special=True)])
    assert ours.pattern not in ("gpt2", "cl100k", "o200k")
    _assert_like_hf(hf, ours, ["a <mask> b", "x<mask>"], offsets=False)
    with pytest.raises(ValueError, match="lstrip, rstrip, single_word or normalized"):
        list(ours.encode_iterable(["a <mask>"]))
    src = tmp_path / "in.txt"
    src.write_text("a <mask>")
    with pytest.raises(ValueError, match="encode_file does not support added tokens"):
        ours.encode_file(src, tmp_path / "out.bin", progress=False)


def test_plain_options_keep_the_c_path(base_json, tmp_path):
    """Tokens found as by one longest-match scan (no option, or all normalized without a
    normalizer, as GPT-2's file has them) stay on the C path."""
    for normalized in (False, True):
        added = [AddedToken(s, special=True, normalized=normalized) for s in ("<s>", "<m>")]
        hf, ours = _pair(base_json, tmp_path, added)
        assert ours._added is None
        _assert_like_hf(hf, ours, ["a<s>b <m>", "<s><m>"])


def test_tokens_equal_once_normalized_refused(base_json, tmp_path):
    hf = tokenizers.Tokenizer.from_str(base_json)
    hf.normalizer = N.Lowercase()
    hf.add_special_tokens([AddedToken("<mask>", normalized=True, special=True),
                           AddedToken("<MASK>", normalized=True, special=True)])
    p = tmp_path / "clash.json"
    hf.save(str(p))
    assert len(json.loads(p.read_text())["added_tokens"]) == 2
    with pytest.raises(ValueError, match=r"clash.json: added tokens '<mask>' and '<MASK>' "
                                         r"are both '<mask>' once normalized"):
        load(p)


def test_daemon_serves_them_as_in_process(base_json, tmp_path):
    """The daemon's packed-ids fast paths run the C scanner alone: a tokenizer whose added
    tokens need Python must not take them (RoBERTa's " <mask>" is one id, not two)."""
    pytest.importorskip("zmq")
    from test_daemon_support import Daemon
    from bpe_cffi.daemon import Client
    added = [AddedToken("<mask>", lstrip=True, special=True),
             AddedToken("<s>", normalized=True, special=True)]
    hf, ours = _pair(base_json, tmp_path, added, name="roberta.json")
    texts = ["The cat <mask> on the mat.", "a  <mask><s> b", "", "x" * 300 + " <mask>"]
    want = [hf.encode(t, add_special_tokens=False).ids for t in texts]
    assert [ours.encode(t) for t in texts] == want
    d = Daemon({"rob": tmp_path / "roberta.json"}, workers=1)
    try:
        with Client(d.endpoint, timeout=20) as c:
            assert [c.encode(t) for t in texts] == want
            assert c.encode_batch(texts) == want
            assert c.encode_batch(texts * 30) == want * 30
            doc = "".join(texts).encode()
            assert c.encode_chunks([doc[:13], doc[13:40], doc[40:]]) == \
                hf.encode("".join(texts), add_special_tokens=False).ids
    finally:
        d.stop()


def test_offsets_with_special_token_options(base_json, tmp_path):
    """encode_with_offsets takes encode's keywords: tokens not allowed are text, a
    disallowed one raises; a lone surrogate's span is its own character."""
    added = [AddedToken("<mask>", lstrip=True, special=True)]
    hf, ours = _pair(base_json, tmp_path, added)
    ids, spans = ours.encode_with_offsets("a <mask>", allowed_special=set())
    assert ids == ours.encode_ordinary("a <mask>") and spans[-1][1] == len("a <mask>")
    with pytest.raises(ValueError, match="<mask>"):
        ours.encode_with_offsets("a <mask>", allowed_special=set(), disallowed_special="all")
    text = "x\ud800 <mask>!"
    ids, spans = ours.encode_with_offsets(text)
    assert ids == ours.encode(text) and ids[-2] == ours.special_tokens["<mask>"]
    assert spans[-2] == (2, 9) and spans[-1] == (9, 10)


def test_encode_batch_equals_encode_of_each(base_json, tmp_path):
    """encode_batch finds the tokens text by text and encodes all the text between them in
    one C batch: the same ids as encode of each text, with every special-token option, for
    ASCII, non-ASCII and lone-surrogate texts; a disallowed token raises naming it."""
    rng = random.Random(77)
    hf, ours = _pair(base_json, tmp_path, _random_added(rng, TOKENS, normalized_too=True))
    texts = _random_texts(rng, 300) + ["x\ud800 <mask>", "\ud83d\ude00qzq <s>", "", "plain"]
    for kw in ({}, {"allowed_special": set()}, {"allowed_special": {"<mask>", " the"}},
               {"allowed_special": {"<s>"}, "disallowed_special": set()}):
        want = [ours.encode(t, **kw) for t in texts]
        assert ours.encode_batch(texts, **kw) == want, kw
        assert ours.encode_batch(texts, num_threads=1, **kw) == want, kw
    with pytest.raises(ValueError, match="<mask>"):
        ours.encode_batch(["fine", "a <mask>"], allowed_special={"<s>"},
                          disallowed_special="all")


def test_tokens_normalized_to_nothing_are_never_found(base_json, tmp_path):
    """Under a Strip normalizer two whitespace tokens with normalized=true are both "": HF
    never finds them (and loads the file); neither do we."""
    hf = tokenizers.Tokenizer.from_str(base_json)
    hf.normalizer = N.Strip()
    hf.add_special_tokens([AddedToken("  ", normalized=True, special=True),
                           AddedToken("\t", normalized=True, special=True),
                           AddedToken("<m>", lstrip=True, special=True)])
    p = tmp_path / "strip.json"
    hf.save(str(p))
    hf = tokenizers.Tokenizer.from_file(str(p))
    ours = load(p)
    _assert_like_hf(hf, ours, ["a  b\tc <m> d", "  <m>\t", "\t\t"], offsets=False)


def test_cli_encode_of_a_roberta_file(base_json, tmp_path, capsys):
    """`bpe-cffi encode` runs a RoBERTa-style file (refused before: its added tokens'
    options), writes encode's ids, and says the ignored post-processor in one line of its
    own, not as a Python warning with a source line."""
    import numpy as np
    from bpe_cffi import cli
    added = [AddedToken("<s>", special=True, normalized=True),
             AddedToken("<mask>", lstrip=True, special=True)]
    post = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    hf, ours = _pair(base_json, tmp_path, added, post=post, name="roberta.json")
    text = "The cat <mask> on the mat.\n<s>hello <mask>  world\n" * 2000
    src = tmp_path / "in.txt"
    src.write_text(text, encoding="utf-8")
    out = tmp_path / "out.bin"
    assert cli.main(["encode", "--tokenizer", str(tmp_path / "roberta.json"), str(src),
                     "-o", str(out), "--no-progress"]) == 0
    assert np.fromfile(out, dtype="<u2").tolist() == ours.encode(text)
    err = capsys.readouterr().err
    assert "bpe-cffi: warning: " in err and "RobertaProcessing is ignored" in err
    assert "UserWarning" not in err and ".py:" not in err
