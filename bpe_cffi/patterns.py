"""The split patterns: names, regex strings, and their C scanner ids.

The strings are the ones tiktoken uses for r50k/p50k (our "gpt2"), cl100k_base and o200k_base.
A pattern given by name runs in the hand-written C scanner; any other regex string is run by
the `regex` module in Python and only the BPE runs in C.
"""
GPT2 = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
CL100K = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++"""
          r"""[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""")
O200K = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])

# name -> (regex string, C pattern id from bpe.h)
BUILTIN = {
    "gpt2": (GPT2, 1),
    "cl100k": (CL100K, 2),
    "o200k": (O200K, 3),
}
ALIASES = {"r50k": "gpt2", "p50k": "gpt2", "r50k_base": "gpt2", "p50k_base": "gpt2",
           "cl100k_base": "cl100k", "o200k_base": "o200k"}


def resolve(pattern: str) -> tuple:
    """Return (name or None, regex string, C pattern id; 0 means split in Python)."""
    if not isinstance(pattern, str):
        raise TypeError(f"pattern must be a str, not {type(pattern).__name__}")
    name = ALIASES.get(pattern, pattern)
    if name in BUILTIN:
        regex, cid = BUILTIN[name]
        return name, regex, cid
    for known, (regex, cid) in BUILTIN.items():
        if pattern == regex:
            return known, regex, cid
    if _is_word(pattern):              # meant as a name: a regex of it matches itself only
        meant = _name_meant(pattern)
        guess = f"; did you mean {meant!r}?" if meant else ""
        raise ValueError(f"pattern {pattern!r} is not a pattern name{guess} (names: gpt2, "
                         f"cl100k, o200k, and tiktoken's r50k_base, p50k_base, cl100k_base, "
                         f"o200k_base.  As a regex it would match only the text {pattern!r}; "
                         f"write (?:{pattern}) if that is what you want.)")
    import regex as _regex
    try:
        _regex.compile(pattern)
    except _regex.error as exc:
        raise ValueError(f"pattern is neither a known name (gpt2, cl100k, o200k) nor a valid "
                         f"regex: {exc}") from None
    return None, pattern, 0


def _squeezed(name: str) -> str:
    return "".join(c for c in name.lower() if c.isalnum())


def _is_word(pattern: str) -> bool:
    """True for a short string of letters, digits, '-', '_' and spaces: written as a name
    ("gpt3", "GPT-2"), since a regex with any syntax has some other character."""
    return 0 < len(pattern) <= 20 and all(c.isalnum() or c in "-_ " for c in pattern)


def _name_meant(pattern: str):
    """The pattern name that `pattern` (a word, _is_word) misspells by case, '-', '_' or
    spaces ("gpt-2", "GPT2", "cl100k-base"), or None."""
    squeezed = _squeezed(pattern)
    for name in [*BUILTIN, *ALIASES]:
        if _squeezed(name) == squeezed:
            return name
    return None
