"""Shared test fixtures: where the real vocabularies and corpora live, and how to read them.

The data stays in ../shared (never copied into the repo).  Tests that need it skip with a clear
reason when it is absent, so the suite passes on a machine without it.
"""
import lzma
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
VOCAB_DIR = Path(os.environ.get("BPE_CFFI_VOCAB_DIR", SHARED / "vocab"))
CORPORA_DIR = Path(os.environ.get("BPE_CFFI_CORPORA_DIR", SHARED / "corpora"))
CORPORA = ["en_books", "multilingual", "code", "web"]
LONG = bool(os.environ.get("BPE_CFFI_LONG"))


def _tables_regex_version() -> str:
    """The regex release csrc/unicode_tables.h was generated from (its Unicode version)."""
    header = (REPO / "csrc" / "unicode_tables.h").read_text(encoding="utf-8")
    for line in header.splitlines():
        if line.startswith("#define BPE_UC_REGEX_VERSION"):
            return line.split('"')[1]
    return "?"


def _regex_version() -> str:
    import regex
    return regex.__version__


TABLES_REGEX = _tables_regex_version()
# checks of the C tables against `regex` on any code point hold only with the regex release
# the tables came from (another has another Unicode version); the test extra pins it where
# Python allows (3.11+)
needs_tables_regex = pytest.mark.skipif(
    _regex_version() != TABLES_REGEX,
    reason=f"csrc/unicode_tables.h follows regex {TABLES_REGEX}; installed: "
           f"{_regex_version()} (pip install regex=={TABLES_REGEX}, Python 3.11+)")


def vocab_path(name: str) -> Path:
    p = VOCAB_DIR / name
    if not p.exists():
        pytest.skip(f"vocabulary file {p} not found (set BPE_CFFI_VOCAB_DIR)")
    return p


def tiktoken_encoding(name: str):
    """The offline tiktoken reference encoding ('gpt2', 'cl100k_base', 'o200k_base')."""
    pytest.importorskip("tiktoken", reason="tiktoken is needed as the reference encoder")
    vocab_path("offline_tiktoken.py")
    if str(VOCAB_DIR) not in sys.path:
        sys.path.insert(0, str(VOCAB_DIR))
    from offline_tiktoken import get_encoding
    return get_encoding(name)


def read_corpus(name: str, n_bytes: int, offset: int = 0) -> str:
    """Up to n_bytes of a corpus from `offset`, decoded (a split character at the edges is
    dropped)."""
    p = CORPORA_DIR / f"{name}.txt.xz"
    if not p.exists():
        pytest.skip(f"corpus {p} not found (set BPE_CFFI_CORPORA_DIR)")
    with lzma.open(p, "rb") as f:
        if offset:
            f.seek(offset)
        raw = f.read(n_bytes)
    return raw.decode("utf-8", errors="ignore")


def cs336_path(name: str) -> Path:
    p = CORPORA_DIR / "cs336" / name
    if not p.exists():
        pytest.skip(f"CS336 fixture {p} not found")
    return p


def default_sigint():
    """preexec_fn for a child that a test interrupts with SIGINT.  A runner started in the
    background by a non-interactive shell (`cmd &`) inherits SIGINT as ignored, and Python
    then keeps ignoring it (so would its children): reset it so the child gets
    KeyboardInterrupt whatever launched the test run."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_DFL)
