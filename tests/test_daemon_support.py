"""A stand-in tokenizer for the daemon tests while bpe_cffi.load is not merged: tiktoken's
offline encodings behind the bpe_cffi.Tokenizer interface the daemon uses.

The daemon subprocess loads it with `--loader test_daemon_support:load` (tests/ on
PYTHONPATH).  The tests below check that the adapter keeps the interface's contract, so that
what the daemon tests prove carries over to the real Tokenizer.
"""
import os
import sys
from pathlib import Path

import pytest



def _find_vocab_dir():
    """$BPE_CFFI_VOCAB_DIR, else the first shared/vocab beside an ancestor of the repo (the
    repo may be a git worktree nested one level deeper than the main checkout)."""
    env = os.environ.get("BPE_CFFI_VOCAB_DIR")
    if env:
        return Path(env)
    for parent in list(Path(__file__).resolve().parents)[1:]:   # (slicing: 3.10+)
        cand = parent / "shared" / "vocab"
        if cand.is_dir():
            return cand
    return Path(__file__).resolve().parent.parent.parent / "shared" / "vocab"


VOCAB_DIR = _find_vocab_dir()

_NAMES = {"gpt2_vocab.json": "gpt2", "cl100k_base.tiktoken": "cl100k_base",
          "o200k_base.tiktoken": "o200k_base"}


class StandinTokenizer:
    """encode / encode_ordinary / encode_batch / decode / decode_bytes / n_vocab /
    special_tokens, with bpe_cffi.Tokenizer's defaults (allowed_special="all",
    disallowed_special=())."""

    def __init__(self, enc):
        self._enc = enc
        self.n_vocab = enc.n_vocab
        self.special_tokens = dict(enc._special_tokens)

    def encode(self, text, *, allowed_special="all", disallowed_special=()):
        if not isinstance(text, str):
            raise TypeError(f"text must be str, not {type(text).__name__}")
        return self._enc.encode(text, allowed_special=allowed_special,
                                disallowed_special=disallowed_special)

    def encode_ordinary(self, text):
        return self._enc.encode_ordinary(text)

    def encode_batch(self, texts, *, num_threads=None, allowed_special="all"):
        return [self.encode(t, allowed_special=allowed_special) for t in texts]

    def decode_bytes(self, ids):
        try:
            return self._enc.decode_bytes(ids)
        except (KeyError, OverflowError, ValueError, TypeError) as exc:
            raise ValueError(f"unknown token id in {ids[:8]!r}...: {exc}") from None

    def decode(self, ids):
        return self.decode_bytes(ids).decode("utf-8", "replace")


class _Slow:
    """A tokenizer whose encode of a text "SLOW<seconds>" sleeps that long first (a request
    that outlasts a drain), the rest as the real one."""

    def __init__(self, tok):
        self._tok = tok

    def __getattr__(self, name):
        return getattr(self._tok, name)

    def encode(self, text, **kw):
        if text.startswith("SLOW"):
            import time
            time.sleep(float(text[4:]))
        return self._tok.encode(text, **kw)


def slow_load(path):
    return _Slow(in_process_loader()(path))


def load(path):
    name = _NAMES.get(Path(path).name)
    if name is None:
        raise ValueError(f"stand-in loader: no offline encoding for {path}")
    if str(VOCAB_DIR) not in sys.path:
        sys.path.insert(0, str(VOCAB_DIR))
    from offline_tiktoken import get_encoding
    return StandinTokenizer(get_encoding(name))


def test_standin_contract():
    if not (VOCAB_DIR / "offline_tiktoken.py").exists():
        pytest.skip("shared vocab missing")
    pytest.importorskip("tiktoken")
    tok = load(VOCAB_DIR / "cl100k_base.tiktoken")
    eot = tok.special_tokens["<|endoftext|>"]
    assert tok.encode("a<|endoftext|>b").count(eot) == 1
    assert eot not in tok.encode("a<|endoftext|>b", allowed_special=set())
    with pytest.raises(ValueError):
        tok.encode("a<|endoftext|>b", allowed_special=set(), disallowed_special="all")
    with pytest.raises(ValueError):
        tok.decode_bytes([10 ** 9])
    with pytest.raises(TypeError):
        tok.encode(b"bytes")
    assert tok.decode(tok.encode("héllo wörld")) == "héllo wörld"


# ---- running a real daemon process ----------------------------------------------------------

import subprocess  # noqa: E402
import time  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent


def real_load_available():
    try:
        import bpe_cffi
        return callable(getattr(bpe_cffi, "load", None))
    except ImportError:  # pragma: no cover
        return False


def loader_spec():
    """The --loader the tests give the daemon: the real bpe_cffi.load once it exists."""
    if os.environ.get("BPE_CFFI_DAEMON_STANDIN") or not real_load_available():
        return "test_daemon_support:load"
    return "bpe_cffi:load"


def in_process_loader():
    if loader_spec() == "bpe_cffi:load":
        import bpe_cffi
        return bpe_cffi.load
    return load


def vocab_file(name):
    p = VOCAB_DIR / name
    if not p.exists():
        pytest.skip(f"vocabulary {p} not found (set BPE_CFFI_VOCAB_DIR)")
    if loader_spec() == "test_daemon_support:load":
        pytest.importorskip("tiktoken")
    return p


class Daemon:
    """A daemon subprocess on a free loopback port; stop() is idempotent and bounded."""

    def __init__(self, tokenizers, *extra, bind="tcp://127.0.0.1:0", workers=2,
                 ready_timeout=60.0):
        args = [sys.executable, "-m", "bpe_cffi.daemon", "--loader", loader_spec(),
                "--bind", bind, "--workers", str(workers)]
        for name, path in tokenizers.items():
            args += ["--tokenizer", f"{name}={path}"]
        args += [str(a) for a in extra]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(TESTS)] + [
            p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        import tempfile
        # stderr to a file, never a pipe nobody reads (a full pipe would block the daemon)
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.stderr,
                                     env=env, cwd=str(REPO))
        self.pid = self.proc.pid
        self.endpoint = self._read_endpoint(ready_timeout)

    def _read_endpoint(self, timeout):
        import selectors
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        end = time.monotonic() + timeout
        line = b""
        while time.monotonic() < end and not line.endswith(b"\n"):
            if not sel.select(timeout=0.2):
                if self.proc.poll() is not None:
                    break
                continue
            ch = self.proc.stdout.read1(256) if hasattr(self.proc.stdout, "read1") else \
                self.proc.stdout.readline()
            if not ch:
                break
            line += ch
        sel.close()
        if not line.endswith(b"\n"):
            self.stop()
            raise RuntimeError(f"daemon did not start: {self.stderr_text()[-3000:]}")
        return line.decode().strip().splitlines()[0]

    def stderr_text(self):
        try:
            self.stderr.seek(0)
            return self.stderr.read().decode(errors="replace")
        except (OSError, ValueError):
            return ""

    def rss_kb(self):
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def alive(self):
        return self.proc.poll() is None

    def terminate_and_wait(self, timeout=20.0):
        """SIGTERM, then the exit code (None if it did not exit in time)."""
        import signal
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self):
        if self.proc.poll() is None:
            try:
                self.proc.terminate()
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        for f in (self.proc.stdout, self.stderr):
            try:
                f.close()
            except Exception:
                pass


LONG = bool(os.environ.get("BPE_CFFI_LONG"))
CORPORA_DIR = Path(os.environ.get("BPE_CFFI_CORPORA_DIR", VOCAB_DIR.parent / "corpora"))


def corpus_texts(n, seed=0, max_len=2000):
    """n texts of 1..max_len characters cut from the shared corpora (all four kinds), or a
    synthetic multilingual mix when they are absent."""
    import lzma
    import random
    rng = random.Random(seed)
    pool = []
    for name in ("en_books", "multilingual", "code", "web"):
        p = CORPORA_DIR / f"{name}.txt.xz"
        if p.exists():
            with lzma.open(p, "rb") as f:
                pool.append(f.read(400_000).decode("utf-8", "ignore"))
    if not pool:
        pool = ["Hello wörld! ünïcödé 漢字かな 🎉 def f(x):\n    return x * 2  # 12345\n" * 200]
    out = []
    for _ in range(n):
        src = rng.choice(pool)
        k = rng.randrange(1, max_len)
        a = rng.randrange(0, max(1, len(src) - k))
        out.append(src[a:a + k])
    return out
