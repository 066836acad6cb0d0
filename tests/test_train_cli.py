"""`bpe-cffi train`, the output formats read back by other libraries, and Ctrl-C."""
import base64
import json
import os
import signal
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from conftest import REPO, default_sigint, read_corpus  # noqa: E402

from bpe_cffi import train_bpe  # noqa: E402
from bpe_cffi.patterns import GPT2  # noqa: E402

GPT2_PY = "(?:" + GPT2 + ")"
ENV = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "bpe_cffi", "train", *map(str, args)],
                          capture_output=True, text=True, env=ENV, **kw)


def merges_encode(piece: bytes, ranks: dict) -> list:
    """Reference merge-list BPE of one piece: repeatedly merge the lowest-ranked pair."""
    parts = [bytes([b]) for b in piece]
    while len(parts) > 1:
        best = min(range(len(parts) - 1),
                   key=lambda i: ranks.get((parts[i], parts[i + 1]), float("inf")))
        if (parts[best], parts[best + 1]) not in ranks:
            break
        parts[best:best + 2] = [parts[best] + parts[best + 1]]
    return parts


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    p = tmp_path_factory.mktemp("c") / "corpus.txt"
    p.write_text(read_corpus("web", 150_000), encoding="utf-8")
    return p


def test_help():
    r = subprocess.run([sys.executable, "-m", "bpe_cffi", "train", "--help"],
                       capture_output=True, text=True, env=ENV)
    assert r.returncode == 0
    for word in ("--vocab-size", "--special-token", "--pattern", "--threads",
                 "--min-frequency", "--format", "tiktoken", "gpt2", "-o"):
        assert word in r.stdout


def test_cli_errors(tmp_path):
    r = cli(tmp_path / "missing.txt", "--vocab-size", 300, "-o", tmp_path / "o.json")
    assert r.returncode == 1 and "missing.txt" in r.stderr
    assert not (tmp_path / "o.json").exists()
    (tmp_path / "a.txt").write_text("hello")
    r = cli(tmp_path / "a.txt", "--vocab-size", 100, "-o", tmp_path / "o.json")
    assert r.returncode == 1 and "--vocab-size" in r.stderr
    r = cli(tmp_path / "a.txt", "-o", tmp_path / "o.json")
    assert r.returncode == 2          # argparse: --vocab-size is required


def test_outputs_that_would_replace_an_input_are_refused_before_training(tmp_path):
    """-o naming an input (or, with --format gpt2, merges.txt beside it naming one), or the
    vocabulary named merges.txt, would lose a file: refused at once, every file kept."""
    a, b = tmp_path / "a.txt", tmp_path / "merges.txt"
    a.write_text("hello world " * 50)
    b.write_text("more text " * 50)
    link = tmp_path / "link.json"
    link.symlink_to(a)
    for args in ((a, "-o", a), (a, b, "-o", b), (a, "-o", link),
                 (a, b, "--format", "gpt2", "-o", tmp_path / "vocab.json"),
                 (a, "--format", "gpt2", "-o", tmp_path / "out" / "merges.txt"),
                 (a, "-o", tmp_path)):
        (tmp_path / "out").mkdir(exist_ok=True)
        r = cli(*args, "--vocab-size", 300, "-q")
        assert r.returncode == 1, (args, r.stderr)
        assert "Traceback" not in r.stderr and "error" in r.stderr
        assert a.read_text() == "hello world " * 50 and b.read_text() == "more text " * 50
    assert sorted(os.listdir(tmp_path)) == ["a.txt", "link.json", "merges.txt", "out"]
    assert os.listdir(tmp_path / "out") == []


def test_a_special_token_a_tokenizer_json_cannot_hold_is_refused_first(tmp_path):
    a = tmp_path / "a.txt"
    a.write_text("héllo wörld " * 50)
    for special in ("é", "Ġ"):
        r = cli(a, "--vocab-size", 300, "--special-token", special, "-o", tmp_path / "o.json")
        assert r.returncode == 1 and "byte alphabet" in r.stderr, r.stderr
        assert "counting" not in r.stderr                   # before any training
    assert not (tmp_path / "o.json").exists()
    r = cli(a, "--vocab-size", 300, "--special-token", "é", "--format", "tiktoken", "-q",
            "-o", tmp_path / "o.tiktoken")
    assert r.returncode == 0, r.stderr


def test_more_outputs_and_inputs_refused_before_training(tmp_path):
    """Each of these trained the whole text and then failed to write it: -o ending in '/',
    -o - (a file named '-' was written), a special token spelling a trained token's bytes in
    the byte alphabet ('Ġthe' is ' the'), a pattern with no form in HF's regex engine."""
    a = tmp_path / "a.txt"
    a.write_text("the cat and the hat " * 50)
    for args in (("-o", str(tmp_path / "newdir") + "/"), ("-o", str(a) + "/"), ("-o", "-"),
                 ("--special-token", "Ġthe", "-o", tmp_path / "o.json"),
                 ("--pattern", r"(?a)\w+|\s+|.", "-o", tmp_path / "o.json")):
        r = cli(a, "--vocab-size", 300, *args, cwd=tmp_path)
        assert r.returncode == 1 and "error" in r.stderr, (args, r.stderr)
        assert "Traceback" not in r.stderr and "counting" not in r.stderr, (args, r.stderr)
    assert sorted(os.listdir(tmp_path)) == ["a.txt"]
    r = cli(a, "--vocab-size", 300, "--pattern", r"(?a)\w+|\s+|.", "--format", "tiktoken",
            "-q", "-o", tmp_path / "o.tiktoken")                 # that format keeps it as is
    assert r.returncode == 0, r.stderr


def test_a_vocabulary_its_format_cannot_hold_is_kept_in_a_rescue_file(tmp_path):
    """merges.txt cannot hold a merge whose line begins '#version' (HF skips such lines: it
    read another tokenizer than ours, silently).  Refused, and the training's result is kept
    in a .tiktoken file beside it, which reads back to the ids of the same training."""
    a = tmp_path / "in.txt"
    a.write_text("#versions\n#versioned\n" * 200)
    r = cli(a, "--vocab-size", 290, "--pattern", "cl100k", "--format", "gpt2", "-q",
            "-o", tmp_path / "vocab.json")
    assert r.returncode == 1 and "'#version'" in r.stderr, r.stderr
    rescue = tmp_path / "vocab.json.rescue.tiktoken"
    assert str(rescue) in r.stderr and not (tmp_path / "merges.txt").exists()
    from bpe_cffi import Tokenizer
    vocab, merges = train_bpe(a, 290, pattern="cl100k")
    trained = Tokenizer(vocab, merges, pattern="cl100k")
    back = Tokenizer.from_tiktoken(rescue, pattern="cl100k")
    for t in ["#versions", "#versioned\n#versions x", "#v #version"]:
        assert back.encode(t) == trained.encode(t)


def test_patterns_in_the_regex_module_s_syntax_load_alike_in_hf(tmp_path):
    """\\N{SPACE} was written as it is: HF's engine reads \\N as 'not a newline' and
    split '  ' where ours matched spaces."""
    tk = pytest.importorskip("tokenizers")
    from bpe_cffi import load
    a = tmp_path / "sp.txt"
    a.write_text("a   b   c   d   e   \n" * 50)
    for pattern in (r"\N{SPACE}+|.", r"(?P<w>\w+)|\s+|.", r"(?s)\p{^L}+|\p{L}+"):
        out = tmp_path / "n.json"
        r = cli(a, "--vocab-size", 300, "--pattern", pattern, "-q", "-o", out)
        assert r.returncode == 0, r.stderr
        ours, hf = load(out), tk.Tokenizer.from_file(str(out))
        for t in ["a   b", "a b\n\nc  d   ", "abc   \n   x"]:
            assert ours.encode(t) == hf.encode(t).ids, (pattern, t)


def test_progress_of_a_pipe_and_of_merging_that_stops_early(tmp_path):
    """Counting a pipe with a regex pattern showed '0.0 KB' throughout (its size is 0, and
    the count was capped at it), and merging that ran out of pairs ended its bar at
    '0.0% 0/44 merges'; a 26-byte file read '0.0/0.0 KB'."""
    r = subprocess.run([sys.executable, "-m", "bpe_cffi", "train", "-", "--pattern", r"\S+|\s+",
                        "--vocab-size", "300", "-o", str(tmp_path / "o.json")],
                       input="hello world " * 100_000, capture_output=True, text=True, env=ENV)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    counting = [x for x in lines if x.startswith("counting")]
    merging = [x for x in lines if x.startswith("merging")]
    assert counting and "1.2 MB" in counting[-1], r.stderr
    n = len(json.loads((tmp_path / "o.json").read_text())["model"]["merges"])
    assert n < 44 and merging and f"100.0% {n}/{n} merges" in merging[-1], r.stderr
    small = tmp_path / "s.txt"
    small.write_text("ab ab ab ba " * 2 + "xy")
    r = cli(small, "--vocab-size", 300, "-o", tmp_path / "s.json")
    assert r.returncode == 0 and "100.0% 26/26 B" in r.stderr, r.stderr


def test_a_vocabulary_of_another_size_is_explained(tmp_path):
    """Fewer tokens than --vocab-size (nothing left to merge) or more (the alphabet alone is
    bigger): the run succeeds and says why."""
    a = tmp_path / "a.txt"
    a.write_text("ab ab abc héllo wörld 日本語 " * 20)
    r = cli(a, "--vocab-size", 1000, "-o", tmp_path / "o.json")
    assert r.returncode == 0 and "fewer than --vocab-size 1000" in r.stderr, r.stderr
    r = cli(a, "--vocab-size", 5, "--char-level", "-o", tmp_path / "c.json")
    assert r.returncode == 0 and "more than --vocab-size 5" in r.stderr, r.stderr
    assert "--limit-alphabet" in r.stderr
    r = cli(a, "--vocab-size", 260, "-o", tmp_path / "p.json")
    assert r.returncode == 0 and "note" not in r.stderr


def test_a_misspelt_pattern_name_is_refused_and_a_pattern_matching_nothing_said(tmp_path):
    """--pattern gpt-2 was taken as the regex 'gpt-2': 0 pre-tokens, a byte-only tokenizer,
    exit 0 and a note blaming the merges.  A misspelt name is refused naming the right one;
    a regex that matches none of the text is said to."""
    a = tmp_path / "a.txt"
    a.write_text("hello world " * 50)
    for typo, meant in (("gpt-2", "gpt2"), ("GPT2", "gpt2"), ("cl100k-base", "cl100k_base"),
                        ("O200K", "o200k")):
        r = cli(a, "--vocab-size", 300, "--pattern", typo, "-o", tmp_path / "o.json")
        assert r.returncode == 1 and f"did you mean {meant!r}" in r.stderr, r.stderr
        assert "counting" not in r.stderr
    for word in ("gpt3", "gpt-4", "llama 3"):        # a word that is no name: refused too
        r = cli(a, "--vocab-size", 300, "--pattern", word, "-o", tmp_path / "o.json")
        assert r.returncode == 1 and f"pattern {word!r} is not a pattern name (names:" \
            in r.stderr, r.stderr
    assert not (tmp_path / "o.json").exists()
    r = cli(a, "--vocab-size", 300, "--pattern", "(?:gpt-2)", "-o", tmp_path / "o.json")
    assert r.returncode == 0 and "matched none of it" in r.stderr, r.stderr
    r = cli(a, "--vocab-size", 300, "--pattern", "cl100k_base", "-o", tmp_path / "c.json")
    assert r.returncode == 0 and "matched none" not in r.stderr, r.stderr


def test_input_with_a_non_utf8_name(tmp_path):
    """File names are bytes on POSIX: one that is not UTF-8 is read like any other."""
    name = os.fsdecode(b"corpus-\xff.txt")
    (tmp_path / name).write_text("hello world " * 50)
    r = cli(tmp_path / name, "--vocab-size", 260, "-q", "-o", tmp_path / "o.json")
    assert r.returncode == 0, r.stderr
    (tmp_path / "plain.txt").write_text("hello world " * 50)
    assert train_bpe(tmp_path / name, 260) == train_bpe(tmp_path / "plain.txt", 260)


def test_tiktoken_format_loads_in_tiktoken(tmp_path, corpus):
    tiktoken = pytest.importorskip("tiktoken")
    out = tmp_path / "t.tiktoken"
    r = cli(corpus, "--vocab-size", 2000, "--pattern", GPT2_PY, "--format", "tiktoken",
            "-q", "-o", out)
    assert r.returncode == 0, r.stderr
    vocab, merges = train_bpe(corpus, 2000, pattern=GPT2_PY)
    ranks = {}
    for line in out.read_bytes().splitlines():
        tok, rank = line.split()
        ranks[base64.b64decode(tok)] = int(rank)
    assert ranks == {tok: i for i, tok in vocab.items()}
    enc = tiktoken.Encoding("trained", pat_str=GPT2, mergeable_ranks=ranks, special_tokens={})
    import regex
    merge_rank = {m: i for i, m in enumerate(merges)}
    pieces = set(regex.findall(GPT2, corpus.read_text(encoding="utf-8")))
    differ = 0
    for piece in pieces:
        b = piece.encode("utf-8")
        ours = [ranks[t] for t in merges_encode(b, merge_rank)]
        theirs = enc.encode_ordinary(piece)
        assert enc.decode_bytes(theirs) == b
        differ += ours != theirs
    # tiktoken ranks by the merged token, not by the merge list: a token that two merge
    # paths can build may split differently.  Expected: none or very few.
    print(f"tiktoken: {differ} of {len(pieces)} distinct pieces differ")
    assert differ <= len(pieces) // 200


def test_gpt2_format_loads_in_hf(tmp_path, corpus):
    tokenizers = pytest.importorskip("tokenizers")
    out = tmp_path / "vocab.json"
    specials = ["<|endoftext|>"]
    r = cli(corpus, "--vocab-size", 1500, "--pattern", GPT2_PY, "--format", "gpt2",
            "--special-token", specials[0], "-q", "-o", out)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "merges.txt").exists()
    vocab, merges = train_bpe(corpus, 1500, specials, pattern=GPT2_PY)
    vj = json.loads(out.read_text(encoding="utf-8"))
    assert len(vj) == 1500 and vj["<|endoftext|>"] == 1499
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders
    hf = Tokenizer(models.BPE.from_file(str(out), str(tmp_path / "merges.txt")))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    hf.decoder = decoders.ByteLevel()
    import regex
    merge_rank = {m: i for i, m in enumerate(merges)}
    by_bytes = {tok: i for i, tok in vocab.items()}
    text = corpus.read_text(encoding="utf-8")[:30_000]
    for piece in set(regex.findall(GPT2, text)):
        ours = [by_bytes[t] for t in merges_encode(piece.encode("utf-8"), merge_rank)]
        assert hf.encode(piece).ids == ours, piece


def test_gpt2_format_records_a_pattern_other_than_gpt2(tmp_path, corpus):
    """vocab.json + merges.txt has no place for the split pattern: trained with cl100k, the
    files were loaded (and `bpe-cffi encode` ran) with GPT-2's, silently other ids.  Now
    merges.txt's first line records it and loading uses it; with gpt2 the line is plain."""
    from bpe_cffi import Tokenizer, formats, load
    for pattern, recorded in (("cl100k", "cl100k"), ("gpt2", None), (GPT2_PY, GPT2_PY)):
        d = tmp_path / str(recorded is None) / ("re" if recorded == GPT2_PY else "name")
        d.mkdir(parents=True)
        r = cli(corpus, "--vocab-size", 600, "--pattern", pattern, "--format", "gpt2",
                "--special-token", "<|endoftext|>", "-q", "-o", d / "vocab.json")
        assert r.returncode == 0, r.stderr
        first = (d / "merges.txt").read_text(encoding="utf-8").split("\n", 1)[0]
        assert first.startswith("#version: 0.2")
        assert formats.recorded_pattern(d / "merges.txt") == recorded
        if recorded is None:
            assert first == "#version: 0.2"
        vocab, merges = train_bpe(corpus, 600, ["<|endoftext|>"], pattern=pattern)
        want = Tokenizer(vocab, merges, ["<|endoftext|>"], pattern=pattern)
        text = corpus.read_text(encoding="utf-8")[:20_000] + " 12345 don'T\r\n\r\nx"
        for tok in (load(d / "vocab.json", special_tokens=["<|endoftext|>"]),
                    Tokenizer.from_files(d / "vocab.json", d / "merges.txt",
                                         ["<|endoftext|>"])):
            assert tok.encode(text) == want.encode(text), pattern
        enc = subprocess.run([sys.executable, "-m", "bpe_cffi", "encode", "--tokenizer",
                              str(d / "vocab.json"), "--special-token", "<|endoftext|>",
                              str(corpus), "-o", str(d / "ids.bin"), "-q"],
                             capture_output=True, text=True, env=ENV)
        assert enc.returncode == 0, enc.stderr
        import array
        ids = array.array("H", (d / "ids.bin").read_bytes())
        assert ids.tolist() == want.encode(corpus.read_text(encoding="utf-8")), pattern
    # the pattern given when loading replaces the recorded one; a bad record is an error
    d = tmp_path / "False" / "name"
    o200k = Tokenizer.from_files(d / "vocab.json", d / "merges.txt", pattern="o200k")
    assert "pattern=o200k," in repr(o200k) and "pattern=cl100k," in repr(load(d / "vocab.json"))
    lines = (d / "merges.txt").read_text(encoding="utf-8").split("\n")
    (d / "merges.txt").write_text("\n".join(["#version: 0.2 bpe_cffi-pattern=cl100k"]
                                            + lines[1:]), encoding="utf-8")
    with pytest.raises(ValueError, match=r"merges.txt:1: the split pattern recorded"):
        load(d / "vocab.json")


def test_hf_json_format(tmp_path, corpus):
    """tokenizer.json (Tokenizer.save) loads in HF tokenizers and encodes like our Tokenizer."""
    try:
        from bpe_cffi import Tokenizer  # noqa: F401
    except ImportError:
        pytest.skip("bpe_cffi.Tokenizer (pyapi) not merged yet")
    tokenizers = pytest.importorskip("tokenizers")
    from bpe_cffi import load
    from bpe_cffi.train import train_tokenizer
    out = tmp_path / "tok.json"
    eot = "<|endoftext|>"
    r = cli(corpus, "--vocab-size", 1200, "--special-token", eot, "-q", "-o", out)
    assert r.returncode == 0, r.stderr
    ours = load(out)
    hf = tokenizers.Tokenizer.from_file(str(out))
    text = corpus.read_text(encoding="utf-8")[:50_000]
    text = text[:20_000] + eot + text[20_000:]
    ids = ours.encode(text)
    assert ids.count(1199) >= 1                  # the special token, last id
    assert hf.encode(text).ids == ids
    assert ours.decode(ids) == text
    direct = train_tokenizer(corpus, 1200, [eot])
    assert direct.encode(text) == ids
    vocab, merges = train_bpe(corpus, 1200, [eot])
    assert direct.merges == merges and direct.vocab == vocab
    from bpe_cffi import Tokenizer
    via_class = Tokenizer.train(corpus, 1200, [eot], num_threads=2)
    assert via_class.merges == merges and via_class.encode(text) == ids


@pytest.mark.parametrize("name", ["en_books", "multilingual", "code", "web"])
def test_tiktoken_ranks_vs_merge_list(name, tmp_path):
    """tiktoken ranks by the merged token, not by the merge list: count the pieces whose
    encoding differs between tiktoken (from our .tiktoken) and our merge-list Tokenizer."""
    tiktoken = pytest.importorskip("tiktoken")
    try:
        from bpe_cffi import Tokenizer
    except ImportError:
        pytest.skip("bpe_cffi.Tokenizer (pyapi) not merged yet")
    p = tmp_path / "c.txt"
    p.write_text(read_corpus(name, 300_000), encoding="utf-8")
    vocab, merges = train_bpe(p, 3000, ["<|endoftext|>"])
    ours = Tokenizer(vocab, merges, ["<|endoftext|>"])
    ranks = {tok: i for i, tok in vocab.items() if i < 2999}
    enc = tiktoken.Encoding("trained", pat_str=GPT2, mergeable_ranks=ranks, special_tokens={})
    import regex
    pieces = set()
    for seg in p.read_text(encoding="utf-8").split("<|endoftext|>"):
        pieces.update(regex.findall(GPT2, seg))
    differ = [pc for pc in pieces if enc.encode_ordinary(pc) != ours.encode_ordinary(pc)]
    print(f"{name}: {len(differ)} of {len(pieces)} distinct pieces differ; e.g. {differ[:3]}")
    assert len(differ) <= len(pieces) // 200


def test_sigint_stops_training_promptly(tmp_path):
    """Ctrl-C: KeyboardInterrupt within about a second, threads joined, no output file."""
    big = tmp_path / "big.txt"
    # 24 MB of random "words" over 16 letters: millions of distinct pre-tokens, so both
    # counting and merging take a while
    table = bytes((b" " if i % 6 == 0 else bytes([97 + i % 16])) [0] for i in range(256))
    with open(big, "wb") as f:
        for _ in range(6):
            f.write(os.urandom(4 << 20).translate(table))
    out = tmp_path / "out.json"
    script = ("import sys, bpe_cffi\n"
              "try:\n"
              f"    bpe_cffi.train_bpe({str(big)!r}, 60000, num_threads=2)\n"
              "except KeyboardInterrupt:\n"
              "    print('KeyboardInterrupt', flush=True); sys.exit(130)\n"
              "print('finished', flush=True)\n")
    for args in ([sys.executable, "-c", script],
                 [sys.executable, "-m", "bpe_cffi", "train", str(big), "--vocab-size",
                  "60000", "--threads", "2", "-o", str(out)]):
        p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=ENV, preexec_fn=default_sigint)
        time.sleep(2.0)
        assert p.poll() is None, "training ended before it could be interrupted"
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        stdout, stderr = p.communicate(timeout=30)
        elapsed = time.monotonic() - t0
        assert p.returncode == 130, (stdout, stderr)
        assert "KeyboardInterrupt" in stdout or "interrupted" in stderr
        assert elapsed < 10, f"took {elapsed:.1f} s to stop"   # generous: a loaded machine
        assert not out.exists()
        assert not [f for f in os.listdir(tmp_path) if f.startswith(".bpe-cffi-")]


def test_regex_pattern_counting_is_cancellable_and_shows_progress(tmp_path):
    """With a regex pattern and no special token the whole file is one stretch for the
    regex: Ctrl-C still stops it within a fraction of a second (it was only looked at
    between 8 MB reads, after one regex call over everything: 3.6-9.4 s after the signal on
    60 MB; 1.8 s on 40 MB here), and the counting bar is drawn."""
    big = tmp_path / "big.txt"
    table = bytes((b" " if i % 6 == 0 else bytes([97 + i % 16]))[0] for i in range(256))
    with open(big, "wb") as f:
        for _ in range(20):
            f.write(os.urandom(4 << 20).translate(table))
    p = subprocess.Popen([sys.executable, "-m", "bpe_cffi", "train", str(big), "--vocab-size",
                          "1000", "--pattern", r"\p{L}+|\S|\s+", "-o", str(tmp_path / "o.json")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                         preexec_fn=default_sigint)
    time.sleep(4.0)                          # read (~1 s), then inside the regex counting
    assert p.poll() is None, "training ended before it could be interrupted"
    t0 = time.monotonic()
    p.send_signal(signal.SIGINT)
    _, stderr = p.communicate(timeout=60)
    elapsed = time.monotonic() - t0
    assert p.returncode == 130, stderr
    assert elapsed < 1.5, f"took {elapsed:.1f} s to stop"
    print(f"stopped {elapsed:.2f} s after SIGINT")
    assert "counting" in stderr
    assert not (tmp_path / "o.json").exists()


def test_a_missing_dependency_costs_only_its_own_subcommand(tmp_path):
    """Without pyzmq (a dependency of serve alone), every command died at import with a
    traceback, train --help included.  Now train and encode run, and serve says what is
    missing (pyzmq's import made to fail in a child process)."""
    code = ("import builtins, sys\n"
            "real = builtins.__import__\n"
            "def imp(name, *a, **k):\n"
            "    if name == 'zmq' or name.startswith('zmq.'):\n"
            "        raise ModuleNotFoundError(\"No module named 'zmq'\", name='zmq')\n"
            "    return real(name, *a, **k)\n"
            "builtins.__import__ = imp\n"
            "from bpe_cffi.cli import main\n"
            "sys.exit(main(sys.argv[1:]))\n")
    a = tmp_path / "a.txt"
    a.write_text("hello world " * 50)

    def run(*args):
        return subprocess.run([sys.executable, "-c", code, *map(str, args)],
                              capture_output=True, text=True, env=ENV)
    r = run("train", a, "--vocab-size", 260, "-q", "-o", tmp_path / "t.json")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    r = run("encode", "--tokenizer", tmp_path / "t.json", a, "-o", tmp_path / "a.bin", "-q")
    assert r.returncode == 0 and r.stderr == "", r.stderr       # -q: nothing printed
    assert (tmp_path / "a.bin").stat().st_size > 0
    r = run("serve", "--model", "x")
    assert r.returncode == 1 and "needs the Python package 'pyzmq'" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    r = run("--help")
    assert r.returncode == 0 and "unavailable: pyzmq" in r.stdout, r.stdout


def test_errors_name_the_flags_not_the_python_arguments(tmp_path):
    a = tmp_path / "a.txt"
    a.write_text("hello world " * 50)
    for args, flag in ((("--vocab-size", -5), "--vocab-size"),
                       (("--vocab-size", 300, "--min-frequency", -1), "--min-frequency"),
                       (("--vocab-size", 300, "--threads", -2), "--threads")):
        r = cli(a, *args, "-o", tmp_path / "o.json")
        assert r.returncode == 1 and f"error: {flag} must" in r.stderr, r.stderr
    # -5 said "must be >= 0" where 0 said "at least 256 + 0 special tokens": one message
    for size in (-5, 0):
        r = cli(a, "--vocab-size", size, "-o", tmp_path / "o.json")
        assert "error: --vocab-size must be at least 256 + 0 special tokens = 256, got " \
            f"{size}" in r.stderr, r.stderr
    # encode / decode name --special-token, not load()'s special_tokens
    r = cli(a, "--vocab-size", 300, "-q", "-o", tmp_path / "t.json")
    assert r.returncode == 0, r.stderr
    for command, rest in (("encode", ["-o", tmp_path / "ids.bin"]), ("decode", [])):
        r = subprocess.run([sys.executable, "-m", "bpe_cffi", command, "--tokenizer",
                            str(tmp_path / "t.json"), "--special-token", "X", str(a),
                            *map(str, rest)], capture_output=True, text=True, env=ENV)
        assert r.returncode == 1 and "do not pass --special-token" in r.stderr, r.stderr
