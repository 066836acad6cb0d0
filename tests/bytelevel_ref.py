"""Slow, readable references for tests/test_offsets.py and tests/test_stream_decode.py.

* TiktokenStandIn: the bpe_cffi Tokenizer API (encode, encode_ordinary, decode, decode_bytes,
  decode_single_token_bytes, special_tokens) on top of tiktoken, so these tests also run, and
  pin the expected behaviour, without the C encoder.
* tokenizers(name): the stand-in and, once it exists, the real bpe_cffi.Tokenizer.
* utf8_chars(data): a from-the-standard UTF-8 decoder (Unicode 15 Table 3-7 plus the
  "maximal subpart" replacement practice) giving each character's byte span; it does not use
  Python's codec, so the tests can check the codec-based code against it.
* hf_gpt2(): the HF `tokenizers` configuration that reproduces tiktoken's GPT-2 ids.
"""
import pytest

from conftest import tiktoken_encoding, vocab_path

# name in offline_tiktoken -> (vocabulary given to bpe_cffi, pattern name)
ENCODINGS = ["gpt2", "cl100k_base", "o200k_base"]


class TiktokenStandIn:
    """tiktoken behind the method names of bpe_cffi.Tokenizer."""

    def __init__(self, enc):
        self.enc = enc
        self.special_tokens = dict(enc._special_tokens)
        self.n_vocab = enc.n_vocab

    def encode(self, text):
        return self.enc.encode(text, allowed_special="all")

    def encode_ordinary(self, text):
        return self.enc.encode_ordinary(text)

    def decode(self, ids):
        return self.enc.decode(ids, errors="replace")

    def decode_bytes(self, ids):
        return self.enc.decode_bytes(ids)

    def decode_single_token_bytes(self, token_id):
        return self.enc.decode_single_token_bytes(token_id)


def real_tokenizer(name):
    """bpe_cffi.Tokenizer for an encoding name, or pytest.skip while it is not merged."""
    try:
        from bpe_cffi import Tokenizer
    except ImportError:
        Tokenizer = None
    if Tokenizer is None or not hasattr(Tokenizer, "from_files"):
        pytest.skip("bpe_cffi.Tokenizer is not available yet")
    try:    # the Python-API tests' cached builders: build each vocabulary once per session
        from pyapi_helpers import ours
        return ours(name)
    except ImportError:
        pass
    if name == "gpt2":
        return Tokenizer.from_files(str(vocab_path("gpt2_vocab.json")),
                                    str(vocab_path("gpt2_merges.txt")),
                                    special_tokens=["<|endoftext|>"])
    pattern = {"cl100k_base": "cl100k", "o200k_base": "o200k"}[name]
    return Tokenizer.from_tiktoken(str(vocab_path(f"{name}.tiktoken")), pattern=pattern)


_CACHE = {}


def tokenizer(kind, name):
    """kind 'standin' or 'real'; cached per process (building o200k takes a while)."""
    key = (kind, name)
    if key not in _CACHE:
        if kind == "standin":
            _CACHE[key] = TiktokenStandIn(tiktoken_encoding(name))
        else:
            _CACHE[key] = real_tokenizer(name)
    return _CACHE[key]


def hf_gpt2(config="bytelevel"):
    """HF tokenizer giving tiktoken's GPT-2 ids: BPE from vocab.json/merges.txt, no normalizer,
    no post-processor (so no offset trimming), <|endoftext|> as an added special token, and
    as pre-tokenizer either
      "bytelevel": ByteLevel(add_prefix_space=False), which splits with its own GPT-2 regex, or
      "split":     Split(tiktoken's GPT-2 regex, "isolated") then ByteLevel(use_regex=False).
    Both give tiktoken's ids and the same offsets on the corpora (tests/test_offsets.py)."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers
    key = ("hf", "gpt2", config)
    if key not in _CACHE:
        bpe = models.BPE.from_file(str(vocab_path("gpt2_vocab.json")),
                                   str(vocab_path("gpt2_merges.txt")))
        hf = tokenizers.Tokenizer(bpe)
        if config == "bytelevel":
            hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        else:
            from bpe_cffi.patterns import GPT2
            hf.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(GPT2), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        hf.decoder = decoders.ByteLevel()
        hf.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)])
        _CACHE[key] = hf
    return _CACHE[key]


# --- UTF-8 by the book -------------------------------------------------------------------

def _second_byte_range(lead):
    """Allowed range of the byte after `lead` and the sequence length, or None (Table 3-7)."""
    if 0xC2 <= lead <= 0xDF:
        return 0x80, 0xBF, 2
    if lead == 0xE0:
        return 0xA0, 0xBF, 3
    if 0xE1 <= lead <= 0xEC or 0xEE <= lead <= 0xEF:
        return 0x80, 0xBF, 3
    if lead == 0xED:
        return 0x80, 0x9F, 3
    if lead == 0xF0:
        return 0x90, 0xBF, 4
    if 0xF1 <= lead <= 0xF3:
        return 0x80, 0xBF, 4
    if lead == 0xF4:
        return 0x80, 0x8F, 4
    return None


def _valid_prefix_len(data, i):
    """(k, need): k = how many bytes from i form a well-formed prefix of one character
    (k >= 1 unless data[i] can never start one), need = that character's full length."""
    b = data[i]
    if b < 0x80:
        return 1, 1
    rng = _second_byte_range(b)
    if rng is None:
        return 0, 0
    lo, hi, need = rng
    k = 1
    while k < need and i + k < len(data):
        c = data[i + k]
        ok = (lo <= c <= hi) if k == 1 else (0x80 <= c <= 0xBF)
        if not ok:
            break
        k += 1
    return k, need


def utf8_chars(data):
    """[(start, end)] byte span of each character of data decoded with errors="replace":
    a well-formed sequence is a character; otherwise the maximal subpart (the longest
    well-formed prefix, at least one byte) becomes one U+FFFD."""
    spans = []
    i = 0
    while i < len(data):
        k, need = _valid_prefix_len(data, i)
        step = max(k, 1)
        spans.append((i, i + step))
        i += step
    return spans


def utf8_replace_decode(data):
    """The text for utf8_chars(data): each span is its character or U+FFFD."""
    out = []
    for s, e in utf8_chars(data):
        k, need = _valid_prefix_len(data, s)
        out.append(data[s:e].decode("utf-8") if k == need and e - s == need else "\ufffd")
    return "".join(out)


def incomplete_tail_len(data):
    """Length of the trailing bytes of `data` that are a proper prefix of a well-formed
    character (and so may still become one): 0 to 3."""
    for k in (3, 2, 1):
        if len(data) >= k:
            start = len(data) - k
            got, need = _valid_prefix_len(data, start)
            if got == k and k < need:
                return k
    return 0


def byte_to_char_spans(text, byte_spans):
    """Reference char spans for byte spans of text.encode(): a per-byte table of character
    indices, built the slow way (one entry per byte)."""
    owner = []
    for ci, ch in enumerate(text):
        owner.extend([ci] * len(ch.encode("utf-8")))
    return [(owner[b0], owner[b1 - 1] + 1) for b0, b1 in byte_spans]


def byte_spans(tok, ids):
    """(start, end) byte span of every token in the concatenated token bytes."""
    out = []
    pos = 0
    for i in ids:
        n = len(tok.decode_single_token_bytes(i))
        out.append((pos, pos + n))
        pos += n
    return out
