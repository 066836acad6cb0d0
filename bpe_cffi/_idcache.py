"""Id lists made in C from a shared cache of int objects (csrc/pyext/idlist.c).

`CACHE[i] is i` for every index: ints are immutable, so every list of ids can hold the same
objects, and the C helper stores pointers to them instead of allocating one int per id.  The
helper pins the ints it puts here (immortal on Python 3.12+; see "Pinned ints" in idlist.c),
so lists take them without touching their reference counts; sys.getrefcount of one shows a
huge number.
The cache grows (never shrinks) to the largest id limit of the tokenizers built, at most
MAX_CACHED entries (about 40 bytes each); larger ids are made on the fly.

If the helper extension is not built (it is optional in setup.py), `FAST` is False and
tokenizer.py uses memoryview.tolist(), which gives the same lists more slowly.
"""
MAX_CACHED = 1 << 20

CACHE = []           # public: tokenizer.py and the daemon client hand it to the helper

try:
    from . import _idlist
    FAST = True
except ImportError:  # pragma: no cover - depends on the build
    _idlist = None
    FAST = False

# encode_str(text, keep, tokenizer, mode, encode, ids_free, cache) -> list, (rc, info) or
# None: a short str's ids in one call (csrc/pyext/one_call.c); None without the helper
encode_str = _idlist.encode_str if FAST else None
# decode_ids(ids, keep, tokenizer, decode, bytes_free, errors) -> bytes or str, (rc, index)
# or None: a short list of ids decoded in one call (one_call.c); None without the helper
decode_ids = _idlist.decode_ids if FAST else None


def reserve(limit: int) -> None:
    """Makes sure ints 0 .. min(limit, MAX_CACHED) - 1 are cached."""
    limit = min(int(limit), MAX_CACHED)
    if len(CACHE) < limit:
        if FAST:        # pinned: see "Pinned ints" in idlist.c
            _idlist.extend_cache(CACHE, limit)
        else:
            CACHE.extend(range(len(CACHE), limit))


def ids_list(address: int, n: int) -> list:
    """The list of the n uint32 ids at a C address (the caller keeps the buffer alive)."""
    return _idlist.ids_list(address, n, CACHE)


def ids_lists(address: int, ends_address: int, n_texts: int) -> list:
    """Lists of ids[ends[k-1]:ends[k]] for k < n_texts (ends: size_t values at ends_address)."""
    return _idlist.ids_lists(address, ends_address, n_texts, CACHE)


def collect_batch(step_address: int, poll_address: int, job_address: int, n_texts: int,
                  held=None):
    """(lists of ids of the n_texts texts, 0, 0) or (None, error code, failing text): every
    group of a started C batch job, taken with the C functions bpe_batch_step and
    bpe_batch_poll at these addresses; signals are looked at between steps.  held: None,
    or the list of the n_texts texts held for the job: each text is replaced by None there
    once the job says that nothing reads it any more."""
    return _idlist.collect_batch(step_address, poll_address, job_address, n_texts, CACHE,
                                 held)


def u32_ids(ids) -> bytearray:
    """The uint32 values of a list or tuple of ids, each read as operator.index reads it;
    TypeError / ValueError naming the first item that is not an int / not in 0 .. 2**32-1."""
    return _idlist.u32_ids(ids)


def ids_from_le_bytes(data) -> list:
    """The list of the little-endian uint32 ids packed in data."""
    return _idlist.ids_from_le_bytes(data, CACHE)


def parse_tiktoken(raw: bytes):
    """{rank: token bytes} of a .tiktoken file's bytes in tiktoken's layout, or None when
    they are not entirely in it or without the helper (see csrc/pyext/tiktoken_file.c)."""
    return _idlist.parse_tiktoken(raw) if FAST else None


def str_storage(text):
    """(address, kind) of an exact str's characters where CPython keeps them: kind 0 when they
    are all ASCII (then they are its UTF-8), else the bytes of each (1, 2 or 4: BPE_TEXT_*);
    None for anything else or without the helper.  Valid while the caller holds text."""
    return _idlist.str_storage(text) if FAST else None


def text_units(texts: list, own: bool = False):
    """(held, starts, ends, kinds) locating the characters of each str of texts where CPython
    keeps them, for bpe_batch_start (see text_units in idlist.c), or None for an item that is
    not exactly a str, or without the helper.  held is the list to hold while C reads them:
    texts itself when own is true (the caller's own list, which nothing else sees or changes),
    else a copy of it made in the same pass.  held is untracked by the cycle collector (strs
    refer to nothing: it can be in no cycle)."""
    return _idlist.text_units(texts, own) if FAST else None


def join_utf8(texts: list):
    """(the UTF-8 of the texts end to end, bytes holding the size_t end of each), or None when
    some item is not exactly a str or holds a surrogate (the caller's slower path then
    handles it) or the helper is not built."""
    if not FAST:
        return None
    return _idlist.join_utf8(texts)


def join_utf8_bytes(texts: list):
    """The same as join_utf8 for a list of bytes: (the items end to end, bytes holding the
    size_t end of each), or None when some item is not exactly bytes or not well-formed
    UTF-8 (as Python's strict decoder judges it), or the helper is not built."""
    if not FAST:
        return None
    return _idlist.join_utf8_bytes(texts)
