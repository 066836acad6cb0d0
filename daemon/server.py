"""The bpe_cffi daemon: a ZeroMQ ROUTER front end, worker threads behind an inproc ROUTER.

Data flow.  The main thread owns every socket except the workers' own:

    clients (DEALER/REQ) --tcp--> frontend ROUTER --(main loop)--> backend ROUTER --inproc-->
    worker DEALERs (one per thread; each calls the tokenizer, whose C code drops the GIL)

The main loop does framing and bookkeeping: it reads a message frame by frame (dropping
frames past Limits.max_frames), checks the per-client in-flight count, answers a SMALL
request itself (payload <= inline_max: bounded work, and two thread hand-offs saved), and
queues the others for IDLE workers (a worker is idle after "READY" and after each reply
batch, so a long job never has work queued behind it while another worker waits; under load
an idle worker gets up to MAX_JOBS_PER_HANDOFF queued requests in one message).  Workers
unpack, validate, run the op and send back the packed replies; the main loop forwards them
to the client with NOBLOCK (ROUTER_MANDATORY is on, so a vanished peer or a full high-water
mark is an exception we count and drop, never a block).  Payloads and replies cross the
main loop as zmq.Frames, so they are not copied on their way through it.

The bulk path (Python clients' `stream(batch=k)` and `encode_batch`): texts arrive as UTF-8
bins, which C checks and lays end to end without ever making a str (idlist.join_utf8_bytes);
the plain encode_batch requests of one hand-off are encoded by one C call
(Handler.handle_many), and each reply is packed straight from C's id buffer (fast_encoder).

Streams (op "chunk"): chunks are stored by seq and consumed strictly in order by one worker
at a time (StreamStore's busy flag); with a bpe_cffi tokenizer whose pattern runs in C each
consumed chunk is encoded at once up to the last cut that cannot change (bpe_encode_prefix),
else the chunks are buffered until the final one.

Invariants:
  - every accepted request gets exactly one reply frame (ok or error), except when the client
    vanished or never reads (then the reply is dropped and counted);
  - inflight[identity] == requests of that identity accepted and not yet replied to;
    the entry is deleted at zero, so the dict is bounded by live clients;
  - queued payload bytes <= Limits.max_queued_bytes (past it the front end is not polled and
    ZeroMQ's own high-water mark pushes back on the senders);
  - stream state lives in StreamStore, keyed by (identity, stream id), bounded in count, bytes
    and idle time; only StreamStore's lock guards it.
"""
import codecs
import collections
import ipaddress
import os
import signal
import sys
import threading
import time

import msgpack
import zmq

from . import protocol as P

HEAP_TRIM_BYTES = 16 << 20   # requests' bytes after which a quiet daemon trims its heap

BACKEND_ADDR = "inproc://bpe-cffi-workers"
_READY = b"READY"
_DONE = b"D"
_STOP = b"STOP"
_REQ_FLAG = b"\x01"   # the client is a REQ socket: replies carry an empty delimiter frame
_DEALER_FLAG = b"\x00"
_MORE_NOBLOCK = int(zmq.SNDMORE | zmq.NOBLOCK)
_MORE = int(zmq.SNDMORE)
# plain ints: pyzmq's enum flags make `events & POLLIN` a Python-level call
_EVENTS, _POLLIN = int(zmq.EVENTS), int(zmq.POLLIN)


def _send_parts(sock, parts):
    """sock.send_multipart(parts), without its per-frame `SNDMORE | flags`: an operation on
    pyzmq's enum flags, run in Python, that took a sixth of the main loop's time under load."""
    last = len(parts) - 1
    for i in range(last):
        sock.send(parts[i], _MORE)
    sock.send(parts[last])


def _recv_parts(sock, flags=0):
    """sock.recv_multipart(flags, copy=False) (zmq.Frames, read in place), without its enum
    flags and a getsockopt per frame.  flags apply to the first frame (NOBLOCK: zmq.Again
    when there is no message); the others are there once it is."""
    f = sock.recv(flags, copy=False)
    parts = [f]
    while f.more:
        f = sock.recv(copy=False)
        parts.append(f)
    return parts


def _keeps_every_byte(tok) -> bool:
    """Whether every byte of a text goes into the tokenizer's ids (so that n bytes make at
    least n / max_token_bytes ids): a bpe_cffi Tokenizer without a normalizer or
    pre-tokenizer, which could delete text (HF's BertNormalizer drops control characters,
    WhitespaceSplit the spaces)."""
    from bpe_cffi import Tokenizer
    return isinstance(tok, Tokenizer) and getattr(tok, "_normalizer", None) is None and \
        getattr(tok, "_pre_tokenizer", None) is None


class RequestError(Exception):
    """A request that gets an error reply; code is one of protocol.ERROR_CODES."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message


# ---- endpoints -------------------------------------------------------------------------------

def is_loopback_endpoint(endpoint: str) -> bool:
    """True for ipc://, inproc:// and tcp:// endpoints on a loopback address or interface."""
    if endpoint.startswith(("ipc://", "inproc://")):
        return True
    if not endpoint.startswith("tcp://") or ";" in endpoint:
        return False
    host = endpoint[len("tcp://"):].rsplit(":", 1)[0]
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host in ("localhost", "lo"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_endpoint(bind):
    """ValueError for an endpoint ZeroMQ would misread: no transport ("127.0.0.1:5555"), or
    a tcp port outside 0..65535 (ZeroMQ wraps it around: 99999 bound 34463)."""
    if "://" not in bind:
        raise ValueError(f"{bind}: an endpoint is TRANSPORT://ADDRESS, e.g. "
                         f"tcp://{bind if bind[:1].isdigit() else '127.0.0.1:5555'}")
    if bind.startswith("tcp://"):
        port = bind.rsplit(":", 1)[-1]
        if port != "*" and not (port.isdigit() and 0 <= int(port) <= 65535):
            raise ValueError(f"{bind}: the port must be 0..65535 (0: any free port)")


def check_bind_security(bind, curve_secret_key, curve_authorized_keys):
    """ValueError for a malformed endpoint (check_endpoint), and unless the endpoint is
    loopback or CURVE is fully configured."""
    check_endpoint(bind)
    if (curve_secret_key is None) != (curve_authorized_keys is None):
        raise ValueError("CURVE needs both --curve-secret-key and --curve-authorized-keys")
    if curve_secret_key is None and not is_loopback_endpoint(bind):
        raise ValueError(f"refusing to listen on {bind} without CURVE authentication: "
                         "bind to 127.0.0.1 or give --curve-secret-key FILE and "
                         "--curve-authorized-keys DIR")


def _ipc_path(endpoint: str):
    """The file of an ipc:// endpoint (None for another transport, or ipc://*, whose file
    libzmq makes and removes itself)."""
    if not endpoint.startswith("ipc://") or endpoint == "ipc://*":
        return None
    return endpoint[len("ipc://"):]


def _refuse_live_ipc(path) -> None:
    """OSError(EADDRINUSE) when a process listens on the ipc file `path`: libzmq would
    replace its file, and that daemon would go on running where no client reaches it.  A
    file nobody listens on (left by a daemon killed) is replaced, as before."""
    import errno
    import socket
    if path is None or not os.path.exists(path):
        return
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(path)
    except OSError:
        return
    finally:
        probe.close()
    raise OSError(errno.EADDRINUSE, f"another process listens on {path} (Address already "
                  f"in use)")


def _remove_ipc_file(path, stat_at_bind) -> None:
    """Removes the ipc file this daemon bound, unless another has replaced it since (libzmq
    leaves a named ipc:// file behind)."""
    try:
        st = os.stat(path)
        if stat_at_bind is not None and os.path.samestat(st, stat_at_bind):
            os.unlink(path)
    except OSError:
        pass


def _bindable(endpoint: str) -> str:
    """tcp://host:0 means 'any free port', which ZeroMQ spells tcp://host:*."""
    if endpoint.startswith("tcp://") and endpoint.endswith(":0"):
        return endpoint[:-2] + ":*"
    return endpoint


# ---- statistics ------------------------------------------------------------------------------

class Stats:
    """Counters written by the main loop (requests, bytes, latency) and by workers (ops,
    errors, under self.lock)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.started = time.time()
        self.requests = 0
        self.replies = 0
        self.dropped_replies = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.heap_trims = 0       # times the quiet daemon gave freed memory back (main loop)
        self.ops = collections.Counter()
        self.errors = collections.Counter()
        self.latencies = collections.deque(maxlen=8192)   # seconds, most recent requests

    def count(self, op, error_code=None):
        with self.lock:
            self.ops[op] += 1
            if error_code:
                self.errors[error_code] += 1

    def count_error(self, error_code):
        """An error reply of a request whose op handle() counts (the stream ops, which
        answer errors without raising)."""
        with self.lock:
            self.errors[error_code] += 1

    def snapshot(self):
        for _ in range(3):
            try:
                lat = sorted(self.latencies)
                break
            except RuntimeError:  # pragma: no cover - deque mutated while copying
                lat = []

        def pct(p):
            if not lat:
                return 0.0
            return lat[min(len(lat) - 1, int(p / 100.0 * len(lat)))] * 1000.0

        with self.lock:
            ops, errors = dict(self.ops), dict(self.errors)
        return {"uptime_s": time.time() - self.started, "requests": self.requests,
                "replies": self.replies, "dropped_replies": self.dropped_replies,
                "bytes_in": self.bytes_in, "bytes_out": self.bytes_out,
                "heap_trims": self.heap_trims,
                "errors": sum(errors.values()), "errors_by_code": errors, "ops": ops,
                "latency_ms": {"p50": pct(50), "p90": pct(90), "p99": pct(99),
                               "max": lat[-1] * 1000.0 if lat else 0.0, "samples": len(lat)}}


# ---- streams ---------------------------------------------------------------------------------

class _Stream:
    """One streamed document.

    parts: seq -> bytes of chunks received but not yet consumed (any order);  next_seq: the
    next seq to consume (chunks are consumed strictly in order, by one worker at a time:
    busy);  final_seq: seq of the chunk flagged final, None until it arrives;  opts: the
    options of chunk 0;  deferred: (identity, flag, request id) of the final chunk when it
    arrived before an earlier one (answered when the stream completes);  failed: (code,
    message) once the stream is dead (a tombstone holding no data).
    Consumer state (touched only by the busy worker): dec, the incremental UTF-8 validator;
    tail, bytes not yet turned into ids (incremental mode) or every consumed byte (buffered
    mode, as a list);  n_out: ids sent so far.  nbytes: bytes held (parts + tail/buffer)."""

    __slots__ = ("parts", "next_seq", "busy", "nbytes", "final_seq", "opts", "deferred",
                 "failed", "touched", "dec", "tail", "buf", "n_out")

    def __init__(self, now):
        self.parts = {}
        self.next_seq = 0
        self.busy = False
        self.nbytes = 0
        self.final_seq = None
        self.opts = None
        self.deferred = None
        self.failed = None
        self.touched = now
        self.dec = codecs.getincrementaldecoder("utf-8")("strict")
        self.tail = b""
        self.buf = []
        self.n_out = 0


class StreamStore:
    """Per-(identity, stream id) state, bounded by Limits (count, bytes, idle time).  Only
    self.lock guards the dict and the fields the adders touch (parts, next_seq, busy, ...)."""

    def __init__(self, limits):
        self.limits = limits
        self.lock = threading.Lock()
        self.streams = {}
        self.dead = collections.OrderedDict()
        self.per_client = collections.Counter()
        self.total_bytes = 0

    def __len__(self):
        return len(self.streams)

    def _drop_data(self, st):
        self.total_bytes -= st.nbytes
        st.parts = {}
        st.nbytes = 0
        st.tail = b""
        st.buf = []

    def _remove(self, key):
        st = self.streams.pop(key, None)
        if st is None:
            return None
        self._drop_data(st)
        self.per_client[key[0]] -= 1
        if self.per_client[key[0]] <= 0:
            del self.per_client[key[0]]
        return st

    MAX_DEAD = 4096

    def _fail(self, key, st, code, message):
        """Kills the stream: its state goes, a small tombstone (key -> code, message) stays so
        that its later chunks get the same error (bounded: the oldest are forgotten first, and
        all after stream_idle_s).  Returns its deferred final (to answer) or None."""
        st.failed = (code, message)
        d, st.deferred = st.deferred, None
        if self.streams.get(key) is st:
            self._remove(key)
        self._tombstone(key, code, message, st.touched)
        return d

    def _tombstone(self, key, code, message, touched):
        """Remembers a stream that is gone, newest last: (code, message) for a failed one,
        (None, its final seq) for a completed one (a resend of one of its chunks is then
        acknowledged as a resend instead of opening a new stream that would wait forever
        for its chunk 0).  At most MAX_DEAD, the oldest forgotten first."""
        self.dead[key] = (code, message, touched)
        self.dead.move_to_end(key)
        while len(self.dead) > self.MAX_DEAD:
            self.dead.popitem(last=False)

    def add(self, ident, flag, req_id, stream_id, seq, data, final, opts, now):
        """Records one chunk.  Returns (status, extra):
          ("ack", None)      - stored; reply with an empty ack;
          ("resent", None)   - a chunk already received (stored, consumed, or of a completed
                               stream): its own reply is or was sent; reply with a resend ack;
          ("defer", None)    - stored final chunk that waits for earlier ones: no reply yet;
          ("consume", st)    - this worker now owns consumption (st.busy): run consume();
          ("error", (code, message, deferred)) - this chunk fails; deferred (if any) too."""
        lim = self.limits
        key = (ident, stream_id)
        with self.lock:
            st = self.streams.get(key)
            if st is None and key in self.dead:
                code, message, _ = self.dead[key]
                if code is None:                            # completed; message: final seq
                    if seq <= message:
                        return "resent", None
                    return "error", (P.E_STREAM, f"chunk {seq} after final chunk {message}",
                                     None)
                return "error", (code, message, None)
            if st is None:
                if len(self.streams) >= lim.max_streams:
                    # busy (retried after a pause), not stream_error: the streams may be other
                    # clients' or orphans of connections gone, which expire when idle
                    return "error", (P.E_BUSY, f"too many open streams ({lim.max_streams}); "
                                     f"retry later", None)
                if self.per_client[ident] >= lim.max_streams_per_client:
                    return "error", (P.E_STREAM, "too many open streams for this client "
                                     f"({lim.max_streams_per_client})", None)
                st = self.streams[key] = _Stream(now)
                self.per_client[ident] += 1
            st.touched = now
            if seq in st.parts or seq < st.next_seq:
                return "resent", None
            if st.final_seq is not None and (seq > st.final_seq or final):
                d = self._fail(key, st, P.E_STREAM, f"chunk {seq} after final chunk "
                               f"{st.final_seq}")
                return "error", (P.E_STREAM, st.failed[1], d)
            if final and (any(s > seq for s in st.parts) or st.next_seq > seq + 1):
                d = self._fail(key, st, P.E_STREAM, f"final chunk {seq} but chunks after it were "
                               "received")
                return "error", (P.E_STREAM, st.failed[1], d)
            if st.nbytes + len(data) > lim.max_stream_bytes:
                d = self._fail(key, st, P.E_TOO_LARGE, "streamed document over "
                               f"{lim.max_stream_bytes} bytes")
                return "error", (P.E_TOO_LARGE, st.failed[1], d)
            if self.total_bytes + len(data) > lim.max_stream_total_bytes:
                return "error", (P.E_BUSY, "stream buffers full; retry later", None)
            st.parts[seq] = data
            st.nbytes += len(data)
            self.total_bytes += len(data)
            if seq == 0:
                st.opts = opts
            if final:
                st.final_seq = seq
            if not st.busy and st.next_seq in st.parts:
                st.busy = True
                return "consume", st
            if final:
                st.deferred = (ident, flag, req_id)
                return "defer", None
            return "ack", None

    def take(self, st):
        """The next chunk to consume (seq, data, is_final), or None - then st.busy is
        released.  Called by the busy worker only."""
        with self.lock:
            if st.failed:
                st.busy = False
                return None
            data = st.parts.pop(st.next_seq, None)
            if data is None:
                st.busy = False
                return None
            seq = st.next_seq
            st.next_seq += 1
            return seq, data, seq == st.final_seq

    def account(self, st, delta):
        with self.lock:
            if not st.failed:
                st.nbytes += delta
                self.total_bytes += delta

    def finish(self, key, st):
        """The stream completed: forget it (but for a tombstone); returns the deferred final
        chunk (or None)."""
        with self.lock:
            d, st.deferred = st.deferred, None
            if self.streams.get(key) is st:
                self._remove(key)
                self._tombstone(key, None, st.final_seq, time.monotonic())
            return d

    def fail(self, key, st, code, message):
        """A consumer error: tombstone the stream; returns the deferred final (or None)."""
        with self.lock:
            st.busy = False
            if st.failed:
                return None
            return self._fail(key, st, code, message)

    def abort(self, ident, stream_id):
        """Forgets a stream; returns (existed, deferred final or None)."""
        with self.lock:
            key = (ident, stream_id)
            st = self.streams.get(key)
            if st is None:
                # maybe its chunks are still on their way: they will find the tombstone
                existed = key in self.dead
                self._tombstone(key, P.E_STREAM, "stream aborted", time.monotonic())
                return existed, None
            return True, self._fail(key, st, P.E_STREAM, "stream aborted")

    def expire(self, now, everything=False):
        """Drops streams idle too long (or all idle ones); returns deferred finals to fail."""
        out = []
        with self.lock:
            while self.dead:
                key, (_, _, touched) = next(iter(self.dead.items()))
                if not everything and now - touched <= self.limits.stream_idle_s:
                    break
                self.dead.popitem(last=False)
            for key, st in list(self.streams.items()):
                if st.busy:
                    continue
                if everything or now - st.touched > self.limits.stream_idle_s:
                    st.touched = now
                    d = self._fail(key, st, P.E_STREAM, "stream expired (idle too long)")
                    if d:
                        out.append(d)
            if everything:
                self.dead.clear()
        return out


# ---- a packed-ids fast path for bpe_cffi.Tokenizer -------------------------------------------

def _c_does_it_all(tok) -> bool:
    """Whether C alone encodes tok's text: a built-in pattern, and nothing that makes
    tok.encode go through Python first (a normalizer, a pre-tokenizer, added tokens that HF
    finds with lstrip / rstrip / single_word / normalized: Tokenizer._py_path)."""
    return bool(getattr(tok, "_cpattern", 0)) and not getattr(tok, "_py_path", True)


def fast_encoder(tok):
    """For a bpe_cffi.Tokenizer whose pattern runs in C: a function text -> (packed uint32 LE
    bytes, count) for the default options (every special token allowed), copying the ids
    straight out of C instead of building a list of ints and packing it again (that is most
    of the per-request cost).  None for any other tokenizer, on a big-endian host, or if a
    self-check against tok.encode disagrees; the caller then uses tok.encode."""
    try:
        from bpe_cffi._native import ffi, lib
        handle, mode = tok._handle, tok._all_mode
        if not _c_does_it_all(tok) or sys.byteorder != "little":
            return None
    except Exception:
        return None
    new, encode, free, buffer = ffi.new, lib.bpe_encode, lib.bpe_ids_free, ffi.buffer
    unpack, from_buffer, cast = ffi.unpack, ffi.from_buffer, ffi.cast
    from bpe_cffi import _idcache
    from bpe_cffi._idcache import join_utf8_bytes
    pack_reply = _idcache._idlist.pack_batch_reply if _idcache.FAST else None
    encode_flat = lib.bpe_encode_batch_flat
    from bpe_cffi.tokenizer import _join_utf8 as join_utf8

    def encode_joined(joined, ends, sizes, req_ids):
        """The packed replies {"id", "ok", "n", "ids": [bin, ...]} of encode_batch requests
        whose texts (sizes[i] of them for request i) are laid end to end in joined (size_t
        ends), from ONE C call on this thread (one GIL release for them all); None on any
        error.  The ids are copied once, from C's buffer straight into each reply: no bytes
        object per text, no second packing."""
        n = sum(sizes)
        out = new("bpe_ids *")
        out_ends = new("size_t[]", n)
        info = new("size_t *")
        rc = encode_flat(handle(), n, joined, ends, mode, 1, out, out_ends, info)
        try:
            if rc:
                return None              # let tok.encode raise the precise error
            if pack_reply is not None:      # in C: headers and ids in one allocation
                ids_at = int(cast("uintptr_t", out.ids))
                ends_at = int(cast("uintptr_t", out_ends))
                replies = []
                k = 0
                for size, req_id in zip(sizes, req_ids):
                    replies.append(pack_reply(P.packb(req_id), ids_at, ends_at, k, size))
                    k += size
                return replies
            stops = unpack(out_ends, n)
            flat = memoryview(buffer(out.ids, 4 * out.len)) if out.len else b""
            replies = []
            k = a = 0
            for size, req_id in zip(sizes, req_ids):
                mine = stops[k:k + size]
                k += size
                counts = [b - x for x, b in zip([a] + mine, mine)]
                head = P.packb({"id": req_id, "ok": True, "n": counts, "ids": None})
                parts = [head[:-1], _array_header(size)]   # head ends with nil: ids go there
                for b in mine:
                    parts += (_bin_header(4 * (b - a)), flat[4 * a:4 * b])
                    a = b
                replies.append(b"".join(parts))
            return replies
        finally:
            free(out)

    def enc_many(texts, req_id):
        """The packed reply of one encode_batch of a list of str, or None."""
        joined, ends = join_utf8(texts)
        got = encode_joined(joined, ends, [len(texts)], [req_id])
        return got[0] if got is not None else None

    def enc_many_utf8(groups, req_ids):
        """The packed replies of encode_batch requests whose texts (groups[i], lists of
        bytes) are checked to be UTF-8 and joined in C (never decoded to str), encoded by one
        C call; None when a text is not UTF-8 (or on any error)."""
        got = join_utf8_bytes([t for g in groups for t in g])
        if got is None:
            return None
        return encode_joined(got[0], from_buffer("size_t[]", got[1]), [len(g) for g in groups],
                             req_ids)

    def enc(text):
        data = text.encode("utf-8")
        out = new("bpe_ids *")
        info = new("size_t *")
        rc = encode(handle(), data, len(data), mode, out, info)
        try:
            if rc:
                return None              # let tok.encode raise the precise error
            n = out.len
            return (buffer(out.ids, 4 * n)[:] if n else b""), n
        finally:
            free(out)

    try:
        for sample in ("Hello wörld <|endoftext|> 123\n\n  x  ", "🎉 '$ 漢字 the end"):
            got = enc(sample)
            if got is None or P.bin_to_ids(got[0]) != list(tok.encode(sample)):
                return None
        samples = ["Hello wörld <|endoftext|> 123\n\n  x  ", "", "🎉 '$ 漢字 the end"]
        want = [list(tok.encode(t)) for t in samples]
        for k in (1, 3, 20, 300):          # array and bin headers of every width
            texts = (samples * k)[:k] + [samples[0] * 30]
            rep = msgpack.unpackb(enc_many(texts, "x"))
            utf8 = [t.encode() for t in texts]
            if [msgpack.unpackb(r) for r in enc_many_utf8([utf8, utf8[:2], []], ["x", 1, 2])] \
                    != [rep, dict(rep, id=1, n=rep["n"][:2], ids=rep["ids"][:2]),
                        {"id": 2, "ok": True, "n": [], "ids": []}]:
                return None
            if (rep.get("id") != "x" or rep.get("ok") is not True or len(rep) != 4 or
                    [P.bin_to_ids(b) for b in rep["ids"]] != (want * k)[:k] +
                    [list(tok.encode(samples[0] * 30))] or
                    rep["n"] != [len(x) for x in (want * k)[:k]] + [len(rep["ids"][-1]) // 4]):
                return None
    except Exception:
        return None
    if enc_many_utf8([[b"ok"], [b"\xed\xa0\x80"]], [1, 2]) is not None:   # a surrogate
        return None
    enc.many = enc_many
    enc.many_utf8 = enc_many_utf8
    return enc


def _array_header(n):
    """The msgpack header of an array of n items."""
    if n < 16:
        return bytes((0x90 | n,))
    if n < 1 << 16:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


def _bin_header(n):
    """The msgpack header of a bin of n bytes."""
    if n < 1 << 8:
        return b"\xc4" + bytes((n,))
    if n < 1 << 16:
        return b"\xc5" + n.to_bytes(2, "big")
    return b"\xc6" + n.to_bytes(4, "big")


def prefix_encoder(tok):
    """For a bpe_cffi.Tokenizer whose pattern runs in C: a function
    (opts, utf8 bytes of whole characters, final) -> (ids in opts' format, count, consumed)
    that encodes the longest prefix whose ids cannot change whatever follows (all of it when
    final) - the push form of Tokenizer.encode_iterable, so a streamed document is encoded as
    its chunks arrive and only the unconsumed tail is kept.  None when it does not apply or a
    self-check (chunked encode == whole encode at many cut points) fails; streams are then
    buffered until their final chunk."""
    try:
        from bpe_cffi._native import ffi, lib
        handle, all_mode = tok._handle, tok._all_mode
        mode_for = getattr(tok, "_mode_for", None)
        if not _c_does_it_all(tok) or sys.byteorder != "little":
            return None
        encode_prefix = lib.bpe_encode_prefix
    except Exception:
        return None
    new, free, buffer = ffi.new, lib.bpe_ids_free, ffi.buffer

    def enc(opts, data, final):
        _, allowed, disallowed, fmt = opts
        if allowed == "all" and disallowed == ():
            mode = all_mode
        elif mode_for is not None:
            mode = mode_for(allowed, disallowed)
        else:
            raise RequestError(P.E_BAD_REQUEST, "special-token options are not supported "
                               "for streams by this tokenizer")
        out = new("bpe_ids *")
        consumed = new("size_t *")
        info = new("size_t *")
        rc = encode_prefix(handle(), data, len(data), mode, 1 if final else 0, out, consumed,
                           info)
        try:
            if rc == lib.BPE_ERR_DISALLOWED:
                names = getattr(tok, "_special_names", ())
                raise RequestError(P.E_DISALLOWED, "the streamed document: " +
                                   _disallowed_message(names[info[0]] if info[0] < len(names)
                                                       else None))
            if rc:
                raise RequestError(P.E_BAD_REQUEST, "streamed encode failed: " +
                                   ffi.string(lib.bpe_strerror(rc)).decode())
            n = out.len
            packed = buffer(out.ids, 4 * n)[:] if n else b""
            return (packed if fmt == P.IDS_BIN else P.bin_to_ids(packed)), n, consumed[0]
        finally:
            free(out)

    try:
        doc = ("Héllo  wörld <|endoftext|>\n\n  x 12345 🎉漢字 it's   \t\n"
               "<|endoftext|><|endoftext|> end  ").encode()
        want = list(tok.encode(doc.decode()))
        opts = (None, "all", (), P.IDS_LIST)
        for step in (1, 2, 3, 5, 7, 13, len(doc)):
            dec = codecs.getincrementaldecoder("utf-8")("strict")
            tail, got = b"", []
            chunks = [doc[i:i + step] for i in range(0, len(doc), step)]
            for k, c in enumerate(chunks):
                final = k == len(chunks) - 1
                dec.decode(c, final)
                buf = tail + c
                pending = 0 if final else len(dec.getstate()[0])
                ids, _, used = enc(opts, buf[:len(buf) - pending], final)
                tail = buf[used:]
                got += ids
            if got != want or tail:
                return None
    except Exception:
        return None
    return enc


def _join_ids(parts, fmt):
    if fmt == P.IDS_BIN:
        return b"".join(parts)
    out = []
    for p in parts:
        out += p
    return out


# ---- request handling (runs in worker threads) ----------------------------------------------

_SPECIAL_WORDS = ("all", "none")


class Handler:
    """Turns one request payload into its reply (or replies).  Thread-safe: the tokenizers are
    immutable and shared; the stream store has its own lock."""

    def __init__(self, tokenizers, default, limits, stats, streams, status):
        self.tokenizers = tokenizers
        self.default = default
        self.limits = limits
        self.stats = stats
        self.streams = streams
        self.status = status      # callable -> "ok" | "draining"
        self.ops = {P.OP_ENCODE: self.op_encode, P.OP_ENCODE_BATCH: self.op_encode_batch,
                    P.OP_DECODE: self.op_decode, P.OP_COUNT: self.op_count,
                    P.OP_CHUNK: self.op_chunk, P.OP_STREAM_ABORT: self.op_stream_abort,
                    P.OP_INFO: self.op_info, P.OP_HEALTH: self.op_health,
                    P.OP_STATS: self.op_stats}
        self._info = None
        self._unpack_kw = P.unpack_limits(limits)       # made once, not per request
        self._max_token_bytes = {}
        self.fast = {name: fast_encoder(tok) for name, tok in tokenizers.items()}
        self.prefix = {name: prefix_encoder(tok) for name, tok in tokenizers.items()}

    # -- entry point ---------------------------------------------------------------------------
    def handle(self, ident, flag, payload, inline=False, req=None):
        """Returns a list of (identity, flag, reply bytes); usually one, for this request.
        inline=True (the main loop, small payloads only): returns None for the stream ops,
        which always run in a worker.  req: the payload's map when the caller unpacked it
        already (as parse() would)."""
        req_id, op = None, "?"
        try:
            if req is None:
                req = self.parse(payload)
            req_id = self.request_id(req)
            op = req.get("op")
            if inline and op in (P.OP_CHUNK, P.OP_STREAM_ABORT):
                return None
            fn = self.ops.get(op) if isinstance(op, str) else None
            if fn is None:
                op = "?"
                raise RequestError(P.E_UNKNOWN_OP, f"unknown op {req.get('op')!r}; "
                                   f"expected one of {', '.join(P.OPS)}")
            result = fn(req, ident, flag, req_id)
            if type(result) is bytes:             # a reply the op packed itself
                self.stats.count(op)
                return [(ident, flag, result)]
            if isinstance(result, list):          # stream ops: replies already built
                self.stats.count(op)
                return result
            result["id"] = req_id
            result["ok"] = True
            self.stats.count(op)
            return [(ident, flag, P.packb(result))]
        except RequestError as exc:
            self.stats.count(op, exc.code)
            req_id = getattr(exc, "req_id", req_id)
            return [(ident, flag, P.pack_error(req_id, exc.code, exc.message))]
        except Exception as exc:  # a bug: answer, log nothing to stdout, keep serving
            self.stats.count(op, P.E_INTERNAL)
            msg = f"internal error: {type(exc).__name__}: {exc}"[:1000]
            return [(ident, flag, P.pack_error(req_id, P.E_INTERNAL, msg))]

    def handle_many(self, jobs):
        """The replies of several requests, jobs being (identity, flag, payload) triples: a
        list of (identity, flag, reply bytes) in any order.  Plain encode_batch requests (see
        plain_batch) for the same tokenizer are encoded together by ONE C call; everything
        else, and any plain one when that call fails, is answered by handle() one by one."""
        out = []
        plain = {}                       # tokenizer name -> [(ident, flag, payload, id, texts)]
        for ident, flag, payload in jobs:
            req, got = self.plain_batch(payload) if len(jobs) > 1 else (None, None)
            if got is None:
                out += self.handle(ident, flag, payload, req=req)
            else:
                plain.setdefault(got[0], []).append((ident, flag, payload) + got[1:])
        for name, reqs in plain.items():
            try:
                replies = self.fast[name].many_utf8([r[4] for r in reqs], [r[3] for r in reqs])
            except Exception:  # pragma: no cover - handle() below answers every error
                replies = None
            if replies is None:          # a text that is not UTF-8, an encoder error: alone
                for ident, flag, payload, _, _ in reqs:
                    out += self.handle(ident, flag, payload)
                continue
            for r, reply in zip(reqs, replies):
                self.stats.count(P.OP_ENCODE_BATCH)
                out.append((r[0], r[1], reply))
        return out

    # Batches of up to this many texts are encoded on the worker that got them (the worker
    # threads already spread requests over the cores); larger ones use encode_batch's threads.
    # Client.stream's default grouping (client.STREAM_AUTO_TEXTS) stays within it.
    SMALL_BATCH = 64

    def bulk_encoder(self, name, allowed, disallowed, fmt, n_texts):
        """The fast encoder that answers an encode_batch of n_texts texts with these options
        in one C call, its reply packed from C's buffer; None unless the options are the
        default special-token ones with ids as bin, the batch is small (SMALL_BATCH) and the
        tokenizer has a fast encoder."""
        if allowed != "all" or disallowed != () or fmt != P.IDS_BIN or \
                n_texts > self.SMALL_BATCH:
            return None
        return self.fast.get(name)

    def all_bins(self, texts):
        """True when every text is a bin within max_text_bytes (what the Python client
        sends), which the bulk encoder checks and joins in C."""
        lim = self.limits.max_text_bytes
        return all(type(t) is bytes and len(t) <= lim for t in texts)

    def plain_batch(self, payload):
        """(req, plain): req is the payload's map (None if it is not one: handle() then
        unpacks it again and reports why); plain is (tokenizer name, request id, texts) when
        the request is an encode_batch that the fast path answers (handle() would give the
        same reply): within max_batch_texts, with a bulk_encoder, every text a bin
        (all_bins); else None."""
        try:
            req = msgpack.unpackb(payload, raw=False, **self._unpack_kw)
        except Exception:
            return None, None
        if type(req) is not dict:
            return None, None
        if req.get("op") != P.OP_ENCODE_BATCH:
            return req, None
        try:
            req_id = self.request_id(req)
            name, allowed, disallowed, fmt = self.encode_opts(req)
        except Exception:
            return req, None
        texts = req.get("texts")
        if type(texts) is not list or len(texts) > self.limits.max_batch_texts or \
                self.bulk_encoder(name, allowed, disallowed, fmt, len(texts)) is None or \
                not self.all_bins(texts):
            return req, None
        return req, (name, req_id, texts)

    def parse(self, payload):
        try:
            req = msgpack.unpackb(payload, raw=False, **self._unpack_kw)
        except UnicodeDecodeError:
            rid = None
            try:  # find the id, as sent (a str: its bytes; a bin: a bin), to match the error
                loose = P.unpackb(payload, self.limits, unicode_errors="surrogateescape")
                if isinstance(loose, dict):
                    rid = self.request_id(loose)
            except Exception:
                pass
            raise _with_id(RequestError(P.E_BAD_UTF8, "a msgpack str is not valid UTF-8 "
                                        "(send raw bytes as bin)"), rid)
        except Exception as exc:
            raise RequestError(P.E_BAD_MSGPACK, "the request is not one msgpack value within "
                               f"the limits: {_msgpack_problem(exc)}")
        if not isinstance(req, dict):
            raise RequestError(P.E_BAD_REQUEST, "a request must be a msgpack map, not "
                               f"{type(req).__name__}")
        return req

    def request_id(self, req):
        rid = req.get("id")
        if isinstance(rid, bool) or not isinstance(rid, (int, str, bytes)):
            raise RequestError(P.E_BAD_REQUEST, "the request needs an \"id\" (int, str or bin)")
        if isinstance(rid, (str, bytes)) and len(rid) > self.limits.max_id_len:
            raise RequestError(P.E_BAD_REQUEST, f"request id longer than "
                               f"{self.limits.max_id_len}")
        return rid

    # -- option parsing ------------------------------------------------------------------------
    def tokenizer(self, req):
        name = req.get("tokenizer")
        if name is None:
            name = self.default
        if not isinstance(name, str):
            raise RequestError(P.E_BAD_REQUEST, "\"tokenizer\" must be a str")
        tok = self.tokenizers.get(name)
        if tok is None:
            raise RequestError(P.E_UNKNOWN_TOKENIZER, f"no tokenizer named {name!r}; loaded: "
                               f"{', '.join(sorted(self.tokenizers))}")
        return name, tok

    def special_set(self, tok, req, field, default):
        v = req.get(field, default)
        if v is None:
            v = default
        if v == "all":
            return "all"
        if v == "none":
            return set() if field == "allowed_special" else ()
        if not isinstance(v, (list, tuple)) or not all(isinstance(s, str) for s in v):
            raise RequestError(P.E_BAD_REQUEST, f"\"{field}\" must be \"all\", \"none\" or a "
                               "list of str")
        known = tok.special_tokens
        for s in v:
            if s not in known:
                raise RequestError(P.E_BAD_REQUEST, f"\"{field}\": {s!r} is not a special "
                                   "token of this tokenizer")
        return set(v)

    def ids_format(self, req):
        fmt = req.get("ids", P.IDS_LIST)
        if fmt is None:
            return P.IDS_LIST
        if fmt not in P.IDS_FORMATS:
            raise RequestError(P.E_BAD_REQUEST, "\"ids\" must be \"bin\" or \"list\"")
        return fmt

    def encode_opts(self, req):
        name, tok = self.tokenizer(req)
        allowed = self.special_set(tok, req, "allowed_special", "all")
        disallowed = self.special_set(tok, req, "disallowed_special", "none")
        return (name, allowed, disallowed, self.ids_format(req))

    def text(self, value, field="text"):
        lim = self.limits.max_text_bytes
        if isinstance(value, str):
            n = len(value)
            if n > lim or (n * 4 > lim and len(value.encode("utf-8", "surrogatepass")) > lim):
                raise self.text_too_large(field)
            return value
        if isinstance(value, (bytes, bytearray)):
            if len(value) > lim:
                raise self.text_too_large(field)
            try:
                return bytes(value).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise RequestError(P.E_BAD_UTF8, f"\"{field}\" is not valid UTF-8: {exc}")
        raise RequestError(P.E_BAD_REQUEST, f"\"{field}\" must be a str (or UTF-8 bin), not "
                           f"{_typename(value)}")

    def text_too_large(self, field):
        """too_large for a text over max_text_bytes, saying what to do instead: a client
        that gets it for one long document has no other way to learn of the chunk op."""
        return RequestError(P.E_TOO_LARGE, f"\"{field}\" is over max_text_bytes "
                            f"({self.limits.max_text_bytes:,} bytes): send a longer document "
                            f"as a stream of chunks (op \"chunk\"; the Python clients' "
                            f"encode_chunks())")

    @staticmethod
    def out_ids(ids, fmt):
        if fmt == P.IDS_BIN:
            return P.ids_to_bin(ids)
        return ids if isinstance(ids, list) else list(ids)

    def encode(self, opts, text):
        name, allowed, disallowed, _ = opts
        tok = self.tokenizers[name]
        try:
            if allowed == "all" and disallowed == ():
                return tok.encode(text)
            return tok.encode(text, allowed_special=allowed, disallowed_special=disallowed)
        except ValueError as exc:
            raise _encode_error(exc)

    # -- ops -----------------------------------------------------------------------------------
    def encode_packed(self, opts, text):
        """(ids in the requested format, count), by the fast path when it applies."""
        name, allowed, disallowed, fmt = opts
        fast = self.fast.get(name)
        if fast is not None and allowed == "all" and disallowed == () and fmt == P.IDS_BIN:
            got = fast(text)
            if got is not None:
                return got
        ids = self.encode(opts, text)
        return self.out_ids(ids, fmt), len(ids)

    def op_encode(self, req, ident, flag, req_id):
        opts = self.encode_opts(req)
        text = self.text(req.get("text"))
        ids, n = self.encode_packed(opts, text)
        return {"ids": ids, "n": n}

    def op_encode_batch(self, req, ident, flag, req_id):
        opts = self.encode_opts(req)
        texts = req.get("texts")
        if not isinstance(texts, list):
            raise RequestError(P.E_BAD_REQUEST, "\"texts\" must be a list of str")
        if len(texts) > self.limits.max_batch_texts:
            raise RequestError(P.E_TOO_LARGE, f"more than {self.limits.max_batch_texts} texts")
        name, allowed, disallowed, fmt = opts
        fast = self.bulk_encoder(name, allowed, disallowed, fmt, len(texts))
        if fast is not None and self.all_bins(texts):
            # UTF-8 bins (what the Python client sends): checked and joined in C, never
            # decoded to str; one that is not UTF-8 takes the path below, which names it
            got = fast.many_utf8([texts], [req_id])
            if got is not None:
                return got[0]            # the whole reply, packed
        short = self.limits.max_text_bytes // 4      # a str this long is within the limit
        if not all(type(t) is str and len(t) <= short for t in texts):
            texts = [self.text(t, f"texts[{i}]") for i, t in enumerate(texts)]
        tok = self.tokenizers[name]
        if fast is not None:
            got = fast.many(texts, req_id)
            if got is not None:
                return got               # the whole reply, packed
        if len(texts) <= self.SMALL_BATCH and self.fast.get(name) is not None:
            out = _per_text(lambda t: self.encode_packed(opts, t), texts)
            return {"ids": [x[0] for x in out], "n": [x[1] for x in out]}
        if disallowed == ():
            try:
                out = tok.encode_batch(texts, allowed_special=allowed)
            except ValueError as exc:
                raise _encode_error(exc)
        else:
            out = _per_text(lambda t: self.encode(opts, t), texts)
        return {"ids": [self.out_ids(ids, fmt) for ids in out], "n": [len(ids) for ids in out]}

    def op_decode(self, req, ident, flag, req_id):
        name, tok = self.tokenizer(req)
        ids = req.get("ids")
        if isinstance(ids, (bytes, bytearray)):
            if len(ids) > 4 * self.limits.max_decode_ids:
                raise RequestError(P.E_TOO_LARGE, f"more than {self.limits.max_decode_ids} ids")
            try:
                ids = P.bin_to_ids(ids)
            except ValueError as exc:
                raise RequestError(P.E_BAD_REQUEST, str(exc))
        elif isinstance(ids, list):
            if len(ids) > self.limits.max_decode_ids:
                raise RequestError(P.E_TOO_LARGE, f"more than {self.limits.max_decode_ids} ids")
            for i, x in enumerate(ids):
                if isinstance(x, bool) or not isinstance(x, int):
                    raise RequestError(P.E_BAD_REQUEST, f"ids[{i}] is {_typename(x)}, not an "
                                       "int")
                if x < 0 or x >= 1 << 32:
                    raise RequestError(P.E_BAD_ID, f"ids[{i}] = {x} is not a token id")
        else:
            raise RequestError(P.E_BAD_REQUEST, "\"ids\" must be a list of ints or packed "
                               "uint32 little-endian bin")
        as_bytes = req.get("bytes", False)
        if not isinstance(as_bytes, bool):
            raise RequestError(P.E_BAD_REQUEST, "\"bytes\" must be a bool")
        try:
            data = tok.decode_bytes(ids)
        except (ValueError, KeyError, IndexError, OverflowError) as exc:
            raise RequestError(P.E_BAD_ID, f"decode: {exc}")
        if as_bytes:
            return {"data": bytes(data)}
        return {"text": bytes(data).decode("utf-8", "replace")}

    def op_count(self, req, ident, flag, req_id):
        opts = self.encode_opts(req)
        text = self.text(req.get("text"))
        limit = req.get("limit")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                  or limit < 0):
            raise RequestError(P.E_BAD_REQUEST, "\"limit\" must be a non-negative int")
        if limit is not None:
            # Every token is at most max_token_bytes long, so a text longer than
            # (limit + 1) * max_token_bytes bytes has more than `limit` tokens: stop here.
            mtb = self.max_token_bytes(opts[0])
            # (not when a special token is disallowed: the whole text must be looked at;
            # nor when a normalizer or pre-tokenizer may drop text: then fewer bytes remain)
            if mtb and opts[2] == () and len(text) > (limit + 1) * mtb and \
                    _keeps_every_byte(self.tokenizers[opts[0]]):
                n_bytes = len(text.encode("utf-8"))
                lower = -(-n_bytes // mtb)
                return {"count": lower, "exceeded": True, "exact": False}
            streamed = self.count_until(opts, text, limit)
            if streamed is not None:
                n, exceeded = streamed
                return {"count": n, "exceeded": exceeded, "exact": not exceeded}
        fast = self.fast.get(opts[0])
        got = fast(text) if fast is not None and opts[1] == "all" and opts[2] == () else None
        n = got[1] if got is not None else len(self.encode(opts, text))
        out = {"count": n, "exact": True}
        if limit is not None:
            out["exceeded"] = n > limit
        return out

    COUNT_SLICE = 1 << 16

    def count_until(self, opts, text, limit):
        """For a long text and the default options: feeds the text to the tokenizer's
        streaming encoder (encode_iterable) slice by slice and stops as soon as more than
        `limit` ids came out.  Returns (count, exceeded) - count is exact when not exceeded -
        or None when no streaming encoder applies."""
        name, allowed, disallowed, _ = opts
        tok = self.tokenizers[name]
        step = self.COUNT_SLICE
        if (len(text) <= 2 * step or allowed != "all" or disallowed != ()
                or not hasattr(tok, "encode_iterable")):
            return None
        n = 0
        try:
            it = tok.encode_iterable(text[i:i + step] for i in range(0, len(text), step))
        except ValueError:      # a tokenizer that streams no text (a normalizer...): whole
            return None
        try:
            for _ in it:
                n += 1
                if n > limit:
                    return n, True
        finally:
            close = getattr(it, "close", None)
            if close:
                close()
        return n, False

    def max_token_bytes(self, name):
        """The longest token's byte length, learnt once per tokenizer (0 if unknown)."""
        v = self._max_token_bytes.get(name)
        if v is None:
            tok = self.tokenizers[name]
            v = getattr(tok, "max_token_bytes", None)
            if not isinstance(v, int):
                try:
                    v = max(len(b) for b in tok.vocab.values())
                except Exception:
                    v = None
            if not isinstance(v, int):
                v = 0
                try:
                    for i in range(tok.n_vocab):
                        try:
                            v = max(v, len(tok.decode_bytes([i])))
                        except (ValueError, KeyError):
                            pass
                except Exception:
                    v = 0
            self._max_token_bytes[name] = v
        return v

    def stream_id(self, req):
        sid = req.get("stream")
        if isinstance(sid, bool) or not isinstance(sid, (int, str, bytes)) or (
                isinstance(sid, (str, bytes)) and len(sid) > self.limits.max_id_len):
            raise RequestError(P.E_BAD_REQUEST, "\"stream\" must be an int or a short str "
                               f"(at most {self.limits.max_id_len} bytes)")
        return sid

    def op_chunk(self, req, ident, flag, req_id):
        sid = self.stream_id(req)
        seq = req.get("seq")
        if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq < 1 << 31:
            raise RequestError(P.E_BAD_REQUEST, "\"seq\" must be an int in [0, 2**31)")
        final = req.get("final", False)
        if not isinstance(final, bool):
            raise RequestError(P.E_BAD_REQUEST, "\"final\" must be a bool")
        data = req.get("data", b"")
        if isinstance(data, str):
            data = data.encode("utf-8")
        elif isinstance(data, (bytes, bytearray)):
            data = bytes(data)
        else:
            raise RequestError(P.E_BAD_REQUEST, "\"data\" must be bin (or str)")
        opts = self.encode_opts(req) if seq == 0 else None
        status, extra = self.streams.add(ident, flag, req_id, sid, seq, data, final, opts,
                                         time.monotonic())
        if status in ("ack", "resent"):
            reply = {"id": req_id, "ok": True, "stream": sid, "seq": seq, "ids": [],
                     "final": False}
            if status == "resent":
                reply["resent"] = True   # not this chunk's ids: see PROTOCOL.md, chunk
            return [(ident, flag, P.packb(reply))]
        if status == "defer":
            return []
        if status == "error":
            code, message, deferred = extra
            self.stats.count_error(code)
            return self._stream_errors(ident, flag, req_id, code, message, deferred)
        return self._consume((ident, sid), extra, ident, flag, req_id, sid, seq)

    def _stream_errors(self, ident, flag, req_id, code, message, deferred):
        out = [(ident, flag, P.pack_error(req_id, code, message))]
        if deferred and deferred[2] != req_id:
            out.append((deferred[0], deferred[1],
                        P.pack_error(deferred[2], code, message)))
        return out

    def _consume(self, key, st, ident, flag, req_id, sid, seq):
        """Consumes the stream's chunks in order while they are there (this worker owns
        st.busy).  Every id produced goes into ONE reply: the final chunk's when the run
        reaches it, else this request's; so concatenating the ids of all the stream's replies
        in seq order gives the document's ids."""
        opts = st.opts
        chunks_ids = []
        n_run = 0
        try:
            if opts is None:  # pragma: no cover - seq 0 is always consumed first
                raise RequestError(P.E_STREAM, "stream without chunk 0")
            prefix = self.prefix.get(opts[0])
            while True:
                nxt = self.streams.take(st)
                if nxt is None:
                    break
                cseq, data, is_final = nxt
                try:
                    st.dec.decode(data, is_final)
                except UnicodeDecodeError as exc:
                    raise RequestError(P.E_BAD_UTF8, "streamed document is not valid UTF-8 "
                                       f"(chunk {cseq}): {exc.reason}")
                if prefix is not None:
                    buf = st.tail + data if st.tail else data
                    pending = 0 if is_final else len(st.dec.getstate()[0])
                    ids, n, consumed = prefix(opts, buf[:len(buf) - pending], is_final)
                    st.tail = buf[consumed:]
                    self.streams.account(st, len(st.tail) - len(buf))
                    chunks_ids.append(ids)
                    n_run += n
                elif not is_final:
                    st.buf.append(data)
                else:
                    st.buf.append(data)
                    text = b"".join(st.buf).decode("utf-8")
                    st.buf = []
                    ids, n = self.encode_packed(opts, text)
                    chunks_ids.append(ids)
                    n_run += n
                if is_final:
                    st.n_out += n_run
                    deferred = self.streams.finish(key, st)
                    reply = {"stream": sid, "final": True, "ok": True, "n": st.n_out,
                             "ids": _join_ids(chunks_ids, opts[3])}
                    out = []
                    if deferred is not None and deferred[2] != req_id:
                        out.append((ident, flag, P.packb(
                            {"id": req_id, "ok": True, "stream": sid, "seq": seq, "ids": [],
                             "final": False})))
                        reply["id"] = deferred[2]
                        out.append((deferred[0], deferred[1], P.packb(reply)))
                    else:
                        reply["id"] = req_id
                        out.append((ident, flag, P.packb(reply)))
                    return out
            st.n_out += n_run
            return [(ident, flag, P.packb({"id": req_id, "ok": True, "stream": sid, "seq": seq,
                                           "ids": _join_ids(chunks_ids, opts[3]),
                                           "final": False}))]
        except RequestError as exc:
            deferred = self.streams.fail(key, st, exc.code, exc.message)
            self.stats.count_error(exc.code)
            return self._stream_errors(ident, flag, req_id, exc.code, exc.message, deferred)
        except BaseException:
            self.streams.fail(key, st, P.E_INTERNAL, "internal error")
            raise

    def op_stream_abort(self, req, ident, flag, req_id):
        sid = self.stream_id(req)
        existed, deferred = self.streams.abort(ident, sid)
        out = [(ident, flag, P.packb({"id": req_id, "ok": True, "existed": existed}))]
        if deferred:
            out.append((deferred[0], deferred[1],
                        P.pack_error(deferred[2], P.E_STREAM, "stream aborted")))
        return out

    def op_info(self, req, ident, flag, req_id):
        if self._info is None:
            from . import __version__
            toks = {}
            for name, tok in self.tokenizers.items():
                toks[name] = {"n_vocab": int(tok.n_vocab),
                              "special_tokens": {str(k): int(v)
                                                 for k, v in tok.special_tokens.items()}}
            self._info = {"version": __version__, "protocol": P.PROTOCOL_VERSION,
                          "tokenizers": toks, "default": self.default,
                          "limits": self.limits.as_dict()}
        return dict(self._info)

    def op_health(self, req, ident, flag, req_id):
        return {"status": self.status(), "uptime_s": time.time() - self.stats.started}

    def op_stats(self, req, ident, flag, req_id):
        out = self.stats.snapshot()
        out["status"] = self.status()
        out["streams"] = len(self.streams)
        return out


def _per_text(fn, texts):
    """[fn(t) for t in texts]; a RequestError names the failing text (texts[i]: ...)."""
    out = []
    for i, t in enumerate(texts):
        try:
            out.append(fn(t))
        except RequestError as exc:
            raise RequestError(exc.code, f"texts[{i}]: {exc.message}") from None
    return out


# msgpack raises these with no text at all (its C unpacker only returns an error number)
_MSGPACK_PROBLEMS = {
    "FormatError": "a byte that begins no msgpack value (such as 0xc1)",
    "StackError": "values nested deeper than msgpack allows",
}


def _msgpack_problem(exc):
    """What msgpack found wrong with a payload, as "ExceptionName: what": its own text, or
    for the errors it raises without one, words for them."""
    name = type(exc).__name__
    what = str(exc)[:200] or _MSGPACK_PROBLEMS.get(name) or (type(exc).__doc__ or "?")
    return f"{name}: {what.strip()}"


def _with_id(exc, rid):
    exc.req_id = rid
    return exc


def _typename(v):
    return {str: "str", bytes: "bin", int: "int", float: "float", bool: "bool", list: "array",
            dict: "map", type(None): "nil"}.get(type(v), type(v).__name__)


def _disallowed_message(token) -> str:
    """A disallowed special token's error in the protocol's terms (the in-process message
    is tiktoken's advice on Python arguments)."""
    what = f"the special token {token!r}" if token is not None else "a special token"
    return (f"the text contains {what}, which \"disallowed_special\" refuses: list it in "
            f"\"allowed_special\" to encode it as that token, or leave it out of "
            f"\"disallowed_special\" to encode it as plain text")


def _encode_error(exc):
    msg = str(exc)
    if "special" in msg.lower():
        token = getattr(exc, "special_token", None)     # (bpe_cffi's; another loader's
        if token is not None:                           # error is passed on as it is)
            msg = _disallowed_message(token)
        return RequestError(P.E_DISALLOWED, msg[:1000])
    return RequestError(P.E_BAD_REQUEST, msg[:1000])


# ---- the server ------------------------------------------------------------------------------

class Server:
    """Binds, runs the main loop until stopped, drains, and cleans up.

    tokenizers: dict name -> object with encode / encode_batch / decode_bytes / n_vocab /
    special_tokens (bpe_cffi.Tokenizer or anything shaped like it); the first name is the
    default."""

    def __init__(self, tokenizers, bind="tcp://127.0.0.1:5555", workers=None, limits=None,
                 curve_secret_key=None, curve_authorized_keys=None, drain_timeout=10.0,
                 context=None, heap_trim_bytes=HEAP_TRIM_BYTES):
        if not tokenizers:
            raise ValueError("at least one tokenizer is needed")
        check_bind_security(bind, curve_secret_key, curve_authorized_keys)
        self.tokenizers = dict(tokenizers)
        self.default = next(iter(self.tokenizers))
        self.bind_addr = bind
        self.n_workers = workers or _default_workers()
        self.limits = limits or P.Limits()
        self.curve = (curve_secret_key, curve_authorized_keys)
        self.drain_timeout = drain_timeout
        self.heap_trim_bytes = heap_trim_bytes   # see _trim_heap_when_quiet; 0: never
        self._bytes_seen = self._bytes_trimmed = 0
        self._drain_deadline = 0.0   # set when the drain starts: the replies' last moment
        self.inline_max = 1024       # payloads up to this size are answered by the main loop
        self.ctx = context or zmq.Context()
        self._own_ctx = context is None
        self.stats = Stats()
        self.streams = StreamStore(self.limits)
        self.endpoint = None
        self._stop = threading.Event()
        self._auth = None
        self._threads = []
        self.handler = Handler(self.tokenizers, self.default, self.limits, self.stats,
                               self.streams, lambda: "draining" if self._stop.is_set() else "ok")

    # -- setup ---------------------------------------------------------------------------------
    def start(self):
        """Binds the sockets and starts the workers; returns the bound endpoint."""
        lim = self.limits
        fe = self.frontend = self.ctx.socket(zmq.ROUTER)
        fe.setsockopt(zmq.ROUTER_MANDATORY, 1)
        fe.setsockopt(zmq.MAXMSGSIZE, lim.max_frame_bytes)
        fe.setsockopt(zmq.RCVHWM, lim.rcvhwm)
        fe.setsockopt(zmq.SNDHWM, lim.sndhwm)
        fe.setsockopt(zmq.HEARTBEAT_IVL, lim.heartbeat_ivl_ms)
        fe.setsockopt(zmq.HEARTBEAT_TIMEOUT, lim.heartbeat_timeout_ms)
        fe.setsockopt(zmq.HEARTBEAT_TTL, lim.heartbeat_ttl_ms)
        fe.setsockopt(zmq.LINGER, 1000)
        if self.curve[0] is not None:
            self._setup_curve(fe)
        if self.bind_addr.startswith("tcp://["):     # an IPv6 address, e.g. tcp://[::1]:0
            fe.setsockopt(zmq.IPV6, 1)
        self._ipc = _ipc_path(self.bind_addr)
        _refuse_live_ipc(self._ipc)
        fe.bind(_bindable(self.bind_addr))
        self.endpoint = fe.getsockopt(zmq.LAST_ENDPOINT).decode()
        self._ipc_stat = os.stat(self._ipc) if self._ipc and os.path.exists(self._ipc) \
            else None
        be = self.backend = self.ctx.socket(zmq.ROUTER)
        be.setsockopt(zmq.LINGER, 0)
        be.bind(BACKEND_ADDR + f"-{os.getpid()}-{id(self)}")
        self._backend_addr = be.getsockopt(zmq.LAST_ENDPOINT).decode()
        for i in range(self.n_workers):
            t = threading.Thread(target=self._worker, name=f"bpe-worker-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        return self.endpoint

    def _setup_curve(self, fe):
        import zmq.auth
        from zmq.auth.thread import ThreadAuthenticator
        secret_file, keys_dir = self.curve
        if not os.path.isfile(secret_file):
            raise ValueError(f"--curve-secret-key: no such file {secret_file}")
        if not os.path.isdir(keys_dir):
            raise ValueError(f"--curve-authorized-keys: no such directory {keys_dir}")
        pub, sec = zmq.auth.load_certificate(secret_file)
        if not sec:
            raise ValueError(f"{secret_file} holds no secret key (give the .key_secret file)")
        self._auth = ThreadAuthenticator(self.ctx)
        self._auth.start()
        self._auth.configure_curve(domain="*", location=keys_dir)
        fe.curve_secretkey = sec
        fe.curve_publickey = pub
        fe.curve_server = True

    # -- workers -------------------------------------------------------------------------------
    def _worker(self):
        sock = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(self._backend_addr)
        sock.send(_READY)
        handle_many = self.handler.handle_many
        try:
            while True:
                # (identity, flag, payload) * k, as zmq.Frames: the payloads are not copied
                job = _recv_parts(sock)
                if not len(job[0]) and job[1].bytes == _STOP:
                    break
                frames = [_DONE]
                try:
                    jobs = [(job[i].bytes, job[i + 1].bytes, job[i + 2])
                            for i in range(0, len(job) - 2, 3)]
                    for r_ident, r_flag, reply in handle_many(jobs):
                        frames += (r_ident, r_flag, reply)
                except Exception as exc:  # pragma: no cover - handle() answers everything
                    sys.stderr.write(f"bpe-cffi daemon: worker error {exc!r}\n")
                _send_parts(sock, frames)      # always: the main loop counts on DONE
        except zmq.ContextTerminated:  # pragma: no cover
            pass
        finally:
            sock.close(0)

    # -- main loop -----------------------------------------------------------------------------
    def request_stop(self, *_):
        """Stop taking requests, answer those in flight, then return from run()."""
        self._stop.set()

    def run(self):
        lim = self.limits
        fe, be = self.frontend, self.backend
        idle = collections.deque()            # worker routing ids ready for a job
        busy = {}            # worker routing id -> its pending entries (below) in hand
        pending = collections.deque()         # (identity, flag, payload, t0)
        self._queued_bytes = 0
        inflight = self._inflight = {}
        stats = self.stats
        poller = zmq.Poller()
        poller.register(fe, zmq.POLLIN)
        poller.register(be, zmq.POLLIN)
        fe_polled = True
        next_reap = time.monotonic() + 1.0
        deadline = quiet_end = None
        NOBLOCK, EVENTS, POLLIN = int(zmq.NOBLOCK), _EVENTS, _POLLIN

        while True:
            if self._stop.is_set() and deadline is None:
                deadline = self._drain_deadline = time.monotonic() + self.drain_timeout
            if deadline is not None:
                if not pending and not busy:
                    for d in self.streams.expire(0, everything=True):
                        self._send(d[0], d[1], P.pack_error(
                            d[2], P.E_SHUTTING_DOWN, "daemon stopping; stream dropped"))
                    if not inflight or time.monotonic() > deadline:
                        # a last look for requests that arrived meanwhile (they are told
                        # the daemon is stopping) before the socket closes; requests a busy
                        # machine is still moving off the wire get DRAIN_QUIET to show up,
                        # but clients that keep sending (retrying) hold it DRAIN_LAST at most
                        if quiet_end is None:
                            quiet_end = time.monotonic() + self.DRAIN_LAST_S
                        if time.monotonic() <= min(deadline, quiet_end) and (
                                self._read_frontend(pending) or fe.poll(self.DRAIN_QUIET_MS)):
                            continue
                        break
                elif time.monotonic() > deadline:
                    break
            want_fe = self._queued_bytes < lim.max_queued_bytes
            if want_fe != fe_polled:
                poller.modify(fe, zmq.POLLIN if want_fe else 0)
                fe_polled = want_fe
            events = poller.poll(100)
            for sock, _ in events:
                if sock is be:
                    while be.get(EVENTS) & POLLIN:    # no zmq.Again raised per wake-up
                        try:   # Frames: a reply goes on to its client without a copy
                            frames = _recv_parts(be, NOBLOCK)
                        except zmq.Again:             # pragma: no cover - EVENTS said ready
                            break
                        wid = frames[0].bytes
                        job = busy.pop(wid, None)
                        if job is not None:
                            now_pc = time.perf_counter()
                            stats.latencies.extend(now_pc - t0 for *_, t0 in job)
                        idle.append(wid)
                        for i in range(2, len(frames) - 2, 3):
                            self._send(frames[i].bytes, frames[i + 1].bytes, frames[i + 2])
                        if pending:
                            self._dispatch(idle, busy, pending)
                else:
                    n = 0
                    while n < 256 and self._queued_bytes < lim.max_queued_bytes:
                        if not self._read_frontend(pending):
                            break
                        n += 1
            if pending and idle:
                self._dispatch(idle, busy, pending)
            now = time.monotonic()
            if now >= next_reap:
                next_reap = now + 1.0
                for d in self.streams.expire(now):
                    self._send(d[0], d[1], P.pack_error(
                        d[2], P.E_STREAM, "stream expired (idle too long)"))
                self._trim_heap_when_quiet(busy or pending)
        for ident, flag, payload, _t0 in pending:     # never handed to a worker
            self._abandoned(ident, flag, payload)
        self._shutdown(idle, busy)
        return 0

    def _abandoned(self, ident, flag, payload):
        """Tells a client that the daemon stops without answering its request (it would
        otherwise wait its whole timeout for a reply that never comes)."""
        rid = _peek_id(payload, self.limits)
        self._send(ident, flag, P.pack_error(
            rid, P.E_SHUTTING_DOWN, "daemon stopping: the request was not answered in the "
            "drain's time"))

    def _trim_heap_when_quiet(self, working):
        """Called about once a second: when less than QUIET_BYTES of requests came in since
        the last call (health checks and the like leave the daemon quiet), none is queued
        or running, and at least heap_trim_bytes of requests came in since the last trim,
        gives the heap's free memory back to the system (C's bpe_heap_trim; after a burst of
        big batches the daemon would otherwise keep its peak resident size, e.g. 341 MB
        instead of 123 MB after 16 clients' 7 MB batches).  A request arriving during the
        trim waits for it: ~10 ms for 130 MB given back, once per quiet spell."""
        seen = self.stats.bytes_in
        quiet = seen - self._bytes_seen < self.QUIET_BYTES and not working
        self._bytes_seen = seen
        if not quiet or not self.heap_trim_bytes or \
                seen - self._bytes_trimmed < self.heap_trim_bytes:
            return
        self._bytes_trimmed = seen
        from bpe_cffi._native import lib
        lib.bpe_heap_trim()
        self.stats.heap_trims += 1

    QUIET_BYTES = 256 << 10   # request bytes per second below which the daemon is quiet
    DRAIN_QUIET_MS = 200      # stopping: exit once the front end has been quiet this long
    DRAIN_LAST_S = 1.0        # ... or this long after the work ran out, whatever comes in
    MAX_JOBS_PER_HANDOFF = 8
    MAX_BYTES_PER_HANDOFF = 256 << 10

    def _dispatch(self, idle, busy, pending):
        """Hands queued requests to idle workers.  When more are queued than workers are idle,
        a worker gets several small ones in one message (fewer thread hand-offs under load;
        each worker still gets its fair share, so none waits while another has a backlog)."""
        be = self.backend
        while pending and idle:
            k = min(self.MAX_JOBS_PER_HANDOFF, -(-len(pending) // len(idle)))
            wid = idle.popleft()
            frames = [wid]
            jobs = busy[wid] = []
            size = 0
            while pending and len(jobs) < k and (not jobs or size < self.MAX_BYTES_PER_HANDOFF):
                jobs.append(pending.popleft())
                ident, flag, payload, _t0 = jobs[-1]
                self._queued_bytes -= len(payload)
                size += len(payload)
                frames += (ident, flag, payload)
            _send_parts(be, frames)

    def _read_frontend(self, pending):
        """Reads one message; returns False when there is none."""
        fe = self.frontend
        if not fe.get(_EVENTS) & _POLLIN:   # cheaper than a zmq.Again per wake-up
            return False
        try:
            ident = fe.recv(zmq.NOBLOCK)
        except zmq.Again:  # pragma: no cover - EVENTS said ready
            return False
        t0 = time.perf_counter()
        frames = []
        n = 1
        nbytes = len(ident)
        more = fe.getsockopt(zmq.RCVMORE)
        while more:
            # a zmq.Frame: the payload goes on to a worker without being copied
            f = fe.recv(copy=False)
            more = f.more
            n += 1
            nbytes += len(f)
            if n <= self.limits.max_frames:
                frames.append(f)
        stats = self.stats
        stats.requests += 1
        stats.bytes_in += nbytes
        inflight = self._inflight
        # Valid: [identity, payload] from a DEALER, [identity, b"", payload] from a REQ.
        if len(frames) == 2 and not len(frames[0]) and n == 3:
            flag, payload = _REQ_FLAG, frames[1]
        elif len(frames) == 1 and n == 2:
            flag, payload = _DEALER_FLAG, frames[0]
        else:
            flag = _REQ_FLAG if frames and not len(frames[0]) else _DEALER_FLAG
            inflight[ident] = inflight.get(ident, 0) + 1
            stats.count("?", P.E_BAD_FRAMES)
            self._send(ident, flag, P.pack_error(
                None, P.E_BAD_FRAMES, f"a request is one msgpack frame (got {n - 1} frames)"))
            return True
        inflight[ident] = k = inflight.get(ident, 0) + 1
        if self._stop.is_set() and len(payload) <= self.inline_max and \
                _peek_key(payload, self.limits, "op") in _WHILE_DRAINING and \
                self._inline(ident, flag, payload, t0):
            pass                      # health, stats, info: answered ("draining")
        elif self._stop.is_set():
            stats.count("?", P.E_SHUTTING_DOWN)
            self._send(ident, flag, P.pack_error(
                _peek_id(payload, self.limits), P.E_SHUTTING_DOWN, "the daemon is stopping"))
        elif k > self.limits.max_inflight_per_client:
            stats.count("?", P.E_BUSY)
            self._send(ident, flag, P.pack_error(
                _peek_id(payload, self.limits), P.E_BUSY, "more than "
                f"{self.limits.max_inflight_per_client} requests in flight from this client"))
        elif len(payload) <= self.inline_max and self._inline(ident, flag, payload, t0):
            pass
        else:
            pending.append((ident, flag, payload, t0))
            self._queued_bytes += len(payload)
        return True

    def _inline(self, ident, flag, payload, t0):
        """Answers a small request in the main loop (bounded work: a text under inline_max
        bytes), saving two thread hand-offs; False for a stream op, which goes to a worker."""
        replies = self.handler.handle(ident, flag, payload, inline=True)
        if replies is None:
            return False
        for r_ident, r_flag, reply in replies:
            self._send(r_ident, r_flag, reply)
        self.stats.latencies.append(time.perf_counter() - t0)
        return True

    def _send(self, ident, flag, reply):
        """Sends one reply without ever blocking; drops it if the peer is gone or full."""
        inflight = self._inflight
        k = inflight.get(ident, 0) - 1
        if k > 0:
            inflight[ident] = k
        else:
            inflight.pop(ident, None)
        stats = self.stats
        fe = self.frontend
        try:
            # frame by frame (send_multipart's Python loop costs more): only the identity
            # frame can fail, and then nothing of the reply is queued
            fe.send(ident, _MORE_NOBLOCK)
            if flag == _REQ_FLAG:
                fe.send(b"", _MORE_NOBLOCK)
            fe.send(reply, zmq.NOBLOCK)
            stats.replies += 1
            stats.bytes_out += len(reply)
        except zmq.ZMQError:  # EHOSTUNREACH (peer gone) or EAGAIN (its HWM is full)
            stats.dropped_replies += 1

    def _shutdown(self, idle, busy):
        self._stop_workers(idle, busy)
        # replies already made wait in the socket for clients to take them: they get what is
        # left of the drain's time (a second at least), as the drain promises them an answer
        left = self._drain_deadline - time.monotonic()
        self.frontend.close(linger=max(1000, int(left * 1000)))
        self.backend.close(0)
        if getattr(self, "_ipc", None):
            _remove_ipc_file(self._ipc, self._ipc_stat)
        if self._auth is not None:
            self._auth.stop()
        if self._own_ctx and not any(t.is_alive() for t in self._threads):
            self.ctx.term()

    def _stop_workers(self, idle, busy):
        """Sends STOP to every worker once it is idle.  Busy ones are waited for until the
        drain's end (a moment at least); the requests of those still busy then are answered
        shutting_down, and their threads (daemon threads) are left to the process's exit."""
        be = self.backend
        end = max(self._drain_deadline, time.monotonic() + 0.2)
        waiting = set(busy)
        for wid in idle:
            be.send_multipart([wid, b"", _STOP, b""])
        while waiting and time.monotonic() < end:
            if not be.poll(100):
                continue
            frames = be.recv_multipart()
            wid = frames[0]
            for i in range(2, len(frames) - 2, 3):
                self._send(frames[i], frames[i + 1], frames[i + 2])
            waiting.discard(wid)
            be.send_multipart([wid, b"", _STOP, b""])
        for wid in waiting:
            for ident, flag, payload, _t0 in busy[wid]:
                self._abandoned(ident, flag, payload)
        for t in self._threads:
            t.join(timeout=max(0.0, end - time.monotonic()))


# ops answered while the daemon drains (their replies say "draining"); the rest get
# shutting_down
_WHILE_DRAINING = (P.OP_HEALTH, P.OP_STATS, P.OP_INFO)


def _peek_key(payload, limits, name):
    """The value of key `name` of a request map when it is an int, str or bytes (or None).
    Reads the map key by key and skips the other values unbuilt, so a big text costs no
    copy.  A str that is not UTF-8 is read with surrogateescape: an id packed back by
    P.pack_error is then the very bytes that came (no key or op name matches such a str)."""
    try:
        u = msgpack.Unpacker(raw=False, max_buffer_size=max(len(payload), 1),
                             unicode_errors="surrogateescape", **P.unpack_limits(limits))
        u.feed(payload)
        for _ in range(min(u.read_map_header(), 64)):
            key = u.unpack()
            if key == name:
                v = u.unpack()
                if isinstance(v, (int, str, bytes)) and not isinstance(v, bool):
                    return v
                return None
            u.skip()
    except Exception:
        pass
    return None


def _peek_id(payload, limits):
    """The request id, for the rare replies the main loop sends itself (or None); send it
    with P.pack_error, which packs a str id that was not UTF-8 back to its bytes."""
    return _peek_key(payload, limits, "id")


def _default_workers():
    """One worker per core this process may use: its CPU affinity set, lowered to its
    cgroup's CPU quota (a container's --cpus), as the C calls count them."""
    from bpe_cffi._native import lib
    return lib.bpe_cores_available()


def serve(tokenizers, bind, workers=None, limits=None, curve_secret_key=None,
          curve_authorized_keys=None, drain_timeout=10.0, ready=None, install_signals=True,
          heap_trim_bytes=HEAP_TRIM_BYTES):
    """Runs a daemon until SIGTERM/SIGINT; `ready(endpoint)` is called once bound."""
    server = Server(tokenizers, bind=bind, workers=workers, limits=limits,
                    curve_secret_key=curve_secret_key,
                    curve_authorized_keys=curve_authorized_keys, drain_timeout=drain_timeout,
                    heap_trim_bytes=heap_trim_bytes)
    endpoint = server.start()
    if install_signals:
        signal.signal(signal.SIGTERM, server.request_stop)
        signal.signal(signal.SIGINT, server.request_stop)
        if hasattr(signal, "SIGHUP"):     # a closed terminal or a 'reload': drain, not die
            signal.signal(signal.SIGHUP, server.request_stop)
    if ready:
        ready(endpoint)
    return server.run()
