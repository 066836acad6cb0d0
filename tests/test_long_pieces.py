"""Long pieces (csrc/longpiece.c) give exactly the ids of the heap path (merge.c) and of the
references: tiktoken for the real vocabularies, slow pure-Python BPE for small random ones.

The environment variable BPE_CFFI_LONG_PIECE, read when a tokenizer is built, sets the shortest
piece that takes the long path (0: never), so one process holds both a "long" and a "heap"
tokenizer of the same vocabulary; random small vocabularies use a tiny threshold so that every
piece of a few bytes takes the long path.  Some of those vocabularies break property M (the
ranks of a merge tree grow towards the root), which sends their pieces back to the heap: the
test counts them, so the fallback is exercised, and checks their ids all the same.

References never come from the code under test.  BPE_CFFI_LONG=1 adds 10 MB pieces and more
seeds.
"""
import random
import threading

import pytest

from bpe_cffi._native import lib
from conftest import LONG, tiktoken_encoding
from test_c_core import (PATTERN_ID, CError, CTok, random_merge_vocab, random_tiktoken_vocab,
                         real_vocab, ref_merges, ref_tiktoken)

NAMES = ["gpt2", "cl100k_base", "o200k_base"]
LETTERS = b"abcdefghijklmnopqrstuvwxyz"
EMOJI = ["😀", "🏳️‍🌈", "👍🏽", "🇫🇷", "🤖", "❤️", "👨‍👩‍👧‍👦", "🙂"]


def with_threshold(monkeypatch, threshold, build):
    """build() with BPE_CFFI_LONG_PIECE=threshold in the environment."""
    with monkeypatch.context() as m:
        m.setenv("BPE_CFFI_LONG_PIECE", str(threshold))
        return build()


def real_ctok(name, pattern=0):
    """A CTok of a real vocabulary, built fresh (the environment is read at build)."""
    tokens, rule, merges = real_vocab(name)
    return CTok(tokens, rule, merges, pattern=pattern,
                ignore_merges=int(rule == lib.BPE_RULE_TIKTOKEN)).ok()


@pytest.fixture(scope="module")
def pairs():
    """name -> (long-path tokenizer with threshold 64, heap-only tokenizer, tiktoken)."""
    mp = pytest.MonkeyPatch()
    out = {}

    def get(name):
        if name not in out:
            enc = tiktoken_encoding(name)
            out[name] = (with_threshold(mp, 64, lambda: real_ctok(name)),
                         with_threshold(mp, 0, lambda: real_ctok(name)), enc)
        return out[name]
    yield get
    for a, b, _ in out.values():
        a.close()
        b.close()


def random_word(rng, alphabet, n):
    return bytes(rng.choice(alphabet) for _ in range(n))


def emoji_run(rng, n):
    out = b""
    while len(out) < n:
        out += rng.choice(EMOJI).encode()
    return out


def long_pieces(rng):
    """(label, piece) of the kinds the issue names, at several lengths."""
    sizes = [1000, 4096, 20_000, 100_000, 1_000_000] + ([10_000_000] if LONG else [])
    out = [(f"letters {n}", random_word(rng, LETTERS, n)) for n in sizes]
    for alpha in [b"ab", b"abc", b"abcd", b"ba", b"xyzw"]:
        out.append((f"alphabet {alpha!r}", random_word(rng, alpha, 30_000)))
    for ch in [b"a", b" ", b"^", b"\n", b"0", b"\xe4"]:
        out.append((f"repeated {ch!r}", ch * 50_000))
    out.append(("emoji", emoji_run(rng, 60_000)))
    out.append(("digits", random_word(rng, b"0123456789", 20_000)))
    out.append(("whitespace mix", random_word(rng, b" \t\n\r", 20_000)))
    out.append(("random bytes", bytes(rng.randrange(256) for _ in range(20_000))))
    out.append(("repeated word", b"information" * 3000))
    return out


@pytest.mark.parametrize("name", NAMES)
def test_long_pieces_equal_heap_and_tiktoken(pairs, name):
    long_tok, heap_tok, enc = pairs(name)
    rng = random.Random(7)
    for label, piece in long_pieces(rng):
        got = long_tok.pieces([piece])
        assert got == heap_tok.pieces([piece]), label
        if len(piece) <= 20_000:   # tiktoken's single-piece merge is quadratic
            assert got == enc._encode_single_piece(piece), label
        else:
            head = piece[:8192]
            assert long_tok.pieces([head]) == enc._encode_single_piece(head), label


@pytest.mark.parametrize("name", NAMES)
def test_long_piece_output_grows_after_earlier_ids(pairs, name):
    """The long path asks for room for about one id per two bytes and grows its output as the
    search needs more: pieces of nearly one id a byte, after other ids, equal the heap's."""
    long_tok, heap_tok, _ = pairs(name)
    rng = random.Random(13)
    noisy = bytes(rng.randrange(256) for _ in range(30_000))   # mostly one id a byte
    assert len(heap_tok.pieces([noisy])) > len(noisy) // 2 + 64   # more than the first room
    pieces = [b"hello", noisy, b" world", noisy[::-1], LETTERS * 3, noisy[:5000]]
    assert long_tok.pieces(pieces) == heap_tok.pieces(pieces)


@pytest.mark.parametrize("name", NAMES)
def test_many_lengths_of_random_letters(pairs, name):
    """Lengths around the threshold and up to tens of KB, vs tiktoken."""
    long_tok, _, enc = pairs(name)
    rng = random.Random(11)
    for n in [63, 64, 65, 100, 257, 1000, 1023, 2049, 5000, 9999]:
        for alpha in [LETTERS, b"ab", b"abc", b"etaoin shrdlu"]:
            piece = random_word(rng, alpha, n)
            assert long_tok.pieces([piece]) == enc._encode_single_piece(piece), (n, alpha)


@pytest.mark.parametrize("name", NAMES)
def test_encode_text_with_long_words(pairs, name):
    """Through the pre-tokenizer: prose with huge words in it (default threshold 4096)."""
    enc = tiktoken_encoding(name)
    mp = pytest.MonkeyPatch()
    tok = with_threshold(mp, 4096, lambda: real_ctok(name, PATTERN_ID[name]))
    heap_tok = with_threshold(mp, 0, lambda: real_ctok(name, PATTERN_ID[name]))
    rng = random.Random(3)
    text = b" ".join([b"Some text", random_word(rng, LETTERS, 30_000), b"and then",
                      emoji_run(rng, 9000), b"1234567 " * 10, b" " * 5000, b"end"])
    expect = enc.encode_ordinary(text.decode())
    assert tok.encode(text) == expect
    assert heap_tok.encode(text) == expect
    tok.close()
    heap_tok.close()


# ---- small random vocabularies ---------------------------------------------------------------

def ref_bpe(piece, pair_rank, ids):
    """Plain BPE: merge the adjacent pair of lowest rank (pair_rank(a, b) -> rank or None),
    leftmost on ties, until none merges; ids maps bytes to ids."""
    parts = [piece[i:i + 1] for i in range(len(piece))]
    while True:
        best = None
        for i in range(len(parts) - 1):
            r = pair_rank(parts[i], parts[i + 1])
            if r is not None and (best is None or r < best[0]):
                best = (r, i)
        if best is None:
            return [ids[p] for p in parts]
        i = best[1]
        parts[i:i + 2] = [parts[i] + parts[i + 1]]


def tree_violates_m(pair_rank, token_bytes):
    """True if some token BPE forms has a merge ranked no higher than a merge below it (property
    M fails), by a plain simulation of BPE on every token's bytes.  pair_rank(a, b) gives the
    rank of merging byte strings a, b, or None."""
    for t in token_bytes:
        parts = [(t[i:i + 1], 0) for i in range(len(t))]   # (bytes, level)
        while len(parts) > 1:
            best = None
            for i in range(len(parts) - 1):
                r = pair_rank(parts[i][0], parts[i + 1][0])
                if r is not None and (best is None or r < best[0]):
                    best = (r, i)
            if best is None:
                break
            r, i = best
            (a, la), (b, lb) = parts[i], parts[i + 1]
            if r + 1 <= la or r + 1 <= lb:
                return True
            parts[i:i + 2] = [(a + b, r + 1)]
    return False


SEEDS = range(40 if not LONG else 400)
COUNTS = {"merges": [0, 0], "tiktoken": [0, 0]}   # [vocabs satisfying M, vocabs breaking it]


def check_random_vocab(tok, heap, rng, alphabet, reference):
    pieces = [random_word(rng, alphabet, rng.choice([2, 3, 5, 9, 17, 40, 120, 400]))
              for _ in range(30)]
    expect = [i for p in pieces for i in reference(p)]
    assert tok.pieces(pieces) == expect
    big = [random_word(rng, alphabet, 20_000), alphabet[:1] * 5000]
    assert tok.pieces(big) == heap.pieces(big)


@pytest.mark.parametrize("name", ["gpt2", "o200k_base"])
def test_medium_pieces_take_the_search_after_a_mebibyte_of_them(monkeypatch, name):
    """Pieces of 64 bytes up to the threshold (4096) go to the heap until 1 MiB of them has
    needed merging; then the search's tables are built and such pieces take the search.  The
    ids are tiktoken's before and after.  Shorter pieces never count, and with
    BPE_CFFI_LONG_PIECE=0 the tables are never built."""
    enc = tiktoken_encoding(name)
    tok = with_threshold(monkeypatch, 4096, lambda: real_ctok(name, PATTERN_ID[name]))
    heap_tok = with_threshold(monkeypatch, 0, lambda: real_ctok(name, PATTERN_ID[name]))
    rng = random.Random(17)

    def text_of(low, high, size):
        words, total = [], 0
        while total < size:
            words.append(random_word(rng, LETTERS, rng.randrange(low, high)))
            total += len(words[-1]) + 1
        return b" ".join(words)

    short = text_of(20, 63, 1_300_000)          # pieces of at most 63 bytes with the space
    assert tok.encode(short) == enc.encode_ordinary(short.decode())
    assert not lib.bpe_long_tables_ready(tok.ptr)
    seen = []
    for _ in range(6):                            # 6 x 256 KB of pieces of 65 to 700 bytes
        chunk = text_of(64, 700, 256 * 1024)
        expect = enc.encode_ordinary(chunk.decode())
        assert tok.encode(chunk) == expect
        assert heap_tok.encode(chunk) == expect
        seen.append(lib.bpe_long_tables_ready(tok.ptr))
    assert seen[0] == 0 and seen[-1] == 1, seen   # built once 1 MiB had come, not before
    assert seen == sorted(seen)
    assert not lib.bpe_long_tables_ready(heap_tok.ptr)
    tok.close()
    heap_tok.close()


@pytest.mark.parametrize("seed", SEEDS)
def test_random_merge_vocab(monkeypatch, seed):
    rng = random.Random(5000 + seed)
    alphabet = bytes(rng.sample(b"abcde xyz", rng.randrange(2, 6)))
    vocab, merges, merge_rank = random_merge_vocab(rng, alphabet, rng.randrange(1, 60))
    if seed % 2:   # shuffled ranks: merge trees whose ranks do not grow upwards
        order = list(range(len(merges)))
        rng.shuffle(order)
        merges = [merges[i] for i in order]
        merge_rank = {}
        inv = {i: b for b, i in vocab.items()}
        for k, (a, b) in enumerate(merges):
            merge_rank.setdefault((inv[a], inv[b]), k)
    build = lambda: CTok(list(vocab.items()), lib.BPE_RULE_MERGES, merges,
                         cache=rng.choice([0, 64])).ok()
    tok, heap = with_threshold(monkeypatch, 2, build), with_threshold(monkeypatch, 0, build)
    COUNTS["merges"][tree_violates_m(lambda a, b: merge_rank.get((a, b)), vocab)] += 1
    check_random_vocab(tok, heap, rng, alphabet,
                       lambda p: ref_bpe(p, lambda a, b: merge_rank.get((a, b)), vocab))
    tok.close()
    heap.close()


@pytest.mark.parametrize("seed", SEEDS)
def test_random_tiktoken_vocab(monkeypatch, seed):
    rng = random.Random(9000 + seed)
    alphabet = bytes(rng.sample(b"abcde xyz", rng.randrange(2, 6)))
    ranks = random_tiktoken_vocab(rng, alphabet, rng.randrange(1, 80))
    ignore = rng.randrange(2)
    build = lambda: CTok(list(ranks.items()), lib.BPE_RULE_TIKTOKEN, ignore_merges=ignore,
                         cache=rng.choice([0, 64])).ok()
    tok, heap = with_threshold(monkeypatch, 2, build), with_threshold(monkeypatch, 0, build)
    COUNTS["tiktoken"][tree_violates_m(lambda a, b: ranks.get(a + b), ranks)] += 1
    check_random_vocab(tok, heap, rng, alphabet, lambda p: ref_tiktoken(p, ranks, ignore))
    tok.close()
    heap.close()


@pytest.mark.parametrize("seed", SEEDS)
def test_runs_of_one_byte_in_random_vocabs(seed):
    """A piece that is one byte repeated is merged by blocks (csrc/runpiece.c), its steps
    taken a block at a time only where BPE's own order allows it: against plain BPE, with
    random vocabularies whose ranks are shuffled half the time (merges made later ranking
    lower, where the block steps must fall back to one merge)."""
    rng = random.Random(13000 + seed)
    alphabet = bytes(rng.sample(b"abcde", rng.randrange(1, 3)))
    most = 10 if len(alphabet) == 1 else 60     # one letter has 12 tokens of <= 12 bytes
    if seed % 2:
        ranks = random_tiktoken_vocab(rng, alphabet, rng.randrange(3, most))
        tok = CTok(list(ranks.items()), lib.BPE_RULE_TIKTOKEN, ignore_merges=0).ok()
        reference = lambda p: ref_tiktoken(p, ranks, 0)
    else:
        vocab, merges, _ = random_merge_vocab(rng, alphabet, rng.randrange(3, most))
        if seed % 4:
            rng.shuffle(merges)
        inv = {i: b for b, i in vocab.items()}
        merge_rank = {}
        for k, (a, b) in enumerate(merges):
            merge_rank.setdefault((inv[a], inv[b]), k)
        tok = CTok(list(vocab.items()), lib.BPE_RULE_MERGES, merges).ok()
        reference = lambda p: ref_bpe(p, lambda a, b: merge_rank.get((a, b)), vocab)
    runs = [bytes([c]) * n for c in alphabet for n in sorted(rng.sample(range(30, 300), 12))]
    assert tok.pieces(runs) == [i for p in runs for i in reference(p)]
    tok.close()


@pytest.mark.parametrize("name", NAMES)
def test_runs_of_one_byte_equal_tiktoken(name):
    """Runs of every ASCII byte as one piece (a pattern matching the whole text) and under
    the vocabulary's own pattern, lengths about the block steps' and long pieces'
    thresholds, against tiktoken.  ('-' * 5000 took the long-piece search ~900 ns a byte on
    o200k_base, 5x tiktoken's time; runs now cost the same whatever their length.)"""
    import tiktoken
    from pyapi_helpers import ours
    enc = tiktoken_encoding(name)
    whole = tiktoken.Encoding(name + "-whole", pat_str=r"[\s\S]+",
                              mergeable_ranks=enc._mergeable_ranks, special_tokens={})
    tok = ours(name)
    one_piece = real_ctok(name)
    lengths = [31, 32, 33, 63, 64, 65, 100, 127, 128, 129, 255, 4095, 4096, 5000]
    for b in range(128):
        runs = [bytes([b]) * n for n in lengths]
        assert one_piece.pieces(runs) == [i for r in runs for i in whole.encode_ordinary(
            r.decode())], b
        for r in runs:
            assert tok.encode_ordinary(r.decode()) == enc.encode_ordinary(r.decode()), (b,
                                                                                   len(r))


def test_fallback_was_exercised():
    """Both kinds of random vocabulary occurred above (runs after them, in file order)."""
    if sum(COUNTS["merges"]) < len(SEEDS) or sum(COUNTS["tiktoken"]) < len(SEEDS):
        pytest.skip("run with the random-vocabulary tests")
    for rule, (good, bad) in COUNTS.items():
        assert good > 0 and bad > 0, (rule, good, bad)


def test_trained_vocab():
    """A vocabulary learned by the reference trainer, on long words of its own text."""
    from pyapi_helpers import _small_text, small_trained
    vocab, merges = small_trained(300)
    ids = {b: i for i, b in vocab.items()}
    merge_rank = {}
    for k, (a, b) in enumerate(merges):
        merge_rank.setdefault((a, b), k)
    build = lambda: CTok(list(ids.items()), lib.BPE_RULE_MERGES,
                         [(ids[a], ids[b]) for a, b in merges]).ok()
    mp = pytest.MonkeyPatch()
    tok, heap = with_threshold(mp, 2, build), with_threshold(mp, 0, build)
    text = _small_text().encode()
    words = [w for w in text.split() if w]
    glued = b"".join(words)   # one long word of real letters and punctuation
    pieces = [glued[i:i + n] for i, n in [(0, 300), (1000, 77), (5000, 999)]]
    assert tok.pieces(pieces) == [i for p in pieces for i in ref_merges(p, merge_rank, ids)]
    assert tok.pieces([glued]) == heap.pieces([glued])
    assert tok.pieces(words[:2000]) == heap.pieces(words[:2000])
    tok.close()
    heap.close()


def test_whole_token_with_ignore_merges(monkeypatch):
    """A long piece that is itself a token: ignore_merges decides before any merging."""
    long_token = b"abcab" * 4
    ranks = {bytes([b]): b for b in range(256)}
    ranks.update({b"ab": 300, b"ca": 301, b"bc": 302, long_token: 400})
    for ignore in (0, 1):
        tok = with_threshold(monkeypatch, 8, lambda: CTok(list(ranks.items()),
                                                          lib.BPE_RULE_TIKTOKEN,
                                                          ignore_merges=ignore).ok())
        for piece in (long_token, long_token + b"c", b"x" + long_token):
            assert tok.pieces([piece]) == ref_tiktoken(piece, ranks, ignore), (ignore, piece)
        tok.close()


def test_deferred_candidate_that_is_right(monkeypatch):
    """The search tries a longest candidate last when its last byte would rather merge with the
    next byte (longpiece.c, defer()); here that guess is wrong and the deferred one is right.

    Merges, by rank: y+z, x+yz, v+x, t+v.  In "tvxyz", "tv" is the longest token at 0, and v+x
    ranks below t+v while x+y does not merge, so "tv" is deferred; but y+z, then x+yz merge
    first, which leaves v to t: BPE is [tv, xyz].  The search must come back to "tv" after
    "t" leads nowhere, and resume the deferred order when it backtracks into such a position."""
    ids = {bytes([c]): c for c in b"tvxyzq"}
    ids.update({b"yz": 300, b"xyz": 301, b"vx": 302, b"tv": 303})
    merges = [(ord("y"), ord("z")), (ord("x"), 300), (ord("v"), ord("x")), (ord("t"), ord("v"))]
    rank = {(b"y", b"z"): 0, (b"x", b"yz"): 1, (b"v", b"x"): 2, (b"t", b"v"): 3}
    build = lambda: CTok(list(ids.items()), lib.BPE_RULE_MERGES, merges).ok()
    tok, heap = with_threshold(monkeypatch, 2, build), with_threshold(monkeypatch, 0, build)
    assert tok.pieces([b"tvxyz"]) == [303, 301]
    rng = random.Random(4)
    pieces = [b"tvxyz" * 50, b"tvx" * 40, b"q" + b"tvxyz" * 9 + b"tv"]
    pieces += [random_word(rng, b"tvxyz", n) for n in (5, 17, 300, 3000)]
    for p in pieces:
        expect = ref_bpe(p, lambda a, b: rank.get((a, b)), ids)
        assert tok.pieces([p]) == expect, p[:40]
        assert heap.pieces([p]) == expect, p[:40]
    tok.close()
    heap.close()


def test_missing_byte_on_both_paths(monkeypatch):
    """A byte with no token: an error for a tiktoken vocabulary (tiktoken has no rule for it);
    dropped by a merge-list one, as HF's BPE model drops it (model.c takes over such a
    vocabulary, whatever the piece length)."""
    tokens = [(bytes([b]), b) for b in range(256) if b != ord("q")] + [(b"ab", 300)]
    text = b"ab" * 3000 + b"q" + b"ab" * 10
    for threshold in (0, 2):
        tok = with_threshold(monkeypatch, threshold,
                             lambda: CTok(tokens, lib.BPE_RULE_TIKTOKEN).ok())
        with pytest.raises(CError) as e:
            tok.pieces([text])
        assert e.value.code == lib.BPE_ERR_NOBYTE
        assert tok.pieces([b"ab" * 3000]) == [300] * 3000
        tok.close()
        tok = with_threshold(monkeypatch, threshold,
                             lambda: CTok(tokens, lib.BPE_RULE_MERGES, [(97, 98)]).ok())
        assert tok.pieces([text]) == [300] * 3010
        assert tok.pieces([b"q", b"aqb", b"q" * 50]) == [300]   # HF merges across the gap
        tok.close()


def test_threads_share_a_fresh_tokenizer(monkeypatch):
    """Several threads hit the lazy build and the token classification at once."""
    tiktoken_encoding("cl100k_base")
    tok = with_threshold(monkeypatch, 64, lambda: real_ctok("cl100k_base"))
    heap = with_threshold(monkeypatch, 0, lambda: real_ctok("cl100k_base"))
    rng = random.Random(1)
    pieces = [random_word(rng, alpha, 30_000) for alpha in
              [LETTERS, b"ab", b"abc", LETTERS.upper(), b"0123456789", b"xyz "]]
    expect = [heap.pieces([p]) for p in pieces]
    got = [None] * len(pieces)

    def run(i):
        got[i] = tok.pieces([pieces[i]])
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(pieces))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == expect
    tok.close()
    heap.close()
