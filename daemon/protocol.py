"""Wire protocol of the bpe_cffi daemon: constants, limits and message shapes in one place.

Every message is ONE msgpack frame (after the ROUTER identity envelope on the server side).
A request is a map with at least "op" and "id"; its reply is a map that echoes "id" and has
"ok": true plus the op's fields, or "ok": false plus "code" (a string from ERROR_CODES) and
"message".  PROTOCOL.md (beside this file) is the full description for other languages.
"""
import sys
from array import array

import msgpack

from .. import _idcache

PROTOCOL_VERSION = 1

# ---- operations ----------------------------------------------------------------------------
OP_ENCODE = "encode"             # one text -> ids
OP_ENCODE_BATCH = "encode_batch"  # many texts -> list of ids
OP_DECODE = "decode"             # ids -> text (or bytes)
OP_COUNT = "count"               # one text -> number of tokens (optionally with a limit)
OP_CHUNK = "chunk"               # one numbered piece of a streamed document
OP_STREAM_ABORT = "stream_abort"  # forget a stream's state
OP_INFO = "info"                 # tokenizers, vocab sizes, special tokens, version, limits
OP_HEALTH = "health"             # liveness: status and uptime
OP_STATS = "stats"               # counters and latency percentiles
OPS = (OP_ENCODE, OP_ENCODE_BATCH, OP_DECODE, OP_COUNT, OP_CHUNK, OP_STREAM_ABORT,
       OP_INFO, OP_HEALTH, OP_STATS)

# ---- error codes (the "code" field of a failed reply) -----------------------------------------
E_BAD_FRAMES = "bad_frames"            # wrong number of frames in the message
E_BAD_MSGPACK = "bad_msgpack"          # the payload is not one msgpack value within the limits
E_BAD_REQUEST = "bad_request"          # wrong shape, missing field or wrong type
E_UNKNOWN_OP = "unknown_op"
E_UNKNOWN_TOKENIZER = "unknown_tokenizer"
E_BAD_UTF8 = "bad_utf8"                # a text sent as bin is not valid UTF-8
E_BAD_ID = "bad_id"                    # a token id the tokenizer does not know
E_TOO_LARGE = "too_large"              # a text, batch or stream over its limit
E_DISALLOWED = "disallowed_special"    # the text contains a disallowed special token
E_BUSY = "busy"                        # too many requests in flight for this client; retry
E_STREAM = "stream_error"              # bad seq, unknown/expired stream, too many streams
E_SHUTTING_DOWN = "shutting_down"      # the daemon is draining; send elsewhere / retry later
E_INTERNAL = "internal"                # a bug in the daemon; the request may be retried
ERROR_CODES = (E_BAD_FRAMES, E_BAD_MSGPACK, E_BAD_REQUEST, E_UNKNOWN_OP, E_UNKNOWN_TOKENIZER,
               E_BAD_UTF8, E_BAD_ID, E_TOO_LARGE, E_DISALLOWED, E_BUSY, E_STREAM,
               E_SHUTTING_DOWN, E_INTERNAL)
RETRYABLE = (E_BUSY, E_SHUTTING_DOWN, E_INTERNAL)

# ---- ids formats -------------------------------------------------------------------------------
IDS_BIN = "bin"     # packed uint32 little-endian (msgpack bin)
IDS_LIST = "list"   # msgpack array of unsigned ints
IDS_FORMATS = (IDS_BIN, IDS_LIST)


class Limits:
    """Resource bounds of one daemon (all overridable on the command line)."""

    def __init__(self, **kw):
        self.max_frame_bytes = 8 << 20       # ZMQ_MAXMSGSIZE: a bigger frame drops the peer
        self.max_frames = 3                  # frames per message on the ROUTER (identity incl.)
        self.max_text_bytes = 4 << 20        # one text (UTF-8 bytes)
        self.max_batch_texts = 65536         # texts in one encode_batch
        self.max_decode_ids = 1 << 20        # ids in one decode
        self.max_id_len = 256                # a request id string / bin
        self.max_inflight_per_client = 256   # requests of one identity queued or running
        self.max_queued_bytes = 256 << 20    # payload bytes waiting for a worker, all clients
        self.max_streams = 1024              # open streams, all clients
        self.max_streams_per_client = 32
        self.max_stream_bytes = 64 << 20     # one streamed document
        self.max_stream_total_bytes = 256 << 20  # all buffered stream data
        self.stream_idle_s = 30.0            # a stream untouched this long is dropped
        self.rcvhwm = 64                     # ZMQ high-water marks (messages per peer)
        self.sndhwm = 1024
        self.heartbeat_ivl_ms = 2000
        self.heartbeat_timeout_ms = 6000
        self.heartbeat_ttl_ms = 6000
        for k, v in kw.items():
            if not hasattr(self, k):
                raise TypeError(f"unknown limit {k!r}")
            setattr(self, k, v)

    def as_dict(self):
        return dict(vars(self))


def unpack_limits(limits: Limits) -> dict:
    """msgpack.unpackb keyword arguments bounding what one frame may expand into."""
    n = limits.max_frame_bytes
    return dict(max_str_len=n, max_bin_len=n,
                max_array_len=max(limits.max_batch_texts, limits.max_decode_ids),
                max_map_len=64, max_ext_len=0, strict_map_key=True)


def packb(obj) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def unpackb(data: bytes, limits: Limits, raw: bool = False, unicode_errors: str = "strict"):
    return msgpack.unpackb(data, raw=raw, unicode_errors=unicode_errors, **unpack_limits(limits))


# ---- ids <-> packed uint32 little-endian --------------------------------------------------------
_LITTLE = sys.byteorder == "little"
_U32 = "I" if array("I").itemsize == 4 else "L"  # the array typecode of a 4-byte unsigned


def ids_to_array(ids) -> array:
    """Token ids (an iterable of ints) as an array of 4-byte unsigned ints, host byte order;
    OverflowError for one outside uint32."""
    return array(_U32, ids)


def ids_to_bin(ids) -> bytes:
    """Token ids (a list of ints, an array('I') or anything with .tobytes of uint32) packed."""
    if isinstance(ids, array) and ids.typecode == _U32 and _LITTLE:
        return ids.tobytes()
    a = ids_to_array(ids)
    if not _LITTLE:  # pragma: no cover - big-endian hosts
        a.byteswap()
    return a.tobytes()


_CLIENT_CACHE = 1 << 18


def bin_to_ids(data: bytes) -> list:
    """Packed uint32 little-endian -> list of ints; ValueError if the length is not 4*n."""
    if _idcache.FAST:
        if len(data) >= 1024 and len(_idcache.CACHE) < _CLIENT_CACHE:
            _idcache.reserve(_CLIENT_CACHE)   # once: ints shared by all replies (~10 MB)
        # the C helper raises the same ValueError for a length that is not 4*n
        return _idcache._idlist.ids_from_le_bytes(data, _idcache.CACHE)
    return bin_to_array(data).tolist()


def bin_to_array(data: bytes) -> array:
    """Packed uint32 little-endian -> array of 4-byte unsigned ints (typecode "I", or "L"
    where that is the 4-byte one), in the host's byte order: numpy.frombuffer(a, "uint32")
    reads it without a copy.  ValueError if the length is not 4*n."""
    if len(data) % 4:
        raise ValueError(f"packed ids have {len(data)} bytes, not a multiple of 4")
    a = array(_U32)
    a.frombytes(data)
    if not _LITTLE:  # pragma: no cover - big-endian hosts
        a.byteswap()
    return a


def error_reply(req_id, code: str, message: str) -> dict:
    return {"id": req_id, "ok": False, "code": code, "message": message}


def pack_error(req_id, code: str, message: str) -> bytes:
    """error_reply packed: every error reply the daemon sends.  A str request id read with
    unicode_errors="surrogateescape" (from a request whose strs are not all UTF-8) is packed
    back to the very bytes it came as; any other id packs as packb would."""
    return msgpack.packb(error_reply(req_id, code, message), use_bin_type=True,
                         unicode_errors="surrogateescape")
