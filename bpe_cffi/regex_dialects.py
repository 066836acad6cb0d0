"""Regexes between the two dialects a tokenizer.json meets: HF runs its regexes with
Oniguruma (Ruby syntax), bpe_cffi with the `regex` module (V0).  Most syntax reads the same;
what does not is rewritten here, or refused with ValueError where no rewrite is exact.

    construct        Oniguruma (HF)                         regex module (ours)
    ^  $             start / end of any line                start / end of the text
    \\w  \\W          Alphabetic|Mark|Decimal_Number|        Alphabetic|Mark|Decimal_Number|
                     Connector_Punct. and ² ³ ¹ ¼ ½ ¾      Connector_Punct.|Join_Control
    \\b  \\B          boundary of that \\w                   boundary of that \\w
    X{m,n}+          (?:X{m,n})+                            possessive X{m,n}
    \\h  \\H          a hex digit                            horizontal space
    [a[b]]  [a&&b]   a nested class / an intersection      '[' and '&' are plain characters
    (?m)             dot matches newline                    multi-line ^ $
    [\\w]  [^\\W]      \\w without ² ³ ¹ ¼ ½ ¾ (unlike \\w)        as \\w
    \\Z  \\z          end, or before a final newline / end   end / (end)
    \\p{Word}        \\w                                      without ² ³ ¹ ¼ ½ ¾
    \\p{XDigit}      0-9 A-F a-f                              any decimal digit too
    \\p{Extended_Pictographic}  707 more symbols (U+2605...)     (refused both ways)
    \\N{NAME}        \\N is any character but a newline        the character named NAME
    \\U0001F600      'U0001F600'                              the character U+1F600
    \\x{1F600}       the character U+1F600                    an error
    (?P<n> (?P=n)    (Oniguruma: (?<n> and \\k<n>)             named group, backreference
    (?s)             (Oniguruma: (?m))                       dot matches newline
    (?a) (?u) ...    undefined group options                 ASCII, Unicode ... flags

Going the other way (ours_to_onig, for a tokenizer.json we write), the regex module's own
syntax in the last rows is rewritten into Oniguruma's (\\N{NAME} and \\U as \\x{code
point}) or refused, and where HF `tokenizers` is installed the result must compile in its
engine; onig_to_ours reads \\x{...} as \\u or \\U.

The table was measured with HF `tokenizers` (0.23) over every code point both engines know:
\\w differed on 889 Other_Numbers, 130 circled letters and, in a class, 236 letter numbers
before its spelling here (probe of December 2026); \\p{...} names not listed read alike,
but for the characters assigned in Unicode versions newer than Oniguruma's (README).

The scanner below walks a pattern as both engines tokenize it where they agree: an escape is
a backslash and the next character; a class opens at '[' (a ']' first in it, after an
optional '^', is a plain character) and closes at the next unescaped ']'.
"""

# \w of each dialect, spelled with properties that both engines read alike.  Oniguruma's \w
# inside a character class ([\w'], [^\W]) is not its \w outside one: no Other_Number there.
ONIG_WORD = r"\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\u00B2\u00B3\u00B9\u00BC-\u00BE"
ONIG_WORD_IN_CLASS = r"\p{Alphabetic}\p{M}\p{Nd}\p{Pc}"
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


def _negated_property(toks, k: int) -> bool:
    """Whether toks[k] is the '^' of \\p{^X} or \\P{^X} (no anchor: a negation)."""
    return k >= 2 and toks[k - 1][0] == "{" and toks[k - 2][0] in ("\\p", "\\P")


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
        elif tok in anchors and not in_class and not _negated_property(toks, k):
            out.append(anchors[tok])
        else:
            out.append(tok)
    return "".join(out)


# Escapes whose '{' opens an argument, not a repeat: \x{20}+ is a space repeated
_BRACED_ESCAPES = ("\\x", "\\p", "\\P", "\\N", "\\o", "\\u", "\\k", "\\g")


def _possessive_bounded_repeats(pattern: str) -> list:
    """The index in pattern of the '+' of each X{m,n}+ (a bounded repeat followed by '+')."""
    import re
    marked = list(_tokens(pattern))
    at, starts = 0, []
    for tok, _ in marked:
        starts.append(at)
        at += len(tok)
    found = []
    for k, (tok, in_class) in enumerate(marked):
        if tok != "{" or in_class or (k and marked[k - 1][0] in _BRACED_ESCAPES):
            continue
        m = re.match(r"\{\d*(?:,\d*)?\}\+", pattern[starts[k]:])
        if m and m.end() > 3:
            found.append(starts[k] + m.end() - 1)
    return found


def onig_to_ours(pattern: str) -> str:
    """The regex-module pattern that matches what Oniguruma matches with `pattern`."""
    if _possessive_bounded_repeats(pattern):
        _refuse(pattern, "X{m,n}+, which Oniguruma reads as (?:X{m,n})+ and the regex module "
                         "as a possessive repeat")
    return _rewrite(_onig_syntax_to_ours(pattern), ONIG_WORD, ONIG_WORD_IN_CLASS,
                    {"^": ONIG_LINE_START, "$": ONIG_LINE_END, "\\Z": "(?=\\n?\\Z)",
                     "\\z": "\\Z"},
                    "the m flag (dot matches newline in Oniguruma)")


def _onig_syntax_to_ours(pattern: str) -> str:
    """Oniguruma's own spellings as the regex module's: \\x{HHHH} (which it does not read)
    as \\uHHHH or \\UHHHHHHHH, \\k<n> (a backreference) as \\g<n>, \\g<n> (a call) as
    (?&n), and the m flag (dot matches newline) as s."""
    marked = list(_tokens(pattern))
    toks = [t for t, _ in marked]
    out, k = [], 0
    while k < len(toks):
        tok, in_class = toks[k], marked[k][1]
        if tok == "\\x" and toks[k + 1:k + 2] == ["{"]:
            digits, k = _braced(pattern, toks, k + 1)
            out.append(_code_point_escape(pattern, digits))
            continue
        if tok in ("\\p", "\\P") and toks[k + 1:k + 2] == ["{"]:
            _refuse_differing_property(pattern, _braced(pattern, toks, k + 1)[0])
        if tok in ("\\k", "\\g") and toks[k + 1:k + 2] == ["<"] and not in_class:
            name, k = _closed_by(pattern, toks, k + 2, ">")
            out.append(f"\\g<{name}>" if tok == "\\k" else f"(?&{name})")
            continue
        if tok == "(" and not in_class and _is_flag_group(toks, k):
            j = k + 2
            while toks[j] not in (":", ")"):          # its letters, read on below
                toks[j] = "s" if toks[j] == "m" else toks[j]
                j += 1
        out.append(tok)
        k += 1
    return "".join(out)


def _code_point_escape(pattern: str, digits: str) -> str:
    try:
        cp = int(digits, 16)
        if not 0 <= cp <= 0x10FFFF:
            raise ValueError
    except ValueError:
        _refuse(pattern, f"\\x{{{digits}}}, which is no code point")
    return f"\\u{cp:04X}" if cp <= 0xFFFF else f"\\U{cp:08X}"


def _closed_by(pattern: str, toks, k: int, end: str):
    """(the text of toks[k:] up to the token `end`, the index after it): the name or
    argument after an opening token toks[k - 1]."""
    j = k
    while j < len(toks) and toks[j] != end:
        j += 1
    if j == len(toks):
        _refuse(pattern, f"a {toks[k - 1]!r} not closed by {end!r}")
    return "".join(toks[k:j]), j + 1


def ours_to_onig(pattern: str) -> str:
    """The Oniguruma pattern (for a tokenizer.json) that matches what the regex module
    matches with `pattern`.  Possessive bounded repeats become greedy ones: in our built-in
    patterns nothing follows them inside their alternative, so the matches are the same."""
    given = pattern
    for at in reversed(_possessive_bounded_repeats(pattern)):
        pattern = pattern[:at] + pattern[at + 1:]
    if ONIG_LINE_START in pattern or ONIG_LINE_END in pattern:
        # read from a tokenizer.json (onig_to_ours): its line anchors go back as they came
        out = "^".join("$".join(_ours_to_onig(part) for part in piece.split(ONIG_LINE_END))
                       for piece in pattern.split(ONIG_LINE_START))
    else:
        out = _ours_to_onig(pattern)
    from .patterns import BUILTIN
    if all(given != regex_str for regex_str, _ in BUILTIN.values()):   # those compile there
        _check_compiles_in_hf(given, out)
    return out


def _ours_to_onig(pattern: str) -> str:
    multiline = pattern.startswith("(?m)")
    if multiline:                        # Oniguruma's ^ $ are line anchors already
        pattern = pattern[len("(?m)"):]
    anchors = {"\\Z": "\\z"} if multiline else {"^": "\\A", "$": "\\Z", "\\Z": "\\z"}
    out = _rewrite(pattern, OURS_WORD, OURS_WORD, anchors, _M_FLAG)
    return _ours_syntax_to_onig(out, pattern)


_M_FLAG = "the m flag other than a leading (?m) (it means something else in Oniguruma)"

# Inline flags of the regex module that Oniguruma has under another letter ("" : the same
# in both for a str pattern, dropped); the other flag letters are refused.
_FLAGS_TO_ONIG = {"i": "i", "x": "x", "s": "m", "u": "", "V0": ""}


def _ours_syntax_to_onig(text: str, pattern: str) -> str:
    """text (pattern, or what _rewrite made of it) with the regex module's own spellings
    written as Oniguruma's: \\N{NAME}, (?P<name> (?P=name) (?P>name), \\p{^X}, and inline
    flags; ValueError naming pattern for the flags and property forms Oniguruma lacks."""
    marked = list(_tokens(text))
    toks = [t for t, _ in marked]
    out, k = [], 0
    while k < len(toks):
        tok, rest, in_class = toks[k], "".join(toks[k + 1:k + 3]), marked[k][1]
        if tok == "\\N" and k + 1 < len(toks) and toks[k + 1] == "{":
            name, k = _braced(pattern, toks, k + 1)
            out.append(f"\\x{{{ord(_named_character(pattern, name)):X}}}")
            continue
        if tok == "\\U":                   # Oniguruma reads \U0001F600 as 'U0001F600'
            digits = "".join(toks[k + 1:k + 9])
            if len(digits) != 8 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                _refuse(pattern, "\\U not followed by 8 hex digits")
            out.append(f"\\x{{{int(digits, 16):X}}}")
            k += 9
            continue
        if tok in ("\\p", "\\P") and k + 1 < len(toks) and toks[k + 1] == "{":
            name, k = _braced(pattern, toks, k + 1)
            out.append(_property(pattern, tok, name))
            continue
        if tok == "\\g" and toks[k + 1:k + 2] == ["<"] and not in_class:
            name, k = _closed_by(pattern, toks, k + 2, ">")     # a backreference, in ours
            out.append(f"\\k<{name}>")
            continue
        if tok == "(" and rest == "?&" and not in_class:        # a call, in ours
            name, k = _closed_by(pattern, toks, k + 3, ")")
            out.append(f"\\g<{name}>")
            continue
        if tok == "(" and rest == "?P" and not in_class:
            name, k = _group_name(pattern, toks, k + 3)
            out.append(name)
            continue
        if tok == "(" and not in_class and _is_flag_group(toks, k):
            flags, k = _flags(pattern, toks, k + 2)
            out.append(flags)
            continue
        out.append(tok)
        k += 1
    return "".join(out)


def _is_flag_group(toks, k: int) -> bool:
    """Whether toks[k] == '(' opens an inline flag group: (?letters) or (?letters:, the
    letters possibly with a '-' and the regex module's V0 / V1."""
    if toks[k + 1:k + 2] != ["?"]:
        return False
    j = k + 2
    while j < len(toks) and (toks[j].isalpha() or toks[j] == "-" or
                             (toks[j] in ("0", "1") and toks[j - 1] == "V")):
        j += 1
    return j > k + 2 and j < len(toks) and toks[j] in (":", ")")


def _braced(pattern: str, toks, k: int):
    """(the text between toks[k] == '{' and the next '}', the index after it)."""
    return _closed_by(pattern, toks, k + 1, "}")


def _named_character(pattern: str, name: str) -> str:
    import unicodedata
    try:
        return unicodedata.lookup(name)
    except KeyError:
        _refuse(pattern, f"\\N{{{name}}}, which names no character Python knows")


# Property names the two engines read differently (see the table above)
_DIFFERING_PROPERTIES = {"word", "xdigit", "extendedpictographic", "extpict"}


def _refuse_differing_property(pattern: str, name: str) -> None:
    if name.lstrip("^").lower().replace("_", "").replace(" ", "").replace("-", "") in \
            _DIFFERING_PROPERTIES:
        _refuse(pattern, f"\\p{{{name}}}, which HF's engine (Oniguruma) and the regex module "
                         f"read differently")


def _property(pattern: str, escape: str, name: str) -> str:
    _refuse_differing_property(pattern, name)
    if name.startswith("^"):           # \p{^X} is \P{X}, and \P{^X} is \p{X}
        escape, name = ("\\P" if escape == "\\p" else "\\p"), name[1:]
    if any(c in name for c in "&=:") or name[:2] == "Is":
        _refuse(pattern, f"{escape}{{{name}}}, a property form of the regex module that "
                         f"Oniguruma does not read (write the bare name: \\p{{Latin}}, "
                         f"\\p{{Lu}})")
    return f"{escape}{{{name}}}"


def _group_name(pattern: str, toks, k: int):
    """After '(?P': (?P<n> -> (?<n>, (?P=n) -> \\k<n>, (?P>n) -> \\g<n>; (text, next index)."""
    kind = toks[k] if k < len(toks) else ""
    if kind == "<":
        return "(?<", k + 1
    if kind not in ("=", ">"):
        _refuse(pattern, "a (?P group Oniguruma cannot read")
    name, end = _closed_by(pattern, toks, k + 1, ")")
    return (f"\\k<{name}>" if kind == "=" else f"\\g<{name}>"), end


def _flags(pattern: str, toks, k: int):
    """The inline flag group whose letters start at toks[k], in Oniguruma's letters; a group
    left with no letter goes away (or becomes (?: when scoped).  (text, next index)."""
    on, off, minus, j = [], [], False, k
    while toks[j] not in (":", ")"):
        letter = toks[j]
        if letter == "V" and j + 1 < len(toks) and toks[j + 1] in "01":
            letter += toks[j + 1]
            j += 1
        if letter == "-":
            minus = True
        elif letter == "m":                 # (_rewrite has refused it already)
            _refuse(pattern, _M_FLAG)
        elif letter in _FLAGS_TO_ONIG:
            if _FLAGS_TO_ONIG[letter]:
                (off if minus else on).append(_FLAGS_TO_ONIG[letter])
        else:
            _refuse(pattern, f"the inline flag {letter!r}, which Oniguruma does not have "
                             f"(it knows i, x and the regex module's s, as m)")
        j += 1
    end = toks[j]
    if not on and not off:
        return ("(?:" if end == ":" else ""), j + 1
    return "(?" + "".join(on) + ("-" + "".join(off) if off else "") + end, j + 1


def _check_compiles_in_hf(pattern: str, onig: str) -> None:
    """ValueError when HF `tokenizers` is installed and its engine rejects `onig` (what a
    tokenizer.json holding it would fail to load with)."""
    try:
        from tokenizers import Regex
    except ImportError:
        return
    try:
        Regex(onig)
    except Exception as exc:            # tokenizers raises a plain Exception
        raise ValueError(f"regex {pattern!r} cannot be written for HF tokenizers: as "
                         f"{onig!r} its engine (Oniguruma) says: {exc}") from None
