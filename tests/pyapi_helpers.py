"""Builders shared by the Python-API tests (cached per process: building the 200k-token
tokenizers takes about a second each), and generators of test text."""
import random
from functools import lru_cache

from conftest import CORPORA_DIR, cs336_path, read_corpus, tiktoken_encoding, vocab_path

PATTERN_OF = {"gpt2": "gpt2", "cl100k_base": "cl100k", "o200k_base": "o200k"}
VOCABS = ["gpt2", "cl100k_base", "o200k_base"]


@lru_cache(maxsize=None)
def _ours(name: str):
    from bpe_cffi import Tokenizer
    if name == "gpt2":
        return Tokenizer.from_files(vocab_path("gpt2_vocab.json"), vocab_path("gpt2_merges.txt"),
                                    special_tokens=["<|endoftext|>"])
    return Tokenizer.from_tiktoken(vocab_path(f"{name}.tiktoken"), pattern=PATTERN_OF[name])


def ours(name: str):
    """Our tokenizer for a tiktoken encoding name ('gpt2', 'cl100k_base', 'o200k_base')."""
    vocab_path("gpt2_vocab.json" if name == "gpt2" else f"{name}.tiktoken")  # skip if absent
    return _ours(name)


def reference(name: str):
    """tiktoken's encoding of that name (skips when unavailable)."""
    return tiktoken_encoding(name)


@lru_cache(maxsize=None)
def _small_text() -> str:
    try:
        p = cs336_path("tinystories_sample.txt")
        return p.read_text(encoding="utf-8")[:60_000]
    except BaseException:  # pytest.skip is a BaseException; fall back to a built-in text
        return FALLBACK_TEXT * 40


@lru_cache(maxsize=None)
def small_trained(n_merges: int = 300):
    """(vocab {id: bytes}, merges [(bytes, bytes)]) learned by the reference trainer on a small
    text: a vocabulary tiktoken knows nothing about."""
    from reference_encoder import train_merges
    from bpe_cffi.patterns import GPT2
    text = _small_text()
    return train_merges(text, n_merges, GPT2)


FALLBACK_TEXT = (
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
    "sunshine. One day, she saw a big, red ball in the park! \"Can I play?\" she asked. "
    "The boy said, \"Yes, you can.\" They played together all day and they're happy. 12345 "
    "It's 3:45pm; don't WORRY'LL be fine.\n\n")

FRAGMENTS = [
    "the", " the", "The", " cat", "sat", " on", " mat", "ing", "ed", "'s", "'S", "'ll", "'Ll",
    "'ve", "'RE", "'d", "'m", "'t", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\r",
    "\u00a0", "\u3000", " \n", "\t\t ", "0", "12", "345", "6789", "1,000", "3.14",
    "日本語", "中文", "한국어", "Ελληνικά", "русский", "עברית", "العربية", "हिन्दी",
    "😀", "👨‍👩‍👧", "🏳️‍🌈", "e\u0301", "a\u0308\u0323", "\u0000", "\x01", "\x7f", "\u200b",
    "!", "?", "...", "--", "()", "{}", "[]", "$", "^", "^^^", "#", "//", "/*", "*/", "<", "|",
    ">", "<|", "|>", "endoftext", "<|endoftext|>", "<|endofprompt|>", "<|fim_prefix|>",
    "Hello", "WORLD", "camelCase", "snake_case", "x", "ÿ", "é", "ß", "ﬁ",
]


@lru_cache(maxsize=None)
def recently_assigned(ch: str) -> bool:
    """Unassigned in Python's Unicode database (14.0 for 3.11) but a letter, number or mark
    for the `regex` module or for our scanner's tables (both newer; the installed regex may
    be older than the tables).  tiktoken's regex engine sits in between, so whether such a
    character is a letter differs between tiktoken and our scanner (see
    test_tiktoken_parity.test_recent_unicode_letters); random texts avoid them."""
    import unicodedata
    import regex
    if unicodedata.category(ch) != "Cn":
        return False
    return regex.match(r"\p{L}|\p{N}|\p{M}", ch) is not None or _scanner_classes(ch)


def _scanner_classes(ch: str) -> bool:
    """True when our C scanner takes ch for a letter or mark (o200k: it joins "a" in one
    piece) or a number (gpt2: it joins "1")."""
    from bpe_cffi._native import ffi, lib

    def pieces(pattern, text):
        ends = ffi.new("bpe_ids *")
        try:
            data = text.encode("utf-8")
            assert lib.bpe_pretokenize(pattern, data, len(data), ends) == lib.BPE_OK
            return ends.len
        finally:
            lib.bpe_ids_free(ends)
    return pieces(lib.BPE_PATTERN_O200K, "a" + ch) == 1 or \
        pieces(lib.BPE_PATTERN_GPT2, "1" + ch) == 1


def random_texts(seed: int, n: int, max_fragments: int = 12) -> list:
    """n seeded random strings made of FRAGMENTS and random code points."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(0, max_fragments)):
            r = rng.random()
            if r < 0.8:
                parts.append(rng.choice(FRAGMENTS))
            elif r < 0.9:
                parts.append(chr(rng.randint(0x20, 0x2FF)))
            else:
                c = rng.randint(0, 0x10FFFF)
                if 0xD800 <= c <= 0xDFFF or recently_assigned(chr(c)):
                    c = 0xFFFD
                parts.append(chr(c))
        out.append("".join(parts))
    return out


def corpus_names():
    from conftest import CORPORA
    return CORPORA


def corpus_slice(name: str, n_bytes: int, offset: int = 0) -> str:
    return read_corpus(name, n_bytes, offset)


__all__ = ["ours", "reference", "small_trained", "random_texts", "corpus_slice", "VOCABS",
           "PATTERN_OF", "FRAGMENTS", "CORPORA_DIR"]
