"""Reading HuggingFace tokenizer.json files of BPE models: what `Tokenizer` needs, or a clear
refusal.

`read_hf_tokenizer_json(path)` returns a dict (see its contract) holding the vocabulary, the
merges, the added tokens, the split pattern or pre-tokenizer, the normalizer and decoder (as
`hf_components` objects) and the model options as `Tokenizer` keyword arguments.  Anything
it cannot reproduce exactly is refused with ValueError("<file>: <what>"): a model other than
BPE, a component or option `hf_components` does not implement, unknown fields.  Added tokens'
options (lstrip, rstrip, single_word, normalized) are read and applied by
`added_tokens.AddedTokens`.

Which split runs where:
  - ByteLevel(add_prefix_space=false, use_regex=true) alone is GPT-2's split: pattern
    "gpt2", run by the C scanner (HF's form of the regex splits text as tiktoken's does);
  - Sequence[Split(Regex R, Isolated, invert=false), ByteLevel(add_prefix_space=false,
    use_regex=false)] is a plain regex split: pattern R (the built-in C scanner when R is
    one of ours, as `formats.hf_json` writes it; else the `regex` module);
  - Split(R, Isolated) alone, on a vocabulary without ByteLevel, likewise gives pattern R;
  - any other pre-tokenizer is handed over as the `pre_tokenizer` option.  For a byte-level
    vocabulary its ByteLevel step is taken out (`hf_components.TextPieces`): the pieces are
    raw text and the Tokenizer maps their bytes itself.
A vocabulary is byte-level (token strings in GPT-2's byte-to-unicode alphabet) when the
pre-tokenizer ends with ByteLevel; otherwise token strings are literal UTF-8 text
(byte_level=False).

Post-processors, truncation and padding are not applied by bpe_cffi: they are accepted with a
warning (in the result's "warnings"), because they only add tokens around an encoding (HF's
encode(..., add_special_tokens=True)) or cut/pad it; the ids of the text itself are those of
HF's encode(text, add_special_tokens=False).  A ByteLevel post-processor only trims offsets
(Tokenizer.encode_with_offsets trims them as HF does) and gives no warning.  load() keeps
these sections (and which added tokens are not special) on the Tokenizer, and
Tokenizer.save() writes them back as they were.
"""
import inspect
import os

from . import formats
from . import hf_components as hc
from . import patterns
from .added_tokens import FLAG_NAMES, Flags

TOP_LEVEL_KEYS = {"version", "truncation", "padding", "added_tokens", "normalizer",
                  "pre_tokenizer", "post_processor", "decoder", "model"}
MODEL_KEYS = {"type", "dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix",
              "fuse_unk", "byte_fallback", "ignore_merges", "vocab", "merges", "bpe_cffi"}
ADDED_TOKEN_KEYS = {"id", "content", "single_word", "lstrip", "rstrip", "normalized",
                    "special"}
# post-processors that only add special tokens and/or adjust offsets
KNOWN_POST_PROCESSORS = {"TemplateProcessing", "BertProcessing", "RobertaProcessing",
                         "ByteLevel", "Sequence"}

# Tokenizer keyword arguments this reader may produce (see `options` in the contract).
MODEL_OPTIONS = ("dropout", "unk_token", "fuse_unk", "byte_fallback",
                 "continuing_subword_prefix", "end_of_word_suffix")
COMPONENT_OPTIONS = ("byte_level", "pre_tokenizer", "normalizer", "decoder")


def read_hf_tokenizer_json(path, doc=None, text=None) -> dict:
    """tokenizer.json -> dict with:
      vocab          {id: bytes}, the model's tokens (added tokens taken out);
      merges         [(bytes, bytes)] in rank order;
      special        {str: id}, every added token (HF splits all of them out of the text
                     before the model runs, special or not);
      added_non_special  [str], the added tokens with "special": false (HF's decode with
                     skip_special_tokens keeps these);
      added_flags    {str: added_tokens.Flags} of the added tokens with lstrip, rstrip,
                     single_word or normalized set;
      rule           "merges" (or "tiktoken" for a file bpe_cffi wrote for a tiktoken vocab);
      pattern        the split pattern for Tokenizer(pattern=...) (a built-in name or a regex),
                     or None when the pre_tokenizer option does the splitting;
      ignore_merges  bool (HF's model.ignore_merges);
      byte_level     bool;
      options        {Tokenizer keyword: value}: the model options that differ from their
                     defaults (dropout, unk_token, fuse_unk, byte_fallback,
                     continuing_subword_prefix, end_of_word_suffix) and byte_level=False,
                     pre_tokenizer, normalizer, decoder when needed;
      pre_tokenizer, normalizer, decoder, post_processor   the file's components as
                     hf_components objects (post_processor: its JSON), or None;
      warnings       [str], what is accepted but not applied (post-processor, truncation,
                     padding).
    ValueError("<path>: ...") names what is malformed or unsupported."""
    path = os.fspath(path)
    if doc is None:
        text = formats._read_text(path)
        doc = formats._parse_json(text, path)
    if not isinstance(doc, dict) or not isinstance(doc.get("model"), dict):
        raise ValueError(f"{path}:1: not a tokenizer.json (no \"model\" object)")

    def fail(msg):
        raise ValueError(f"{path}: {msg}")

    extra = sorted(k for k in doc if k not in TOP_LEVEL_KEYS and doc[k] is not None)
    if extra:
        fail(f"unknown top-level field(s) {extra}: unsupported")
    model = doc["model"]
    kind = model.get("type", "BPE")
    if kind != "BPE":
        fail(f"model type {kind!r} is not BPE: unsupported (only BPE models load)")
    extra = sorted(k for k in model if k not in MODEL_KEYS and model[k] is not None)
    if extra:
        fail(f"unknown model field(s) {extra}: unsupported")
    ours = model.get("bpe_cffi") if isinstance(model.get("bpe_cffi"), dict) else None

    def component(key, reader):
        d = doc.get(key)
        if d is None:
            return None
        try:
            return reader(d)
        except hc.UnsupportedComponent as exc:
            fail(f"{exc}")

    pre = component("pre_tokenizer", hc.pre_tokenizer_from_json)
    normalizer = component("normalizer", hc.normalizer_from_json)
    decoder = component("decoder", hc.decoder_from_json)
    warnings = _post_processing_warnings(doc, fail)

    byte_level = _ends_with_byte_level(pre, fail)
    options = _model_options(model, fail)
    special, non_special, flags = _added_tokens(doc, fail)
    vocab, merges = _vocab_and_merges(model, special, byte_level, path, text, fail)

    rule = formats.RULE_MERGES
    pattern = None
    if ours is not None:
        rule = ours.get("rule", formats.RULE_MERGES)
        if rule not in (formats.RULE_MERGES, formats.RULE_TIKTOKEN):
            fail(f"bpe_cffi.rule {rule!r} is neither 'merges' nor 'tiktoken'")
        pattern = ours.get("pattern")
        if pattern is not None and not isinstance(pattern, str):
            fail("bpe_cffi.pattern must be a string")
        seed = ours.get("seed")
        if seed is not None:
            if isinstance(seed, bool) or not isinstance(seed, int):
                fail(f"bpe_cffi.seed must be an integer, not {seed!r}")
            if "dropout" in options:      # the seed only matters with dropout
                options["seed"] = seed
    if pattern is not None and not _split_by(doc.get("pre_tokenizer"), pattern):
        # the file's pre_tokenizer was changed after bpe_cffi wrote it: HF follows the
        # pre_tokenizer, and so does this (the private pattern only spares translating it)
        warnings.append(f"model.bpe_cffi.pattern {pattern!r} is not what the pre_tokenizer "
                        f"splits by; the pre_tokenizer is used, as HF does")
        pattern = None
    if pattern is None:
        pattern = _plain_pattern(pre, byte_level)
    if pattern is None:
        # the pre-tokenizer object does the splitting
        if pre is None:
            options["pre_tokenizer"] = hc.PreTokenizerSequence([])   # the whole text
        else:
            options["pre_tokenizer"] = hc.TextPieces(pre) if byte_level else pre
    if not byte_level:
        options["byte_level"] = False
    if normalizer is not None:
        options["normalizer"] = normalizer
    if decoder is None and not byte_level:
        options["decoder"] = hc.SpaceJoin()    # HF's decode without a decoder
    elif decoder is not None and not (byte_level and isinstance(decoder, hc.ByteLevelDecoder)):
        # a byte-level Tokenizer's own decode is the ByteLevel decoder
        options["decoder"] = decoder
    if rule == formats.RULE_TIKTOKEN and options:
        fail(f"bpe_cffi.rule 'tiktoken' with option(s) {sorted(options)}: unsupported")
    return {"vocab": vocab, "merges": merges, "special": special,
            "added_non_special": non_special, "added_flags": flags, "rule": rule,
            "pattern": pattern,
            "ignore_merges": _get_bool(model, "ignore_merges", False, fail),
            "byte_level": byte_level, "options": options, "pre_tokenizer": pre,
            "normalizer": normalizer, "decoder": decoder,
            "post_processor": doc.get("post_processor"), "warnings": warnings}


def _split_by(pre_json, pattern) -> bool:
    """True when the file's pre_tokenizer (JSON) is a Split by `pattern` as Tokenizer.save
    writes it (alone, or followed by ByteLevel): the private pattern then says the same as
    the standard fields."""
    steps = pre_json.get("pretokenizers") if isinstance(pre_json, dict) and \
        pre_json.get("type") == "Sequence" else [pre_json]
    if not isinstance(steps, list) or not steps or not isinstance(steps[0], dict):
        return False
    first = steps[0]
    if first.get("type") != "Split" or not isinstance(first.get("pattern"), dict):
        return False
    try:
        want = formats.onig_regex(patterns.resolve(pattern)[1])
    except (TypeError, ValueError):
        return False
    rest_ok = all(isinstance(x, dict) and x.get("type") == "ByteLevel" for x in steps[1:])
    return first["pattern"].get("Regex") == want and len(steps) <= 2 and rest_ok


def _get_bool(d, key, default, fail):
    v = d.get(key)
    if v is None:
        return default
    if not isinstance(v, bool):
        fail(f"model.{key} must be true or false, not {v!r}")
    return v


def _post_processing_warnings(doc, fail) -> list:
    out = []
    post = doc.get("post_processor")
    if post is not None:
        if not isinstance(post, dict) or not isinstance(post.get("type"), str):
            fail(f"post_processor {post!r} has no \"type\"")
        kinds = _post_kinds(post)
        unknown = sorted(kinds - KNOWN_POST_PROCESSORS)
        if unknown:
            fail(f"post_processor {', '.join(unknown)} is not supported (supported, and "
                 f"ignored: {', '.join(sorted(KNOWN_POST_PROCESSORS))})")
        if kinds - {"ByteLevel", "Sequence"}:
            out.append(f"post_processor {post['type']} is ignored: bpe_cffi does not add "
                       f"special tokens around an encoding (ids equal HF's "
                       f"encode(text, add_special_tokens=False))")
    for key in ("truncation", "padding"):
        if doc.get(key) is not None:
            out.append(f"{key} is ignored: bpe_cffi encodes the whole text and does not pad")
    return out


def _post_kinds(post) -> set:
    kinds = {post.get("type")}
    if post.get("type") == "Sequence":
        for p in post.get("processors") or []:
            if isinstance(p, dict):
                kinds |= _post_kinds(p)
            else:
                kinds.add(repr(p))
    return kinds


def _steps(pre) -> list:
    if isinstance(pre, hc.PreTokenizerSequence):
        out = []
        for p in pre.pretokenizers:
            out.extend(_steps(p))
        return out
    return [pre] if pre is not None else []


def _ends_with_byte_level(pre, fail) -> bool:
    """True when the pre-tokenizer's last step is ByteLevel (a byte-level vocabulary); a
    ByteLevel anywhere else is refused (later steps would split mapped text)."""
    steps = _steps(pre)
    for k, p in enumerate(steps):
        if isinstance(p, hc.ByteLevel) and k != len(steps) - 1:
            fail(f"pre_tokenizer ByteLevel followed by {type(steps[k + 1]).__name__} is not "
                 f"supported (ByteLevel must be the last pre-tokenizer)")
    return bool(steps) and isinstance(steps[-1], hc.ByteLevel)


def _plain_pattern(pre, byte_level):
    """The Tokenizer pattern (built-in name or regex) equivalent to the pre-tokenizer, or
    None if it is not a plain regex split."""
    steps = _steps(pre)
    if byte_level:
        last = steps[-1]
        if last.add_prefix_space:
            return None
        rest = steps[:-1]
        if last.use_regex:
            return "gpt2" if not rest else None
    else:
        last = None
        rest = steps
    if len(rest) != 1 or not isinstance(rest[0], hc.Split):
        return None
    split = rest[0]
    if split.behavior != "isolated" or split.invert:
        return None
    if split.pattern.kind == "String":
        import regex
        return regex.escape(split.pattern.source)
    return _known_pattern(split.pattern.source)


def _known_pattern(regex_str: str) -> str:
    """A built-in pattern's name when regex_str is its regex (ours, or the Oniguruma form
    formats.hf_json writes), else regex_str in the regex module's dialect."""
    from .regex_dialects import onig_to_ours
    for name, (rx, _cid) in patterns.BUILTIN.items():
        if regex_str in (rx, formats.onig_regex(rx)):
            return name
    return onig_to_ours(regex_str)      # as the Split compiled it (hf_components)


def _model_options(model, fail) -> dict:
    """The model options that differ from Tokenizer's defaults, checked."""
    opts = {}
    dropout = model.get("dropout")
    if dropout is not None:
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) \
                or not 0.0 <= dropout <= 1.0:
            fail(f"model.dropout must be a number in [0, 1], not {dropout!r}")
        if dropout > 0.0:
            opts["dropout"] = float(dropout)
    for key in ("unk_token", "continuing_subword_prefix", "end_of_word_suffix"):
        v = model.get(key)
        if v is None or v == "":
            continue
        if not isinstance(v, str):
            fail(f"model.{key} must be a string, not {v!r}")
        opts[key] = v
    for key in ("fuse_unk", "byte_fallback"):
        if _get_bool(model, key, False, fail):
            opts[key] = True
    return opts


def _added_tokens(doc, fail):
    """{content: id} of the added tokens, the list of non-special ones, and {content: Flags}
    of those with an option set (lstrip, rstrip, single_word, normalized)."""
    raw = doc.get("added_tokens")
    if raw is None:
        raw = []
    if not isinstance(raw, list):
        fail("added_tokens must be a list")
    special = {}
    non_special = []
    flags = {}
    for k, t in enumerate(raw):
        where = f"added_tokens[{k}]"
        if not isinstance(t, dict) or not isinstance(t.get("content"), str) or not t["content"]:
            fail(f"{where} has no content")
        extra = sorted(set(t) - ADDED_TOKEN_KEYS)
        if extra:
            fail(f"{where} ({t['content']!r}): unknown field(s) {extra}: unsupported")
        s = t["content"]
        i = _checked_id(t.get("id"), where, fail)
        for flag in FLAG_NAMES:
            if not isinstance(t.get(flag, False), bool):
                fail(f"{where} ({s!r}): {flag} must be true or false, not {t[flag]!r}")
        if s in special and special[s] != i:
            fail(f"{where}: {s!r} appears twice, with ids {special[s]} and {i}")
        if i in special.values() and special.get(s) != i:
            other = next(x for x, j in special.items() if j == i)
            fail(f"{where}: id {i} is both {other!r} and {s!r}")
        special[s] = i
        if not t.get("special", False):
            non_special.append(s)
        got = Flags(*(t.get(flag, False) for flag in FLAG_NAMES))
        if got != Flags():
            flags[s] = got
    return special, non_special, flags


def _checked_id(value, where, fail) -> int:
    if type(value) is not int or not 0 <= value < 2 ** 32 - 1:
        fail(f"{where}: token id {value!r} is not an integer in 0 .. 2**32-2")
    return value


def _vocab_and_merges(model, special, byte_level, path, text, fail):
    raw_vocab = model.get("vocab")
    if not isinstance(raw_vocab, dict):
        fail("model.vocab must be an object")
    if "merges" not in model:       # HF refuses such a file too
        fail("model.merges is missing (a BPE model lists its merges, [] for none)")
    raw_merges = model["merges"]
    if not isinstance(raw_merges, list):
        fail("model.merges must be a list")
    # added tokens may also appear in model.vocab, as raw strings: they are special here,
    # and stay model tokens too when the merges use or make them (HF's add_tokens(["ing"])
    # of a token the model has: the model still merges "in" + "g" into it) or when they are
    # initial symbols (a byte, a character), which the model makes without a merge
    pairs = _merge_pairs(raw_merges)
    for s, i in special.items():
        if byte_level and raw_vocab.get(s, i) != i:
            fail(f"added token {s!r} (id {i}) has the text of the model's token "
                 f"{raw_vocab[s]}: HF gives it the model's id and numbers the added tokens "
                 f"after it anew: unsupported")
    also_added = {s for s, i in special.items() if raw_vocab.get(s, -1) == i}
    if also_added:
        prefix = model.get("continuing_subword_prefix") or ""
        suffix = model.get("end_of_word_suffix") or ""
        in_merges = formats.merge_names(pairs, prefix)
        raw_vocab = {s: i for s, i in raw_vocab.items()
                     if not (s in also_added and s not in in_merges and
                             not formats.is_initial_symbol(s, byte_level, prefix, suffix))}
    if byte_level:
        vocab = formats.vocab_from_token_strings(raw_vocab, path, text)

        def to_bytes(s, where):
            return formats.token_str_to_bytes(s, where)
    else:
        vocab = _text_vocab(raw_vocab, path, text)

        def to_bytes(s, where):
            return s.encode("utf-8", "surrogatepass")
    by_bytes = {b: i for i, b in vocab.items()}
    for s, i in special.items():
        b = s.encode("utf-8", "surrogatepass")
        if i in vocab and vocab[i] != b:
            fail(f"added token {s!r} has id {i}, which is the model's token {vocab[i]!r}: "
                 f"unsupported")
        if by_bytes.get(b, i) != i and not byte_level:   # (byte-level: token strings differ)
            fail(f"added token {s!r} (id {i}) is also the model's token {by_bytes[b]}: "
                 f"unsupported")
    # the bytes of each token string, first those of the vocabulary (merges name them)
    cache = dict(zip(raw_vocab, map(vocab.__getitem__, raw_vocab.values())))
    if len(pairs) == len(raw_merges):
        try:             # the usual case: every merge two token strings of the vocabulary
            return vocab, [(cache[a], cache[b]) for a, b in pairs]
        except KeyError:
            pass
    return vocab, [_merge_bytes(k, m, cache, to_bytes, path, fail)
                   for k, m in enumerate(raw_merges)]


def _merge_bytes(k, m, cache, to_bytes, path, fail):
    """The (left, right) bytes of model.merges[k], checked; cache: token string -> bytes."""
    if isinstance(m, str):
        parts = m.split(" ")
    elif isinstance(m, list):
        parts = m
    else:
        parts = None
    if not parts or len(parts) != 2 or not all(isinstance(p, str) and p for p in parts):
        fail(f"model.merges[{k}] must be two tokens, found {m!r}")
    pair = []
    for p in parts:
        b = cache.get(p)
        if b is None:
            b = cache[p] = to_bytes(p, f"{path}: model.merges[{k}]")
        pair.append(b)
    return pair[0], pair[1]


def _merge_pairs(raw_merges) -> list:
    """The [left, right] token strings of the well-formed entries of model.merges (either
    form; a part may be empty, which no token is); the others are left to the merges'
    check."""
    if all(type(m) is str for m in raw_merges):        # "a b" each, as HF writes them
        pairs = [m.split(" ") for m in raw_merges]
        if all(len(p) == 2 for p in pairs):
            return pairs
    pairs = []
    for m in raw_merges:
        parts = m.split(" ") if type(m) is str else m
        if type(parts) is list and len(parts) == 2 and type(parts[0]) is str and \
                type(parts[1]) is str:
            pairs.append(parts)
    return pairs


def _text_vocab(raw_vocab, path, text) -> dict:
    """{token string: id} with literal-text tokens -> {id: UTF-8 bytes}, checked."""
    vocab = {}
    for s, i in raw_vocab.items():
        where = path
        if text is not None:
            line = formats._json_key_lines(text, [s]).get(s) if (
                not s or type(i) is not int) else None
            where = f"{path}:{line}" if line else path
        if not s:
            raise ValueError(f"{where}: token {s!r}: the empty string is not a token")
        if type(i) is not int or not 0 <= i < 2 ** 32 - 1:
            raise ValueError(f"{where}: token {s!r}: id {i!r} is not an integer in "
                             f"0 .. 2**32-2")
        if i in vocab:
            raise ValueError(f"{where}: token {s!r}: duplicate id {i} (also token "
                             f"{vocab[i].decode('utf-8', 'replace')!r})")
        vocab[i] = s.encode("utf-8", "surrogatepass")
    return vocab


# ---- handing the result to Tokenizer ----------------------------------------------------

def tokenizer_keywords(cls) -> set:
    """The keyword arguments cls.__init__ accepts (all of them if it takes **kwargs)."""
    params = inspect.signature(cls.__init__).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params}


def check_options_supported(cls, options, path) -> None:
    """ValueError naming the options of a tokenizer.json that cls(...) does not accept."""
    accepted = tokenizer_keywords(cls)
    if accepted is None:
        return
    missing = [k for k in options if k not in accepted]
    if missing:
        what = ", ".join(f"{k}={_short(options[k])}" for k in missing)
        raise ValueError(f"{os.fspath(path)}: option{'s' if len(missing) > 1 else ''} "
                         f"{what} {'are' if len(missing) > 1 else 'is'} not supported by "
                         f"this version of Tokenizer")


def _short(v) -> str:
    return type(v).__name__ if hasattr(v, "to_json") else repr(v)
