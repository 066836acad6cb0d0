"""Where HuggingFace finds a tokenizer.json's added tokens in text, when their options make
it differ from one longest-match scan.

An added token of a tokenizer.json carries four options (HF `AddedToken`):
  lstrip       the token takes the whitespace before it (its span starts there);
  rstrip       the token takes the whitespace after it;
  single_word  the token is only found where no word character touches it on either side;
  normalized   the token is found in the normalized text, after the others.
With all four false for every token, HF splits added tokens out of the raw text as the C
scanner does (longest match at the leftmost place).  Otherwise `AddedTokens.parts` does it
the way HF's AddedVocabulary does, and the Tokenizer encodes the text between the tokens:

  1. the tokens with normalized=false are found in the raw text (pass 1);
  2. each stretch between them is normalized (by the tokenizer's normalizer, if any), and the
     tokens with normalized=true are found in it (pass 2), each by its text as the normalizer
     makes it (HF normalizes them too: with NFKC, "\ufb01" is found as "fi"); what is left is
     pre-tokenized and encoded.

One pass (`_splits`) walks the non-overlapping leftmost-longest matches of the tokens in
order.  A single_word match touched by a word character is dropped, and the text it covered
is not searched again (so a shorter token inside it is not found either).  lstrip moves a
match's start back over the whitespace before it, but not before the end of the previous
token; rstrip moves its end forward over the whitespace after it, while the search goes on
from the match's own end (so a token made of whitespace can be found again inside the
whitespace rstrip took: HF emits both, unless lstrip leaves the second one nothing: HF drops
an empty one, and fails with "AddedVocabulary bad split" where it would end before it starts;
both are dropped here).  Whitespace is Unicode's White_Space property (Rust's
char::is_whitespace); a word character is one of the Rust regex crate's `\\w` (Alphabetic,
marks, decimal digits, connector punctuation, Join_Control), which HF tests it with.
"""
from typing import NamedTuple

import regex

from .offsets import WHITE_SPACE

_WORD = regex.compile(r"[\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}]")

FLAG_NAMES = ("lstrip", "rstrip", "single_word", "normalized")


class Flags(NamedTuple):
    lstrip: bool = False
    rstrip: bool = False
    single_word: bool = False
    normalized: bool = False

    @property
    def moves_match(self) -> bool:
        return self.lstrip or self.rstrip or self.single_word


def needed(names, flags: dict, has_normalizer: bool) -> bool:
    """Whether the added tokens `names`, with {content: Flags} (missing: all false), are found
    differently from one plain longest-match scan of the raw text."""
    values = [flags.get(s, Flags()) for s in names]
    if any(f.moves_match for f in values):
        return True
    normalized = [f.normalized for f in values]
    if not any(normalized):
        return False
    # all normalized and no normalizer: pass 1 finds nothing, pass 2 scans the raw text
    return has_normalizer or not all(normalized)


class AddedTokens:
    """The added tokens {content: id} with their {content: Flags} (missing: all false), and
    the matchers for each set of allowed tokens (made once per set).  `normalize`: the
    tokenizer's normalizer (str -> str) or None.  ValueError if two tokens with
    normalized=true are the same text once normalized."""

    def __init__(self, special: dict, flags: dict, normalize=None):
        self.flags = {s: flags.get(s, Flags()) for s in special}
        self.flags_of_id = {i: self.flags[s] for s, i in special.items()}
        self.any_lstrip = any(f.lstrip for f in self.flags.values())
        self.any_single_word = any(f.single_word for f in self.flags.values())
        # each token's text as it is found (normalized ones: as the normalizer makes it), and
        # (that text, whether normalized) -> (its id, its flags)
        self._names = {}
        self.found_as = {}
        for s, i in special.items():
            f = self.flags[s]
            key = normalize(s) if f.normalized and normalize is not None else s
            other = self.found_as.get((key, f.normalized))
            if other is not None and key:       # (one normalized to nothing is never found)
                raise ValueError(f"added tokens {other[2]!r} and {s!r} are both {key!r} "
                                 f"once normalized: unsupported")
            self._names[s] = key
            self.found_as[(key, f.normalized)] = (i, f, s)
        self._matchers = {}
        # every start (not the whole) of a token's text, for prefix_at_end
        self._starts = {t[:k] for t in self._names.values() for k in range(1, len(t))}
        self._longest = max(map(len, self._names.values()), default=0)

    def _matcher_pair(self, allowed):
        key = frozenset(allowed)
        pair = self._matchers.get(key)
        if pair is None:
            raw = [s for s in key if not self.flags[s].normalized]
            norm = [self._names[s] for s in key if self.flags[s].normalized]
            pair = (_alternation(raw), _alternation([s for s in norm if s]))
            self._matchers[key] = pair
        return pair

    def parts(self, text: str, allowed, normalize=None) -> list:
        """text cut as HF cuts it, with the tokens of `allowed` (names) found: a list of
        (id, start, end) for a token (a span of text, whitespace it took included) and
        (piece, at, normalized) for text between tokens: piece is a str, at where it starts
        in text (in the normalized stretch for pass 2, so only at == 0 is exact), normalized
        whether normalize() was applied to it already."""
        raw_rx, norm_rx = self._matcher_pair(allowed)
        out = []
        for tid, a, b in self._splits(text, raw_rx, False):
            if tid is not None:
                out.append((tid, a, b))
                continue
            piece = text[a:b]
            if norm_rx is None:
                out.append((piece, a, False))
                continue
            if normalize is not None:
                piece = normalize(piece)
            for tid2, c, d in self._splits(piece, norm_rx, True):
                out.append((tid2, a + c, a + d) if tid2 is not None
                           else (piece[c:d], a + c, normalize is not None))
        return out

    def prefix_at_end(self, s: str) -> int:
        """The length of the longest end of s that is the start (not the whole) of a token's
        text: where text appended to s could still make a token begin."""
        for k in range(min(self._longest - 1, len(s)), 0, -1):
            if s[len(s) - k:] in self._starts:
                return k
        return 0

    def clean_cut(self, s: str, k: int) -> bool:
        """Whether finding the tokens of s[k:] alone sees what finding them in s sees at k:
        the character before k is not whitespace an lstrip token could take, nor a word
        character a single_word token looks at."""
        if k == 0:
            return True
        c = s[k - 1]
        return not ((self.any_lstrip and c in WHITE_SPACE) or
                    (self.any_single_word and _WORD.match(c) is not None))

    def _splits(self, s: str, rx, normalized: bool) -> list:
        """One pass: [(id or None, start, end)] covering s (see the module docstring), with
        the tokens whose normalized flag is `normalized`."""
        if rx is None:
            return [(None, 0, len(s))] if s else []
        out = []
        done = 0                          # where the last token's span ended
        for m in rx.finditer(s):
            start, stop = m.span()
            tid, f, _ = self.found_as[(m.group(), normalized)]
            if f.single_word and (_word_at(s, start - 1) or _word_at(s, stop)):
                continue
            if f.lstrip:
                start = max(space_start(s, start), done)
            if f.rstrip:
                stop = space_end(s, stop)
            if start >= stop:     # inside whitespace an earlier token took (see above)
                continue
            if done < start:
                out.append((None, done, start))
            out.append((tid, start, stop))
            done = stop
        if done < len(s):
            out.append((None, done, len(s)))
        return out


def _alternation(names):
    """A regex finding the leftmost-longest of the names (the longest tried first), or None."""
    if not names:
        return None
    names = sorted(names, key=len, reverse=True)
    return regex.compile("|".join(regex.escape(s) for s in names))


def _word_at(s: str, k: int) -> bool:
    return 0 <= k < len(s) and _WORD.match(s[k]) is not None


def space_start(s: str, k: int) -> int:
    while k > 0 and s[k - 1] in WHITE_SPACE:
        k -= 1
    return k


def word_start(s: str, k: int) -> int:
    """The start of the run of word characters that ends at k."""
    while k > 0 and _WORD.match(s[k - 1]) is not None:
        k -= 1
    return k


def space_end(s: str, k: int) -> int:
    while k < len(s) and s[k] in WHITE_SPACE:
        k += 1
    return k
