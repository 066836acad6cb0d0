"""Regexes between the two dialects a tokenizer.json meets: HF runs its regexes with
Oniguruma (Ruby syntax), bpe_cffi with the `regex` module (V0).  Most syntax reads the same;
what does not is rewritten here, or refused with ValueError where no rewrite is exact.

    construct        Oniguruma (HF)                         regex module (ours)
    ^  $             start / end of any line                start / end of the text
    \\w  \\W          Letter|Mark|Number|Connector_Punct.    Alphabetic|Mark|Decimal_Number|
                                                            Connector_Punct.|Join_Control
    \\b  \\B          boundary of that \\w                   boundary of that \\w
    X{m,n}+          (?:X{m,n})+                            possessive X{m,n}
    \\h  \\H          a hex digit                            horizontal space
    [a[b]]  [a&&b]   a nested class / an intersection      '[' and '&' are plain characters
    (?m)             dot matches newline                    multi-line ^ $
    [\\w]  [^\\W]      \\w without Other_Number (unlike \\w)     as \\w

The table was measured with HF `tokenizers` over every assigned code point (a probe found
\\w differing on 1/2, superscript digits and ZWNJ/ZWJ, and ^ $ on every line).

The scanner below walks a pattern as both engines tokenize it where they agree: an escape is
a backslash and the next character; a class opens at '[' (a ']' first in it, after an
optional '^', is a plain character) and closes at the next unescaped ']'.
"""

# \w of each dialect, spelled with properties that both engines read alike.  Oniguruma's \w
# inside a character class ([\w'], [^\W]) is not its \w outside one: no Other_Number there.
ONIG_WORD = r"\p{L}\p{M}\p{N}\p{Pc}"
ONIG_WORD_IN_CLASS = r"\p{L}\p{M}\p{Nd}\p{Pc}"
OURS_WORD = r"\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}"
# Oniguruma's line anchors in the regex module: ^ at the start of the text or of a line, but
# not after a newline that ends the text; $ before any newline or at the end
ONIG_LINE_START = r"(?:\A|(?m:^)(?!\Z))"
ONIG_LINE_END = r"(?m:$)"


def _boundary(word: str, negated: bool) -> str:
    inside, outside = f"(?<=[{word}])", f"(?<![{word}])"
    ahead_in, ahead_out = f"(?=[{word}])", f"(?![{word}])"
    if negated:
        return f"(?:{inside}{ahead_in}|{outside}{ahead_out})"
    return f"(?:{inside}{ahead_out}|{outside}{ahead_in})"


def _tokens(pattern: str):
    """(token, in_class) for each token of pattern: an escape (two characters), or one
    character; a class's opening '[' (with its '^' and a leading ']') is one token."""
    i, n, in_class = 0, len(pattern), False
    while i < n:
        c = pattern[i]
        if c == "\\" and i + 1 < n:
            yield pattern[i:i + 2], in_class
            i += 2
        elif c == "[" and not in_class:
            j = i + 1
            if pattern.startswith("^", j):
                j += 1
            if pattern.startswith("]", j):
                j += 1
            yield pattern[i:j], False
            in_class = True
            i = j
        elif c == "]" and in_class:
            yield c, True
            in_class = False
            i += 1
        else:
            yield c, in_class
            i += 1


def _refuse(pattern: str, what: str):
    raise ValueError(f"regex {pattern!r} uses {what}")


def _common_checks(pattern: str, tok: str, in_class: bool, nxt: str) -> None:
    if in_class and tok == "[":
        _refuse(pattern, "'[' inside a character class (a nested class or [[:name:]] in "
                         "Oniguruma, a plain '[' in the regex module)")
    if in_class and tok == "&" and nxt == "&":
        _refuse(pattern, "'&&' inside a character class (an intersection in Oniguruma)")
    if tok in ("\\h", "\\H"):
        _refuse(pattern, "\\h or \\H, a hex digit in Oniguruma but horizontal space in the "
                         "regex module")


def _flag_group(pattern: str, k: int, toks) -> str:
    """The letters of an inline flag group starting at token k ('(' then '?'), or ''."""
    if toks[k][0] != "(" or k + 2 >= len(toks) or toks[k + 1][0] != "?":
        return ""
    letters = ""
    for tok, _ in toks[k + 2:]:
        if tok in (":", ")"):
            break
        if not (tok.isalpha() or tok == "-"):
            return ""
        letters += tok
    return letters


def _rewrite(pattern: str, word: str, word_in_class: str, anchors: dict,
             m_flag: str) -> str:
    """pattern with \\w \\W \\b \\B spelled by the word class `word` (`word_in_class` for \\w
    inside a class) and the anchors of `anchors` replaced; ValueError for the constructs
    without an exact rewrite (m_flag: why the m flag is one)."""
    toks = list(_tokens(pattern))
    out = []
    for k, (tok, in_class) in enumerate(toks):
        nxt = toks[k + 1][0] if k + 1 < len(toks) else ""
        _common_checks(pattern, tok, in_class, nxt)
        if not in_class and "m" in _flag_group(pattern, k, toks):
            _refuse(pattern, m_flag)
        if tok == "\\w":
            out.append(word_in_class if in_class else f"[{word}]")
        elif tok == "\\W":
            if in_class:
                _refuse(pattern, "\\W inside a character class")
            out.append(f"[^{word}]")
        elif tok in ("\\b", "\\B") and not in_class:
            out.append(_boundary(word, tok == "\\B"))
        elif tok in anchors and not in_class:
            out.append(anchors[tok])
        else:
            out.append(tok)
    return "".join(out)


def onig_to_ours(pattern: str) -> str:
    """The regex-module pattern that matches what Oniguruma matches with `pattern`."""
    import re
    if re.search(r"(?<!\\)(?:\\\\)*\{\d*(?:,\d*)?\}\+", pattern):
        _refuse(pattern, "X{m,n}+, which Oniguruma reads as (?:X{m,n})+ and the regex module "
                         "as a possessive repeat")
    return _rewrite(pattern, ONIG_WORD, ONIG_WORD_IN_CLASS,
                    {"^": ONIG_LINE_START, "$": ONIG_LINE_END},
                    "the m flag (dot matches newline in Oniguruma)")


def ours_to_onig(pattern: str) -> str:
    """The Oniguruma pattern (for a tokenizer.json) that matches what the regex module
    matches with `pattern`.  Possessive bounded repeats become greedy ones: in our built-in
    patterns nothing follows them inside their alternative, so the matches are the same."""
    import re
    pattern = re.sub(r"(?<!\\)(\{\d+(?:,\d*)?\})\+", r"\1", pattern)
    if ONIG_LINE_START in pattern or ONIG_LINE_END in pattern:
        # read from a tokenizer.json (onig_to_ours): its line anchors go back as they came
        return "^".join("$".join(_ours_to_onig(part) for part in piece.split(ONIG_LINE_END))
                        for piece in pattern.split(ONIG_LINE_START))
    return _ours_to_onig(pattern)


def _ours_to_onig(pattern: str) -> str:
    multiline = pattern.startswith("(?m)")
    if multiline:                        # Oniguruma's ^ $ are line anchors already
        pattern = pattern[len("(?m)"):]
    return _rewrite(pattern, OURS_WORD, OURS_WORD, {} if multiline else {"^": "\\A", "$": "\\Z"},
                    "the m flag other than a leading (?m) (it means something else in "
                    "Oniguruma)")
