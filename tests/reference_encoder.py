"""A slow, obviously-correct byte-level BPE encoder in pure Python: the yardstick the C encoder
is compared against for vocabularies tiktoken does not know.

It shares no code with bpe_cffi.  Steps, for `encode(text)`:
  1. Special tokens: find the leftmost occurrence of an allowed special token (the longest one
     where several start at the same place); the text before it is ordinary text, the token
     becomes its id; repeat on the rest.
  2. Ordinary text is split into pieces with the `regex` module and the pattern string.
  3. Each piece (as UTF-8 bytes) becomes a list of one-byte parts, then parts are merged:
       rule "merges":   the adjacent pair (a, b) with the smallest merge rank (its index in the
                        merge list) merges; the leftmost occurrence first on ties.
       rule "tiktoken": the adjacent pair whose concatenation is the lowest-ranked token
                        (rank == id) merges; the leftmost first on ties.
     With ignore_merges, a piece that is itself a token is emitted whole, without merging.
  4. Each final part is looked up in the vocabulary.
"""
import regex


class ReferenceEncoder:
    def __init__(self, vocab: dict, merges=None, special_tokens=None, *, pattern: str,
                 rule: str = "merges", ignore_merges: bool = True):
        """vocab {id: bytes}; merges [(bytes, bytes)] (rule "merges"); special_tokens
        {str: id}; pattern a regex string."""
        self.vocab = dict(vocab)
        self.ids = {b: i for i, b in vocab.items()}
        self.rule = rule
        self.ignore_merges = ignore_merges
        self.merge_rank = {}
        for k, (a, b) in enumerate(merges or []):
            self.merge_rank.setdefault((a, b), k)
        self.special = dict(special_tokens or {})
        self.pattern = regex.compile(pattern)

    # -- step 3 ---------------------------------------------------------------------------
    def pair_rank(self, a: bytes, b: bytes):
        if self.rule == "merges":
            return self.merge_rank.get((a, b))
        return self.ids.get(a + b)

    def bpe(self, piece: bytes) -> list:
        if self.ignore_merges and piece in self.ids:
            return [self.ids[piece]]
        parts = [piece[i:i + 1] for i in range(len(piece))]
        while len(parts) > 1:
            best, best_i = None, None
            for i in range(len(parts) - 1):
                r = self.pair_rank(parts[i], parts[i + 1])
                if r is not None and (best is None or r < best):
                    best, best_i = r, i
            if best is None:
                break
            parts[best_i:best_i + 2] = [parts[best_i] + parts[best_i + 1]]
        return [self.ids[p] for p in parts]

    # -- steps 1, 2 -------------------------------------------------------------------------
    def encode_ordinary(self, text: str) -> list:
        out = []
        for m in self.pattern.finditer(text):
            out.extend(self.bpe(m.group().encode("utf-8")))
        return out

    def encode(self, text: str, allowed=None) -> list:
        """allowed: the special tokens to recognise (None: all of them)."""
        allowed = list(self.special) if allowed is None else list(allowed)
        out = []
        pos = 0
        while True:
            found = None
            for s in allowed:
                j = text.find(s, pos)
                if j >= 0 and (found is None or j < found[0]
                               or (j == found[0] and len(s) > len(found[1]))):
                    found = (j, s)
            if found is None:
                out.extend(self.encode_ordinary(text[pos:]))
                return out
            j, s = found
            out.extend(self.encode_ordinary(text[pos:j]))
            out.append(self.special[s])
            pos = j + len(s)

    def decode_bytes(self, ids) -> bytes:
        inv = {i: s.encode("utf-8") for s, i in self.special.items()}
        return b"".join(self.vocab[i] if i in self.vocab else inv[i] for i in ids)


def train_merges(text: str, n_merges: int, pattern: str) -> tuple:
    """A tiny, slow BPE trainer (for building non-tiktoken test vocabularies): counts pieces
    of `text`, then repeatedly merges the most frequent adjacent pair (ties: the
    lexicographically greatest pair, as CS336 specifies).  Returns (vocab {id: bytes},
    merges [(bytes, bytes)]) with ids 0..255 the single bytes."""
    from collections import Counter
    words = Counter(m.group().encode("utf-8") for m in regex.finditer(pattern, text))
    seqs = {w: [w[i:i + 1] for i in range(len(w))] for w in words}
    vocab = {i: bytes([i]) for i in range(256)}
    merges = []
    for _ in range(n_merges):
        pairs = Counter()
        for w, c in words.items():
            s = seqs[w]
            for i in range(len(s) - 1):
                pairs[(s[i], s[i + 1])] += c
        if not pairs:
            break
        best = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))[0]
        merges.append(best)
        vocab[len(vocab)] = best[0] + best[1]
        for w in words:
            s = seqs[w]
            i = 0
            out = []
            while i < len(s):
                if i + 1 < len(s) and (s[i], s[i + 1]) == best:
                    out.append(s[i] + s[i + 1])
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
    return vocab, merges
