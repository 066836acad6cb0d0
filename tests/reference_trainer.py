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

Options (issue #6):
  max_token_length: a pair is counted (and can be merged) only if the token it makes would
     cover at most this many units of the word: bytes when byte-level, characters when
     character-level.  A token's units are 1 for an initial token and, for a learned one,
     left's + right's when its string is new (a merge that spells an existing token keeps
     that token and its units).  The prefix and suffix are not counted.
  byte_level=False: character-level training (initial_symbols below):
     - the alphabet is every character of the words (frequency = occurrences x word count)
       plus initial_alphabet (infinitely frequent); with limit_alphabet only the
       limit_alphabet most frequent are kept, ties to the smaller code point;
     - ids 0.. are the kept characters in code point order, then the decorated symbols that
       occur, in byte order, one id per distinct string;
     - a word's symbols: each kept character, with continuing_subword_prefix before it unless
       it is the word's first character, and end_of_word_suffix after it if it is the word's
       last character ("first" and "last" before dropping characters not kept; a dropped
       character disappears and its neighbours become adjacent);
     - merging (x, y) makes the string x + y, without y's leading prefix (HF's rule).
     vocab_size counts every id; if the initial tokens and specials exceed it, nothing is
     learned (the vocabulary is bigger than vocab_size, as with HF).
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
        for match in compiled.finditer(segment):
            counts[match.group().encode("utf-8")] += 1
    return counts


def merge_word(word: tuple, pair: tuple, token: bytes = None) -> tuple:
    """word with every occurrence of pair, left to right without overlap, replaced by token
    (default: the two parts joined)."""
    if token is None:
        token = pair[0] + pair[1]
    out = []
    i = 0
    while i < len(word):
        if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
            out.append(token)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


def initial_symbols(counts, initial_alphabet=(), limit_alphabet=None, prefix=None,
                    suffix=None):
    """Character-level start: (initial tokens [bytes] in id order, {word bytes: symbols})."""
    freq = Counter()
    for w, c in counts.items():
        for ch in w.decode("utf-8"):
            freq[ch] += c
    for ch in initial_alphabet:
        freq[ch] = float("inf")
    ranked = sorted(freq, key=lambda ch: (-freq[ch], ord(ch)))
    if limit_alphabet is not None:
        ranked = ranked[:limit_alphabet]
    kept = set(ranked)
    words = {}
    for w in counts:
        chars = w.decode("utf-8")
        symbols = []
        for i, ch in enumerate(chars):
            if ch not in kept:
                continue
            s = ch
            if prefix and i > 0:
                s = prefix + s
            if suffix and i == len(chars) - 1:
                s = s + suffix
            symbols.append(s.encode("utf-8"))
        words[w] = tuple(symbols)
    alphabet = [ch.encode("utf-8") for ch in sorted(kept, key=ord)]
    decorated = sorted({s for syms in words.values() for s in syms} - set(alphabet))
    return alphabet + decorated, words


def train_from_counts(counts, vocab_size: int, special_tokens=(), min_frequency=None,
                      max_token_length=None, byte_level=True, initial_alphabet=(),
                      limit_alphabet=None, continuing_subword_prefix=None,
                      end_of_word_suffix=None):
    """BPE over pre-token counts {bytes: int}.  Returns (vocab {id: bytes}, merges)."""
    special_tokens = list(special_tokens)
    prefix = continuing_subword_prefix or None
    if byte_level:
        initial = [bytes([i]) for i in range(256)]
        words = {tuple(bytes([b]) for b in w): c for w, c in counts.items()}
    else:
        initial, symbols = initial_symbols(counts, initial_alphabet, limit_alphabet, prefix,
                                           end_of_word_suffix or None)
        words = {}
        for w, c in counts.items():
            words[symbols[w]] = words.get(symbols[w], 0) + c
    vocab = dict(enumerate(initial))
    units = {t: 1 for t in initial}          # word units (bytes / characters) a token covers
    merges = []
    words = {w: c for w, c in words.items() if len(w) > 1}
    target = vocab_size - len(special_tokens)

    def allowed(pair):
        return max_token_length is None or units[pair[0]] + units[pair[1]] <= max_token_length

    while len(vocab) < target:
        pairs = Counter()
        for word, c in words.items():
            for pair in zip(word, word[1:]):      # every adjacent position
                if allowed(pair):
                    pairs[pair] += c
        if not pairs:
            break
        best = max(pairs, key=lambda p: (pairs[p], p))
        if pairs[best] <= 0 or (min_frequency is not None and pairs[best] < min_frequency):
            break
        merges.append(best)
        left, right = best
        if prefix and right.startswith(prefix.encode("utf-8")):
            right = right[len(prefix.encode("utf-8")):]
        token = left + right
        if token not in units:
            units[token] = units[best[0]] + units[best[1]]
            vocab[len(vocab)] = token
        new_words = {}
        for word, c in words.items():
            w = merge_word(word, best, token) if best[0] in word else word
            if len(w) > 1:        # a single token has no pair and can never change again
                new_words[w] = new_words.get(w, 0) + c
        words = new_words
    for s in special_tokens:
        vocab[len(vocab)] = s.encode("utf-8")
    return vocab, merges


def train_reference(paths, vocab_size: int, special_tokens=(), pattern: str = None,
                    min_frequency=None, **options):
    """Train on the files at paths (a path or a list); pattern is a regex string; options are
    train_from_counts's (max_token_length, byte_level, ...)."""
    if pattern is None:
        from bpe_cffi.patterns import GPT2 as pattern
    if isinstance(paths, (str, bytes)) or hasattr(paths, "__fspath__"):
        paths = [paths]
    counts = Counter()
    for p in paths:
        with open(p, "rb") as f:
            text = f.read().decode("utf-8", errors="replace")
        counts.update(count_pretokens(text, pattern, special_tokens))
    return train_from_counts(counts, vocab_size, special_tokens, min_frequency, **options)
