"""csrc/unicode_tables.h against the `regex` module, for every code point.

The C tables are only reachable through bpe_pretokenize, so each code point c is placed in
small contexts whose split depends on c's class, and the C pieces are compared with the pieces
`regex` finds in the same text:

    gpt2  "a"+c   c joins the letter run          iff c is \\p{L}
    gpt2  "1"+c   c joins the number run          iff c is \\p{N}
    gpt2  "."+c   c joins the punctuation run     iff c is [^\\s\\p{L}\\p{N}] (OTHER or MARK)
          (none of the three: c is \\s)
    o200k "a"+c   c joins the lower-case word     iff c is Ll, Lm, Lo or M
    o200k c+"Ab"  c starts a piece with "Ab"      iff c is not Ll, N, \\r or \\n

Together these tell apart every class the patterns distinguish (Lu|Lt, Ll, Lm|Lo, M, N, \\s,
other), so a wrong table entry changes the pieces at that code point.
"""
import importlib.util
from pathlib import Path

import numpy as np
import pytest
import regex

from bpe_cffi._native import ffi, lib
from conftest import needs_tables_regex
from bpe_cffi.patterns import GPT2, O200K

REPO = Path(__file__).resolve().parent.parent
CHUNK = 1 << 16
CONTEXTS = {"gpt2": (lib.BPE_PATTERN_GPT2, regex.compile(GPT2), ("a{}", "1{}", ".{}")),
            "o200k": (lib.BPE_PATTERN_O200K, regex.compile(O200K), ("a{}", "{}Ab"))}


def c_byte_ends(pid: int, data: bytes) -> np.ndarray:
    ends = ffi.new("bpe_ids *")
    try:
        assert lib.bpe_pretokenize(pid, data, len(data), ends) == lib.BPE_OK
        return np.frombuffer(ffi.buffer(ends.ids, 4 * ends.len), dtype=np.uint32).astype(np.int64)
    finally:
        lib.bpe_ids_free(ends)


@needs_tables_regex
@pytest.mark.parametrize("name", list(CONTEXTS))
@pytest.mark.parametrize("start", range(0, 0x110000, CHUNK))
def test_every_code_point(name, start):
    pid, pat, forms = CONTEXTS[name]
    cps = [c for c in range(start, start + CHUNK) if not 0xD800 <= c < 0xE000]
    text = "\n".join(f.format(chr(c)) for c in cps for f in forms)
    data = text.encode("utf-8")
    # regex's piece ends, converted from character to byte offsets
    pieces = pat.findall(text)
    char_ends = np.cumsum(np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces)))
    cp_arr = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    utf8_len = 1 + (cp_arr >= 0x80) + (cp_arr >= 0x800) + (cp_arr >= 0x10000)
    byte_end_of_char = np.cumsum(utf8_len.astype(np.int64))
    want = byte_end_of_char[char_ends - 1]
    got = c_byte_ends(pid, data)
    if len(got) != len(want) or not np.array_equal(got, want):
        n = min(len(got), len(want))
        i = int(np.argmax(got[:n] != want[:n])) if np.any(got[:n] != want[:n]) else n
        lo = int(min(got[i - 1] if i else 0, want[i - 1] if i else 0))
        hi = int(max(got[min(i + 1, len(got) - 1)], want[min(i + 1, len(want) - 1)]))
        around = data[lo:hi].decode("utf-8", "replace")
        culprits = sorted({f"U+{ord(ch):04X}" for ch in around if ch not in "a1.A\nb"})
        raise AssertionError(f"{name}: piece {i}: C end {got[i:i + 2]} regex end {want[i:i + 2]}"
                             f" in {around!r}; code points {culprits}")


def _load_generator():
    spec = importlib.util.spec_from_file_location("gen_unicode_tables",
                                                  REPO / "scripts" / "gen_unicode_tables.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_committed_header_is_what_the_generator_makes():
    header = (REPO / "csrc" / "unicode_tables.h").read_text(encoding="utf-8")
    m = regex.search(r'#define BPE_UC_REGEX_VERSION "([^"]+)"', header)
    assert m, "unicode_tables.h names no regex version"
    if m.group(1) != regex.__version__:
        pytest.skip(f"header generated with regex {m.group(1)}, installed {regex.__version__} "
                    "(test_every_code_point still checks every class)")
    assert _load_generator().render() == header


def test_header_states_the_unicode_version():
    header = (REPO / "csrc" / "unicode_tables.h").read_text(encoding="utf-8")
    m = regex.search(r'#define BPE_UC_UNICODE_VERSION "(\d+\.\d+(?:\.\d+)?)"', header)
    assert m, "unicode_tables.h does not state its Unicode version"
