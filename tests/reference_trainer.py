"""A slow, obviously-correct byte-level BPE trainer: the definition the C trainer must match.

Clarity over speed: every step recounts every pair of every pre-token.  Use it on corpora of
a few hundred KB at most.

The semantics (bpe_cffi.train documents the same rules):
  1. The text is decoded as UTF-8 with errors="replace" (so invalid bytes become U+FFFD) and
     split on the special tokens (longest first at a position); nothing is learned across them.
  2. Each segment is split into pre-tokens with the pattern's regex (the `regex` module); each
     pre-token is counted as its UTF-8 bytes.
  3. A pre-token is a sequence of tokens, each a `bytes`; at the start one token per byte.
  4. The count of a pair (x, y) is, summed over pre-tokens, (number of positions i where
     token i is x and token i+1 is y) x (frequency of the pre-token).  Every adjacent
     position counts, overlapping ones included: "aaa" contributes 2 to (a, a).
  5. Each step picks the pair with the highest count; ties go to the greatest
     (left bytes, right bytes) as Python compares tuples of bytes.  It stops when no pair has a
     positive count, when the best count is below min_frequency, or when the vocabulary is full.
  6. The pair is merged in every pre-token from left to right without overlap ("aaa" with
     (a, a) becomes "aa", "a").
  7. The merged token's bytes are left + right.  It gets the next id unless those bytes are
     already a token (two merge paths can spell the same bytes); then the merge is still
     recorded but the vocabulary does not grow, and training goes on.
  8. Ids 0..255 are the single bytes, then the learned tokens in order, then the special
     tokens.  Training stops when len(vocab) reaches vocab_size.
"""
from collections import Counter

import regex


def split_specials(text: str, special_tokens) -> list:
    """The segments of text between special tokens (leftmost, then longest, match)."""
    if not special_tokens:
        return [text]
    alternation = "|".join(regex.escape(s) for s in sorted(special_tokens, key=len, reverse=True))
    return regex.split(alternation, text)


def count_pretokens(text: str, pattern: str, special_tokens) -> Counter:
    counts = Counter()
    compiled = regex.compile(pattern)
    for segment in split_specials(text, special_tokens):
        for piece in compiled.findall(segment):
            counts[piece.encode("utf-8")] += 1
    return counts


def merge_word(word: tuple, pair: tuple) -> tuple:
    out = []
    i = 0
    while i < len(word):
        if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
            out.append(word[i] + word[i + 1])
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


def train_from_counts(counts, vocab_size: int, special_tokens=(), min_frequency=None):
    """BPE over pre-token counts {bytes: int}.  Returns (vocab {id: bytes}, merges)."""
    special_tokens = list(special_tokens)
    vocab = {i: bytes([i]) for i in range(256)}
    known = set(vocab.values())
    merges = []
    words = {tuple(bytes([b]) for b in w): c for w, c in counts.items()}
    target = vocab_size - len(special_tokens)
    while len(vocab) < target:
        pairs = Counter()
        for word, c in words.items():
            for pair in zip(word, word[1:]):      # every adjacent position
                pairs[pair] += c
        if not pairs:
            break
        best = max(pairs, key=lambda p: (pairs[p], p))
        if pairs[best] <= 0 or (min_frequency is not None and pairs[best] < min_frequency):
            break
        merges.append(best)
        token = best[0] + best[1]
        if token not in known:
            known.add(token)
            vocab[len(vocab)] = token
        new_words = {}
        for word, c in words.items():
            w = merge_word(word, best) if best[0] in word else word
            if len(w) > 1:        # a single token has no pair and can never change again
                new_words[w] = new_words.get(w, 0) + c
        words = new_words
    for s in special_tokens:
        vocab[len(vocab)] = s.encode("utf-8")
    return vocab, merges


def train_reference(paths, vocab_size: int, special_tokens=(), pattern: str = None,
                    min_frequency=None):
    """Train on the files at paths (a path or a list); pattern is a regex string."""
    if pattern is None:
        from bpe_cffi.patterns import GPT2 as pattern
    if isinstance(paths, (str, bytes)) or hasattr(paths, "__fspath__"):
        paths = [paths]
    counts = Counter()
    for p in paths:
        with open(p, "rb") as f:
            text = f.read().decode("utf-8", errors="replace")
        counts.update(count_pretokens(text, pattern, special_tokens))
    return train_from_counts(counts, vocab_size, special_tokens, min_frequency)
