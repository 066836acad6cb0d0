"""A slow pure-Python BPE pipeline driven only by what `hf_import.read_hf_tokenizer_json`
returns: the yardstick showing that the reader's output (vocabulary, merges, added tokens,
model options, components) is enough to reproduce HF's ids, before the C core has the model
options.  It shares no code with the C encoder.

Steps of `encode(text)` (HF's order):
  1. added tokens are split out of the text (leftmost, longest where several start at one
     place); each becomes its id;
  2. each segment between them is normalized, then pre-tokenized (with `offset` = where the
     segment starts in the text, so Metaspace(prepend_scheme="first") prepends only at 0);
  3. each piece becomes symbols: byte-level: its UTF-8 bytes; else its characters, the
     continuing_subword_prefix before every character but the first, the end_of_word_suffix
     after the last; a symbol not in the vocabulary becomes its <0xXX> byte tokens
     (byte_fallback) or the unk token (consecutive unks fused with fuse_unk), or without
     an unk token is dropped (as HF does); with
     ignore_merges a piece that is itself a token is emitted whole;
  4. the adjacent pair with the lowest merge rank merges (leftmost first) until none does; a
     merge of (a, b) makes a + b without b's continuing_subword_prefix.
"""
import heapq

import regex


class ReferencePipeline:
    def __init__(self, parts: dict):
        self.vocab = dict(parts["vocab"])
        for s, i in parts["special"].items():
            self.vocab.setdefault(i, s.encode("utf-8"))
        self.ids = {b: i for i, b in self.vocab.items()}
        opts = parts["options"]
        self.byte_level = parts["byte_level"]
        self.ignore_merges = parts["ignore_merges"]
        self.prefix = (opts.get("continuing_subword_prefix") or "").encode("utf-8")
        self.suffix = (opts.get("end_of_word_suffix") or "").encode("utf-8")
        self.unk = opts.get("unk_token")
        self.fuse_unk = opts.get("fuse_unk", False)
        self.byte_fallback = opts.get("byte_fallback", False)
        self.normalizer = opts.get("normalizer")
        self.pre = opts.get("pre_tokenizer")
        self.pattern = regex.compile(parts["pattern"]) if self.pre is None else None
        if self.pattern is not None and parts["pattern"] in ("gpt2", "cl100k", "o200k"):
            from bpe_cffi import patterns
            self.pattern = regex.compile(patterns.BUILTIN[parts["pattern"]][0])
        self.merge = {}
        for rank, (a, b) in enumerate(parts["merges"]):
            new = a + (b[len(self.prefix):] if self.prefix else b)
            self.merge.setdefault((self.ids[a], self.ids[b]), (rank, self.ids[new]))
        names = sorted(parts["special"], key=len, reverse=True)
        self.special = parts["special"]
        self.special_re = regex.compile("|".join(regex.escape(s) for s in names)) \
            if names else None

    def encode(self, text: str) -> list:
        out = []
        pos = 0
        if self.special_re is not None:
            for m in self.special_re.finditer(text):
                self._segment(text[pos:m.start()], pos, out)
                out.append(self.special[m.group()])
                pos = m.end()
        self._segment(text[pos:], pos, out)
        return out

    def _segment(self, seg, offset, out):
        if not seg:
            return
        if self.normalizer is not None:
            seg = self.normalizer.normalize_str(seg)
        if self.pre is not None:
            pieces = [p for p, _ in self.pre.pre_tokenize_str(seg, offset=offset)]
        else:
            pieces = _regex_pieces(self.pattern, seg)
        for p in pieces:
            out.extend(self._word(p))

    def _word(self, piece: str) -> list:
        data = piece.encode("utf-8")
        if self.ignore_merges and data in self.ids:
            return [self.ids[data]]
        if self.byte_level:
            units = [bytes([b]) for b in data]
        else:
            units = [c.encode("utf-8") for c in piece]
        syms = []
        unk_run = False
        for k, u in enumerate(units):
            s = (self.prefix if k and self.prefix else b"") + u + \
                (self.suffix if k == len(units) - 1 else b"")
            if s in self.ids:
                syms.append(self.ids[s])
                unk_run = False
                continue
            if self.byte_fallback:
                fb = [f"<0x{b:02X}>".encode() for b in s]
                if all(f in self.ids for f in fb):
                    syms.extend(self.ids[f] for f in fb)
                    unk_run = False
                    continue
            if self.unk is None:            # HF drops what it cannot represent
                continue
            if not (self.fuse_unk and unk_run):
                syms.append(self.ids[self.unk.encode("utf-8")])
            unk_run = True
        return self._merge_all(syms)

    def _merge_all(self, syms):
        """Step 4 with a heap (lowest rank, then leftmost), as HF's Word::merge_all."""
        n = len(syms)
        nxt = list(range(1, n)) + [-1]
        prv = [-1] + list(range(n - 1))
        heap = []

        def push(i):
            j = nxt[i] if i >= 0 else -1
            if i >= 0 and j >= 0:
                m = self.merge.get((syms[i], syms[j]))
                if m is not None:
                    heapq.heappush(heap, (m[0], i, j, syms[i], syms[j], m[1]))
        for i in range(n - 1):
            push(i)
        alive = [True] * n
        while heap:
            _, i, j, a, b, new = heapq.heappop(heap)
            if not (alive[i] and alive[j] and nxt[i] == j and syms[i] == a and syms[j] == b):
                continue
            syms[i] = new
            alive[j] = False
            nxt[i] = nxt[j]
            if nxt[j] >= 0:
                prv[nxt[j]] = i
            push(prv[i])
            push(i)
        return [syms[i] for i in range(n) if alive[i]]


def _regex_pieces(pattern, text):
    pieces = []
    pos = 0
    for m in pattern.finditer(text):
        s, e = m.span()
        if s == e:
            continue
        if s > pos:
            pieces.append(text[pos:s])
        pieces.append(text[s:e])
        pos = e
    if pos < len(text):
        pieces.append(text[pos:])
    return pieces
