"""Tokenizer against the pure-Python reference encoder (vocabularies tiktoken does not know),
plus the API's contracts: special tokens, batch, files, threads, decode, bad input."""
import os
import threading

import pytest

from conftest import LONG
from pyapi_helpers import ours, random_texts, small_trained
from reference_encoder import ReferenceEncoder

from bpe_cffi import Tokenizer, patterns

N_CASES = 2000 if LONG else 300
CUSTOM_REGEX = r"""\p{L}+|\p{N}|[^\p{L}\p{N}\s]+|\s+"""
SPECIALS = ["<|endoftext|>", "<|pad|>", "<s>", "<s><s>"]


def reference_for(tok: Tokenizer, rule="merges", ignore_merges=True):
    vocab = {i: b for i, b in tok.vocab.items() if i not in tok.special_tokens.values()}
    merges = tok.merges if rule == "merges" else None
    return ReferenceEncoder(vocab, merges, tok.special_tokens,
                            pattern=patterns.resolve(tok.pattern)[1], rule=rule,
                            ignore_merges=ignore_merges)


@pytest.fixture(scope="module")
def trained():
    vocab, merges = small_trained()
    return vocab, merges


@pytest.mark.parametrize("pattern", ["gpt2", "cl100k", "o200k", CUSTOM_REGEX])
def test_trained_vocab_matches_reference(trained, pattern):
    vocab, merges = trained
    tok = Tokenizer(vocab, merges, SPECIALS, pattern=pattern)
    ref = reference_for(tok)
    assert len(tok.merges) == len(merges)
    for s in random_texts(seed=7, n=N_CASES):
        assert tok.encode(s) == ref.encode(s), repr(s)
        assert tok.encode_ordinary(s) == ref.encode_ordinary(s), repr(s)
    text = "".join(random_texts(seed=8, n=200))
    assert tok.encode(text) == ref.encode(text)


def test_trained_vocab_as_tiktoken_rule(trained, tmp_path):
    """The same bytes written as a .tiktoken file (rank = id): tiktoken's rule."""
    from bpe_cffi import formats
    vocab, _ = trained
    path = tmp_path / "small.tiktoken"
    formats.write_tiktoken(vocab, path)
    tok = Tokenizer.from_tiktoken(path, pattern="gpt2", special_tokens={"<|endoftext|>": 5000})
    ref = reference_for(tok, rule="tiktoken")
    for s in random_texts(seed=9, n=N_CASES):
        assert tok.encode(s) == ref.encode(s), repr(s)


def test_rule_matters():
    """Merge order differs from id order: the two rules give different ids, each as the
    reference says."""
    vocab = {i: bytes([i]) for i in range(256)}
    ab, bc = 256, 257
    vocab[ab], vocab[bc] = b"ab", b"bc"
    merges = [(b"b", b"c"), (b"a", b"b")]           # bc merges first
    by_merges = Tokenizer(vocab, merges, pattern="gpt2")
    assert by_merges.encode("abc") == [ord("a"), bc]
    import tempfile, os
    from bpe_cffi import formats
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "v.tiktoken")
        formats.write_tiktoken(vocab, p)
        by_rank = Tokenizer.from_tiktoken(p, pattern="gpt2")
    assert by_rank.encode("abc") == [ab, ord("c")]   # the lower-ranked token ab first
    assert reference_for(by_merges).encode("abc") == [ord("a"), bc]
    assert reference_for(by_rank, rule="tiktoken").encode("abc") == [ab, ord("c")]


def test_ignore_merges():
    """A piece that is itself a token is emitted whole even when no merge builds it."""
    vocab = {i: bytes([i]) for i in range(256)}
    vocab[256] = b"xyz"
    tok = Tokenizer(vocab, [], pattern="gpt2")
    assert tok.encode("xyz") == [256]
    assert tok.encode(" xyz") == [ord(" "), ord("x"), ord("y"), ord("z")]
    plain = Tokenizer(vocab, [], pattern="gpt2", ignore_merges=False)
    assert plain.encode("xyz") == [ord("x"), ord("y"), ord("z")]


def test_special_tokens_ids_and_longest_match(trained):
    vocab, merges = trained
    vocab = dict(vocab)
    vocab[len(vocab)] = b"<|pad|>"                 # already in the vocab: keeps its id
    pad_id = len(vocab) - 1
    tok = Tokenizer(vocab, merges, SPECIALS)
    sp = tok.special_tokens
    assert sp["<|pad|>"] == pad_id
    assert sorted(sp.values()) == sorted(set(sp.values()))
    assert min(i for s, i in sp.items() if s != "<|pad|>") == len(vocab)
    assert tok.n_vocab == max(sp.values()) + 1
    assert tok.encode("<s><s><s>") == [sp["<s><s>"], sp["<s>"]]
    assert tok.encode("<s><s><s>", allowed_special={"<s>"}) == [sp["<s>"]] * 3
    assert tok.encode("<|pad|>x<|endoftext|>")[0] == pad_id
    assert tok.decode(tok.encode("a<s><s>b<|pad|>")) == "a<s><s>b<|pad|>"
    ref = reference_for(tok)
    assert tok.encode_ordinary("<|pad|>") == ref.encode_ordinary("<|pad|>")
    assert tok.decode_single_token_bytes(sp["<s>"]) == b"<s>"


def test_special_tokens_given_with_ids(trained, tmp_path):
    """A dict {str: id} keeps its ids (it used to be read as a list of names: the ids were
    silently renumbered, and decode of the model's id gave another token); an id that is
    another token's is refused."""
    vocab, merges = trained
    far = len(vocab) + 1000
    tok = Tokenizer(vocab, merges, {"<|im_start|>": far, "<|pad|>": far + 7})
    assert tok.special_tokens == {"<|im_start|>": far, "<|pad|>": far + 7}
    assert tok.encode("a<|im_start|>") == tok.encode("a") + [far]
    assert tok.decode([far + 7]) == "<|pad|>" and tok.n_vocab == far + 8
    path = tmp_path / "t.json"
    tok.save(path)
    from bpe_cffi import load
    assert load(path).special_tokens == tok.special_tokens
    word = next(b for b in vocab.values() if len(b) > 1 and b.isascii()).decode()
    for bad, match in (({"<x>": 300}, "already the ordinary token"),
                       ({"<x>": far, "<y>": far}, "share an id")):
        with pytest.raises(ValueError, match=match):
            Tokenizer(vocab, merges, bad)
    # a special token with an ordinary token's bytes under another id (HF's "\n\n" added
    # to GPT-2): found first by encode, the ordinary token's ids by encode_ordinary
    both = Tokenizer(vocab, merges, {word: far})
    plain = Tokenizer(vocab, merges)
    assert both.encode(f"x{word}x") == plain.encode("x") + [far] + plain.encode("x")
    assert both.encode_ordinary(f"x{word}x") == plain.encode(f"x{word}x")
    assert both.decode([far]) == word
    # a character-level tokenizer.json could not hold both under one string: refused
    with pytest.raises(ValueError, match="also the ordinary token"):
        Tokenizer({0: b"a", 1: b"b", 2: b"ab"}, [(b"a", b"b")], {"ab": 5}, byte_level=False)


def test_allowed_disallowed_arguments(trained):
    vocab, merges = trained
    tok = Tokenizer(vocab, merges, SPECIALS)
    with pytest.raises(ValueError, match="nope"):
        tok.encode("x", allowed_special={"nope"})
    with pytest.raises(ValueError, match="nope"):
        tok.encode("x", disallowed_special={"nope"})
    with pytest.raises(ValueError, match="<s>"):
        tok.encode("a <s> b", allowed_special={"<|pad|>"}, disallowed_special="all")
    with pytest.raises(ValueError):
        tok.encode("x", allowed_special="some")
    with pytest.raises(TypeError):
        tok.encode("x", allowed_special=5)


@pytest.mark.parametrize("bad", [None, b"bytes", 5, ["list"], bytearray(b"x")])
def test_encode_rejects_non_str(bad):
    tok = ours("gpt2")
    with pytest.raises(TypeError):
        tok.encode(bad)
    with pytest.raises(TypeError):
        tok.encode_ordinary(bad)


def test_lone_surrogates_like_tiktoken():
    from pyapi_helpers import reference
    tok, enc = ours("cl100k_base"), reference("cl100k_base")
    for s in ["\ud800", "a\udfffb", "\ud83d\ude00", "x\ud800\udc00y", "\udc00\ud800"]:
        assert tok.encode(s) == enc.encode(s), repr(s)
        assert tok.encode_ordinary(s) == enc.encode_ordinary(s), repr(s)


@pytest.mark.parametrize("split", ["C", "regex"])
def test_encode_batch_names_the_text_that_is_not_a_str(split):
    """A batch with one bad item among many: the TypeError gives its index."""
    from conftest import vocab_path
    from bpe_cffi import Tokenizer
    from bpe_cffi.patterns import GPT2
    tok = ours("gpt2") if split == "C" else Tokenizer.from_files(
        vocab_path("gpt2_vocab.json"), vocab_path("gpt2_merges.txt"), pattern="(?:" + GPT2 + ")")
    for texts, k, kind in ((["ok"] * 5 + [b"x"], 5, "bytes"),
                           (["a b"] * 3000 + [None] + ["c"], 3000, "NoneType"),
                           (["a", 3], 1, "int")):
        with pytest.raises(TypeError, match=rf"texts\[{k}\] must be a str, not {kind}"):
            tok.encode_batch(texts)


def test_decode_errors_argument_must_be_a_str_whatever_the_ids():
    """errors=None returned bytes for a list of up to 1024 ids (the fast path's own use of
    None) and raised for a tuple or a longer list; errors=0 said 'bad argument type for
    built-in operation'.  tiktoken: TypeError every time.  A str subclass is a str."""
    tok = ours("gpt2")
    ids = tok.encode("hello world")
    for errors in (None, 0, b"strict", ("strict",)):
        for seq in (ids, tuple(ids), ids * 600):
            with pytest.raises(TypeError, match="argument 'errors' must be str"):
                tok.decode(seq, errors=errors)

    class Mode(str):
        pass
    assert tok.decode(ids, errors=Mode("strict")) == "hello world"
    assert tok.decode(ids * 600, errors=Mode("strict")) == "hello world" * 600


def test_decode_errors_and_replacement():
    tok = ours("gpt2")
    ids = tok.encode("héllo")
    assert tok.decode(ids) == "héllo"
    with pytest.raises(ValueError, match="999999"):
        tok.decode([1, 2, 999999])
    with pytest.raises(ValueError, match="-1"):
        tok.decode([1, -1])
    with pytest.raises(ValueError):
        tok.decode([2 ** 40])
    with pytest.raises(TypeError):
        tok.decode([1, "2"])
    with pytest.raises(TypeError):
        tok.decode([1.5])
    with pytest.raises(TypeError):
        tok.decode_single_token_bytes("1")
    with pytest.raises(ValueError):
        tok.decode_single_token_bytes(10 ** 9)
    e_acute = tok.encode("é")
    assert len(e_acute) == 1
    # a token that is half of a UTF-8 sequence decodes to U+FFFD
    ch = next(c for c in "\u9f98\U0001f916\U0001d400\u4e2d" if len(tok.encode_ordinary(c)) > 1)
    half = tok.encode_ordinary(ch)              # several tokens, the first one a partial char
    assert tok.decode(half[:1]) == "\ufffd"
    assert tok.decode_bytes(half) == ch.encode()
    assert tok.decode([]) == ""
    import numpy
    assert tok.decode(numpy.array(ids, dtype=numpy.uint32)) == "héllo"
    assert tok.decode(numpy.array(ids, dtype=numpy.int64)) == "héllo"
    # a float equal to an id is not an id, in a short list as in a long one
    with pytest.raises(TypeError, match="bytes"):
        tok.token_to_id("a")
    assert tok.token_to_id(b"a") == tok.encode("a")[0]
    for n in (1, 600):
        with pytest.raises(TypeError, match="1.0"):
            tok.decode_bytes([1] * n + [1.0])
    # nor is anything else that C's conversion would cut to an int (numpy floats, Decimal,
    # Fraction: decoded as the int below them before); ids are read as operator.index reads
    # them, as tiktoken does, in a list as in a numpy array, and the bad one is named
    from decimal import Decimal
    from fractions import Fraction
    for bad in (numpy.float32(ids[0]), Decimal(ids[0]), Fraction(ids[0] * 2 + 1, 2)):
        for n in (1, 600):
            with pytest.raises(TypeError, match=f"position {n}"):
                tok.decode([ids[0]] * n + [bad])
    for arr in (numpy.array([float(i) for i in ids]), numpy.array([True, False])):
        with pytest.raises(TypeError, match="numpy array"):
            tok.decode(arr)
    with pytest.raises(ValueError, match="-1 at position 2"):
        tok.decode(numpy.array(ids[:2] + [-1]))
    with pytest.raises(ValueError, match="at position 1"):
        tok.decode(numpy.array([ids[0], 2 ** 40]))
    for dtype in (numpy.int32, numpy.uint64, numpy.uint16):
        assert tok.decode(numpy.array(ids, dtype=dtype)) == "héllo"
    assert tok.decode(numpy.repeat(numpy.array(ids, dtype=numpy.uint32), 2)[::2]) == "héllo"
    assert tok.decode(tuple(ids)) == tok.decode(iter(ids)) == "héllo"
    # numpy's ints are ids, one at a time too (as tiktoken takes them)
    assert tok.decode_single_token_bytes(numpy.int64(ids[0])) == \
        tok.decode_single_token_bytes(ids[0])
    assert tok.decode_tokens_bytes(numpy.array(ids)) == [tok.decode_single_token_bytes(i)
                                                         for i in ids]


def test_concurrent_threads():
    from pyapi_helpers import corpus_slice, reference
    tok, enc = ours("cl100k_base"), reference("cl100k_base")
    texts = [corpus_slice(c, 30_000) for c in ("en_books", "multilingual", "code", "web")]
    expected = [enc.encode_ordinary(t) for t in texts]
    failures = []

    def worker(k):
        for r in range(4):
            i = (k + r) % len(texts)
            if tok.encode_ordinary(texts[i]) != expected[i]:
                failures.append((k, i))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


@pytest.mark.parametrize("vocab", ["gpt2", "o200k_base"])
def test_encode_batch_equals_encode(vocab):
    from pyapi_helpers import corpus_slice
    tok = ours(vocab)
    docs = corpus_slice("web", 200_000).split("\n")
    docs += random_texts(seed=3, n=200) + ["", "<|endoftext|>", "x<|endoftext|>y"]
    expected = [tok.encode(d) for d in docs]
    assert tok.encode_batch(docs) == expected
    assert tok.encode_batch(docs, num_threads=2) == expected
    assert tok.encode_batch(docs, num_threads=1) == expected
    assert tok.encode_batch(docs[:300], num_threads=2 ** 40) == expected[:300]  # C's int
    assert tok.encode_batch([]) == []
    assert tok.encode_batch(docs[:5], allowed_special=set()) == \
        [tok.encode(d, allowed_special=set()) for d in docs[:5]]
    with pytest.raises(TypeError):
        tok.encode_batch("not a list")
    with pytest.raises(TypeError):
        tok.encode_batch(["ok", 5])


@pytest.mark.parametrize("vocab", ["gpt2", "o200k_base"])
def test_first_batch_after_single_calls_matches_tiktoken(vocab):
    """A fresh tokenizer warmed by one single-thread call: its first 2-thread batch starts the
    worker's word cache as a copy of the caller's (bpe_work_seed in C), so most of the worker's
    pieces come from copied entries.  Its ids must still be tiktoken's."""
    from conftest import read_corpus
    from pyapi_helpers import _ours, reference
    enc = reference(vocab)
    tok = _ours.__wrapped__(vocab)            # a new tokenizer: every slot's cache empty
    text = read_corpus("en_books", 600_000, offset=3_000_000)
    docs = [d for d in text.split("\n\n") if d]
    tok.encode_ordinary(text)
    got = tok.encode_batch(docs, num_threads=2, allowed_special=set())
    assert got == [enc.encode_ordinary(d) for d in docs]
    tok.close()


@pytest.mark.parametrize("vocab", ["gpt2", "o200k_base"])
def test_small_batches_equal_encode(vocab):
    """Batches of 1 to 6 texts (up to 4 short ones are encoded text by text, longer or more
    as a C job): the ids of encode for every special-token mode, and its errors."""
    tok = ours(vocab)
    texts = ["hello world", "", "x<|endoftext|>y", "na\u00efve caf\u00e9 \u65e5\u672c \U0001f642",
             "  spaces\n\n", "a" * 20000]
    modes = [{}, {"allowed_special": set()}, {"allowed_special": "all"}]
    for n in range(1, len(texts) + 1):
        for docs in (texts[:n], texts[-n:]):
            for kw in modes:
                assert tok.encode_batch(docs, **kw) == [tok.encode(d, **kw) for d in docs]
    if "<|endoftext|>" in tok.special_tokens:
        for docs in (texts[:3], texts):
            with pytest.raises(ValueError) as one:
                tok.encode(texts[2], allowed_special=set(), disallowed_special="all")
            with pytest.raises(ValueError) as many:
                tok.encode_batch(docs, allowed_special=set(), disallowed_special="all")
            assert str(many.value) == str(one.value)
    with pytest.raises(TypeError, match="str"):
        tok.encode_batch(["ok", b"bytes"])


@pytest.mark.parametrize("pattern", [
    CUSTOM_REGEX,                                       # matches end to end: findall
    r"\p{L}+|\p{N}",                                    # gaps between matches
    r"(\p{L}+)|\p{N}+|[^\p{L}\p{N}]+",                   # a group: findall gives groups
    r"\p{L}*|\s",                                       # empty matches
    r"(?<=a)b+|[^b]+|b",                                 # a lookbehind
])
def test_regex_pieces_equal_the_match_by_match_walk(trained, pattern):
    """_regex_piece_ends takes the pieces of a regex that covers the text with findall;
    whatever the regex, its result is the match-by-match walk's (matches and the text
    between them, empty matches dropped), in UTF-8 byte offsets."""
    import regex
    from bpe_cffi.tokenizer import _piece_ends_walk
    vocab, merges = trained
    tok = Tokenizer(vocab, merges, SPECIALS, pattern=pattern)
    rx = regex.compile(pattern)
    for s in random_texts(seed=11, n=200) + ["", "abba  bb, caf\u00e9 12 \U0001F600b"]:
        data = s.encode("utf-8", "surrogatepass").decode("utf-8", "replace").encode()
        text = data.decode()
        assert tok._regex_piece_ends(data) == _piece_ends_walk(rx, text, data), repr(s)


def test_encode_batch_custom_pattern(trained):
    vocab, merges = trained
    tok = Tokenizer(vocab, merges, SPECIALS, pattern=CUSTOM_REGEX)
    docs = random_texts(seed=4, n=50)
    assert tok.encode_batch(docs) == [tok.encode(d) for d in docs]


@pytest.mark.parametrize("vocab,dtype", [("gpt2", None), ("gpt2", "uint32"),
                                         ("o200k_base", None)])
def test_encode_file_matches_encode(tmp_path, vocab, dtype):
    numpy = pytest.importorskip("numpy")
    from pyapi_helpers import corpus_slice
    tok = ours(vocab)
    text = corpus_slice("multilingual", 300_000) + "<|endoftext|>" + corpus_slice("code", 200_000)
    src = tmp_path / "in.txt"
    src.write_bytes(text.encode("utf-8"))
    out = tmp_path / "out.bin"
    n = tok.encode_file(src, out, dtype=dtype, progress=False, num_threads=2)
    want_dtype = numpy.dtype(dtype or ("uint16" if tok.n_vocab <= 65536 else "uint32"))
    got = numpy.fromfile(out, dtype=want_dtype.newbyteorder("<")).tolist()
    expected = tok.encode(text)
    assert n == len(expected)
    assert got == expected
    if dtype is None:       # more threads than C's int holds: as many as C uses
        assert tok.encode_file(src, out, progress=False, num_threads=2 ** 40) == n
        assert numpy.fromfile(out, dtype=want_dtype.newbyteorder("<")).tolist() == expected


def test_encode_file_errors(tmp_path):
    tok = ours("o200k_base")
    src = tmp_path / "in.txt"
    src.write_text("hello")
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        tok.encode_file(tmp_path / "missing.txt", tmp_path / "o.bin", progress=False)
    with pytest.raises(ValueError, match="uint16"):
        tok.encode_file(src, tmp_path / "o.bin", dtype="uint16", progress=False)
    with pytest.raises(ValueError):
        tok.encode_file(src, tmp_path / "o.bin", dtype="float32", progress=False)
    numpy = pytest.importorskip("numpy")
    n = tok.encode_file(src, tmp_path / "o.bin", dtype=numpy.uint32, progress=False)
    assert numpy.fromfile(tmp_path / "o.bin", dtype="<u4").tolist() == tok.encode("hello")
    assert n == len(tok.encode("hello"))
    with pytest.raises(ValueError, match="big-endian"):
        tok.encode_file(src, tmp_path / "o.bin", dtype=numpy.dtype(">u4"), progress=False)
    for name, width in (("<u4", 4), ("u4", 4), ("=u4", 4)):   # numpy's names of uint32
        tok.encode_file(src, tmp_path / "o.bin", dtype=name, progress=False)
        assert os.path.getsize(tmp_path / "o.bin") == n * width, name
    with pytest.raises(ValueError, match="big-endian"):
        tok.encode_file(src, tmp_path / "o.bin", dtype=">u4", progress=False)
    # a missing directory is named (it was the temporary file to be made in it)
    with pytest.raises(FileNotFoundError, match="output directory does not exist") as e:
        tok.encode_file(src, tmp_path / "no" / "such" / "dir.bin", progress=False)
    assert ".tmp" not in str(e.value)
    with pytest.raises(IsADirectoryError):
        tok.encode_file(src, str(tmp_path / "sub") + "/", progress=False)


@pytest.mark.parametrize("how", ["same path", "another spelling", "hard link", "via symlink",
                                 "output a symlink to it"])
def test_encode_file_refuses_to_replace_its_input(tmp_path, how):
    """output_path is replaced by the ids (through a symlink, the file it points to): when
    that is the input file, the text would be lost."""
    import os
    tok = ours("gpt2")
    src = tmp_path / "in.txt"
    src.write_text("hello world")
    if how == "same path":
        out = src
    elif how == "another spelling":
        out = tmp_path / "." / "in.txt"
    elif how == "hard link":
        out = tmp_path / "link.txt"
        os.link(src, out)
    elif how == "via symlink":                 # input named through a symlink to out
        out = src
        src = tmp_path / "alias.txt"
        src.symlink_to(out)
    else:
        out = tmp_path / "out.bin"
        out.symlink_to(src)
    with pytest.raises(ValueError, match="is the input file"):
        tok.encode_file(src, out, progress=False)
    assert (tmp_path / "in.txt").read_text() == "hello world"


@pytest.mark.parametrize("python_split", [False, True], ids=["C", "regex"])
def test_encode_file_reads_a_named_pipe(tmp_path, python_split):
    """A FIFO as the input is read once, by the encoder: it was opened (and closed) first
    for the same-file check, which killed its writer and lost the text."""
    import os
    import threading
    from conftest import vocab_path
    from bpe_cffi import Tokenizer
    from bpe_cffi.patterns import GPT2
    tok = ours("gpt2") if not python_split else Tokenizer.from_files(
        vocab_path("gpt2_vocab.json"), vocab_path("gpt2_merges.txt"), pattern="(?:" + GPT2 + ")")
    text = "hello world, hello pipes\n" * 2000
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_text(text), daemon=True)
    writer.start()
    out = tmp_path / "out.bin"
    result = []                                # in a thread: the old code blocked forever
    job = threading.Thread(target=lambda: result.append(tok.encode_file(fifo, out,
                                                                         progress=False)),
                           daemon=True)
    job.start()
    job.join(60)
    writer.join(30)
    assert result == [len(tok.encode(text))]
    raw = out.read_bytes()
    assert [int.from_bytes(raw[k:k + 2], "little") for k in range(0, len(raw), 2)] == \
        tok.encode(text)


@pytest.mark.parametrize("python_split", [False, True], ids=["C", "regex"])
def test_encode_file_output_through_links_pipes_and_devices(tmp_path, python_split):
    """Where output_path is a symlink, the file it points to gets the ids (the link stays);
    a pipe or a device (/dev/null) is written in place, not replaced by a regular file; a
    replaced file keeps its permissions, and a new one follows the umask."""
    import os
    import stat
    import threading
    from conftest import vocab_path
    from bpe_cffi import Tokenizer
    from bpe_cffi.patterns import GPT2
    tok = ours("gpt2") if not python_split else Tokenizer.from_files(
        vocab_path("gpt2_vocab.json"), vocab_path("gpt2_merges.txt"), pattern="(?:" + GPT2 + ")")
    text = "hello world, hello pipes\n" * 50
    want = b"".join(i.to_bytes(2, "little") for i in tok.encode(text))
    src = tmp_path / "in.txt"
    src.write_text(text)
    real = tmp_path / "data" / "real.bin"
    real.parent.mkdir()
    real.write_bytes(b"old")
    real.chmod(0o640)
    link = tmp_path / "link.bin"
    link.symlink_to(real)
    assert tok.encode_file(src, link, progress=False) * 2 == len(want)
    assert link.is_symlink() and real.read_bytes() == want
    assert stat.S_IMODE(real.stat().st_mode) == 0o640
    assert sorted(os.listdir(real.parent)) == ["real.bin"]

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    tok.encode_file(src, fifo, progress=False)
    reader.join(30)
    assert got == [want] and stat.S_ISFIFO(fifo.stat().st_mode)

    null = tmp_path / "null"                   # a device of our own, as /dev/null is
    try:
        os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (PermissionError, AttributeError):
        null = None                            # not root: no device node to test with
    if null is not None:
        assert tok.encode_file(src, null, progress=False) * 2 == len(want)
        assert stat.S_ISCHR(null.stat().st_mode) and null.stat().st_rdev == os.makedev(1, 3)

    old = os.umask(0o077)
    try:
        tok.encode_file(src, tmp_path / "new.bin", progress=False)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.bin").stat().st_mode) == 0o600


def test_encode_file_invalid_utf8(tmp_path):
    numpy = pytest.importorskip("numpy")
    tok = ours("gpt2")
    raw = b"ok \xff\xfe bad \xc3 end\n" * 100
    src = tmp_path / "in.txt"
    src.write_bytes(raw)
    out = tmp_path / "o.bin"
    tok.encode_file(src, out, progress=False)
    got = numpy.fromfile(out, dtype="<u2").tolist()
    assert got == tok.encode(raw.decode("utf-8", errors="replace"))


def test_close_and_context_manager(trained):
    vocab, merges = trained
    with Tokenizer(vocab, merges) as tok:
        assert tok.encode("the cat") == tok.encode("the cat")
        assert "Tokenizer(" in repr(tok)
    with pytest.raises(ValueError, match="closed"):
        tok.encode("x")
    for n in (1, 600):   # short lists too (decoded from a dict, not by C)
        with pytest.raises(ValueError, match="closed"):
            tok.decode([1] * n)
    tok.close()          # twice is fine
    assert "closed" in repr(tok)


def test_close_while_other_threads_encode(tmp_path):
    """close() from one thread while others run encode, encode_batch and encode_file on the
    same tokenizer in C: each call finishes with the right result, or (started after the
    close) raises ValueError; the C tokenizer is freed when the last call returns, never
    under it (that was a segmentation fault)."""
    import time
    from pyapi_helpers import _ours, corpus_slice
    text = corpus_slice("en_books", 1_000_000)
    docs = text.split("\n")
    src = tmp_path / "in.txt"
    src.write_text(text, encoding="utf-8")
    ref = ours("gpt2")
    short = [d for d in docs if 0 < len(d) < 2000][:3000]    # encode_str's one-call path
    wanted = {"single": ref.encode(text), "batch": ref.encode_batch(docs),
              "file": len(ref.encode(text)), "short": [ref.encode(d) for d in short]}
    for delay in (0.0, 0.001, 0.003, 0.008):
        tok = _ours.__wrapped__("gpt2")
        outcome = {}

        def run(kind):
            try:
                if kind == "single":
                    got = tok.encode(text)
                elif kind == "batch":
                    got = tok.encode_batch(docs, num_threads=2)
                elif kind == "short":
                    got = []
                    for d in short:
                        got.append(tok.encode(d))
                else:
                    got = tok.encode_file(src, tmp_path / f"out{delay}.bin", progress=False)
                outcome[kind] = got == wanted[kind]
            except ValueError as e:
                outcome[kind] = "closed" in str(e)

        threads = [threading.Thread(target=run, args=(k,)) for k in wanted]
        for t in threads:
            t.start()
        time.sleep(delay)
        tok.close()
        for t in threads:
            t.join()
        assert outcome == {k: True for k in wanted}, (delay, outcome)
        with pytest.raises(ValueError, match="closed"):
            tok.encode_batch(docs[:3])


@pytest.mark.parametrize("vocab", ["gpt2", "cl100k_base"])
def test_short_texts_in_one_call_equal_the_general_path(vocab, monkeypatch):
    """encode / encode_ordinary of a str under 4096 characters run in one call of the helper
    (csrc/pyext/one_call.c): the same ids, errors and fallbacks as the CFFI path, which
    they took before (and take without the helper)."""
    from bpe_cffi import tokenizer as tk
    from pyapi_helpers import reference
    if tk._encode_str is None:
        pytest.skip("the helper extension is not built")
    tok, enc = ours(vocab), reference(vocab)
    texts = random_texts(seed=7, n=300) + [
        "", "a", "<|endoftext|>", "x<|endoftext|>y" * 3, "caf\u00e9 \U0001F600",
        "a\ud800b", "\udc00", "\ud83d\ude00 pair as two units", "x" * 4095, "y" * 4096,
        "\u00e9" * 300 + " tail"]            # "y" * 4096: just past the one-call path

    class Sub(str):
        pass

    cases = [("ordinary", {}), ("all", {"allowed_special": "all"}),
             ("none", {"allowed_special": set()}),
             ("named", {"allowed_special": {"<|endoftext|>"}})]
    fast = {}
    for name, kw in cases:
        call = tok.encode_ordinary if name == "ordinary" else (lambda t, kw=kw: tok.encode(t, **kw))
        fast[name] = [call(t) for t in texts] + [call(Sub("hello <|endoftext|>"))]
    monkeypatch.setattr(tk, "_encode_str", None)
    for name, kw in cases:
        call = tok.encode_ordinary if name == "ordinary" else (lambda t, kw=kw: tok.encode(t, **kw))
        assert fast[name] == [call(t) for t in texts] + [call(Sub("hello <|endoftext|>"))], name
    assert fast["ordinary"][:-1] == [enc.encode_ordinary(t) for t in texts]
    monkeypatch.undo()
    with pytest.raises(ValueError, match="disallowed special token"):
        tok.encode("x<|endoftext|>", allowed_special=set(), disallowed_special="all")
    with pytest.raises(TypeError, match="must be a str"):
        tok.encode_ordinary(b"bytes")


@pytest.mark.parametrize("vocab", ["gpt2", "o200k_base"])
def test_short_id_lists_decoded_in_one_call_equal_the_general_path(vocab, monkeypatch):
    """decode / decode_bytes of a list of up to 1024 plain ints run in one call of the helper
    (one_call.c): the same bytes, text (for each errors=) and errors as the general path."""
    import random
    from bpe_cffi import tokenizer as tk
    if tk._decode_ids is None:
        pytest.skip("the helper extension is not built")
    tok = ours(vocab)
    rng = random.Random(3)
    n = tok.n_vocab
    lists = [[], [0], [n - 1], list(range(300)), [rng.randrange(n) for _ in range(1024)],
             [rng.randrange(n) for _ in range(1025)], tok.encode("caf\u00e9 \U0001F600"),
             tok.encode("\U0001F600")[:1], tok.encode("<|endoftext|>")]
    lists += [[rng.randrange(n) for _ in range(rng.randrange(1, 40))] for _ in range(200)]
    odd = [[1, n + 5], [1, -1], [1, 2 ** 32], [1, 2.0], [True, 2], [1, "x"], (1, 2)]

    def outcome(call, ids):
        try:
            return call(ids)
        except (ValueError, TypeError) as exc:       # UnicodeDecodeError is a ValueError
            return type(exc), str(exc)

    calls = [tok.decode_bytes] + [lambda ids, e=e: tok.decode(ids, errors=e)
                                  for e in ("replace", "strict", "ignore", "backslashreplace")]
    fast = [[outcome(c, ids) for ids in lists + odd] for c in calls]
    monkeypatch.setattr(tk, "_decode_ids", None)
    assert fast == [[outcome(c, ids) for ids in lists + odd] for c in calls]
    assert any(type(r) is tuple and r[0] is UnicodeDecodeError for r in fast[2])


@pytest.mark.parametrize("byte_level", [True, False])
def test_a_special_token_that_is_one_byte_or_character_keeps_it_in_the_model(byte_level):
    """A special token whose text is one of the model's initial symbols (here "\n", which no
    merge names) was taken out of the model: encode_ordinary("x\ny") lost the newline, and
    so did decode(encode(...)) wherever the special token was not allowed."""
    if byte_level:
        vocab = {i: bytes([i]) for i in range(256)}
    else:
        vocab = {i: c.encode() for i, c in enumerate("abxy\n")}
    vocab[300] = b"ab"
    tok = Tokenizer(vocab, [(b"a", b"b")], ["\n", "<|endoftext|>"], byte_level=byte_level)
    nl, x, y, ab = (next(i for i, b in vocab.items() if b == t) for t in (b"\n", b"x", b"y",
                                                                         b"ab"))
    assert tok.special_tokens["\n"] == nl
    for call in (tok.encode_ordinary, tok.encode,
                 lambda t: tok.encode(t, allowed_special=set())):
        assert call("x\nyab") == [x, nl, y, ab]
    assert tok.decode(tok.encode_ordinary("ab\n\nx")) == "ab\n\nx"


@pytest.mark.parametrize("vocab", ["gpt2", "cl100k_base"])
def test_single_token_lookups_in_python_equal_c(vocab):
    """decode_single_token_bytes of an int and token_to_id of bytes answer from Python dicts
    (a call into C cost ten times tiktoken's); the same answers as the C lookups, which a
    numpy int and a bytearray still take."""
    numpy = pytest.importorskip("numpy")
    tok = ours(vocab)
    for i in list(range(0, tok.n_vocab, 7)) + list(range(tok.n_vocab - 300, tok.n_vocab + 3)):
        try:
            fast = tok.decode_single_token_bytes(i)
        except ValueError:
            fast = None
        try:
            slow = tok.decode_single_token_bytes(numpy.int64(i))
        except ValueError:
            slow = None
        assert fast == slow, i
        if fast is not None:
            assert tok.token_to_id(fast) == tok.token_to_id(bytearray(fast))
    assert tok.token_to_id(b"\xff\xfe\xfd never a token") is None
    with pytest.raises(TypeError):
        tok.decode_single_token_bytes(True)


def test_no_special_allowed_as_tiktoken():
    """allowed_special=set() (text from users) with disallowed_special () or "all" takes a
    mode made once (the sets' checks cost ~1.5 us a call): the ids and errors of tiktoken
    given the same arguments."""
    from pyapi_helpers import reference
    tok, enc = ours("cl100k_base"), reference("cl100k_base")

    def outcome(f):
        try:
            return f()
        except ValueError as exc:
            return "disallowed" in str(exc)

    texts = ["hi", "x<|endoftext|>y", "<|fim_prefix|>a<|endofprompt|>", "<|endoftext", ""]
    for _ in range(2):              # the second time from the kept modes
        for text in texts:
            for allowed in (set(), frozenset()):
                for disallowed in ((), "all"):
                    assert outcome(lambda: tok.encode(text, allowed_special=allowed,
                                                      disallowed_special=disallowed)) == \
                        outcome(lambda: enc.encode(text, allowed_special=allowed,
                                                   disallowed_special=disallowed)), \
                        (text, allowed, disallowed)


def test_n_vocab_matches_c(trained):
    from bpe_cffi._native import lib
    for tok in (ours("gpt2"), ours("cl100k_base"), Tokenizer(*trained, SPECIALS)):
        assert tok.n_vocab == lib.bpe_tokenizer_id_limit(tok._ptr)


def test_constructor_rejects_bad_vocab_and_merges():
    base = {i: bytes([i]) for i in range(256)}
    with pytest.raises(ValueError, match="same bytes"):
        Tokenizer({**base, 300: b"a"}, [])
    with pytest.raises(ValueError, match="not in the vocabulary"):
        Tokenizer(base, [(b"a", b"b")])                    # result ab missing
    with pytest.raises(ValueError, match="not in the vocabulary"):
        Tokenizer({**base, 256: b"abc"}, [(b"ab", b"c")])  # part ab missing
    with pytest.raises(TypeError):
        Tokenizer({0: "a"}, [])
    with pytest.raises(ValueError, match="empty"):
        Tokenizer({0: b""}, [])
    with pytest.raises(ValueError):
        Tokenizer(base, [], pattern="(unclosed")
    with pytest.raises(ValueError, match="empty"):
        Tokenizer(base, [], [""])


INTERRUPT_SCRIPT = r"""
import os, signal, sys, threading, time
sys.path[:0] = {paths!r}
from bpe_cffi import Tokenizer
tok = Tokenizer.from_tiktoken({vocab!r}, pattern="cl100k")
src, out, what = {src!r}, {out!r}, {what!r}
if what == "file":
    work = lambda: tok.encode_file(src, out, progress=True, num_threads=2)
elif what == "encode":
    text = open(src, encoding="utf-8").read()
    work = lambda: tok.encode(text)
elif what == "bigbatch":
    text = open(src, encoding="utf-8").read()
    work = lambda: tok.encode_batch([text[:1000], text], num_threads=2)
elif what == "batch1":
    docs = open(src, encoding="utf-8").read().split("\n") * 2
    work = lambda: tok.encode_batch(docs, num_threads=1)
else:
    docs = open(src, encoding="utf-8").read().split("\n") * 2
    work = lambda: tok.encode_batch(docs, num_threads=2)
fired = []
def fire():
    fired.append(time.monotonic())
    os.kill(os.getpid(), signal.SIGINT)
threading.Timer({delay!r}, fire).start()
t0 = time.monotonic()
try:
    work()
    print("finished")
except KeyboardInterrupt:
    now = time.monotonic()
    from bpe_cffi.progress import calls_running
    print("interrupted", now - t0, now - fired[0], os.path.exists(out), calls_running() > 0)
"""


def _interrupted(tmp_path, what, chunks, delay):
    """Runs INTERRUPT_SCRIPT's `what` ("file", "encode" or "batch") in a child on `chunks`
    copies of 400 KB of web text, with SIGINT `delay` s in: (its stdout's fields, its
    stderr).  Interrupted, the fields are: seconds since the start, since the signal,
    whether the output file exists, whether a helper thread still runs its call."""
    import os
    import subprocess
    import sys
    from conftest import default_sigint, vocab_path
    from pyapi_helpers import corpus_slice
    import bpe_cffi
    chunk = corpus_slice("web", 400_000)
    src = tmp_path / "big.txt"
    with open(src, "w", encoding="utf-8") as f:
        for _ in range(chunks):
            f.write(chunk)
    script = INTERRUPT_SCRIPT.format(
        paths=[os.path.dirname(os.path.dirname(bpe_cffi.__file__))],
        vocab=str(vocab_path("cl100k_base.tiktoken")), src=str(src),
        out=str(tmp_path / "big.bin"), what=what, delay=delay)
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300, preexec_fn=default_sigint)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout.split(), res.stderr


def test_encode_file_ctrl_c_cancels(tmp_path):
    """SIGINT during encode_file: KeyboardInterrupt soon after, no output file, no thread."""
    fields, err = _interrupted(tmp_path, "file", 500, 0.5)   # ~200 MB: seconds of work even
    assert fields[0] == "interrupted", fields               # on a fast machine
    elapsed, rest = fields[1], fields[3:]
    assert float(elapsed) < 0.5 + 5.0
    assert rest == ["False", "False"]            # output removed; the helper thread ended
    assert "encode big.txt" in err               # the progress bar was drawn


@pytest.mark.parametrize("what", ["encode", "batch", "bigbatch", "batch1"])
def test_ctrl_c_stops_a_long_encode(tmp_path, what):
    """SIGINT during one long encode, or an encode_batch of many texts on 2 threads or on 1,
    or of one long one, which is cut into parts (all run on a helper thread from 4 MiB on,
    the job cancelled inside its texts): KeyboardInterrupt within a fraction of a second,
    not after the whole text (seconds here; the batch of one long text once waited for all
    its parts), and no call left running."""
    fields, _ = _interrupted(tmp_path, what, 375, 0.3)      # ~150 MB: seconds of work here
    assert fields[0] == "interrupted", fields
    late, still_running = fields[2], fields[4]
    assert float(late) < 0.4, fields
    assert still_running == "False"


def test_ctrl_c_before_the_batch_job_exists_cancels_it(monkeypatch):
    """encode_batch starts its job on the thread that collects it; a Ctrl-C that comes before
    the job exists (cancel() finds nothing to cancel yet) still stops it once started:
    KeyboardInterrupt, nothing returned.  Without the Ctrl-C the same call gives every list."""
    from bpe_cffi import Tokenizer
    from conftest import vocab_path
    tok = Tokenizer.from_tiktoken(vocab_path("cl100k_base.tiktoken"), pattern="cl100k")
    docs = ["some words of text, %d of them" % k for k in range(3000)]
    want = [tok.encode(d) for d in docs]
    runs = []

    def interrupted(start_and_collect, cancel, size):
        runs.append(size)
        cancel()                                  # as Ctrl-C would, before the start
        return start_and_collect()

    monkeypatch.setattr(Tokenizer, "_run_batch", staticmethod(interrupted))
    with pytest.raises(KeyboardInterrupt):
        tok.encode_batch(docs, num_threads=2)
    assert runs == [sum(map(len, docs))]
    monkeypatch.undo()
    assert tok.encode_batch(docs, num_threads=2) == want


def test_encode_batch_of_many_texts_opens_its_job_first(monkeypatch):
    """A batch of EARLY_WORKERS_MIN texts or more, from the main thread, large enough for the
    helper thread (as a sample of its texts says), runs on that thread from the start and
    opens its job (workers started) before locating the texts: the same lists; a Ctrl-C
    before the job is opened still stops it (KeyboardInterrupt); a text that is not a str
    raises TypeError naming it, with the opened job's threads ended.  A smaller batch of as
    many texts stays on this thread."""
    import sys
    import time
    import bpe_cffi.progress as progress
    import bpe_cffi.tokenizer as T
    from bpe_cffi import Tokenizer, _batch_job
    from conftest import vocab_path
    tok = Tokenizer.from_tiktoken(vocab_path("cl100k_base.tiktoken"), pattern="cl100k")
    n = _batch_job.EARLY_WORKERS_MIN
    monkeypatch.setattr(T, "_CANCELLABLE_MIN", 30 * n)      # 4 MiB: too slow a test
    docs = ["some words of text, %d of them" % k for k in range(n)]    # >= 30 characters
    want = [tok.encode(d) for d in docs]
    calls = []
    real = progress.run_cancellable

    def counted(call, prog, bars=None, cancel=None):
        calls.append(None)             # (not the call: it holds the job)
        return real(call, prog, bars, cancel)

    monkeypatch.setattr(progress, "run_cancellable", counted)
    refs = sys.getrefcount(docs[0])
    assert tok.encode_batch(docs, num_threads=2) == want
    assert len(calls) == 1
    deadline = time.monotonic() + 5      # its copy of the list is let go (on the helper)
    while sys.getrefcount(docs[0]) != refs and time.monotonic() < deadline:
        time.sleep(0.01)
    now = sys.getrefcount(docs[0])       # (not inside the assert: pytest would hold docs[0])
    assert now == refs
    assert tok.encode_batch([d[:20] for d in docs], num_threads=2) == \
        [tok.encode(d[:20]) for d in docs]
    assert len(calls) == 1              # too small: on this thread

    def interrupted(call, prog, bars=None, cancel=None):
        cancel()                        # as Ctrl-C would, before the job is opened
        return call()

    monkeypatch.setattr(progress, "run_cancellable", interrupted)
    with pytest.raises(KeyboardInterrupt):
        tok.encode_batch(docs, num_threads=2)
    monkeypatch.setattr(progress, "run_cancellable", real)
    threads_before = len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") \
        else None
    with pytest.raises(TypeError, match="4000"):
        tok.encode_batch(docs[:4000] + [b"bytes"] + docs[4000:], num_threads=2)
    if threads_before is not None:
        assert len(os.listdir("/proc/self/task")) == threads_before
    assert tok.encode_batch(docs, num_threads=2) == want


def test_cli_encode(tmp_path, capsys):
    numpy = pytest.importorskip("numpy")
    from conftest import vocab_path
    from pyapi_helpers import corpus_slice
    from bpe_cffi import cli, load
    text = corpus_slice("code", 100_000)
    src = tmp_path / "in.txt"
    src.write_text(text, encoding="utf-8")
    out = tmp_path / "out.bin"
    vocab = vocab_path("gpt2_vocab.json")                # gpt2_merges.txt is found beside it
    assert cli.main(["encode", "--tokenizer", str(vocab), str(src), "-o", str(out),
                     "--no-progress", "--threads", "2"]) == 0
    assert numpy.fromfile(out, dtype="<u2").tolist() == load(vocab).encode(text)
    assert "tokens (uint16) written" in capsys.readouterr().err
    # --threads 0 is the default (one per core), as num_threads=0 is; below 0 is refused
    assert cli.main(["encode", "--tokenizer", str(vocab), str(src), "-o", str(out),
                     "--no-progress", "--threads", "0"]) == 0
    assert numpy.fromfile(out, dtype="<u2").tolist() == load(vocab).encode(text)
    assert cli.main(["encode", "--tokenizer", str(vocab), str(src), "-o", str(out),
                     "--threads", "-1"]) == 1
    assert "--threads must be >= 0" in capsys.readouterr().err
    assert cli.main(["encode", "--tokenizer", str(vocab), str(tmp_path / "nope.txt"),
                     "-o", str(out)]) == 1
    assert "nope.txt" in capsys.readouterr().err
    o200k = vocab_path("o200k_base.tiktoken")
    assert cli.main(["encode", "--tokenizer", str(o200k), str(src), "-o", str(out),
                     "--dtype", "uint16", "--no-progress"]) == 1
    assert "uint16" in capsys.readouterr().err
    assert cli.main(["encode", "--tokenizer", str(tmp_path / "missing.json"), str(src),
                     "-o", str(out)]) == 1
    assert "missing.json" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["encode", "--help"])
    assert "numpy.fromfile" in capsys.readouterr().out


def test_cli_encode_special_tokens(tmp_path, capsys):
    """--special-token gives a GPT-2 vocab.json (whose format cannot hold special tokens)
    tiktoken's <|endoftext|>, and a .tiktoken written by `bpe-cffi train` back the special
    tokens it was trained with; a standard .tiktoken keeps its known ids."""
    numpy = pytest.importorskip("numpy")
    from conftest import tiktoken_encoding, vocab_path
    from pyapi_helpers import corpus_slice
    from bpe_cffi import cli
    text = corpus_slice("web", 30_000) + "<|endoftext|>" + corpus_slice("code", 30_000)
    src, out = tmp_path / "in.txt", tmp_path / "out.bin"
    src.write_text(text, encoding="utf-8")

    def encode(*args):
        assert cli.main(["encode", *map(str, args), str(src), "-o", str(out),
                         "--no-progress"]) == 0, capsys.readouterr().err
        return numpy.fromfile(out, dtype="<u4" if "uint32" in args else "<u2").tolist()

    gpt2 = tiktoken_encoding("gpt2").encode(text, allowed_special="all")
    assert 50256 in gpt2
    assert encode("--tokenizer", vocab_path("gpt2_vocab.json"),
                  "--special-token", "<|endoftext|>") == gpt2
    assert encode("--tokenizer", vocab_path("gpt2_vocab.json")) != gpt2   # as plain text
    cl100k = tiktoken_encoding("cl100k_base").encode(text, allowed_special="all")
    assert encode("--tokenizer", vocab_path("cl100k_base.tiktoken"), "--dtype", "uint32",
                  "--special-token", "<|endoftext|>") == cl100k
    trained = tmp_path / "mine.tiktoken"
    assert cli.main(["train", str(src), "--vocab-size", "400", "--format", "tiktoken",
                     "--special-token", "<|endoftext|>", "-q", "-o", str(trained)]) == 0
    want = Tokenizer.train(src, 400, ["<|endoftext|>"]).encode(text)
    assert encode("--tokenizer", trained, "--pattern", "gpt2",
                  "--special-token", "<|endoftext|>") == want
    assert cli.main(["encode", "--tokenizer", str(vocab_path("o200k_base.tiktoken")),
                     "--merges", str(vocab_path("gpt2_merges.txt")), str(src), "-o",
                     str(out)]) == 1
    assert "--merges goes with a GPT-2 vocab.json" in capsys.readouterr().err
    assert cli.main(["encode", "--tokenizer", str(vocab_path("gpt2_vocab.json")),
                     "--pattern", "", str(src), "-o", str(out)]) == 1
    assert "--pattern is empty" in capsys.readouterr().err


def test_cli_encode_refuses_the_merges_found_beside_the_vocab(tmp_path, capsys):
    import shutil
    from conftest import vocab_path
    from bpe_cffi import cli
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(vocab_path("gpt2_" + name), tmp_path / name)
    src = tmp_path / "in.txt"
    src.write_text("hello world")
    before = (tmp_path / "merges.txt").read_bytes()
    assert cli.main(["encode", "--tokenizer", str(tmp_path / "vocab.json"), str(src), "-o",
                     str(tmp_path / "merges.txt"), "--no-progress"]) == 1
    assert "--merges file" in capsys.readouterr().err
    assert (tmp_path / "merges.txt").read_bytes() == before


def test_replaced_output_keeps_its_owner(tmp_path):
    """As a shell's > does (only root can give a file to another owner)."""
    import os
    if os.getuid() != 0:
        pytest.skip("needs root to create a file owned by another user")
    tok = ours("gpt2")
    src, out = tmp_path / "in.txt", tmp_path / "out.bin"
    src.write_text("hello world")
    out.write_bytes(b"old")
    os.chown(out, 65534, 65534)
    tok.encode_file(src, out, progress=False)
    assert (out.stat().st_uid, out.stat().st_gid) == (65534, 65534)


def test_cli_encode_sigterm_leaves_nothing(tmp_path):
    """SIGTERM (a scheduler stopping the job) during `bpe-cffi encode` is taken like Ctrl-C:
    exit code 143 soon after, the existing output kept as it was, no temporary file."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from conftest import vocab_path
    from pyapi_helpers import corpus_slice
    import bpe_cffi
    src = tmp_path / "big.txt"
    chunk = corpus_slice("web", 400_000)
    with open(src, "w", encoding="utf-8") as f:
        for _ in range(500):                   # ~200 MB: seconds of work even on a fast machine
            f.write(chunk)
    out = tmp_path / "big.bin"
    out.write_bytes(b"previous")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(bpe_cffi.__file__)))
    p = subprocess.Popen([sys.executable, "-m", "bpe_cffi", "encode", "--tokenizer",
                          str(vocab_path("cl100k_base.tiktoken")), str(src), "-o", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 60           # until the encoding has begun
    while not any(n.startswith(".tmp-") for n in os.listdir(tmp_path)):
        assert p.poll() is None and time.monotonic() < deadline, p.communicate()
        time.sleep(0.01)
    time.sleep(0.05)
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 143, err[-2000:]
    assert time.monotonic() - t0 < 5
    assert "terminated" in err and "Traceback" not in err
    assert sorted(os.listdir(tmp_path)) == ["big.bin", "big.txt"]
    assert out.read_bytes() == b"previous"


def test_cli_encode_two_quick_signals_end_it_cleanly(tmp_path):
    """Two SIGTERMs (or Ctrl-Cs) a moment apart: a handler that raised inside the wait for
    the C call could break that wait's lock when the second came (hung for good 1 in 40,
    'release unlocked lock' 4 in 40 in a probe).  Every run must end with 143 / 130, one
    line, no traceback, nothing left behind."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from conftest import default_sigint, vocab_path
    from pyapi_helpers import corpus_slice
    import bpe_cffi
    src = tmp_path / "big.txt"
    chunk = corpus_slice("web", 400_000)
    with open(src, "w", encoding="utf-8") as f:
        for _ in range(300):
            f.write(chunk)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(bpe_cffi.__file__)))
    for k in range(8):
        sig = signal.SIGTERM if k % 2 == 0 else signal.SIGINT
        p = subprocess.Popen([sys.executable, "-m", "bpe_cffi", "encode", "--tokenizer",
                              str(vocab_path("gpt2_vocab.json")), str(src), "-o",
                              str(out_dir / "o.bin"), "--threads", "1"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                             preexec_fn=default_sigint)
        deadline = time.monotonic() + 60
        while not any(n.startswith(".tmp-") for n in os.listdir(out_dir)):
            assert p.poll() is None and time.monotonic() < deadline, p.communicate()
            time.sleep(0.01)
        p.send_signal(sig)
        time.sleep(0.001 * (k % 3))
        p.send_signal(sig)
        _, err = p.communicate(timeout=60)
        assert p.returncode == (143 if sig == signal.SIGTERM else 130), err[-2000:]
        assert "Traceback" not in err and "Exception ignored" not in err, err[-2000:]
        assert os.listdir(out_dir) == []


def test_pickle_and_custom_pattern_encode_file(tmp_path):
    import pickle
    numpy = pytest.importorskip("numpy")
    vocab, merges = small_trained()
    tok = Tokenizer(vocab, merges, SPECIALS, pattern=CUSTOM_REGEX)
    back = pickle.loads(pickle.dumps(tok))
    texts = random_texts(seed=12, n=100)
    assert [back.encode(t) for t in texts] == [tok.encode(t) for t in texts]
    assert back.special_tokens == tok.special_tokens and back.pattern == tok.pattern
    text = "".join(texts) * 3
    src = tmp_path / "in.txt"
    src.write_bytes(text.encode("utf-8") + b"\xff tail")
    out = tmp_path / "o.bin"
    n = tok.encode_file(src, out, progress=False)
    got = numpy.fromfile(out, dtype="<u2").tolist()
    assert n == len(got)
    assert got == tok.encode(text + "\ufffd tail")
    gpt2 = ours("gpt2")
    assert pickle.loads(pickle.dumps(gpt2)).encode("hello <|endoftext|>") == \
        gpt2.encode("hello <|endoftext|>")


def test_train_classmethod_roundtrip(tmp_path):
    from conftest import cs336_path
    src = cs336_path("tinystories_sample.txt")
    tok = Tokenizer.train(src, 400, ["<|endoftext|>"])
    assert tok.n_vocab == 400 and "<|endoftext|>" in tok.special_tokens
    text = src.read_text(encoding="utf-8")[:20_000]
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert ids == reference_for(tok).encode(text)


def test_encode_batch_restores_the_garbage_collector_state():
    """encode_batch pauses the cyclic GC while it builds its result lists; it must leave the
    collector as it found it, enabled or disabled, also when the encode fails."""
    import gc
    from pyapi_helpers import ours
    tok = ours("gpt2")
    docs = ["hello world", "", "more text here"] * 50
    assert gc.isenabled()
    assert tok.encode_batch(docs) == [tok.encode(d) for d in docs]
    assert gc.isenabled()
    gc.disable()
    try:
        tok.encode_batch(docs)
        assert not gc.isenabled()
    finally:
        gc.enable()
    with pytest.raises(ValueError):
        tok.encode_batch(["<|endoftext|>"], allowed_special=set(), disallowed_special="all")
    assert gc.isenabled()


def test_num_threads_is_read_as_an_index(tmp_path):
    """numpy's ints are thread counts too; a str, float or bool is a TypeError (they were
    ValueErrors, np.int64(2) refused); a negative count a ValueError."""
    import numpy
    tok = ours("gpt2")
    texts = ["hello world"] * 50
    want = [tok.encode(t) for t in texts]
    assert tok.encode_batch(texts, num_threads=numpy.int64(2)) == want
    src = tmp_path / "in.txt"
    src.write_text("hello world\n" * 100)
    assert tok.encode_file(src, tmp_path / "o.bin", num_threads=numpy.int32(2),
                           progress=False) == len(tok.encode("hello world\n" * 100))
    for bad in ("2", 2.0, True):
        with pytest.raises(TypeError, match="num_threads"):
            tok.encode_batch(texts, num_threads=bad)
    with pytest.raises(ValueError, match="num_threads"):
        tok.encode_batch(texts, num_threads=-1)


def test_encode_batch_leaves_the_collector_alone_for_other_threads():
    """encode_batch used to gc.disable() the whole process while it ran: other threads' cycles
    went uncollected, and a gc.disable() made meanwhile was undone when it ended.  The helper
    now pauses the collector only while it holds the GIL."""
    import gc
    from bpe_cffi import _idcache
    if not _idcache.FAST:
        pytest.skip("the pure-Python path pauses the collector process-wide")
    from pyapi_helpers import corpus_slice
    tok = ours("gpt2")
    docs = [d for d in corpus_slice("en_books", 3_000_000).split("\n\n") if d]
    seen = []
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            seen.append(gc.isenabled())

    assert gc.isenabled()
    try:
        w = threading.Thread(target=watch)
        w.start()
        for _ in range(3):
            tok.encode_batch(docs, num_threads=2)
        stop.set()
        w.join()
        assert seen and all(seen), f"{seen.count(False)} of {len(seen)} samples saw it off"
        b = threading.Thread(target=lambda: tok.encode_batch(docs * 3, num_threads=1))
        b.start()
        gc.disable()                       # this thread's wish, made while the batch runs
        b.join()
        assert not gc.isenabled()
    finally:
        gc.enable()



def test_encode_batch_runs_only_the_collections_its_lists_make_due():
    """The lists encode_batch makes count towards the young generation's threshold; the
    collection they make due runs after the first groups (gc.collect(0), from the helper),
    once, while the result list holds few of them, not after everything.  None runs with the
    collector disabled or its threshold 0 (automatic collection off), whatever the lists'
    count, and the result is the same.  Asking whether it is due must not run it either:
    that made one collection after every group, ~45 here, instead of ~2.  When the one due
    next is of the middle generation, it is the one run early."""
    import gc
    from bpe_cffi import _idcache
    if not _idcache.FAST:
        pytest.skip("the pure-Python path has no helper to run it")
    tok = ours("gpt2")
    docs = ["some words %d, and more words after them. " % k * 3 for k in range(20_000)]
    want = [tok.encode(d) for d in docs]
    runs = []

    def record(phase, info):
        if phase == "start":
            runs.append(info["generation"])

    old = gc.get_threshold()
    gc.callbacks.append(record)
    try:
        assert tok.encode_batch(docs, num_threads=2) == want
        assert runs, "20K lists made no collection due"
        assert len(runs) <= 4, f"{len(runs)} collections in one call of 20K lists"
        # the collection due next is of the middle generation (its count has reached its
        # threshold): it runs early, while the result list is short, and the last is young
        gc.set_threshold(old[0], 1, 1000)
        gc.collect(1)
        gc.collect(0)
        runs.clear()
        assert tok.encode_batch(docs, num_threads=2) == want
        assert runs[0] == 1 and 1 not in runs[1:], runs
        gc.set_threshold(*old)
        runs.clear()
        gc.disable()
        assert tok.encode_batch(docs, num_threads=2) == want
        assert runs == [] and not gc.isenabled()
        gc.enable()
        gc.set_threshold(0)
        assert tok.encode_batch(docs, num_threads=2) == want
        assert runs == []
    finally:
        gc.set_threshold(*old)
        gc.enable()
        gc.callbacks.remove(record)

def test_common_mistakes_get_errors_that_say_what_to_do(tmp_path):
    """A file opened in binary mode given to encode_iterable, a set of ids (no order) given
    to decode, a pickle given to from_files: each error says what was expected."""
    import io
    import pickle
    tok = ours("gpt2")
    with pytest.raises(TypeError, match="binary mode"):
        list(tok.encode_iterable(io.BytesIO(b"hello\nworld\n")))
    for ids in ({1, 2}, frozenset([1]), {1: 2}):
        with pytest.raises(TypeError, match="sequence of int"):
            tok.decode(ids)
    p = tmp_path / "vocab.pkl"
    p.write_bytes(pickle.dumps({1: b"x"}))
    with pytest.raises(ValueError, match="expected a GPT-2 vocab.json"):
        Tokenizer.from_files(p, p)
