"""Streaming decode: token ids in, one at a time as a model makes them; text out as soon as it
is certain.

Byte-level tokens can end inside a UTF-8 character, so the text of a token is not always known
when the token arrives.  StreamDecoder keeps the bytes that may still change meaning and emits
everything before them.

Invariant: the pending bytes are empty or a proper prefix of some well-formed UTF-8 sequence
(a lead byte followed by at most two continuation bytes that are valid after it, e.g.
b"\\xf0\\x9f"); at most 3 bytes.  Everything else has been emitted.  When a byte arrives that
cannot continue the pending prefix, the prefix is a maximal invalid subpart and is emitted as
one U+FFFD, exactly as bytes.decode("utf-8", errors="replace") does; a byte that is invalid on
its own (0x80-0xBF with nothing pending, 0xC0, 0xC1, 0xF5-0xFF) is emitted as U+FFFD at once.
So the concatenation of all outputs followed by flush() equals tok.decode(ids) for the same ids,
and no output ever holds a U+FFFD that later bytes would have turned into a character.

The byte state machine is CPython's UTF-8 decoder in its incremental mode
(codecs.utf_8_decode with final=False: C code, the same tables as the one-shot decoder; it
returns how many bytes it consumed, the rest is pending), with one correction: it holds back
ED A0..ED BF (the start of an encoded surrogate, which only its "surrogatepass" handler could
accept) although under errors="replace" those two bytes are already two U+FFFD whatever
follows, so _push() emits them.
tests/test_stream_decode.py checks the result against an independent reference of the rule
above on every short byte sequence and on random ones.
"""
import codecs
import operator
import weakref

__all__ = ["StreamDecoder"]

_utf_8_decode = codecs.utf_8_decode    # (data, errors, final) -> (text, bytes consumed)

# tokenizer -> {int id: token bytes}, shared by its decoders, dropped with the tokenizer.
# Asking the tokenizer for one token's bytes costs several microseconds (a C call through
# CFFI with argument checks), more than the rest of feed(); the cache holds at most the
# vocabulary and only ids actually streamed.
_BYTES = weakref.WeakKeyDictionary()


def _bytes_cache(tok) -> dict:
    try:
        cache = _BYTES.get(tok)
        if cache is None:
            cache = _BYTES[tok] = {}
        return cache
    except TypeError:             # tok not weakly referenceable: a cache per decoder
        return {}


def _as_id(token_id) -> int:
    """An integer-like id (numpy, torch scalar) as an int; TypeError for bool, float, str."""
    if isinstance(token_id, bool):
        raise TypeError("token id must be an int, not bool")
    try:
        return operator.index(token_id)
    except TypeError:
        raise TypeError(f"token id must be an int, not {type(token_id).__name__}") from None


class StreamDecoder:
    """Incremental detokenizer for one stream of ids from one tokenizer.

        dec = StreamDecoder(tok)
        for id in generate():
            print(dec.feed(id), end="")
        print(dec.flush())

    Not thread-safe (one decoder per stream); the tokenizer it reads from may be shared.
    Performance: a dict lookup for the token's bytes (see _BYTES) and one C call to decode
    per id; the pending bytes are kept here rather than in codecs' incremental decoder, whose
    decode() is Python.
    """

    __slots__ = ("_tok", "_token_bytes", "_cache", "_pending")

    def __init__(self, tok):
        self._tok = tok
        self._token_bytes = tok.decode_single_token_bytes
        self._cache = _bytes_cache(tok)
        self._pending = b""

    def feed(self, token_id: int) -> str:
        """Add one id; return the text it completes ("" while a character is still partial).
        An unknown id raises what tok.decode_single_token_bytes raises, and leaves the state
        unchanged."""
        if type(token_id) is not int:
            token_id = _as_id(token_id)
        data = self._cache.get(token_id)
        if data is None:
            data = self._token_bytes(token_id)
            self._cache[token_id] = data
        return self._push(data)

    def feed_many(self, ids) -> str:
        """Add several ids at once; the same text as feeding them one by one, concatenated.
        An unknown id raises (from tok.decode_bytes) and leaves the state unchanged."""
        return self._push(self._tok.decode_bytes(list(ids)))

    def _push(self, data: bytes) -> str:
        if self._pending:
            data = self._pending + data
        text, used = _utf_8_decode(data, "replace", False)
        if used == len(data):
            self._pending = b""
            return text
        rest = data[used:]
        # CPython holds back ED A0..ED BF, the start of an encoded surrogate that only its
        # "surrogatepass" handler could accept; under "replace" they are two U+FFFD already.
        if len(rest) == 2 and rest[0] == 0xED and rest[1] >= 0xA0:
            self._pending = b""
            return text + "\ufffd\ufffd"
        self._pending = rest
        return text

    def flush(self) -> str:
        """End of stream: return the pending bytes decoded (an incomplete character -> one
        U+FFFD) and start afresh, as after reset()."""
        pending, self._pending = self._pending, b""
        return pending.decode("utf-8", "replace")

    def reset(self) -> None:
        """Drop any pending bytes without emitting them."""
        self._pending = b""

    @property
    def pending(self) -> bytes:
        """The bytes held back: an incomplete character (empty, or 1 to 3 bytes)."""
        return self._pending

    def __repr__(self) -> str:
        return f"<StreamDecoder pending={self.pending!r}>"
