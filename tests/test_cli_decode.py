"""`bpe-cffi decode`: a file of ids back into its text (the inverse of `bpe-cffi encode`),
checked against tiktoken's decode_bytes of the same ids."""
import array
import os
import subprocess
import sys

import pytest

from pyapi_helpers import corpus_slice, ours, reference

ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))


def ids_file(path, ids, width):
    arr = array.array("H" if width == 2 else "I", ids)
    assert arr.itemsize == width
    if sys.byteorder != "little":
        arr.byteswap()
    path.write_bytes(arr.tobytes())
    return path


def tokenizer_file(name):
    from conftest import vocab_path
    return str(vocab_path("gpt2_vocab.json" if name == "gpt2" else f"{name}.tiktoken"))


@pytest.mark.parametrize("name", ["gpt2", "o200k_base"])
def test_decode_gives_back_the_encoded_text(tmp_path, name, monkeypatch):
    """encode_file's output decoded by the CLI (in blocks smaller than the file) is the text,
    and tiktoken's bytes of the same ids."""
    from bpe_cffi import _cli_decode, cli
    text = corpus_slice("multilingual", 200_000) + "<|endoftext|>" + corpus_slice("code",
                                                                                  100_000)
    src = tmp_path / "in.txt"
    src.write_bytes(text.encode("utf-8"))
    tok = ours(name)
    n = tok.encode_file(src, tmp_path / "ids.bin", progress=False)
    width = 2 if tok.n_vocab <= 65536 else 4
    assert (tmp_path / "ids.bin").stat().st_size == n * width
    monkeypatch.setattr(_cli_decode, "BLOCK_IDS", 1000)      # many blocks
    args = ["decode", "--tokenizer", tokenizer_file(name), str(tmp_path / "ids.bin"),
            "-o", str(tmp_path / "back.txt")]
    if name == "gpt2":
        args += ["--special-token", "<|endoftext|>"]
    assert cli.main(args) == 0
    back = (tmp_path / "back.txt").read_bytes()
    assert back == text.encode("utf-8")
    assert back == reference(name).decode_bytes(tok.encode(text))


def test_decode_from_stdin_to_stdout(tmp_path):
    enc = reference("cl100k_base")
    ids = enc.encode_ordinary("caf\u00e9 \U0001F600 hello world\n" * 300)
    data = ids_file(tmp_path / "ids.bin", ids, 4).read_bytes()
    res = subprocess.run([sys.executable, "-m", "bpe_cffi", "decode", "--tokenizer",
                          tokenizer_file("cl100k_base"), "-"], input=data,
                         capture_output=True, env=ENV, cwd=tmp_path, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout == enc.decode_bytes(ids)


def test_decode_errors_name_the_position(tmp_path, capsys):
    from bpe_cffi import cli
    base = ["decode", "--tokenizer", tokenizer_file("gpt2")]
    ids = ours("gpt2").encode("hello world, again and again " * 4)
    assert len(ids) > 7
    bad = ids_file(tmp_path / "bad.bin", ids[:7] + [60000] + ids[7:], 2)
    assert cli.main(base + [str(bad), "-o", str(tmp_path / "out.txt")]) == 1
    err = capsys.readouterr().err
    assert "id 60000 at position 7" in err and "byte 14" in err
    assert not (tmp_path / "out.txt").exists()                 # nothing half written
    odd = tmp_path / "odd.bin"
    odd.write_bytes(ids_file(tmp_path / "x.bin", ids, 2).read_bytes() + b"\x01")
    assert cli.main(base + [str(odd)]) == 1
    assert "not a whole number of 2-byte ids" in capsys.readouterr().err
    assert cli.main(base + [str(tmp_path / "missing.bin")]) == 1
    assert "missing.bin" in capsys.readouterr().err
    assert cli.main(base + [str(tmp_path)]) == 1
    assert "directory" in capsys.readouterr().err
    good = ids_file(tmp_path / "good.bin", ids, 2)
    assert cli.main(base + [str(good), "-o", str(good)]) == 1      # the ids would be lost
    assert "is the input file" in capsys.readouterr().err
    assert good.read_bytes() == ids_file(tmp_path / "y.bin", ids, 2).read_bytes()


def test_decode_help():
    res = subprocess.run([sys.executable, "-m", "bpe_cffi", "decode", "--help"],
                         capture_output=True, text=True, env=ENV, timeout=60)
    assert res.returncode == 0
    assert "--dtype" in res.stdout and "standard input" in res.stdout
