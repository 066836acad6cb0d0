"""encode_iterable: the ids of the concatenation, whatever the chunking; lazy; O(chunk) memory
(checked under RLIMIT_AS in a subprocess, as Stanford CS336's tests limit it)."""
import functools
import io
import os
import random
import subprocess
import sys
import textwrap
import types

import pytest

from conftest import LONG
from pyapi_helpers import corpus_slice, ours, random_texts, reference, small_trained

from bpe_cffi import Tokenizer

TRICKY = ("Hello  world!\n\n  It's 12345 tokens<|endoftext|>  <|endoftext|>\r\n\u00a0\u3000 "
          "日本語 😀👨‍👩‍👧 e\u0301 'LL   \t\n<|endoftext|><|endoftext|>end   ")


def chunked(text, cuts):
    cuts = sorted(set(c for c in cuts if 0 < c < len(text)))
    prev = 0
    for c in cuts + [len(text)]:
        yield text[prev:c]
        prev = c


@pytest.mark.parametrize("vocab", ["gpt2", "cl100k_base", "o200k_base"])
def test_every_single_cut(vocab):
    tok, enc = ours(vocab), reference(vocab)
    want = enc.encode(TRICKY, allowed_special="all")
    assert list(tok.encode_iterable([TRICKY])) == want
    for cut in range(1, len(TRICKY)):
        got = list(tok.encode_iterable(chunked(TRICKY, [cut])))
        assert got == want, cut


@pytest.mark.parametrize("vocab", ["gpt2", "cl100k_base", "o200k_base"])
def test_random_chunkings(vocab):
    tok, enc = ours(vocab), reference(vocab)
    rng = random.Random(11)
    text = corpus_slice("multilingual", 40_000) + TRICKY + corpus_slice("code", 40_000)
    want = enc.encode(text, allowed_special="all")
    for _ in range(20 if LONG else 4):
        cuts = [rng.randrange(len(text)) for _ in range(rng.choice([1, 10, 300, 3000]))]
        assert list(tok.encode_iterable(chunked(text, cuts))) == want
    # one character at a time (the worst case for the tail)
    small = TRICKY * 3
    assert list(tok.encode_iterable(iter(small))) == enc.encode(small, allowed_special="all")


def test_file_object_and_laziness(tmp_path):
    tok, enc = ours("gpt2"), reference("gpt2")
    text = corpus_slice("en_books", 100_000)
    p = tmp_path / "t.txt"
    p.write_text(text, encoding="utf-8")
    with open(p, encoding="utf-8") as f:
        it = tok.encode_iterable(f)
        assert isinstance(it, types.GeneratorType)
        assert list(it) == enc.encode(text, allowed_special="all")

    pulled = []

    def chunks():
        for k in range(20_000):
            pulled.append(k)
            yield "the quick brown fox "
    it = tok.encode_iterable(chunks())
    first = [next(it) for _ in range(100)]
    assert tok.decode(first).startswith("the quick brown fox the quick")
    assert len(pulled) < 100, "encode_iterable read far ahead of what it yielded"


class _NoLines(io.StringIO):
    """A seekable text file whose lines must not be iterated."""

    def __next__(self):
        raise AssertionError("a regular text file was iterated by lines")

    def readline(self, *args):
        raise AssertionError("a regular text file was read by lines")


@pytest.mark.parametrize("vocab", ["gpt2", "o200k_base"])
def test_regular_text_file_is_read_in_blocks(tmp_path, vocab):
    """A seekable text file is read in blocks, not by lines (per-chunk Python costs made a file
    of short lines 3x slower), with the same ids as encode of its whole text: CRLF and lone
    CR translated at every block boundary, characters of 1-4 UTF-8 bytes on both sides."""
    from bpe_cffi import tokenizer as T
    tok, enc = ours(vocab), reference(vocab)
    rng = random.Random(11)
    words = ["word", "\r\n", "\r", "\n", " ", "\u00e9t\u00e9", "\u4e2d\u6587", "\U0001F600",
             "don't", "<|endoftext|>", "12345", "  \t"]
    raw = "".join(rng.choice(words) for _ in range(60_000))
    block = T._FILE_BLOCK
    # a \r\n astride each of the first block boundaries (as the file's text has it)
    raw = "".join(raw[k:k + block - 1] + "\r\n" for k in range(0, 4 * block, block)) + raw
    p = tmp_path / "t.txt"
    p.write_bytes(raw.encode("utf-8"))
    for newline in (None, "", "\n", "\r\n"):
        with open(p, encoding="utf-8", newline=newline) as f:
            text = f.read()
        with open(p, encoding="utf-8", newline=newline) as f:
            got = list(tok.encode_iterable(f))
        assert got == enc.encode(text, allowed_special="all"), newline
    with _NoLines(raw) as f:
        assert list(tok.encode_iterable(f)) == enc.encode(raw, allowed_special="all")


def test_pipe_stays_lazy():
    """A stream that is not seekable (a pipe) is still taken as its lines arrive: ids come out
    while the writer has not finished (a block read would wait for 32K characters)."""
    import threading
    tok = ours("gpt2")
    r, w = os.pipe()
    reader = os.fdopen(r, "r", encoding="utf-8")
    writer = os.fdopen(w, "w", encoding="utf-8")
    finish = threading.Event()

    def write():
        writer.write("the quick brown fox jumps over the lazy dog\n" * 10)
        writer.flush()
        finish.wait(30)
        writer.close()
    t = threading.Thread(target=write)
    t.start()
    try:
        assert not reader.seekable()
        it = tok.encode_iterable(reader)
        first = [next(it) for _ in range(20)]       # would block until close if read whole
        assert tok.decode(first).startswith("the quick brown fox")
        assert not finish.is_set()
    finally:
        finish.set()
        t.join(30)
        reader.close()


def test_custom_regex_iterable():
    vocab, merges = small_trained()
    tok = Tokenizer(vocab, merges, ["<|endoftext|>"], pattern=r"\p{L}+| ?\p{N}|\s+|[^\s\p{L}]+")
    texts = random_texts(seed=21, n=60)
    whole = "".join(texts)
    assert list(tok.encode_iterable(texts)) == tok.encode(whole)
    assert list(tok.encode_iterable(iter(whole))) == tok.encode(whole)


def test_custom_regex_with_lookahead_gives_tiktoken_ids_whatever_the_chunking(tmp_path):
    """GPT-2's pattern given as a regex string (so split by Python's regex, not the C
    scanner): its \\s+(?!\\S) looks at the character after a run of spaces, which a chunk
    boundary hides.  Every cut of TRICKY, line-by-line chunks, and encode_file (which reads
    the file line by line) give tiktoken's ids."""
    from conftest import vocab_path
    from bpe_cffi.patterns import GPT2
    enc = reference("gpt2")
    tok = Tokenizer.from_files(vocab_path("gpt2_vocab.json"), vocab_path("gpt2_merges.txt"),
                               ["<|endoftext|>"], pattern="(?:" + GPT2 + ")")
    assert tok._cpattern == 0                   # the Python-split path
    for text in (TRICKY, "x\n\n!\n" * 3, "a  \n\n  (b)\n\n\n# c\n"):
        want = enc.encode(text, allowed_special="all")
        assert list(tok.encode_iterable(text.splitlines(keepends=True))) == want
        for cut in range(1, len(text)):
            assert list(tok.encode_iterable(chunked(text, [cut]))) == want, cut
    text = corpus_slice("code", 60_000) + "<|endoftext|>" + TRICKY
    want = enc.encode(text, allowed_special="all")
    assert list(tok.encode_iterable(text.splitlines(keepends=True))) == want
    src, out = tmp_path / "in.txt", tmp_path / "out.bin"
    src.write_bytes(text.encode("utf-8"))      # as is (write_text's newline=: 3.10+)
    assert tok.encode_file(src, out, progress=False) == len(want)
    raw = out.read_bytes()
    assert [int.from_bytes(raw[k:k + 2], "little") for k in range(0, len(raw), 2)] == want


class _CountingLib:
    """bpe_cffi's C library with the bytes handed to bpe_encode_prefix counted."""

    def __init__(self, lib):
        self._lib, self.scanned = lib, 0

    def __getattr__(self, name):
        return getattr(self._lib, name)

    def bpe_encode_prefix(self, tok, data, n, *rest):
        self.scanned += n
        return self._lib.bpe_encode_prefix(tok, data, n, *rest)


def test_a_tail_without_a_cut_is_not_scanned_again_at_every_chunk(monkeypatch):
    """Blank lines read one by one make one growing piece that has no place to cut: the
    encoder scanned the whole tail again at every line (quadratic: 100K lines took 12 s
    against 1 ms for encode).  The bytes scanned now stay within a few times the text."""
    import bpe_cffi.tokenizer as T
    tok = ours("gpt2")
    counting = _CountingLib(T.lib)
    monkeypatch.setattr(T, "lib", counting)
    lines = ["x\n"] + ["\n"] * 20_000 + ["y"]
    assert list(tok.encode_iterable(lines)) == tok.encode("".join(lines))
    assert counting.scanned < 8 * len("".join(lines)), counting.scanned
    counting.scanned = 0
    words = [f"word{i} " for i in range(5000)]        # ordinary text: still lazy, chunk by chunk
    assert list(tok.encode_iterable(words)) == tok.encode("".join(words))
    assert counting.scanned < 3 * len("".join(words))


def test_iterable_rejects_non_str():
    tok = ours("gpt2")
    with pytest.raises(TypeError, match="item of type bytes, not a str.*binary mode"):
        list(tok.encode_iterable(["ok", b"bytes"]))
    with pytest.raises(TypeError, match="item of type int, not a str$"):
        list(tok.encode_iterable(["ok", 3]))
    with pytest.raises(TypeError):
        list(tok.encode_iterable(io.BytesIO(b"abc\n")))


@functools.lru_cache(maxsize=None)
def _stream_text():
    """The streamed text (CS336's corpus.en + a few MB of en_books), and the count and
    sha256 of tiktoken's ids for it."""
    import hashlib
    from conftest import cs336_path
    parts = [cs336_path("corpus.en").read_text(encoding="utf-8")]
    parts.append(corpus_slice("en_books", 20_000_000 if LONG else 3_000_000))
    text = "<|endoftext|>".join(parts)
    want = reference("gpt2").encode(text, allowed_special="all")
    h = hashlib.sha256()
    for i in want:
        h.update(i.to_bytes(4, "little"))
    return text, len(want), h.hexdigest()


MEMORY_SCRIPT = textwrap.dedent(r"""
    import hashlib, os, resource, sys
    import psutil
    sys.path[:0] = {paths!r}
    from bpe_cffi import Tokenizer
    tok = Tokenizer.from_files({vocab!r}, {merges!r}, special_tokens=["<|endoftext|>"])
    path = {path!r}
    # warm up this thread's state in C (its word cache) before the limit
    with open(path, encoding="utf-8") as f:
        for _ in zip(range(20000), tok.encode_iterable(f)):
            pass
    proc = psutil.Process(os.getpid())
    rss = proc.memory_info().rss
    vms = proc.memory_info().vms
    limit = {base} + {extra}
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    h = hashlib.sha256()
    n = 0
    with open(path, encoding="utf-8") as f:
        for i in tok.encode_iterable(f):
            h.update(i.to_bytes(4, "little"))
            n += 1
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    print(n, h.hexdigest(), proc.memory_info().rss - rss)
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS is Linux-only")
@pytest.mark.skipif("ASAN_OPTIONS" in os.environ, reason="under scripts/sanitize.sh: "
                    "AddressSanitizer's shadow memory and quarantine defeat an address-space limit")
@pytest.mark.parametrize("base,extra", [("max(rss, vms)", 4 * 2 ** 20), ("rss", 2 ** 20)])
def test_streaming_memory_is_bounded(tmp_path, base, extra):
    """Streams a multi-MB file under an address-space limit: (current size + 4 MB), and
    CS336's literal (RSS + 1 MB), which is below the current address space, so no new mapping
    may be made at all: no thread start, no large allocation, no growth with the file."""
    from conftest import vocab_path
    pytest.importorskip("psutil")
    text, n_want, digest_want = _stream_text()
    path = tmp_path / "stream.txt"
    path.write_text(text, encoding="utf-8")
    import bpe_cffi
    paths = [os.path.dirname(os.path.dirname(bpe_cffi.__file__))]
    script = MEMORY_SCRIPT.format(paths=paths, vocab=str(vocab_path("gpt2_vocab.json")),
                                  merges=str(vocab_path("gpt2_merges.txt")), path=str(path),
                                  base=base, extra=extra)
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    n, digest, growth = res.stdout.split()
    assert int(n) == n_want
    assert digest == digest_want
    assert int(growth) < 8 * 2 ** 20
