"""File formats: the byte-level alphabet, and every malformed, truncated or inconsistent file
raising ValueError with the file and line (missing files: FileNotFoundError naming them)."""
import base64
import json

import pytest

from bpe_cffi import Tokenizer, formats, load


def test_byte_alphabet_matches_gpt2():
    from conftest import vocab_path
    vocab_path("offline_tiktoken.py")
    import sys
    from conftest import VOCAB_DIR
    sys.path.insert(0, str(VOCAB_DIR))
    from offline_tiktoken import gpt2_byte_decoder     # an independent copy of the table
    assert formats.unicode_to_byte() == gpt2_byte_decoder()
    assert len(set(formats.byte_to_unicode())) == 256
    assert formats.bytes_to_token_str(b" the") == "Ġthe"
    assert formats.token_str_to_bytes("Ġthe\u010a", "x") == b" the\n"
    every = bytes(range(256)) * 3 + b"\x00\xff"
    encoder = {b: c for c, b in gpt2_byte_decoder().items()}
    assert formats.bytes_to_token_str(every) == "".join(encoder[b] for b in every)
    assert formats.bytes_to_token_str(bytearray(b"\xc4\xa0")) == "Äł"
    assert formats.token_str_to_bytes(formats.bytes_to_token_str(every), "x") == every


def test_gpt2_files_read():
    from conftest import vocab_path
    vocab = formats.read_gpt2_vocab(vocab_path("gpt2_vocab.json"))
    merges = formats.read_gpt2_merges(vocab_path("gpt2_merges.txt"))
    assert len(vocab) == 50257 and vocab[50256] == b"<|endoftext|>"
    assert len(merges) == 50000 and merges[0] == (b" ", b"t")
    assert vocab[198] == b"\n"


def write(tmp_path, name, data):
    p = tmp_path / name
    if isinstance(data, str):
        data = data.encode("utf-8")
    p.write_bytes(data)
    return p


BASE_VOCAB = {formats.bytes_to_token_str(bytes([i])): i for i in range(256)}


def vocab_json(extra=None, text=None):
    if text is not None:
        return text
    v = dict(BASE_VOCAB)
    v.update(extra or {})
    return "{\n" + ",\n".join(f"  {json.dumps(k)}: {json.dumps(i)}" for k, i in v.items()) + "\n}"


GOOD_MERGES = "#version: 0.2\na b\nab c\n"
GOOD_EXTRA = {"ab": 256, "abc": 257}


def test_good_files_load(tmp_path):
    v = write(tmp_path, "vocab.json", vocab_json(GOOD_EXTRA))
    m = write(tmp_path, "merges.txt", GOOD_MERGES)
    tok = Tokenizer.from_files(v, m)
    assert tok.encode("abc") == [257]
    assert tok.encode("abcab") == [257, 256]
    assert load(v).encode("abcab") == [257, 256]           # merges.txt found beside it
    assert load((v, m)).encode("abc") == [257]


def test_load_of_a_json_name_that_is_not_json_says_so(tmp_path):
    """A .json file that is not JSON is reported as bad JSON, not read as a .tiktoken file
    (whose error, "bad base64", named the wrong format)."""
    p = write(tmp_path, "tokenizer.json", "not json at all\n")
    with pytest.raises(ValueError, match="tokenizer.json:1: bad JSON"):
        load(p)
    t = write(tmp_path, "ranks.txt", base64.b64encode(b"a").decode() + " 0\n")
    assert load(t, pattern="gpt2").encode("a") == [0]      # other names still sniffed


@pytest.mark.parametrize("merges,match", [
    ("a b\nab\n", r"merges.txt:2: .*two tokens"),
    ("a b\nab c d\n", r"merges.txt:2: .*two tokens"),
    ("a b\nx y\n", r"merges.txt:2: .*'xy'.*not in the vocabulary"),
    ("#version: 0.2\na b\nab zz\n", r"merges.txt:3: .*'zz'.*not in the vocabulary"),
    ("a b\nab  c\n", r"merges.txt:2:"),
    ("a b\n\u2603 c\n", r"merges.txt:2: .*alphabet"),
])
def test_bad_merges(tmp_path, merges, match):
    v = write(tmp_path, "vocab.json", vocab_json(GOOD_EXTRA))
    m = write(tmp_path, "merges.txt", merges)
    with pytest.raises(ValueError, match=match):
        Tokenizer.from_files(v, m)


@pytest.mark.parametrize("text,match", [
    ('{"a": 0, "b": 1', r"vocab.json:1: bad JSON"),
    ('{"a": 0,\n "b": }', r"vocab.json:2: bad JSON"),
    ('["a", "b"]', r"vocab.json:1: expected a JSON object"),
    (None, r"vocab.json:\d+: .*duplicate id 97"),
    ('{"a": 0,\n "a": 1}', r"vocab.json:2: token 'a': appears twice"),
    ('{"a": 0,\n "b": -4}', r"vocab.json:2: .*-4"),
    ('{"a": 0,\n "b": "1"}', r"vocab.json:2: .*not an integer"),
    ('{"a": 0,\n "\u2603": 1}', r"vocab.json: token .*alphabet"),
    ('{"a": 0,\n "": 1}', r"vocab.json:2: .*empty"),
    (b'{"a": 0, "\xff": 1}', r"vocab.json:1: not valid UTF-8"),
])
def test_bad_vocab_json(tmp_path, text, match):
    if text is None:
        text = vocab_json({"dup": 97})
    v = write(tmp_path, "vocab.json", text)
    m = write(tmp_path, "merges.txt", "")
    with pytest.raises(ValueError, match=match):
        Tokenizer.from_files(v, m)


def tiktoken_lines(vocab):
    return b"\n".join(base64.b64encode(b) + b" " + str(i).encode() for i, b in vocab.items())


@pytest.mark.parametrize("mutate,match", [
    (lambda ls: ls[:5] + [b"!!notbase64 5"] + ls[6:], r"x.tiktoken:6: bad base64"),
    (lambda ls: ls[:3] + [ls[3].split()[0]] + ls[4:], r"x.tiktoken:4: .*rank is missing"),
    (lambda ls: ls[:3] + [ls[3] + b" 7"] + ls[4:], r"x.tiktoken:4: .*3 fields"),
    (lambda ls: ls[:3] + [ls[3].split()[0] + b" x1"] + ls[4:], r"x.tiktoken:4: rank"),
    (lambda ls: ls[:3] + [ls[3].split()[0] + b" 9"] + ls[4:], r"x.tiktoken:10: duplicate rank 9"),
    (lambda ls: ls[:3] + [ls[9].split()[0] + b" 3"] + ls[4:], r"x.tiktoken:10: duplicate token"),
    (lambda ls: [], r"x.tiktoken:1: no tokens"),
])
def test_bad_tiktoken(tmp_path, mutate, match):
    lines = tiktoken_lines({i: bytes([i]) for i in range(256)}).split(b"\n")
    p = write(tmp_path, "x.tiktoken", b"\n".join(mutate(lines)))
    with pytest.raises(ValueError, match=match):
        Tokenizer.from_tiktoken(p, pattern="gpt2")


def _needs_the_helper():
    from bpe_cffi import _idcache
    if not _idcache.FAST:
        pytest.skip("the helper extension (csrc/pyext) is not built")


@pytest.mark.parametrize("name", ["cl100k_base.tiktoken", "o200k_base.tiktoken"])
def test_tiktoken_bulk_reader_real_files(name):
    """read_tiktoken parses tiktoken's own layout in C: the same vocabulary as the line by
    line reader."""
    from conftest import vocab_path
    from bpe_cffi import formats
    _needs_the_helper()
    raw = vocab_path(name).read_bytes()
    assert formats._read_tiktoken_plain(raw) is not None
    assert formats.read_tiktoken(vocab_path(name)) == formats._read_tiktoken_lines(raw, name)


def test_tiktoken_bulk_reader_equals_line_reader(tmp_path):
    """Every layout gives the same vocabulary, whichever reader takes it, and a bad rank or
    base64 in tiktoken's own layout still gets its line named."""
    from bpe_cffi import formats
    vocab = {i: bytes([i]) for i in range(256)} | {300: b"ab", 257: b"xyz"}
    lines = tiktoken_lines(vocab).split(b"\n")
    layouts = {
        "plain": b"\n".join(lines) + b"\n",
        "no final newline": b"\n".join(lines),
        "crlf": b"\r\n".join(lines),
        "tabs and blank lines": b"\n\n".join(x.replace(b" ", b"\t ") for x in lines),
        "zero-padded ranks": b"\n".join(x.replace(b" ", b" 000") for x in lines),
    }
    for what, data in layouts.items():
        p = write(tmp_path, "v.tiktoken", data)
        assert formats.read_tiktoken(p) == vocab, what
    for bad, match in ((b"QQ= 5", r"v.tiktoken:6: bad base64"),
                       (b"QQ== 4294967295", r"v.tiktoken:6: rank 4294967295 is out of range"),
                       (b"QUJD 9", r"v.tiktoken:10: duplicate rank 9")):
        p = write(tmp_path, "v.tiktoken", b"\n".join(lines[:5] + [bad] + lines[6:]))
        with pytest.raises(ValueError, match=match):
            formats.read_tiktoken(p)


def test_tiktoken_c_reader_base64_and_ranks():
    """The C reader decodes what binascii does (every padding, random bytes) and gives up
    (None) on every line that strict base64 or the rank rule refuses, so the line by line
    reader can name it."""
    import random
    from bpe_cffi import formats
    _needs_the_helper()
    rng = random.Random(5)
    vocab = {}
    while len(vocab) < 3000:
        vocab[rng.randrange(2 ** 32 - 1)] = bytes(rng.randrange(256)
                                                  for _ in range(rng.randrange(1, 40)))
    raw = b"\n".join(base64.b64encode(b) + b" " + str(i).encode() for i, b in vocab.items())
    assert formats._read_tiktoken_plain(raw) == vocab
    assert formats._read_tiktoken_plain(raw + b"\n") == vocab
    assert formats._read_tiktoken_plain(b"") == {}
    for line in [b"QQ= 1", b"QQ 1", b"Q=== 1", b"=QQQ 1", b"QQ=Q 1", b"QQ==QUJD 1", b"Q!== 1",
                 b"QQ==", b"QQ== ", b"QQ== -1", b"QQ== 1x", b"QQ== 4294967295",
                 b"QQ== 99999999999999999999", b" QQ== 1", b"QQ==  1", b"QQ== 1 ", b"QQ==\t1",
                 b"QQ== 1\r", b"", b"QUJD 2\nQUJE 2"]:
        assert formats._read_tiktoken_plain(b"QUI= 0\n" + line + b"\nQUJDRA== 7") is None, line
    assert formats._read_tiktoken_plain(b"QUI= 0\nQQ== 4294967294") == \
        {0: b"AB", 4294967294: b"A"}


def test_vocab_json_bulk_equals_checked():
    """vocab_from_token_strings makes the vocabulary a list at a time when every entry is
    good: the same dict as its entry by entry loop, byte-level or not."""
    from conftest import vocab_path
    from bpe_cffi import formats
    pairs = list(json.loads(vocab_path("gpt2_vocab.json").read_text("utf-8")).items())
    bulk = formats._vocab_in_bulk(pairs, True)
    assert bulk is not None and len(bulk) == 50257
    assert bulk == formats._vocab_checked(pairs, "v", None, True)
    text_pairs = [("a", 0), ("\u00e9t\u00e9", 5), ("\U0001F600", 2), ("\ud800x", 9)]
    assert formats._vocab_in_bulk(text_pairs, False) == \
        formats._vocab_checked(text_pairs, "v", None, False)
    for bad in ([("a", 0), ("b", 0)], [("a", 0), ("a", 1)], [("a", True)], [("", 0)],
                [("a", -1)], [("a", 2 ** 32 - 1)], [("\u2603", 0)], [("a", 0), ("a b", 1)]):
        assert formats._vocab_in_bulk(bad, True) is None, bad
        with pytest.raises(ValueError):
            formats._vocab_checked(bad, "v", None, True)


def test_merges_txt_bulk_equals_checked(tmp_path):
    """read_gpt2_merges reads the common layout a list at a time: the same merges and line
    numbers as line by line; other layouts (CRLF, blank lines) go line by line."""
    from conftest import vocab_path
    from bpe_cffi import formats
    from bpe_cffi.tokenizer import _checked_vocab, _plain_vocab
    text = vocab_path("gpt2_merges.txt").read_text("utf-8")
    bulk = formats._merges_in_bulk(text, True)
    assert bulk is not None and len(bulk[0]) == 50000
    assert bulk == formats._merges_checked(text, "m", True)
    with_header = "#version: 0.2\n" + text
    assert formats._merges_in_bulk(with_header, True) == \
        formats._merges_checked(with_header, "m", True)
    assert formats._merges_in_bulk(with_header, True)[1][:2] == [2, 3]
    for other in (with_header.replace("\n", "\r\n"), with_header.replace("\n", "\n\n", 3),
                  "a b\nc d e\n", "a b\n\u2603 b\n"):
        assert formats._merges_in_bulk(other, True) is None
    p = write(tmp_path, "m.txt", with_header.replace("\n", "\r\n"))
    assert formats.read_gpt2_merges(p) == bulk[0]
    vocab = formats.read_gpt2_vocab(vocab_path("gpt2_vocab.json"))
    assert _plain_vocab(vocab) == _checked_vocab(vocab, None)
    for bad in ({0: b"a", 1: b"a"}, {0: b""}, {-1: b"a"}, {True: b"a"}, {0: "a"},
                {0: bytearray(b"a")}, {2 ** 32 - 1: b"a"}, {}):
        assert _plain_vocab(bad) == (None, None), bad


def test_truncated_files(tmp_path):
    from conftest import vocab_path
    raw = vocab_path("cl100k_base.tiktoken").read_bytes()
    p = write(tmp_path, "cut.tiktoken", raw[:len(raw) // 2])
    # cut in the middle of a line: either bad base64 or a missing rank, with its line
    with pytest.raises(ValueError, match=r"cut.tiktoken:\d+: "):
        Tokenizer.from_tiktoken(p, pattern="cl100k")
    rawj = vocab_path("gpt2_vocab.json").read_bytes()
    v = write(tmp_path, "vocab.json", rawj[:len(rawj) // 3])
    with pytest.raises(ValueError, match=r"vocab.json:\d+: bad JSON"):
        Tokenizer.from_files(v, vocab_path("gpt2_merges.txt"))
    rawm = vocab_path("gpt2_merges.txt").read_bytes()
    m = write(tmp_path, "merges.txt", rawm[:len(rawm) // 2] + b"\n\xc4")
    with pytest.raises(ValueError, match=r"merges.txt:\d+: "):
        Tokenizer.from_files(vocab_path("gpt2_vocab.json"), m)


def test_bad_tokenizer_json(tmp_path):
    tok = Tokenizer({i: bytes([i]) for i in range(256)} | {256: b"ab"}, [(b"a", b"b")],
                    ["<|x|>"])
    good = tmp_path / "tok.json"
    tok.save(good)
    doc = json.loads(good.read_text(encoding="utf-8"))
    cases = []
    d = json.loads(json.dumps(doc)); d["model"]["merges"].append(["a", "zz"])
    cases.append((d, r"not in the vocabulary"))
    d = json.loads(json.dumps(doc)); d["model"]["merges"].append(["a b c"])
    cases.append((d, r"merges\[1\].*two tokens"))
    d = json.loads(json.dumps(doc)); d["model"]["vocab"]["zz"] = 5
    cases.append((d, r"duplicate id 5"))
    d = json.loads(json.dumps(doc)); del d["model"]
    cases.append((d, r"neither a tokenizer.json"))
    d = json.loads(json.dumps(doc)); d["model"]["type"] = "Unigram"
    cases.append((d, r"not BPE"))
    d = json.loads(json.dumps(doc)); d["model"]["bpe_cffi"]["rule"] = "magic"
    cases.append((d, r"rule"))
    for k, (d, match) in enumerate(cases):
        p = tmp_path / f"bad{k}.json"
        p.write_text(json.dumps(d, indent=1), encoding="utf-8")
        with pytest.raises(ValueError, match=match):
            load(p)
    p = tmp_path / "trunc.json"
    p.write_bytes(good.read_bytes()[:-200])
    with pytest.raises(ValueError, match=r"trunc.json:\d+: (bad JSON|not valid UTF-8)"):
        load(p)


def test_load_of_a_merges_txt_points_to_its_vocab_json(tmp_path):
    """load("merges.txt") read it as a .tiktoken file: "expected 'base64-token rank', 4
    fields"."""
    for name, text in (("merges.txt", "#version: 0.2\na b\n"), ("my-merges.txt", "a b\n"),
                       ("m.txt", "#version: 0.2\na b\n")):
        p = write(tmp_path, name, text)
        with pytest.raises(ValueError, match=r"is a GPT-2 merges.txt: load its vocab.json"):
            load(p)


def test_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.json"):
        Tokenizer.from_files(tmp_path / "nope.json", tmp_path / "m.txt")
    v = write(tmp_path, "vocab.json", vocab_json())
    with pytest.raises(FileNotFoundError, match="nomerges.txt"):
        Tokenizer.from_files(v, tmp_path / "nomerges.txt")
    with pytest.raises(FileNotFoundError, match="x.tiktoken"):
        Tokenizer.from_tiktoken(tmp_path / "x.tiktoken", pattern="gpt2")
    with pytest.raises(FileNotFoundError, match="gone.json"):
        load(tmp_path / "gone.json")
    lone = tmp_path / "sub"
    lone.mkdir()
    v2 = write(lone, "my-vocab.json", vocab_json())
    with pytest.raises(FileNotFoundError, match="merges"):
        load(v2)


def test_tiktoken_pattern_inference(tmp_path):
    p = write(tmp_path, "odd.tiktoken", tiktoken_lines({i: bytes([i]) for i in range(256)}))
    with pytest.raises(ValueError, match="pattern"):
        load(p)
    assert load(p, pattern="o200k").pattern == "o200k"
    from conftest import vocab_path
    assert load(vocab_path("cl100k_base.tiktoken")).pattern == "cl100k"


def test_synthesize_merges_small():
    vocab = {i: bytes([i]) for i in range(256)}
    vocab.update({256: b"ab", 257: b"bc", 258: b"abc", 259: b"xyz"})
    merges = formats.synthesize_merges(vocab)
    # abc: with ab (256) and bc (257) available, tiktoken merges ab first -> (ab, c)
    assert merges == [(b"a", b"b"), (b"b", b"c"), (b"ab", b"c")]   # xyz is unreachable


def test_atomic_write_leaves_no_temp(tmp_path):
    p = tmp_path / "f.bin"
    formats.atomic_write(p, b"one")
    formats.atomic_write(p, b"two")
    assert p.read_bytes() == b"two"
    assert [x.name for x in tmp_path.iterdir()] == ["f.bin"]


@pytest.mark.parametrize("at", ["creation", "chmod"])
def test_interrupt_as_the_temp_file_appears_leaves_nothing(tmp_path, monkeypatch, at):
    """Ctrl-C / SIGTERM (an exception raised by a signal handler) the moment the temporary
    file exists: it was left behind when the exception came before its name was known
    (inside mkstemp; hit by the CLI's two-signals test).  Simulated by an os.open / os.chmod
    that does its work and then raises."""
    import os
    real_open, real_chmod = os.open, os.chmod

    def open_then_interrupt(path, *a, **k):
        fd = real_open(path, *a, **k)
        if ".tmp-" in os.fspath(path) and at == "creation":
            os.close(fd)
            raise KeyboardInterrupt
        return fd

    def chmod_then_interrupt(path, *a, **k):
        real_chmod(path, *a, **k)
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "open", open_then_interrupt)
    if at == "chmod":
        monkeypatch.setattr(os, "chmod", chmod_then_interrupt)
    p = tmp_path / "f.bin"
    p.write_bytes(b"old")
    with pytest.raises(KeyboardInterrupt):
        formats.atomic_write(p, b"new")
    monkeypatch.undo()
    assert [x.name for x in tmp_path.iterdir()] == ["f.bin"]
    assert p.read_bytes() == b"old"


def test_saved_files_get_the_usual_permissions(tmp_path):
    """Atomic writes go through a temporary file (mode 0600); the final file must honour the umask
    like any file the user creates, or other users/services cannot read a shared tokenizer."""
    import os
    from bpe_cffi import formats
    old = os.umask(0o022)
    try:
        p = tmp_path / "x.bin"
        formats.atomic_write(p, b"data")
    finally:
        os.umask(old)
    assert (p.stat().st_mode & 0o777) == 0o644
    assert p.read_bytes() == b"data"
