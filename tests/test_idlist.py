"""The C id-list helper (csrc/pyext/idlist.c via bpe_cffi._idcache) against the plain Python
paths it replaces: same lists for every id value, empty parts and bad input."""
import gc
import random
import sys

import pytest

from bpe_cffi import _idcache
from bpe_cffi import tokenizer as T
from bpe_cffi._native import ffi

from pyapi_helpers import ours

pytestmark = pytest.mark.skipif(not _idcache.FAST, reason="bpe_cffi._idlist is not built")


def random_ids(rng, n):
    big = [0, 1, 255, 256, 2 ** 16, _idcache.MAX_CACHED - 1, _idcache.MAX_CACHED,
           2 ** 31, 2 ** 32 - 2, 2 ** 32 - 1]
    return [rng.choice(big) if rng.random() < 0.05 else rng.randrange(0, 300_000)
            for _ in range(n)]


def test_one_list_equals_the_python_path():
    rng = random.Random(1)
    _idcache.reserve(200_000)
    for n in [0, 1, 47, 48, 1000, 100_000]:
        ids = random_ids(rng, n)
        buf = ffi.new("uint32_t[]", ids or [0])
        got = T._ids(buf, n)
        assert got == ids == T._ids_py(buf, n)
        assert all(type(x) is int for x in got)
        if n:   # shared objects for cached ids
            small = [x for x in got if x < len(_idcache.CACHE)]
            assert all(x is _idcache.CACHE[x] for x in small)


def test_split_lists_equal_the_python_path():
    rng = random.Random(2)
    ids = random_ids(rng, 5000)
    buf = ffi.new("uint32_t[]", ids)
    cuts = sorted(rng.choices(range(5001), k=60)) + [5000]   # repeats: empty parts
    ends = ffi.new("size_t[]", cuts)
    got = T._split_ids(buf, ends, len(cuts))
    assert got == T._split_ids_py(buf, ends, len(cuts))
    assert sum(got, []) == ids and len(got) == len(cuts)
    assert T._split_ids(buf, ends, 0) == []
    zeros = ffi.new("size_t[]", [0, 0])
    assert T._split_ids(ffi.NULL, zeros, 2) == [[], []]
    back = ffi.new("size_t[]", [10, 5])
    with pytest.raises(ValueError):
        T._split_ids(buf, back, 2)


def test_packed_bytes_and_bad_input():
    rng = random.Random(3)
    ids = random_ids(rng, 3000)
    data = b"".join(i.to_bytes(4, "little") for i in ids)
    assert _idcache.ids_from_le_bytes(data) == ids
    assert _idcache.ids_from_le_bytes(bytearray(data)) == ids
    assert _idcache.ids_from_le_bytes(b"") == []
    with pytest.raises(ValueError, match="multiple of 4"):
        _idcache.ids_from_le_bytes(b"abcde")
    with pytest.raises(TypeError):
        _idcache._idlist.ids_list(0, 0, (1, 2))
    with pytest.raises(ValueError):
        _idcache._idlist.ids_list(0, 5, _idcache.CACHE)
    with pytest.raises(ValueError):
        _idcache._idlist.ids_list(1234, -1, _idcache.CACHE)


def test_packed_bytes_every_short_length():
    """ids_from_le_bytes reads each id from any alignment: every short length, at an odd
    offset (a memoryview slice), gives the plain decoding."""
    rng = random.Random(4)
    _idcache.reserve(200_000)
    for n in range(0, 80):
        ids = random_ids(rng, n)
        data = b"x" + b"".join(i.to_bytes(4, "little") for i in ids)
        assert _idcache.ids_from_le_bytes(memoryview(data)[1:]) == ids


PINNED = 2 ** 30      # far above any real count; see "Pinned ints" in idlist.c


def test_cached_ints_are_pinned_and_lists_share_them():
    """Every int of the cache is pinned (immortal on 3.12+), so lists take it without a
    count: making and dropping many lists leaves it alive, the same object, still pinned.
    Ids beyond the cache are new ints owned by their list alone."""
    _idcache.reserve(1000)
    probes = [_idcache.CACHE[i] for i in (300, 777, 999)]   # not CPython's small ints
    assert all(sys.getrefcount(p) >= PINNED for p in probes)
    if sys.version_info >= (3, 12):
        before = [sys.getrefcount(p) for p in probes]
    ids = [300, 777, 999] * 3000 + [_idcache.MAX_CACHED + 5]
    buf = ffi.new("uint32_t[]", ids)
    ends = ffi.new("size_t[]", [10, 10, 5000, len(ids)])
    for _ in range(20):
        one = T._ids(buf, len(ids))
        parts = T._split_ids(buf, ends, 4)
        packed = _idcache.ids_from_le_bytes(b"".join(i.to_bytes(4, "little") for i in ids))
        for got in (one, sum(parts, []), packed):
            assert got[:3] == [300, 777, 999] and all(a is b for a, b in zip(got, probes))
        beyond = one[-1]
        assert beyond == _idcache.MAX_CACHED + 5 and sys.getrefcount(beyond) == 3  # one, beyond
        del one, parts, packed, got
    assert [_idcache.CACHE[i] for i in (300, 777, 999)] == [300, 777, 999]
    assert all(p is _idcache.CACHE[v] for p, v in zip(probes, (300, 777, 999)))
    assert all(sys.getrefcount(p) >= PINNED for p in probes)
    if sys.version_info >= (3, 12):                 # immortal: no count moves at all
        assert [sys.getrefcount(p) for p in probes] == before


def test_cache_grows_by_pinned_ints_only():
    start = len(_idcache.CACHE)
    _idcache.reserve(start + 3000)
    assert len(_idcache.CACHE) == min(start + 3000, _idcache.MAX_CACHED)
    new = _idcache.CACHE[start:]
    assert new == list(range(start, start + len(new)))
    assert all(sys.getrefcount(x) >= PINNED for x in new)
    with pytest.raises(TypeError):
        _idcache._idlist.extend_cache((1, 2), 10)


def test_failing_split_leaves_the_cache_intact():
    """A split that fails after making two lists frees them: the cached ints stay alive."""
    _idcache.reserve(1000)
    ids = [300 + i % 700 for i in range(9000)]
    buf = ffi.new("uint32_t[]", ids)
    back = ffi.new("size_t[]", [4500, 9000, 10, 9000])
    for _ in range(50):
        with pytest.raises(ValueError, match="backwards"):
            T._split_ids(buf, back, 4)
    assert _idcache.CACHE[300:1000] == list(range(300, 1000))
    assert T._ids(buf, 9000) == ids


def test_batch_while_another_thread_grows_the_cache():
    """encode_batch makes its lists between waits without the GIL; the cache list may grow
    (and move its items) meanwhile, when another thread builds a tokenizer with more ids."""
    import threading
    tok = ours("cl100k_base")
    texts = ["hello world %d, 漢字 🎉 " % i * (i % 40) for i in range(4000)]
    want = [tok.encode(t) for t in texts]
    stop = threading.Event()
    limit = min(_idcache.MAX_CACHED, len(_idcache.CACHE) + 300_000)

    def grow():
        while not stop.is_set() and len(_idcache.CACHE) < limit:
            _idcache.reserve(len(_idcache.CACHE) + 1024)

    t = threading.Thread(target=grow)
    t.start()
    try:
        for _ in range(5):
            assert tok.encode_batch(texts, num_threads=2) == want
    finally:
        stop.set()
        t.join()


def test_encode_batch_lets_go_of_each_text_once_its_group_is_in(monkeypatch):
    """encode_batch holds a reference to every str while C reads it; collect_batch puts None
    in that list for each text as soon as the job says no encoder reads it (with one thread,
    every text; with two, all but a group the caller encoded a second time at most).  The
    caller's list is left alone, and every str ends with the references it had."""
    tok = ours("cl100k_base")
    texts = [("word %d, é " % i) * (20 + i % 50) for i in range(3000)]
    want = [tok.encode(t) for t in texts]
    counts = [sys.getrefcount(t) for t in texts]
    seen = []
    collect = T.Tokenizer._collect_batch

    def spy(job, n, held=None):
        got = collect(job, n, held)
        seen.append(list(held))
        return got

    monkeypatch.setattr(T.Tokenizer, "_collect_batch", staticmethod(spy))
    copy = list(texts)
    assert tok.encode_batch(texts, num_threads=1) == want
    assert seen[-1] == [None] * len(texts)
    for _ in range(3):
        assert tok.encode_batch(texts, num_threads=2) == want
        kept = [t for t in seen[-1] if t is not None]
        assert len(kept) < len(texts) // 4 and all(t in texts for t in kept)
    assert tok.encode_batch(iter(texts), num_threads=2) == want     # its own list
    assert texts == copy and all(a is b for a, b in zip(texts, copy))
    copy = seen = kept = None
    gc.collect()
    assert [sys.getrefcount(t) for t in texts] == counts
    with pytest.raises(ValueError, match="bad batch job"):          # held must fit
        _idcache.collect_batch(T._BATCH_STEP, T._BATCH_POLL, 1234, 3, [None] * 2)


def test_collect_batch_refuses_bad_jobs():
    with pytest.raises(ValueError, match="bad batch job"):
        _idcache.collect_batch(T._BATCH_STEP, T._BATCH_POLL, 0, 3)
    with pytest.raises(ValueError, match="bad batch job"):
        _idcache.collect_batch(0, T._BATCH_POLL, 1234, 3)
    with pytest.raises(ValueError, match="bad batch job"):
        _idcache.collect_batch(T._BATCH_STEP, 0, 1234, 3)
    with pytest.raises(TypeError):
        _idcache._idlist.collect_batch(T._BATCH_STEP, T._BATCH_POLL, 1234, 3, (1,))


def test_encoders_agree_without_the_helper(monkeypatch):
    tok = ours("cl100k_base")
    texts = ["hello world " * 50, "", "漢字 🎉 " * 30, "x"] * 20
    fast_single = [tok.encode(t) for t in texts]
    fast_batch = tok.encode_batch(texts, num_threads=2)
    monkeypatch.setattr(_idcache, "FAST", False)
    assert [tok.encode(t) for t in texts] == fast_single
    assert tok.encode_batch(texts, num_threads=2) == fast_batch == fast_single
    # a text cut into parts: the Python loop gets BPE_BATCH_PENDING steps before it
    big = ["short one", "Some words, and more words. " * 60_000]
    assert tok.encode_batch(big, num_threads=2) == [tok.encode(t) for t in big]


def test_decode_reads_ids_alike_without_the_helper(monkeypatch):
    """u32_ids and the pure-Python fallback read ids the same way: operator.index, the first
    bad item named with its position."""
    from decimal import Decimal
    tok = ours("cl100k_base")
    ids = tok.encode("hello world, 漢字")

    class Index:
        def __index__(self):
            return ids[0]

    cases = [ids, tuple(ids), [True] + ids, [Index()] + ids, ids + [1.0], ids + [Decimal(3)],
             ids + [-1], ids + [2 ** 32], ids + [2 ** 70], ids + ["7"]]

    def outcomes():
        out = []
        for c in cases:
            try:
                out.append(tok.decode_bytes(list(c) * 300))
            except (TypeError, ValueError) as e:
                out.append((type(e), str(e)))
        return out

    fast = outcomes()
    monkeypatch.setattr(_idcache, "FAST", False)
    assert outcomes() == fast
    assert [type(x) for x in fast[:4]] == [bytes] * 4
    assert [x[0] for x in fast[4:]] == [TypeError, TypeError, ValueError, ValueError,
                                        ValueError, TypeError]


def test_u32_ids_when_index_changes_the_list():
    ids = [1, 2, 3]

    class Shrink:
        def __index__(self):
            del ids[1:]
            return 5

    ids.insert(1, Shrink())
    with pytest.raises(RuntimeError, match="changed size"):
        _idcache.u32_ids(ids)


def random_texts(rng, n):
    """Texts of every storage kind of str: ASCII, Latin-1, BMP (with the edges of each UTF-8
    width) and astral characters, empty ones included."""
    pools = [[chr(c) for c in range(0x20, 0x7F)],
             [chr(c) for c in range(0x80, 0x100)],
             [chr(c) for c in (0x7FF, 0x800, 0x4E00, 0xD7FF, 0xE000, 0xFFFD, 0xFFFF)],
             [chr(c) for c in (0x10000, 0x1F600, 0x10FFFF)]]
    out = []
    for _ in range(n):
        kinds = pools[:rng.randrange(1, 5)]
        out.append("".join(rng.choice(rng.choice(kinds)) for _ in range(rng.randrange(0, 40))))
    return out


def test_join_utf8_equals_joining_encoded_texts():
    rng = random.Random(3)
    for n in [0, 1, 2, 7, 300]:
        texts = random_texts(rng, n)
        joined, ends = _idcache.join_utf8(texts)
        datas = [t.encode("utf-8") for t in texts]
        assert joined == b"".join(datas)
        got_ends = list(ffi.from_buffer("size_t[]", ends)) if n else []
        want, total = [], 0
        for d in datas:
            total += len(d)
            want.append(total)
        assert got_ends == want


def runs_text(rng, pools, n_runs):
    """Runs of 0..40 characters, each from one pool: long ASCII stretches inside Latin-1, BMP
    and astral strings, as real text has them (the helper copies those 8 or 16 at a time)."""
    return "".join("".join(rng.choice(pool) for _ in range(rng.randrange(0, 41)))
                   for pool in (rng.choice(pools) for _ in range(n_runs)))


def test_join_utf8_of_runs_long_texts_and_surrogates_anywhere():
    rng = random.Random(5)
    ascii_ = [chr(c) for c in range(0x20, 0x7F)]
    pools = [ascii_, [chr(c) for c in (0x80, 0xE9, 0xFF)],
             [chr(c) for c in (0x7FF, 0x800, 0x4E00, 0xFFFF)], ["\U0001F600", "\U0010FFFF"]]
    for _ in range(200):
        kinds = [ascii_] + rng.sample(pools[1:], rng.randrange(1, 4))
        texts = [runs_text(rng, kinds, rng.randrange(0, 12)) for _ in range(rng.randrange(1, 6))]
        joined, ends = _idcache.join_utf8(texts)
        assert joined == "".join(texts).encode("utf-8")
        assert list(ffi.from_buffer("size_t[]", ends))[-1] == len(joined)
        # a surrogate at any place of any text sends the batch to the slow path
        k = rng.randrange(len(texts))
        at = rng.randrange(len(texts[k]) + 1)
        bad = texts[:k] + [texts[k][:at] + rng.choice("\ud800\udbff\udc00\udfff") +
                           texts[k][at:]] + texts[k + 1:]
        assert _idcache.join_utf8(bad) is None
    # longer than the helper's 32768-character counting round (int16 lanes would overflow
    # in one with no flush), of each kind
    for text in ["\u00e9" + "ab\u00ffcd" * 20000, ("x\u4e00y\u07ff" + "z" * 9) * 5000,
                 "\u4e00" * 140000, ("a\U0001F600" + "\u0800" * 7) * 6000]:
        assert _idcache.join_utf8([text, "tail"])[0] == (text + "tail").encode("utf-8")


@pytest.mark.parametrize("texts", [["\ud800"], ["ok", "a\udfffb"], ["x\ud83d\ude00"],
                                   ["é\ud800"], ["\U0001F600\udc00"], ["a", 3], ["a", b"b"]])
def test_join_utf8_leaves_surrogates_and_non_str_to_the_slow_path(texts):
    assert _idcache.join_utf8(texts) is None


def test_batch_with_surrogates_or_str_subclasses_equals_single_encodes():
    class S(str):
        pass
    tok = ours("cl100k_base")
    texts = ["a\ud83d\ude00b", "x\ud800", "é漢🎉", S("sub class"), ""]
    assert tok.encode_batch(texts) == [tok.encode(t) for t in texts]
    with pytest.raises(TypeError, match="int"):
        tok.encode_batch(["a", 3])


def test_text_units_hold_a_private_untracked_list_of_strs():
    """encode_batch holds the strs C reads in a list of its own: the caller's list is copied
    in the same pass (its items, same objects, each holding a reference), or with own=True
    taken as it is; that list, all strs, is untracked by the cycle collector (strs refer to
    nothing: no cycle can pass through it), so that a collection during the batch does not
    read every str.  The caller's list is neither untracked nor changed."""
    # made at run time: a one-character str (and on 3.12+ any interned one) is immortal,
    # and its count does not move
    texts = ["".join(parts) for parts in (["a", "c"], ["b"] * 100, ["ü"] + ["z"] * 50)]
    before = [sys.getrefcount(t) for t in texts]
    held = _idcache.text_units(texts)[0]
    assert held is not texts and held == texts and gc.is_tracked(texts)
    assert all(h is t for h, t in zip(held, texts)) and not gc.is_tracked(held)
    assert [sys.getrefcount(t) for t in texts] == [b + 1 for b in before]
    texts.clear()                   # another thread could: the copy still holds the strs
    assert held == ["ac", "b" * 100, "ü" + "z" * 50]
    del held
    mine = ["x", "y"]
    assert _idcache.text_units(mine, own=True)[0] is mine and not gc.is_tracked(mine)
    tok = ours("cl100k_base")
    theirs = ["hello world", "more text"] * 3000
    assert tok.encode_batch(theirs, num_threads=2) == [tok.encode(t) for t in theirs]
    assert gc.is_tracked(theirs)


def test_text_units_locate_each_strs_storage():
    """encode_batch hands C each str where CPython keeps it: its address, its length in
    characters (running ends) and its kind, which must be the C core's BPE_TEXT_* values."""
    from bpe_cffi._native import lib
    texts = ["", "ascii", "café ÿ", "漢字 and ascii", "a\ud800", "🎉x", "x" * 5000]
    kinds_wanted = [lib.BPE_TEXT_UTF8, lib.BPE_TEXT_UTF8, lib.BPE_TEXT_LATIN1,
                    lib.BPE_TEXT_UCS2, lib.BPE_TEXT_UCS2, lib.BPE_TEXT_UCS4, lib.BPE_TEXT_UTF8]
    held, starts, ends, kinds = _idcache.text_units(texts)
    assert held == texts
    where = ffi.from_buffer("uint8_t *[]", starts)
    assert list(ffi.from_buffer("size_t[]", ends)) == \
        [sum(map(len, texts[:k + 1])) for k in range(len(texts))]
    assert list(kinds) == kinds_wanted
    width = {lib.BPE_TEXT_UTF8: 1, lib.BPE_TEXT_LATIN1: 1, lib.BPE_TEXT_UCS2: 2,
             lib.BPE_TEXT_UCS4: 4}
    codec = {1: "latin-1", 2: "utf-16-le", 4: "utf-32-le"}
    for k, text in enumerate(texts):
        if text and sys.byteorder == "little":
            stored = ffi.buffer(where[k], len(text) * width[kinds[k]])[:]
            assert stored.decode(codec[width[kinds[k]]], "surrogatepass") == text

    class Sub(str):
        pass

    for odd in [["ok", Sub("x")], ["ok", b"bytes"], ["ok", 3]]:
        assert _idcache.text_units(odd) is None
        assert _idcache.text_units(odd, own=True) is None and gc.is_tracked(odd)
    with pytest.raises(TypeError):
        _idcache.text_units(("a", "b"))
    tok = ours("cl100k_base")
    texts = ["", "ascii only", "café", "漢字 and ascii", "🎉x", "a" * 1000, "ü" * 5000, "",
             "Ж" * 3 + "z", "\x7f", "\x80"]
    mixed = texts + ["x" * 70_000 + "<|endoftext|>", "ß" * 70_000] + texts
    for threads in [1, 2, 3]:
        assert tok.encode_batch(mixed, num_threads=threads) == [tok.encode(t) for t in mixed]


@pytest.mark.parametrize("name", ["gpt2", "o200k_base"])
def test_batch_of_every_str_kind_equals_single_encodes(name):
    """Texts of every storage width, with lone surrogates (U+FFFD) and surrogate pairs made
    of two code points, through encode_batch's in-place reading on 1-3 threads: the ids of
    encode, which goes through str.encode."""
    tok = ours(name)
    rng = random.Random(12)
    pools = ["abc xyz.,!\n", "éßñ\xa0ÿ", "漢字Жא\u2019\u2014", "\U0001F600\U00010348",
             "\ud800\udbff\udc00\udfff", "\ud83d\ude00", "<|endoftext|>"]
    texts = ["".join(rng.choice(rng.choice(pools)) for _ in range(rng.choice([1, 5, 60, 900])))
             for _ in range(300)] + ["ÿ" * 70_000, "\ud800" * 3, ""]
    expect = [tok.encode(t) for t in texts]
    for threads in [1, 2, 3]:
        assert tok.encode_batch(texts, num_threads=threads) == expect
    assert tok.encode_batch(texts, allowed_special=set()) == \
        [tok.encode_ordinary(t) for t in texts]


def test_id_lists_are_not_tracked_by_the_cycle_collector_and_stay_ordinary_lists():
    import gc
    tok = ours("cl100k_base")
    ids = tok.encode("hello world, " * 20)
    many = tok.encode_batch(["a b c", "", "漢字 " * 30])
    packed = _idcache.ids_from_le_bytes(bytes(range(16)))
    for x in [ids, packed] + many:
        assert type(x) is list and not gc.is_tracked(x)
    assert gc.is_tracked(many)                # the outer list holds lists: tracked
    before = list(ids)
    ids.append(7)
    ids[0] = -1
    assert ids[1:-1] == before[1:] and ids[-1] == 7 and sorted(packed) == packed
    gc.collect()                              # nothing is freed from under the lists
    assert ids[1:-1] == before[1:]


def _is_utf8(data):
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def test_join_utf8_bytes_judges_utf8_as_python_does():
    """join_utf8_bytes accepts exactly what bytes.decode("utf-8") accepts: every boundary of
    the UTF-8 rules (overlong forms, surrogates, > U+10FFFF, cut sequences), at every offset
    of the 8-byte ASCII step, and random bytes."""
    edges = [b"", b"\x7f", b"\x80", b"\xbf", b"\xc0\x80", b"\xc1\xbf", b"\xc2\x80", b"\xdf\xbf",
             b"\xc2\x7f", b"\xc2\xc0", b"\xe0\x80\x80", b"\xe0\x9f\xbf", b"\xe0\xa0\x80",
             b"\xec\xbf\xbf", b"\xed\x80\x80", b"\xed\x9f\xbf", b"\xed\xa0\x80", b"\xed\xbf\xbf",
             b"\xee\x80\x80", b"\xef\xbf\xbf", b"\xe1\x80\x7f", b"\xf0\x8f\xbf\xbf",
             b"\xf0\x90\x80\x80", b"\xf3\xbf\xbf\xbf", b"\xf4\x8f\xbf\xbf", b"\xf4\x90\x80\x80",
             b"\xf5\x80\x80\x80", b"\xf1\x80\x80\x7f", b"\xfe", b"\xff", b"\xe2\x82", b"\xc3",
             b"\xf0\x9f\x8e", "é漢🎉".encode()]
    cases = [b"a" * pre + e + b"b" * post for e in edges for pre in range(10) for post in (0, 1, 9)]
    rng = random.Random(5)
    alphabet = [0x41, 0x7F, 0x80, 0x9F, 0xA0, 0xBF, 0xC0, 0xC2, 0xDF, 0xE0, 0xED, 0xEF, 0xF0,
                0xF4, 0xF5, 0xFF]
    for _ in range(3000):
        cases.append(bytes(rng.choice(alphabet) for _ in range(rng.randrange(0, 24))))
    valid = "x é 漢字 🎉 end".encode()
    for _ in range(1000):
        b = bytearray(valid)
        b[rng.randrange(len(b))] = rng.randrange(256)
        cases.append(bytes(b))
    seen = set()
    for data in cases:
        got = _idcache.join_utf8_bytes([data])
        ok = _is_utf8(data)
        seen.add(ok)
        if ok:
            assert got is not None and got[0] == data, data
            assert int.from_bytes(got[1], sys.byteorder) == len(data)
        else:
            assert got is None, data
    assert seen == {True, False}


def test_join_utf8_bytes_joins_and_refuses_other_items():
    parts = [b"abc", b"", "h\u00e9llo \U0001f389".encode(), b"x" * 100]
    joined, ends = _idcache.join_utf8_bytes(parts)
    assert joined == b"".join(parts)
    width = len(ends) // len(parts)
    assert [int.from_bytes(ends[i:i + width], sys.byteorder)
            for i in range(0, len(ends), width)] == [3, 3, 3 + len(parts[2]), len(joined)]
    assert _idcache.join_utf8_bytes([]) == (b"", b"")
    assert _idcache.join_utf8_bytes([b"ok", "str"]) is None
    assert _idcache.join_utf8_bytes([b"ok", bytearray(b"x")]) is None
    assert _idcache.join_utf8_bytes([b"ok", b"\xff"]) is None
    with pytest.raises(TypeError):
        _idcache._idlist.join_utf8_bytes((b"a",))


def test_pack_batch_reply_is_what_msgpack_packs():
    """pack_batch_reply (the daemon's encode_batch replies, packed in C) gives byte for byte
    msgpack-python's packing of the same map, across every header width: counts around 127,
    255, 65535; bins around 256 and 65536 bytes; arrays around 16 and 65536 items; any slice
    of the texts; any id type."""
    msgpack = pytest.importorskip("msgpack")
    rng = random.Random(6)
    sizes = [0, 1, 2, 63, 64, 127, 128, 255, 256, 16383, 16384, 65535, 65536]
    sizes += [rng.randrange(0, 3000) for _ in range(10)]
    ids = [rng.randrange(0, 2 ** 32) for _ in range(sum(sizes))]
    buf = ffi.new("uint32_t[]", ids)
    cuts, a = [], 0
    for n in sizes:
        a += n
        cuts.append(a)
    ends = ffi.new("size_t[]", cuts)
    addr, eaddr = int(ffi.cast("uintptr_t", buf)), int(ffi.cast("uintptr_t", ends))
    pack = _idcache._idlist.pack_batch_reply

    def want(rid, first, count):
        lo = cuts[first - 1] if first else 0
        bins, counts = [], []
        for k in range(first, first + count):
            bins.append(b"".join(i.to_bytes(4, "little") for i in ids[lo:cuts[k]]))
            counts.append(cuts[k] - lo)
            lo = cuts[k]
        return msgpack.packb({"id": rid, "ok": True, "n": counts, "ids": bins}, use_bin_type=True)

    for rid in (0, 7, 300, -5, "abc", b"\x00\x01"):
        packed_id = msgpack.packb(rid, use_bin_type=True)
        for first, count in [(0, len(sizes)), (0, 0), (3, 1), (5, 9), (len(sizes) - 1, 1)]:
            assert pack(packed_id, addr, eaddr, first, count) == want(rid, first, count)
    # 16 and 65536 texts: the array headers' widths (empty texts)
    zeros = ffi.new("size_t[]", 70_000)
    zaddr = int(ffi.cast("uintptr_t", zeros))
    for count in (15, 16, 65535, 65536, 70_000):
        got = pack(b"\x01", 0, zaddr, 0, count)
        assert got == msgpack.packb({"id": 1, "ok": True, "n": [0] * count,
                                     "ids": [b""] * count}, use_bin_type=True)
    back = ffi.new("size_t[]", [10, 5])
    with pytest.raises(ValueError):
        pack(b"\x01", addr, int(ffi.cast("uintptr_t", back)), 0, 2)
    with pytest.raises(ValueError):
        pack(b"\x01", addr, eaddr, -1, 2)


def test_ascii_text_is_read_in_place_and_only_ascii():
    """encode reads an all-ASCII str where it lies as UTF-8 (its characters are its UTF-8); a
    str of one-byte characters that are not all ASCII (Latin-1: 'é' is one byte in the str,
    two in UTF-8) must not be read as UTF-8, and a str subclass or anything else not at all.
    A long non-ASCII str is read where it lies and converted by C as it is encoded, a lone
    surrogate as U+FFFD (as tiktoken); a short one goes through the str path."""
    ascii_text = "plain ASCII text, with digits 12345 and\ttabs\n" * 200
    for text in [ascii_text, ""]:
        address, kind = _idcache.str_storage(text)
        assert address != 0 and kind == 0
    for other, width in [("café", 1), ("\x80", 1), ("漢字", 2), ("🎉", 4)]:
        address, kind = _idcache.str_storage(other)
        assert address != 0 and kind == width, other
    for other in [b"bytes", 42, None]:
        assert _idcache.str_storage(other) is None, other

    class Sub(str):
        pass

    assert _idcache.str_storage(Sub("abc")) is None
    tok = ours("cl100k_base")
    for text in [ascii_text, "", "a", "café au lait " * 50, "naïve " * 1000 + "end",
                 "x" * 100_000 + "<|endoftext|>" + "y" * 10,
                 "漢字とかな、Ελληνικά, русский 🎉 " * 500 + "<|endoftext|>é",   # long: in place
                 "lone \ud800 surrogate " * 500]:                  # long: in place, U+FFFD
        want = tok.encode(Sub(text))                 # the copying path
        assert tok.encode(text) == want
        assert tok.encode_ordinary(text) == tok.encode_ordinary(Sub(text))
        assert tok.encode(text) == tok.encode_batch([text])[0]
