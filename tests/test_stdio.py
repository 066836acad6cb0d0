"""encode_file into an open file or descriptor, and the CLI's "-" for standard input (encode
and train) and "-o -" for standard output (encode), so both can sit in a pipeline."""
import os
import subprocess
import sys
import time

import pytest

from pyapi_helpers import ours, reference

TEXT = "hello world, hello pipes\n" * 400 + "caf\u00e9 \U0001F600 12345\n" * 50


def le16(ids) -> bytes:
    return b"".join(i.to_bytes(2, "little") for i in ids)


def gpt2(split):
    """GPT-2's tokenizer with the C scanner ("C") or the same pattern through regex."""
    if split == "C":
        return ours("gpt2")
    from conftest import vocab_path
    from bpe_cffi import Tokenizer
    from bpe_cffi.patterns import GPT2
    return Tokenizer.from_files(vocab_path("gpt2_vocab.json"), vocab_path("gpt2_merges.txt"),
                                pattern="(?:" + GPT2 + ")")


@pytest.fixture
def src(tmp_path):
    path = tmp_path / "in.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


@pytest.mark.parametrize("split", ["C", "regex"])
def test_ids_go_after_what_an_open_file_holds(tmp_path, src, split):
    """A binary file object: its buffered bytes first, then the ids; it stays open and
    usable."""
    tok = gpt2(split)
    want = le16(reference("gpt2").encode_ordinary(TEXT))
    out = tmp_path / "out.bin"
    with open(out, "wb") as f:
        f.write(b"HEAD")                       # still in the file object's buffer
        n = tok.encode_file(src, f, progress=False)
        assert not f.closed
        f.write(b"TAIL")
    assert n * 2 == len(want)
    assert out.read_bytes() == b"HEAD" + want + b"TAIL"


@pytest.mark.parametrize("split", ["C", "regex"])
def test_ids_to_a_file_descriptor(tmp_path, src, split):
    tok = gpt2(split)
    out = tmp_path / "out.bin"
    out.write_bytes(b"old content that stays")
    fd = os.open(out, os.O_WRONLY | os.O_APPEND)
    try:
        n = tok.encode_file(src, fd, dtype="uint32", progress=False)
        os.fstat(fd)                           # not closed by encode_file
    finally:
        os.close(fd)
    ids = tok.encode(TEXT)
    assert n == len(ids)
    assert out.read_bytes() == b"old content that stays" + \
        b"".join(i.to_bytes(4, "little") for i in ids)


def test_bad_open_outputs_are_refused(tmp_path, src):
    tok = ours("gpt2")
    with open(tmp_path / "text.txt", "w") as f:
        with pytest.raises(TypeError, match="text mode"):
            tok.encode_file(src, f, progress=False)
    f = open(tmp_path / "closed.bin", "wb")
    f.close()
    with pytest.raises(ValueError, match="closed"):
        tok.encode_file(src, f, progress=False)
    fd = os.open(tmp_path / "x.bin", os.O_WRONLY | os.O_CREAT)
    os.close(fd)
    with pytest.raises(OSError):
        tok.encode_file(src, fd, progress=False)           # a descriptor no longer open
    with pytest.raises(TypeError, match="bool"):
        tok.encode_file(src, True, progress=False)


def test_the_input_itself_open_for_writing_is_refused(src):
    tok = ours("gpt2")
    fd = os.open(src, os.O_WRONLY | os.O_APPEND)
    try:
        with pytest.raises(ValueError, match="is the input file"):
            tok.encode_file(src, fd, progress=False)
    finally:
        os.close(fd)
    assert src.read_text(encoding="utf-8") == TEXT


# ---- the CLI ----------------------------------------------------------------------------

ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))


def cli(args, cwd, **kw):
    """bpe-cffi encode in a child process whose working directory is cwd (a file named "-"
    written by mistake lands there)."""
    from conftest import vocab_path
    cmd = [sys.executable, "-m", "bpe_cffi", "encode", "--tokenizer",
           str(vocab_path("gpt2_vocab.json")), "--no-progress", *args]
    return subprocess.run(cmd, env=ENV, cwd=cwd, timeout=120, **kw)


def test_cli_reads_stdin_and_writes_stdout(src):
    want = le16(reference("gpt2").encode_ordinary(TEXT))
    with open(src, "rb") as stdin:                  # a redirected file: `< in.txt`
        res = cli(["-", "-o", "-"], src.parent, stdin=stdin, capture_output=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout == want
    assert b"written to standard output" in res.stderr
    assert not (src.parent / "-").exists()
    res = cli(["-", "-o", "-"], src.parent, input=TEXT.encode("utf-8"),
              capture_output=True)   # a pipe
    assert res.returncode == 0, res.stderr
    assert res.stdout == want


def test_cli_stdout_appended_keeps_what_the_file_held(tmp_path, src):
    """`>> out.bin`: the ids go after the file's content (it is not replaced)."""
    out = tmp_path / "out.bin"
    out.write_bytes(b"first part")
    with open(out, "ab") as stdout:
        res = cli([str(src), "-o", "-"], tmp_path, stdout=stdout, stderr=subprocess.PIPE)
    assert res.returncode == 0, res.stderr
    assert out.read_bytes() == b"first part" + le16(ours("gpt2").encode(TEXT))


def test_cli_refuses_a_terminal_as_stdout(src):
    pty = pytest.importorskip("pty")
    master, slave = pty.openpty()
    try:
        res = cli([str(src), "-o", "-"], src.parent, stdout=slave, stderr=subprocess.PIPE)
    finally:
        os.close(slave)
        os.close(master)
    assert res.returncode == 1
    assert b"terminal" in res.stderr


def test_cli_help_names_the_dashes(capsys):
    from bpe_cffi import cli as cli_module
    with pytest.raises(SystemExit):
        cli_module.main(["encode", "--help"])
    out = capsys.readouterr().out
    assert "standard input" in out and "standard output" in out


def train_cli(args, cwd, **kw):
    cmd = [sys.executable, "-m", "bpe_cffi", "train", "--vocab-size", "600", "-q", *args]
    return subprocess.run(cmd, env=ENV, cwd=cwd, timeout=300, capture_output=True, **kw)


def test_train_reads_stdin_as_it_reads_the_file(tmp_path):
    from conftest import read_corpus
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(read_corpus("web", 300_000), encoding="utf-8")
    res = train_cli([str(corpus), "-o", "from_file.json"], tmp_path)
    assert res.returncode == 0, res.stderr
    res = train_cli(["-", "-o", "from_pipe.json"], tmp_path, input=corpus.read_bytes())
    assert res.returncode == 0, res.stderr
    with open(corpus, "rb") as stdin:
        res = train_cli([str(corpus), "-", "-o", "file_and_stdin.json"], tmp_path, stdin=stdin)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "from_pipe.json").read_bytes() == \
        (tmp_path / "from_file.json").read_bytes()
    res = train_cli([str(corpus), str(corpus), "-o", "file_twice.json"], tmp_path)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "file_and_stdin.json").read_bytes() == \
        (tmp_path / "file_twice.json").read_bytes()
    assert not (tmp_path / "-").exists()


def test_train_refuses_stdin_twice(tmp_path):
    res = train_cli(["-", "-", "-o", "out.json"], tmp_path, input=b"some text")
    assert res.returncode == 1
    assert b"only once" in res.stderr
    assert not (tmp_path / "out.json").exists()


def test_cli_ends_quietly_when_the_reader_of_stdout_goes_away(tmp_path):
    """`bpe-cffi encode ... -o - | head -c 100`: exit status 141 (as a command stopped by
    SIGPIPE) and no error message, not 'error: ... Broken pipe'."""
    from conftest import vocab_path
    src = tmp_path / "big.txt"
    src.write_text(TEXT * 400, encoding="utf-8")              # ~6 MB of text, ~3 MB of ids
    cmd = [sys.executable, "-m", "bpe_cffi", "encode", "--tokenizer",
           str(vocab_path("gpt2_vocab.json")), "--no-progress", str(src), "-o", "-"]
    p = subprocess.Popen(cmd, env=ENV, cwd=tmp_path, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    head = p.stdout.read(100)
    p.stdout.close()                                          # the reader goes away
    err = p.stderr.read()
    rc = p.wait(timeout=120)
    assert len(head) == 100
    assert rc == 141, err
    assert err == b""


def test_cli_writes_the_ids_of_a_slow_pipe_as_its_text_arrives(tmp_path):
    """`slow-producer | bpe-cffi encode - -o - | consumer`: the ids of what has arrived come
    out while the producer is still writing (they waited for 8 MB of text or the end), and
    the whole output is still that of the whole text, whatever the timing."""
    import select
    from conftest import vocab_path
    cmd = [sys.executable, "-m", "bpe_cffi", "encode", "--tokenizer",
           str(vocab_path("gpt2_vocab.json")), "--no-progress", "-", "-o", "-"]
    p = subprocess.Popen(cmd, env=ENV, cwd=tmp_path, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    parts = [TEXT[:7000], TEXT[7000:7500], TEXT[7500:]]   # cuts inside words and lines
    got = b""
    try:
        for part in parts[:2]:
            p.stdin.write(part.encode("utf-8"))
            p.stdin.flush()
            before = len(got)
            deadline = time.monotonic() + 60
            while len(got) == before and time.monotonic() < deadline:
                if select.select([p.stdout], [], [], 1.0)[0]:
                    got += os.read(p.stdout.fileno(), 1 << 20)
            assert len(got) > before, "no ids came out while the pipe stayed open"
        p.stdin.write(parts[2].encode("utf-8"))
        p.stdin.close()
        got += p.stdout.read()
        assert p.wait(timeout=60) == 0, p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert got == le16(reference("gpt2").encode_ordinary(TEXT))


def test_cli_says_when_stdin_is_closed(tmp_path):
    res = cli(["-", "-o", "out.bin"], tmp_path, stdin=None, capture_output=True,
              preexec_fn=lambda: os.close(0))
    assert res.returncode == 1
    assert b"standard input is closed" in res.stderr
    assert not (tmp_path / "out.bin").exists()


# ---- compressed files given as text --------------------------------------------------------

def compressed_files(tmp_path):
    """TEXT in every format the check knows (zstd: its frame header, no module for it)."""
    import bz2
    import gzip
    import lzma
    import zipfile
    data = TEXT.encode("utf-8")
    files = {"gzip": gzip.compress(data), "xz": lzma.compress(data), "bzip2": bz2.compress(data),
             "zstd": b"(\xb5/\xfd" + bytes(range(64))}
    with zipfile.ZipFile(tmp_path / "t.zip", "w") as z:
        z.writestr("t.txt", data)
    files["zip"] = (tmp_path / "t.zip").read_bytes()
    out = {}
    for name, raw in files.items():
        out[name] = tmp_path / f"text.{name}"
        out[name].write_bytes(raw)
    return out


def test_compressed_input_is_refused_not_encoded_as_text(tmp_path):
    """Its bytes read as text gave ids of garbage without a word; now encode_file, train_bpe
    and the CLI say what it is and how to decompress it into them."""
    from bpe_cffi import train_bpe
    tok = ours("gpt2")
    for name, path in compressed_files(tmp_path).items():
        with pytest.raises(ValueError, match=f"{name}-compressed, not text"):
            tok.encode_file(path, tmp_path / "out.bin", progress=False)
        assert not (tmp_path / "out.bin").exists()
        with pytest.raises(ValueError, match=f"{name}-compressed"):
            train_bpe(path, 300)
    res = cli([str(tmp_path / "text.xz"), "-o", "out.bin"], tmp_path, capture_output=True)
    assert res.returncode == 1
    assert b"xz-compressed, not text" in res.stderr and b"xz -dc" in res.stderr


def test_text_that_starts_like_a_compressed_file_is_still_text(tmp_path):
    """bzip2's magic is ASCII: only its whole 10-byte header counts, so text starting with
    'BZh9' is encoded."""
    from bpe_cffi import formats
    text = "BZh91 is not a bzip2 stream, PK is not a zip\n" * 20
    src = tmp_path / "t.txt"
    src.write_text(text, encoding="utf-8")
    tok = ours("gpt2")
    assert tok.encode_file(src, tmp_path / "out.bin", progress=False) == len(tok.encode(text))
    assert formats.compressed_format(text.encode()[:10]) is None
    assert formats.compressed_format(b"") is None


def test_open_files_where_a_path_is_read_and_files_without_a_descriptor(tmp_path, src):
    """An open file given as the input of encode_file or train_bpe is refused saying to pass
    the path (train_bpe took an open text file's lines for paths: "No such file: '\\n'"),
    and an output without a descriptor (io.BytesIO) says so (it was UnsupportedOperation:
    fileno)."""
    import io
    from bpe_cffi import train_bpe
    tok = gpt2("C")
    with open(src, "rb") as f:
        with pytest.raises(TypeError, match=r"encode_file reads a file by its path, not an "
                                            r"open BufferedReader \('.*in.txt'\)"):
            tok.encode_file(f, tmp_path / "a.bin", progress=False)
    with open(src, encoding="utf-8") as f:
        for arg in (f, [f], [str(src), f]):
            with pytest.raises(TypeError, match=r"train_bpe reads a file by its path, not an "
                                                r"open TextIOWrapper"):
                train_bpe(arg, 300)
    with pytest.raises(TypeError, match=r"the output BytesIO has no file descriptor"):
        tok.encode_file(src, io.BytesIO(), progress=False)
    assert not (tmp_path / "a.bin").exists()
