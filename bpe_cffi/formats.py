"""Reading and writing vocabulary files, with errors that name the file and line.

Formats:
  - GPT-2 `vocab.json` (token string -> id) + `merges.txt` (one "left right" pair a line,
    rank = order; an optional first line starting with "#version" is skipped).  Token strings
    are written in GPT-2's byte-to-unicode alphabet: every byte maps to one printable
    character, so a token's bytes are recovered character by character.
  - tiktoken `.tiktoken`: one "base64(token bytes) rank" pair a line; rank = token id.
  - HuggingFace `tokenizer.json` (model type BPE, byte-level alphabet).  We write it so that
    `tokenizers.Tokenizer.from_file` reproduces our ids, plus a "bpe_cffi" key inside "model"
    (HF ignores unknown keys there but rejects them at the top level) recording the merge
    rule and split pattern, so `read_hf` restores the exact tokenizer.  Reading any BPE
    tokenizer.json (other pre-tokenizers, normalizers, decoders, model options) is
    `hf_import.read_hf_tokenizer_json`.

Every reader validates what it returns: malformed, truncated or inconsistent input raises
ValueError("<file>:<line>: <what is wrong>"); a missing file raises the OSError from open().
"""
import base64
import binascii
import contextlib
import json
import errno
import functools
import io
import itertools
import os
import stat
from functools import lru_cache

RULE_MERGES = "merges"
RULE_TIKTOKEN = "tiktoken"


# ---- GPT-2's byte <-> unicode alphabet ------------------------------------------------

@lru_cache(maxsize=None)
def byte_to_unicode() -> tuple:
    """A tuple of 256 one-character strings: the printable stand-in for each byte.

    Bytes that are printable Latin-1 characters (other than space) stand for themselves; the
    remaining 68 bytes, in increasing order, get the characters U+0100, U+0101, ..."""
    keep = set(range(ord("!"), ord("~") + 1)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    table = []
    extra = 0
    for b in range(256):
        if b in keep:
            table.append(chr(b))
        else:
            table.append(chr(256 + extra))
            extra += 1
    return tuple(table)


@lru_cache(maxsize=None)
def unicode_to_byte() -> dict:
    return {c: b for b, c in enumerate(byte_to_unicode())}


@lru_cache(maxsize=None)
def _encode_table() -> dict:
    """str.translate table: the code point of each byte (as latin-1 reads it) -> its
    stand-in character."""
    return {b: c for b, c in enumerate(byte_to_unicode())}


def bytes_to_token_str(data: bytes) -> str:
    """The token's bytes in GPT-2's byte alphabet (one character a byte), translated in C: a
    generator over the bytes took 8 s to save a vocabulary holding a 3 MB token."""
    return bytes(data).decode("latin-1").translate(_encode_table())


@lru_cache(maxsize=None)
def _decode_table() -> dict:
    """str.translate table: alphabet character -> the byte's code point; any other code
    point below 256 -> U+FFFF (so the latin-1 encode that follows fails)."""
    table = {i: 0xFFFF for i in range(256)}
    for b, c in enumerate(byte_to_unicode()):
        table[ord(c)] = b
    return table


def token_str_to_bytes(s: str, where: str) -> bytes:
    """The bytes a byte-level token string stands for; ValueError naming `where` if a
    character is outside the alphabet."""
    try:
        return s.translate(_decode_table()).encode("latin-1")
    except UnicodeEncodeError:
        dec = unicode_to_byte()
        bad = next(c for c in s if c not in dec)
        raise ValueError(f"{where}: token {s!r} has the character {bad!r}, which is "
                         f"not in GPT-2's byte-level alphabet") from None


# ---- helpers ------------------------------------------------------------------------

def _read_text(path, expected: str = None) -> str:
    """The file's text; ValueError naming the line of invalid UTF-8 (and, given `expected`,
    what kind of file was expected: a pickle or a .bin given for vocab.json is not text)."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        raw = f.read()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        hint = f"; expected {expected}" if expected else ""
        raise ValueError(f"{path}:{line}: not valid UTF-8 ({exc.reason}){hint}") from None


def _parse_json(text, path, **kw):
    try:
        return json.loads(text, **kw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{os.fspath(path)}:{exc.lineno}: bad JSON: {exc.msg} "
                         f"(column {exc.colno})") from None


def _load_json(path):
    return _parse_json(_read_text(path), path)


class _Pairs(list):
    """A JSON object kept as its list of (key, value) pairs, so duplicate keys are seen."""


def _pairs_top(pairs):
    return _Pairs(pairs)


def _check_id(value, where: str) -> int:
    if type(value) is not int:  # bool is not an id either
        raise ValueError(f"{where}: token id {value!r} is not an integer")
    if value < 0 or value >= 2 ** 32 - 1:
        raise ValueError(f"{where}: token id {value} is out of range (0 .. 2**32-2)")
    return value


def _json_key_lines(text: str, keys) -> dict:
    """Best-effort line numbers of JSON object keys (for error messages only)."""
    wanted = set(keys)
    found = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped.startswith('"'):
            continue
        try:
            key, _ = json.JSONDecoder().raw_decode(stripped)
        except json.JSONDecodeError:
            continue
        if key in wanted and key not in found:
            found[key] = lineno
    return found


# ---- GPT-2 vocab.json + merges.txt ----------------------------------------------------

def vocab_from_token_strings(mapping, path, text=None, byte_level: bool = True) -> dict:
    """{token string: id} (byte-level alphabet; with byte_level=False plain text, taken as
    its UTF-8) -> {id: bytes}, checked.  `text` (the file's text) is used to give the line of
    a bad entry."""
    path = os.fspath(path)
    if isinstance(mapping, _Pairs):  # a JSON object as its pairs: duplicates still visible
        pairs = mapping
    elif isinstance(mapping, dict):
        pairs = list(mapping.items())
    else:
        raise ValueError(f"{path}:1: expected a JSON object mapping token strings to ids, "
                         f"found {type(mapping).__name__}")
    vocab = _vocab_in_bulk(pairs, byte_level)
    if vocab is not None:
        return vocab
    return _vocab_checked(pairs, path, text, byte_level)


def _vocab_in_bulk(pairs, byte_level: bool):
    """vocab_from_token_strings' result made a list at a time (five times as fast as its
    loop), or None if any check fails, for the loop to find and name it."""
    strs = [s for s, _ in pairs]
    ids = [i for _, i in pairs]
    if not all(type(s) is str and s for s in strs) or \
            not all(type(i) is int for i in ids) or \
            (ids and not 0 <= min(ids) <= max(ids) < 2 ** 32 - 1):
        return None
    tokens = _token_bytes_in_bulk(strs, byte_level)
    if tokens is None:
        return None
    vocab = dict(zip(ids, tokens))
    n = len(pairs)
    if len(vocab) != n or len(set(strs)) != n or len(set(tokens)) != n:
        return None
    return vocab


def _token_bytes_in_bulk(strs, byte_level: bool):
    """The bytes of each token string (token_str_to_bytes, or UTF-8 with byte_level False),
    converted all at once; None if some character is outside the byte-level alphabet."""
    if not byte_level:
        return [s.encode("utf-8", "surrogatepass") for s in strs]
    try:                 # one alphabet character per byte
        joined = "".join(strs).translate(_decode_table()).encode("latin-1")
    except UnicodeEncodeError:
        return None
    ends = list(itertools.accumulate(map(len, strs)))
    return list(map(joined.__getitem__, map(slice, [0] + ends[:-1], ends)))


def _vocab_checked(pairs, path, text, byte_level: bool) -> dict:
    """vocab_from_token_strings token by token, raising on the first bad entry."""
    vocab = {}
    by_bytes = {}
    seen_str = set()

    def fail(s, msg):
        line = _json_key_lines(text, [s]).get(s) if text is not None else None
        where = f"{path}:{line}" if line else path
        raise ValueError(f"{where}: token {s!r}: {msg}")

    for s, i in pairs:
        if not isinstance(s, str):
            fail(s, "token must be a string")
        if s in seen_str:
            fail(s, "appears twice")
        seen_str.add(s)
        if type(i) is not int or not 0 <= i < 2 ** 32 - 1:
            fail(s, f"id {i!r} is not an integer in 0 .. 2**32-2")
        b = token_str_to_bytes(s, path) if byte_level else s.encode("utf-8", "surrogatepass")
        if not b:
            fail(s, "the empty string is not a token")
        if i in vocab:
            fail(s, f"duplicate id {i} (also token {bytes_to_token_str(vocab[i])!r})")
        if b in by_bytes:
            fail(s, f"duplicate token bytes {b!r} (ids {by_bytes[b]} and {i})")
        vocab[i] = b
        by_bytes[b] = i
    return vocab


def read_gpt2_vocab(path, byte_level: bool = True) -> dict:
    """vocab.json -> {id: bytes} (byte_level=False: token strings are plain text)."""
    text = _read_text(path, "a GPT-2 vocab.json (a JSON object of token: id)")
    pairs = _parse_json(text, path, object_pairs_hook=_pairs_top)
    return vocab_from_token_strings(pairs, path, text, byte_level)


def read_gpt2_merges(path, with_lines: bool = False, byte_level: bool = True):
    """merges.txt -> [(left bytes, right bytes)] in rank order (and, with with_lines, the
    line number of each merge).  byte_level=False: token strings are plain text."""
    path = os.fspath(path)
    text = _read_text(path, "a GPT-2 merges.txt (two tokens a line)")
    found = _merges_in_bulk(text, byte_level)
    if found is None:           # some line is not "a b": line by line, to name it
        found = _merges_checked(text, path, byte_level)
    return found if with_lines else found[0]


def _merges_in_bulk(text: str, byte_level: bool):
    """(merges, line numbers) of a merges.txt whose every line is two tokens and one space
    (after the "#version" line; a final newline allowed), converted a list at a time; None
    for any other text."""
    lines = text.split("\n")
    first = 1 if lines[0].startswith("#version") else 0
    if lines[-1] == "":
        lines.pop()
    pairs = [line.split(" ") for line in lines[first:]]
    if "\r" in text or not all(len(p) == 2 and p[0] and p[1] for p in pairs):
        return None
    names = list({s: None for p in pairs for s in p})
    tokens = _token_bytes_in_bulk(names, byte_level)
    if tokens is None:
        return None
    by_name = dict(zip(names, tokens))
    merges = [(by_name[a], by_name[b]) for a, b in pairs]
    return merges, list(range(first + 1, first + 1 + len(merges)))


def _merges_checked(text: str, path: str, byte_level: bool):
    """(merges, line numbers) of merges.txt line by line; ValueError naming a bad line."""
    merges = []
    lines = []
    cache = {}
    for lineno, line in enumerate(text.split("\n"), 1):
        line = line.rstrip("\r")
        if lineno == 1 and line.startswith("#version"):
            continue
        if not line.strip():
            continue
        parts = line.split(" ")
        if len(parts) != 2 or not parts[0] or not parts[1]:
            raise ValueError(f"{path}:{lineno}: a merge line must be two tokens separated by "
                             f"one space, found {line!r}")
        a, b = parts
        for s in (a, b):
            if s not in cache:
                cache[s] = token_str_to_bytes(s, f"{path}:{lineno}") if byte_level else \
                    s.encode("utf-8")
        merges.append((cache[a], cache[b]))
        lines.append(lineno)
    return merges, lines


def recorded_pattern(merges_path):
    """The split pattern that merges.txt's first line records (see write_gpt2), or None."""
    path = os.fspath(merges_path)
    with open(path, "rb") as f:
        first = f.readline(1 << 20).decode("utf-8", "replace").rstrip("\r\n")
    if not first.startswith("#version") or _PATTERN_MARK not in first:
        return None
    value = first.split(_PATTERN_MARK, 1)[1]
    try:
        pattern = json.loads(value)
    except ValueError:
        pattern = None
    if not isinstance(pattern, str) or not pattern:
        raise ValueError(f"{path}:1: the split pattern recorded after '{_PATTERN_MARK.strip()}' "
                         f"is not a JSON string: {value[:60]!r}")
    return pattern


def is_initial_symbol(token, byte_level: bool, prefix=b"", suffix=b"") -> bool:
    """Whether a model token is one of BPE's initial symbols, which it makes without any
    merge: one byte (byte-level) or one character, with its continuing-subword prefix or
    end-of-word suffix (token, prefix, suffix: bytes, or strs, alike)."""
    core = token
    if prefix and core.startswith(prefix) and len(core) > len(prefix):
        core = core[len(prefix):]
    if suffix and core.endswith(suffix) and len(core) > len(suffix):
        core = core[:-len(suffix)]
    if isinstance(core, str):         # (byte-level: a token string of the byte alphabet)
        return len(core) == 1 and (not byte_level or core in unicode_to_byte())
    if byte_level:
        return len(core) == 1
    try:
        return len(core.decode("utf-8")) == 1
    except UnicodeDecodeError:
        return False


def merge_names(pairs, prefix="") -> set:
    """Every token a merge list names: both parts of each merge (a, b) and its result, a + b
    with b's continuing-subword prefix cut (HF's rule; a + b whole is kept too).  pairs and
    prefix are token strings or token bytes, alike."""
    pairs = pairs if isinstance(pairs, list) else list(pairs)
    out = {a for a, _ in pairs}
    out.update([b for _, b in pairs])
    out.update([a + b for a, b in pairs])
    if prefix:
        out.update([a + b[len(prefix):] for a, b in pairs if b.startswith(prefix)])
    return out


def check_merges(vocab: dict, merges, where: str = "merges",
                 line_of=lambda i: None, cut: int = 0) -> list:
    """[(left bytes, right bytes)] -> [(left id, right id)], checking that both parts and
    their concatenation are tokens.  `line_of(i)` gives the file line of merge i, if any.
    cut: bytes of a continuing-subword prefix, cut from the right part before concatenating
    (HF's rule)."""
    ids = {b: i for i, b in vocab.items()}
    try:                                   # fast path: all well formed
        out = [(ids[a], ids[b]) for a, b in merges]
        if all(a + b[cut:] in ids and len(b) >= cut for a, b in merges):
            return out
    except (KeyError, TypeError, ValueError):
        pass
    out = []
    for k, pair in enumerate(merges):
        loc = line_of(k)
        prefix = f"{where}:{loc}" if loc is not None else f"{where}: merge {k}"
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ValueError(f"{prefix}: a merge must be a pair of bytes, found {pair!r}")
        a, b = pair
        if not isinstance(a, (bytes, bytearray)) or not isinstance(b, (bytes, bytearray)):
            raise ValueError(f"{prefix}: merge parts must be bytes, found {pair!r}")
        a, b = bytes(a), bytes(b)
        for part in (a, b):
            if part not in ids:
                raise ValueError(f"{prefix}: merge part {part!r} is not in the vocabulary")
        if len(b) < cut:
            raise ValueError(f"{prefix}: the right part {b!r} is shorter than the "
                             f"continuing-subword prefix")
        if a + b[cut:] not in ids:
            raise ValueError(f"{prefix}: the result {a + b[cut:]!r} of merging {a!r} and "
                             f"{b!r} is not in the vocabulary")
        out.append((ids[a], ids[b]))
    return out


# merges.txt's first line is "#version: 0.2", which every reader skips (HF, GPT-2's own
# encoder.py, ours).  The format has no place for the split pattern, so a vocabulary trained
# with another pattern than GPT-2's gets it recorded there, after this mark, as a JSON string
# (a name or a regex): from_files and load read it back, and other readers still skip it.
_PATTERN_MARK = " bpe_cffi-pattern="


def write_gpt2(vocab: dict, merges, vocab_path, merges_path, pattern: str = None) -> None:
    """Writes vocab.json + merges.txt ({id: bytes}, [(bytes, bytes)]); a split pattern other
    than GPT-2's (a name or a regex) is recorded in merges.txt's first line."""
    from . import patterns
    header = "#version: 0.2"
    if pattern is not None:
        name, regex_str, _ = patterns.resolve(pattern)
        if name != "gpt2":
            header += _PATTERN_MARK + json.dumps(name or regex_str)
    lines = [header] + [f"{bytes_to_token_str(a)} {bytes_to_token_str(b)}"
                        for a, b in merges]
    for k, line in enumerate(lines[1:]):
        if line.startswith("#version"):
            raise ValueError(f"merge {k + 1} ({line!r}) would begin a line of merges.txt with "
                             f"'#version', which HF's reader skips as a header line: "
                             f"merges.txt cannot hold this vocabulary (write a tokenizer.json "
                             f"or a .tiktoken file)")
    data = {bytes_to_token_str(b): i for i, b in sorted(vocab.items())}
    atomic_write(vocab_path, json.dumps(data, ensure_ascii=False).encode("utf-8"))
    atomic_write(merges_path, ("\n".join(lines) + "\n").encode("utf-8"))


# ---- tiktoken ---------------------------------------------------------------------------

def read_tiktoken(path) -> dict:
    """A .tiktoken file -> {rank (= id): bytes}."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        raw = f.read()
    vocab = _read_tiktoken_plain(raw)
    if vocab is None:          # another layout or something wrong: line by line, to say where
        vocab = _read_tiktoken_lines(raw, path)
    if not vocab:
        raise ValueError(f"{path}:1: no tokens in the file")
    if len(set(vocab.values())) != len(vocab):
        seen = {}
        for rank, tok in vocab.items():       # insertion order = line order
            if tok in seen:
                line = _tiktoken_line_of(raw, rank)
                raise ValueError(f"{path}:{line}: duplicate token {tok!r} (ranks {seen[tok]} "
                                 f"and {rank})")
            seen[tok] = rank
    return vocab


def _read_tiktoken_plain(raw: bytes):
    """The vocabulary of a file in tiktoken's own layout, read in C (csrc/pyext/
    tiktoken_file.c, ten times as fast as line by line), or None for a file in another
    layout or with a bad line, or without the helper extension."""
    from . import _idcache
    return _idcache.parse_tiktoken(raw)


def _base64_decoder():
    try:
        binascii.a2b_base64(b"QQ==", strict_mode=True)
    except TypeError:             # Python < 3.11
        return binascii.a2b_base64
    return functools.partial(binascii.a2b_base64, strict_mode=True)


def _read_tiktoken_lines(raw: bytes, path: str) -> dict:
    """The vocabulary of a .tiktoken file read line by line; ValueError naming the first bad
    line."""
    vocab = {}
    a2b = _base64_decoder()
    limit = 2 ** 32 - 1
    for lineno, line in enumerate(raw.split(b"\n"), 1):
        parts = line.split()
        if len(parts) != 2:
            if not parts:
                continue
            what = "a rank is missing" if len(parts) == 1 else f"{len(parts)} fields"
            raise ValueError(f"{path}:{lineno}: expected 'base64-token rank', {what}")
        b64, r = parts
        try:
            tok = a2b(b64)
        except (binascii.Error, ValueError):
            tok = None
        if not tok:
            raise ValueError(f"{path}:{lineno}: bad base64 {b64[:40]!r}")
        if not r.isdigit():
            raise ValueError(f"{path}:{lineno}: rank {r[:40]!r} is not a non-negative integer")
        rank = int(r)
        if rank >= limit or rank in vocab:
            raise ValueError(f"{path}:{lineno}: " + (f"duplicate rank {rank}" if rank in vocab
                                                     else f"rank {rank} is out of range"))
        vocab[rank] = tok
    return vocab


def _tiktoken_line_of(raw: bytes, rank: int) -> int:
    for lineno, line in enumerate(raw.split(b"\n"), 1):
        parts = line.split()
        if len(parts) == 2 and parts[1] == str(rank).encode():
            return lineno
    return 0


def write_tiktoken(vocab: dict, path) -> None:
    lines = [base64.b64encode(b) + b" " + str(i).encode() for i, b in sorted(vocab.items())]
    atomic_write(path, b"\n".join(lines) + b"\n")


def bpe_split_tiktoken(ranks: dict, token: bytes, max_rank: int) -> list:
    """tiktoken's merge rule on `token` using only tokens ranked below max_rank: the parts
    it ends with (used to synthesize a merge list for a tiktoken vocabulary)."""
    parts = [token[i:i + 1] for i in range(len(token))]
    while len(parts) > 1:
        best = None
        best_i = -1
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < max_rank and (best is None or r < best):
                best, best_i = r, i
        if best is None:
            break
        parts[best_i:best_i + 2] = [parts[best_i] + parts[best_i + 1]]
    return parts


def synthesize_merges(vocab: dict) -> list:
    """A ranked merge list [(left bytes, right bytes)] for a tiktoken vocabulary {rank: bytes}:
    for each token of 2+ bytes, in rank order, the two parts tiktoken's rule reaches when only
    lower-ranked tokens exist.  Tokens the rule cannot build from two parts get no merge (with
    ignore_merges they are still emitted when a whole piece equals them)."""
    ranks = {b: r for r, b in vocab.items()}
    merges = []
    for rank, tok in sorted(vocab.items()):
        if len(tok) < 2:
            continue
        parts = bpe_split_tiktoken(ranks, tok, rank)
        if len(parts) == 2:
            merges.append((parts[0], parts[1]))
    return merges


# ---- HuggingFace tokenizer.json ----------------------------------------------------------

def _token_text(b: bytes, what: str) -> str:
    """A token of a character-level vocabulary as its string (it must be UTF-8)."""
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{what} {b!r} is not UTF-8: not a character-level vocabulary") \
            from None


def hf_json(vocab: dict, merges, special: dict, pattern_regex: str, rule: str,
            pattern_name, byte_level: bool = True) -> dict:
    """The tokenizer.json document for an ordinary vocab {id: bytes}, merges [(bytes, bytes)],
    special tokens {str: id}.  byte_level=False: tokens are written as their text (they must
    be UTF-8), and neither the pre-tokenizer nor the decoder is ByteLevel."""
    if byte_level:
        tok_str, alphabet = (lambda b, what: bytes_to_token_str(b)), " in the byte-level alphabet"
    else:
        tok_str, alphabet = _token_text, ""
    model_vocab = {}
    for i, b in sorted(vocab.items()):
        s = tok_str(b, f"token {i}")
        if s in model_vocab:
            raise ValueError(f"tokens {model_vocab[s]} and {i} are both {s!r}")
        model_vocab[s] = i
    for s, i in special.items():
        # HF gives an added token the id of the model token with the same string, and
        # otherwise the next free id: list them in the model vocab to keep our ids.
        if model_vocab.get(s, i) != i:
            raise ValueError(f"special token {s!r} (id {i}) has the same string as ordinary "
                             f"token {model_vocab[s]}{alphabet}; HF's tokenizer.json cannot "
                             f"hold both")
        model_vocab[s] = i
    added = [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True}
             for s, i in sorted(special.items(), key=lambda kv: kv[1])]
    split = {"type": "Split", "pattern": {"Regex": onig_regex(pattern_regex)},
             "behavior": "Isolated", "invert": False}
    byte_level_step = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                       "use_regex": False}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [split, byte_level_step]}
        if byte_level else split,
        "post_processor": None,
        "decoder": dict(byte_level_step) if byte_level else None,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": True,
            "vocab": model_vocab,
            "merges": [[tok_str(a, "merge part"), tok_str(b, "merge part")]
                       for a, b in merges],
            # ours; HF ignores unknown keys inside "model" (but rejects them at top level)
            "bpe_cffi": {
                "format": 1,
                "rule": rule,
                "pattern": pattern_name if pattern_name else pattern_regex,
            },
        },
    }


def char_level_decoder(continuing_subword_prefix=None, end_of_word_suffix=None) -> dict:
    """The tokenizer.json decoder of a character-level training's result: drop the prefix
    where it starts a token and the suffix where it ends one, join the tokens.  (A plain
    string Replace dropped every occurrence: text holding "##" itself lost it.)"""
    steps = []
    if continuing_subword_prefix:
        steps.append({"type": "Replace", "content": "",
                      "pattern": {"Regex": "\\A" + _onig_literal(continuing_subword_prefix)}})
    if end_of_word_suffix:
        steps.append({"type": "Replace", "content": "",
                      "pattern": {"Regex": _onig_literal(end_of_word_suffix) + "\\z"}})
    steps.append({"type": "Fuse"})
    return {"type": "Sequence", "decoders": steps}


def _onig_literal(text: str) -> str:
    """A regex (Oniguruma's syntax, and the regex module's) matching exactly text: every ASCII
    character but letters and digits escaped."""
    return "".join("\\" + c if c.isascii() and not c.isalnum() else c for c in text)


def hf_json_char_level(vocab: dict, merges, special: dict, pattern_regex: str, pattern_name,
                       continuing_subword_prefix=None, end_of_word_suffix=None) -> dict:
    """The tokenizer.json document for a CHARACTER-level vocabulary (train_bpe with
    byte_level=False): {id: UTF-8 bytes of the token string}, merges [(bytes, bytes)], special
    tokens {str: id}.  HF's char-level layout: hf_json's byte_level=False document (token
    strings as they are, the Split pre-tokenizer alone) with the prefix and suffix in the model
    section, merges applied by rank, and a decoder that drops them and joins the tokens (our
    pre-tokens keep their spaces, so joining restores the text; HF's BPEDecoder would turn the
    suffix into a space instead)."""
    doc = hf_json(vocab, merges, special, pattern_regex, RULE_MERGES, pattern_name,
                  byte_level=False)
    doc["decoder"] = char_level_decoder(continuing_subword_prefix, end_of_word_suffix)
    model = doc["model"]
    model["continuing_subword_prefix"] = continuing_subword_prefix or None
    model["end_of_word_suffix"] = end_of_word_suffix or None
    model["ignore_merges"] = False
    model["bpe_cffi"]["byte_level"] = False
    return doc


def onig_regex(pattern: str) -> str:
    """The pattern in the dialect of HF's regex engine (Oniguruma), for a tokenizer.json:
    bpe_cffi.regex_dialects.ours_to_onig (ValueError for what Oniguruma cannot say alike)."""
    from .regex_dialects import ours_to_onig
    return ours_to_onig(pattern)


def write_hf(path, doc: dict) -> None:
    atomic_write(path, json.dumps(doc, ensure_ascii=False, indent=1).encode("utf-8"))


def read_hf(path, doc=None, text=None) -> dict:
    """tokenizer.json -> the dict of hf_import.read_hf_tokenizer_json (kept for callers of
    the older name)."""
    from .hf_import import read_hf_tokenizer_json
    return read_hf_tokenizer_json(path, doc, text)


# ---- writing files safely -------------------------------------------------------------

@contextlib.contextmanager
def atomic_output(path, *, fsync: bool = True):
    """A binary file to write `path` through.

    Where `path` is a regular file, or nothing yet: a temporary file in the same directory,
    renamed over it when the block ends normally (fsynced first when `fsync`), removed when
    the block raises, so a reader sees the old file or the whole new one.  A symlink is
    followed: the file it points to is replaced and the link kept, as a shell's `>` would.
    The new file takes the permissions (and, where allowed, the owner) of the one it
    replaces (a new one: 0666 less the umask), as mkstemp's 0600 would not.
    Where `path` is something else that exists (a pipe, a device such as /dev/null or a
    terminal): it is opened and written in place, as it goes; there is nothing to undo if
    the block raises.  A directory is refused (IsADirectoryError)."""
    path = os.fspath(path)
    if path == "":
        raise FileNotFoundError(errno.ENOENT, "empty output path", path)
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        st = None                        # nothing there yet (or a dangling symlink)
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, "the output is a directory", path)
    if st is not None and not stat.S_ISREG(st.st_mode):
        with open(path, "wb") as f:
            yield f
        return
    target = os.path.realpath(path) if os.path.islink(path) else path
    directory = os.path.dirname(os.path.abspath(target))
    named = []
    try:
        # the name is known here before the file exists, so that a Ctrl-C or SIGTERM raised
        # the moment after it is created still removes it (mkstemp gave the name only after)
        fd = _new_temp(directory, os.path.basename(target), named)
        tmp = named[0]
        os.chmod(tmp, stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~_umask())
        if st is not None and hasattr(os, "chown") and \
                (st.st_uid, st.st_gid) != (os.getuid(), os.getgid()):
            try:                         # the owner too, where allowed (as root)
                os.chown(tmp, st.st_uid, st.st_gid)
            except OSError:
                pass
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        for name in named:
            try:
                os.unlink(name)
            except OSError:
                pass
        raise
    if fsync:
        _fsync_directory(directory)


def refuse_open_file(value, caller: str) -> None:
    """TypeError saying to pass the path when value, given where `caller` reads a file by
    its path, is an open file (os.fspath's "expected str, bytes or os.PathLike" does not say
    so, and a list of paths taken from an open text file would be its lines)."""
    if hasattr(value, "read") and not isinstance(value, (str, bytes, os.PathLike)):
        name = getattr(value, "name", None)
        hint = f" ({name!r})" if isinstance(name, str) else ""
        raise TypeError(f"{caller} reads a file by its path, not an open "
                        f"{type(value).__name__}{hint}: pass the path")


def _is_file_object(target) -> bool:
    """An open file given as an output (it has fileno()), not a path."""
    return hasattr(target, "fileno") and not isinstance(target, (str, bytes, os.PathLike))


def open_stream(target):
    """The descriptor of an open output `target` (an int descriptor, or a file object with
    fileno(), such as sys.stdout.buffer), or None when target is a path.  A file object's
    buffered data is flushed first, so what is written to the descriptor comes after it."""
    if isinstance(target, bool):
        raise TypeError("an output must be a path, a file descriptor or a binary file, "
                        "not a bool")
    if isinstance(target, int):
        fd = target
    elif _is_file_object(target):
        if getattr(target, "closed", False):
            raise ValueError("the output file is closed")
        if isinstance(target, io.TextIOBase):
            raise TypeError("the output file is open in text mode: ids are binary (use "
                            "its .buffer, or open it with 'wb')")
        target.flush()
        try:
            fd = target.fileno()
        except io.UnsupportedOperation:
            raise TypeError(f"the output {type(target).__name__} has no file descriptor: ids "
                            f"are written to a path, a descriptor or a file on one (for ids "
                            f"in memory, encode() the text or use encode_to_numpy())") from None
    else:
        return None
    os.fstat(fd)                         # OSError (EBADF) for a descriptor that is not open
    return fd


@contextlib.contextmanager
def output_file(target, *, fsync: bool = True):
    """A binary file to write `target` through: atomic_output(target) for a path; for an
    open descriptor or file object (open_stream), a file on its descriptor, written in place
    from where it stands and flushed at the end (not closed, not fsynced, nothing to undo on
    an error)."""
    fd = open_stream(target)
    if fd is None:
        with atomic_output(target, fsync=fsync) as f:
            yield f
        return
    with os.fdopen(fd, "wb", closefd=False) as f:
        yield f


def output_name(target) -> str:
    """How an output is named in messages: its path, or the file object's name."""
    if isinstance(target, int) and not isinstance(target, bool):
        return f"file descriptor {target}"
    if _is_file_object(target):
        return str(getattr(target, "name", "the output file"))
    return os.fspath(target)


# ---- compressed text given as text ------------------------------------------------------

# (leading bytes, format, command that writes the text to stdout).  Each but bzip2's holds
# bytes that are not UTF-8, and bzip2's 10 are its stream and first block header: no text
# file starts so.
_COMPRESSED = (
    (b"\x1f\x8b", "gzip", "gzip -dc"),
    (b"\xfd7zXZ\x00", "xz", "xz -dc"),
    (b"(\xb5/\xfd", "zstd", "zstd -dc"),
    (b"PK\x03\x04", "zip", "unzip -p"),
)


def compressed_format(head: bytes):
    """(format, decompress command) when `head`, a file's first bytes, opens a compressed
    file (gzip, xz, zstd, zip, bzip2), else None."""
    for magic, name, command in _COMPRESSED:
        if head.startswith(magic):
            return name, command
    if len(head) >= 10 and head[:3] == b"BZh" and head[3:4] in b"123456789" and \
            head[4:10] in (b"1AY&SY", b"\x17rE8P\x90"):
        return "bzip2", "bzip2 -dc"
    return None


def refuse_compressed(path, st, user: str) -> None:
    """ValueError when the regular file `path` (os.stat st) is compressed: its bytes read as
    text would give ids (or a vocabulary) of garbage, with no error.  `user` names who reads
    it ("encode", "train"), for the hint.  A pipe or device is not read here (that would
    take its data)."""
    if not stat.S_ISREG(st.st_mode):
        return
    with open(path, "rb") as f:
        found = compressed_format(f.read(10))
    if found is not None:
        name, command = found
        raise ValueError(f"{os.fsdecode(path)} is {name}-compressed, not text: decompress it "
                         f"first, e.g. `{command} {os.fsdecode(path)} | bpe-cffi {user} ... -`")


_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | \
    getattr(os, "O_BINARY", 0)


def _new_temp(directory: str, base: str, named: list) -> int:
    """The descriptor of a new file ".tmp-<random><base>" in directory (mode 0600), whose path
    is put in `named` before the file is created (and taken out if another file has it)."""
    while True:
        named[:] = [os.path.join(directory, f".tmp-{os.urandom(6).hex()}{base}")]
        try:
            return os.open(named[0], _TEMP_FLAGS, 0o600)
        except FileExistsError:
            named.clear()


def check_output_path(path) -> None:
    """Before long work whose result goes to `path` (the CLI's -o): IsADirectoryError for a
    directory or an empty path, FileNotFoundError when the directory to put it in is
    missing."""
    path = os.fspath(path)
    if path == "" or os.path.isdir(path):
        raise IsADirectoryError(errno.EISDIR, "the output is a directory", path)
    if path.endswith(("/", os.sep)):
        raise IsADirectoryError(errno.EISDIR, "the output names a directory (it ends with "
                                "'/'); name the file to write", path)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise FileNotFoundError(errno.ENOENT, "output directory does not exist", directory)


def same_file(path, st) -> bool:
    """True when `path` (through symlinks) is the file whose os.stat is st."""
    try:
        return os.path.samestat(os.stat(path), st)
    except (OSError, ValueError):
        return False


def _umask() -> int:
    """The process's umask, read without changing it where the system tells it (Linux); else
    set and put back at once."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fsync_directory(directory) -> None:
    """Make a rename in `directory` durable (best effort: not every filesystem allows it)."""
    try:
        dfd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def atomic_write(path, data: bytes) -> None:
    """Write `data` to `path` through atomic_output."""
    with atomic_output(path) as f:
        f.write(data)
