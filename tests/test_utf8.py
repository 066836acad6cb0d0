"""csrc/utf8.c against Python's own UTF-8 codec.

utf8.c has no binding in the package's cdef, so this file builds a tiny test-only cffi module
from csrc/utf8.c + csrc/buffers.c in a temporary directory.  Expected results always come from
Python: bytes.decode("utf-8", errors="replace"), strict decoding, and the incremental decoder.
"""
import codecs
import random
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from conftest import LONG

cffi = pytest.importorskip("cffi")

CSRC = Path(__file__).resolve().parent.parent / "csrc"


@pytest.fixture(scope="module")
def u8(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("utf8_cffi")
    ffi = cffi.FFI()
    ffi.cdef("""
        typedef struct bpe_bytes { uint8_t *data; size_t len; size_t cap; } bpe_bytes;
        size_t bpe_utf8_complete_prefix(const uint8_t *buf, size_t len);
        int bpe_utf8_valid(const uint8_t *buf, size_t len);
        int bpe_utf8_replace_invalid(const uint8_t *buf, size_t len, bpe_bytes *out);
        int bpe_utf8_from_units(const uint8_t *units, size_t n, int kind, bpe_bytes *out);
        void free(void *);
    """)
    ffi.set_source("_utf8_test", '#include <stdlib.h>\n#include "utf8.h"',
                   sources=[str(CSRC / "utf8.c"), str(CSRC / "buffers.c")],
                   include_dirs=[str(CSRC)],
                   extra_compile_args=["-std=c99", "-Wall", "-Wextra", "-O1"])
    so = ffi.compile(tmpdir=str(tmp))
    sys.path.insert(0, str(tmp))
    try:
        import importlib.util
        spec = importlib.util.spec_from_file_location("_utf8_test", so)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(tmp))
    return mod


def replace(u8, data: bytes) -> bytes:
    out = u8.ffi.new("bpe_bytes *")
    try:
        assert u8.lib.bpe_utf8_replace_invalid(data, len(data), out) == 0
        return u8.ffi.buffer(out.data, out.len)[:] if out.len else b""
    finally:
        u8.lib.free(out.data)


def check(u8, data: bytes) -> None:
    want = data.decode("utf-8", errors="replace").encode("utf-8")
    assert replace(u8, data) == want, data
    try:
        data.decode("utf-8")
        valid = 1
    except UnicodeDecodeError:
        valid = 0
    assert u8.lib.bpe_utf8_valid(data, len(data)) == valid, data
    # The kept-back tail is the suffix that is a proper prefix of some character's encoding
    # (at most one suffix can be: it starts with a lead byte followed only by continuations).
    # Python's incremental decoder keeps the same tail, except that it also keeps back some
    # tails that can never complete (e.g. b"\xed\xa0", a surrogate): those are replaced the
    # same way whether or not they are cut off, so either choice is a safe cut.
    pending = next((k for k in (3, 2, 1) if len(data) >= k and data[-k:] in PREFIXES), 0)
    p = u8.lib.bpe_utf8_complete_prefix(data, len(data))
    assert p == len(data) - pending, data
    dec = codecs.getincrementaldecoder("utf-8")("replace")
    dec.decode(data, final=False)
    assert len(dec.getstate()[0]) >= pending, data
    for tail in (b"", b"\x80", b"\xbf\xbf\xbf", b"a"):
        assert (data[:p].decode("utf-8", "replace") + (data[p:] + tail).decode("utf-8", "replace")
                == (data + tail).decode("utf-8", "replace")), data


PREFIXES = {chr(c).encode("utf-8")[:k] for c in range(0x80, 0x110000) if not 0xD800 <= c < 0xE000
            for k in range(1, len(chr(c).encode("utf-8")))}


# Bytes that matter: ASCII, continuations, every lead byte, the edges of each second-byte range.
INTERESTING = [0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF,
               0xE0, 0xE1, 0xEC, 0xED, 0xEE, 0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xF8, 0xFF]


def test_exhaustive_short_sequences(u8):
    import itertools
    for n in range(1, 4):
        for tup in itertools.product(INTERESTING, repeat=n):
            check(u8, bytes(tup))


def test_every_code_point_and_surrogates(u8):
    text = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000)
    check(u8, text.encode("utf-8"))
    for c in (0xD800, 0xDBFF, 0xDC00, 0xDFFF):   # surrogates encoded as UTF-8 are invalid
        check(u8, chr(c).encode("utf-8", "surrogatepass"))
    for bad in (b"\xc0\x80", b"\xe0\x80\x80", b"\xf0\x80\x80\x80", b"\xf4\x90\x80\x80"):
        check(u8, bad)                            # overlongs and > U+10FFFF


def test_random_bytes(u8):
    rng = random.Random(7)
    for _ in range(200_000 if LONG else 5_000):
        n = rng.randint(0, 40)
        kind = rng.random()
        if kind < 0.4:
            data = bytes(rng.choice(INTERESTING) for _ in range(n))
        elif kind < 0.7:
            data = bytes(rng.randrange(256) for _ in range(n))
        else:  # valid text with a few corruptions
            s = "".join(chr(rng.choice([rng.randrange(0x80), rng.randrange(0x800),
                                        rng.randrange(0xD800), rng.randrange(0x10000, 0x110000)]))
                        for _ in range(n))
            data = bytearray(s.encode("utf-8"))
            for _ in range(rng.randint(0, 3)):
                if data:
                    data[rng.randrange(len(data))] = rng.randrange(256)
            if data and rng.random() < 0.3:
                del data[-rng.randint(1, min(3, len(data))):]
            data = bytes(data)
        check(u8, data)


def test_long_buffers(u8):
    rng = random.Random(3)
    base = ("héllo wörld 中文 😀 " * 5000).encode("utf-8")
    check(u8, base)
    data = bytearray(base)
    for _ in range(200):
        data[rng.randrange(len(data))] = rng.randrange(256)
    check(u8, bytes(data))
    check(u8, b"\xff" * 100_000)          # worst case: output is 3x the input
    check(u8, b"a" * 100_003 + b"\xe2\x82")


@settings(max_examples=3000 if LONG else 300, deadline=None)
@given(st.binary(max_size=64))
def test_hypothesis_bytes(u8, data):
    check(u8, data)


@settings(max_examples=2000 if LONG else 200, deadline=None)
@given(st.text(max_size=32), st.integers(0, 3), st.binary(max_size=4))
def test_hypothesis_text_with_garbage(u8, text, cut, garbage):
    data = text.encode("utf-8")
    check(u8, data[:len(data) - cut] + garbage + data)


# ---- bpe_utf8_from_units: a str's code units (as CPython stores them) to UTF-8 ----------------

KIND_CODE = {1: "B", 2: "H", 4: "I"}   # BPE_TEXT_LATIN1, _UCS2, _UCS4: bytes per unit


def from_units(u8, units, width):
    """(rc, bytes) of bpe_utf8_from_units on a list of code units of `width` bytes."""
    import array
    data = array.array(KIND_CODE[width], units).tobytes()
    out = u8.ffi.new("bpe_bytes *")
    try:
        rc = u8.lib.bpe_utf8_from_units(data, len(units), width, out)
        return rc, (u8.ffi.buffer(out.data, out.len)[:] if out.len else b"")
    finally:
        u8.lib.free(out.data)


def units_utf8(units) -> bytes:
    """What the C core must give: the units read as UTF-16 (a high surrogate then a low one is
    one character; any other surrogate U+FFFD), as tiktoken and bpe_cffi's Python layer do."""
    s = "".join(map(chr, units))
    return s.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace").encode("utf-8")


UNIT_POOLS = {
    1: [range(0x20, 0x7F), [0x00, 0x7F, 0x80, 0xA0, 0xE9, 0xFF]],
    2: [range(0x20, 0x7F), [0x80, 0x7FF, 0x800, 0x4E00, 0xFFFF, 0xFEFF],
        [0xD800, 0xDBFF, 0xDC00, 0xDFFF, 0xD83D, 0xDE00]],
    4: [range(0x20, 0x7F), [0x80, 0x800, 0xFFFF, 0x10000, 0x1F600, 0x10FFFF],
        [0xD800, 0xDBFF, 0xDC00, 0xDFFF]],
}


@pytest.mark.parametrize("width", [1, 2, 4])
def test_from_units_runs_of_every_kind_and_surrogates_anywhere(u8, width):
    """Runs of 0..20 units from one pool at a time: ASCII blocks copied whole next to wide
    characters and surrogates (pairs and lone ones) at every offset of the 8- or 16-unit
    blocks, and every length of the tail."""
    rng = random.Random(width)
    for _ in range(3000 if LONG else 600):
        units = []
        for _ in range(rng.randrange(0, 8)):
            pool = rng.choice(UNIT_POOLS[width])
            units += [rng.choice(pool) for _ in range(rng.randrange(0, 21))]
        assert from_units(u8, units, width) == (0, units_utf8(units)), units


def test_from_units_long_texts_and_code_points_above_unicode(u8):
    for units, width in [([0x61] * 100003, 1), ([0xE9, 0x61] * 50001, 1),
                         (([0x61] * 9 + [0x4E00, 0xD83D, 0xDE00]) * 9000, 2),
                         ([0x1F600, 0x61, 0x62] * 30001, 4)]:
        assert from_units(u8, units, width) == (0, units_utf8(units))
    assert from_units(u8, [0x61, 0x110000], 4)[0] == 12   # BPE_ERR_TEXT


def test_appends_keep_what_was_written_when_the_buffer_moves(u8):
    """bpe_utf8_from_units appends after out->len.  It reserves a text's largest UTF-8 (up to
    four bytes a unit, bpe_bytes_room) and writes less, so a later, longer text finds the
    buffer less than half in use: it then moves to a new block with only the bytes in use
    copied (buffers.c, `moved`), else it grows by realloc.  Both ways must keep every byte
    written before."""
    import array
    rng = random.Random(11)
    for _ in range(40 if LONG else 12):
        out = u8.ffi.new("bpe_bytes *")
        want = []
        try:
            for _ in range(rng.randrange(1, 7)):
                width = rng.choice([1, 2, 4])
                n = rng.choice([0, 1, rng.randrange(2, 300), rng.randrange(300, 40_000)])
                units = [rng.choice(rng.choice(UNIT_POOLS[width])) for _ in range(n)]
                data = array.array(KIND_CODE[width], units).tobytes()
                cap_before = out.cap
                assert u8.lib.bpe_utf8_from_units(data, n, width, out) == 0
                want.append(units_utf8(units))
                assert out.len <= out.cap and (out.cap == cap_before or out.cap >= n)
                assert u8.ffi.buffer(out.data, out.len)[:] == b"".join(want)
        finally:
            u8.lib.free(out.data)
