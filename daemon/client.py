"""Blocking client of the bpe_cffi daemon (one DEALER socket per daemon endpoint).

Requests are pipelined: each carries a fresh integer id; replies are matched by id, so they
may arrive in any order, and a reply whose id is no longer awaited (a duplicate after a
resend, or a late answer to an abandoned request) is dropped.  Lazy Pirate: every operation is
idempotent, so a request not answered within `timeout` seconds is resent (to the next endpoint
when there are several) up to `retries` times, then DaemonTimeout is raised.

A Client is not thread-safe (ZeroMQ sockets are not): use one per thread.
"""
import collections
import itertools
import os
import time

import msgpack
import zmq

from . import protocol as P


# plain ints: pyzmq's enum flags make `events & POLLIN` a Python-level call
_EVENTS, _POLLIN = int(zmq.EVENTS), int(zmq.POLLIN)


class DaemonError(RuntimeError):
    """An error reply from the daemon: .code is one of protocol.ERROR_CODES."""

    def __init__(self, code, message):
        super().__init__(f"[{code}] {message}")
        self.code = code
        self.message = message


class DaemonTimeout(DaemonError, TimeoutError):
    """No reply after all retries."""

    def __init__(self, message):
        super().__init__("timeout", message)


def _key(value, secret=False):
    """A CURVE key given as z85 bytes/str, or as a zmq.auth certificate file path."""
    if value is None:
        return None
    if isinstance(value, str) and len(value) == 40 and not os.path.exists(value):
        return value.encode()
    if isinstance(value, bytes) and len(value) == 40:
        return value
    import zmq.auth
    pub, sec = zmq.auth.load_certificate(os.fspath(value))
    if secret and not sec:
        raise ValueError(f"{value} holds no secret key")
    return sec if secret else pub


def configure_socket(sock, curve_server_key=None, curve_public_key=None,
                     curve_secret_key=None, heartbeat_ivl_ms=2000):
    """Socket options shared by Client and AsyncClient: identity, HWM, heartbeats, CURVE."""
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.IMMEDIATE, 1)        # queue only to live connections
    sock.setsockopt(zmq.SNDHWM, 10000)
    sock.setsockopt(zmq.RCVHWM, 10000)
    sock.setsockopt(zmq.ROUTING_ID, b"c" + os.urandom(15))   # stable across reconnects
    if heartbeat_ivl_ms:
        sock.setsockopt(zmq.HEARTBEAT_IVL, heartbeat_ivl_ms)
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, 3 * heartbeat_ivl_ms)
        sock.setsockopt(zmq.HEARTBEAT_TTL, 3 * heartbeat_ivl_ms)
    if curve_server_key is not None:
        sock.curve_serverkey = _key(curve_server_key)
        if curve_public_key is None or curve_secret_key is None:
            pub, sec = zmq.curve_keypair()
        else:
            pub, sec = _key(curve_public_key), _key(curve_secret_key, secret=True)
        sock.curve_publickey = pub
        sock.curve_secretkey = sec


class _Pending:
    __slots__ = ("packed", "ep", "deadline", "retries_left", "pinned", "why", "free",
                 "busy_wait", "budget_end", "sent")

    def __init__(self, packed, ep, deadline, retries_left, pinned, budget_end=0.0):
        self.packed = packed
        self.ep = ep
        self.deadline = deadline
        self.retries_left = retries_left
        self.pinned = pinned
        self.why = None          # the retryable error that set an early deadline
        self.free = False        # that resend is not an attempt (busy: see _on_reply)
        self.busy_wait = BUSY_WAIT_FIRST
        self.budget_end = budget_end   # busy replies are resent until then
        self.sent = False        # an attempt went out (else no endpoint was connected)


# A busy reply (the daemon's per-client or buffer limits) is flow control, not a failure: the
# request is sent again after a pause that doubles from BUSY_WAIT_FIRST to BUSY_WAIT_MAX, for as
# long as the request's whole time budget (timeout * (retries + 1)) lasts.
BUSY_WAIT_FIRST = 0.01
BUSY_WAIT_MAX = 0.25

# A request frame over the daemon's max_frame_bytes makes libzmq drop the connection: no
# reply, only timeouts.  A client asks the daemons' limits (info) the first time it has a
# frame bigger than this, and refuses one over them at once (too_large).
FRAME_CHECK_BYTES = 1 << 20


def request_msg(op, tokenizer=None, allowed_special=None, disallowed_special=None, **fields):
    msg = {"op": op}
    if tokenizer is not None:
        msg["tokenizer"] = tokenizer
    if allowed_special is not None:
        msg["allowed_special"] = _special(allowed_special)
    if disallowed_special is not None:
        msg["disallowed_special"] = _special(disallowed_special)
    msg.update(fields)
    return msg


def _special(v):
    if isinstance(v, str):
        return v
    return sorted(v) if v else "none"


def parse_reply(raw):
    """(reply dict, its int id) of a reply frame; (None, None) for anything unreadable, which
    the clients drop (a reply without an int id answers no request of theirs)."""
    try:
        rep = msgpack.unpackb(raw, raw=False, **_CLIENT_UNPACK)
    except Exception:
        return None, None
    if not isinstance(rep, dict):
        return None, None
    rid = rep.get("id")
    return (rep, rid) if isinstance(rid, int) else (rep, None)


def without_lone_surrogates(text):
    """text with each surrogate pair written as two code units made the one character it
    stands for, and each lone surrogate made U+FFFD: what bpe_cffi.Tokenizer (tokenizer._utf8)
    and tiktoken encode in its place.  UTF-8 has no surrogates, so the daemon could not be
    sent the text as it is (msgpack raises UnicodeEncodeError)."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def utf8(text):
    """UTF-8 of a str, a lone surrogate as U+FFFD (without_lone_surrogates): the same ids as
    in-process.  Only a text that UTF-8 refuses pays for the repair."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return without_lone_surrogates(text).encode("utf-8")


def pack_request(pack, msg):
    """msg packed by pack.  A "text" that UTF-8 refuses (a lone surrogate) is repaired as
    in-process encode does and packed again: catching the rare failure costs an ordinary
    text nothing, where checking every text first would encode each one twice."""
    try:
        return pack(msg)
    except UnicodeEncodeError:
        text = msg.get("text")
        if not isinstance(text, str):
            raise
        msg["text"] = without_lone_surrogates(text)
        return pack(msg)


def refuse_one_text(texts, what):
    """TypeError for a single str or bytes where a list of texts belongs: iterated, it gave a
    text per character (encode_batch("hello") made five)."""
    if isinstance(texts, (str, bytes, bytearray, memoryview)):
        raise TypeError(f"{what} takes a list of texts, not a {type(texts).__name__}: use "
                        f"encode(text) for one text, or {what}([text])")


def utf8_bins(texts):
    """The texts of an encode_batch as UTF-8 bins (the daemon checks them in C without
    decoding them to str), lone surrogates as U+FFFD (utf8); bytes are sent as they are, and
    anything else too (the daemon refuses it, naming it by its index)."""
    refuse_one_text(texts, "encode_batch")
    return [utf8(t) if isinstance(t, str) else t for t in texts]


def pairs_kept_whole(chunks):
    """The chunks of encode_chunks, a high surrogate that ends a str moved to the start of the
    next str: a surrogate pair cut between two chunks is then the one character it is in the
    joined document (each half alone would become U+FFFD), as Tokenizer.encode_iterable does.
    Before bytes, or at the end, the held surrogate is sent alone (U+FFFD)."""
    held = ""
    for chunk in chunks:
        if held:
            if isinstance(chunk, str):
                chunk, held = held + chunk, ""
            else:
                yield held
                held = ""
        if isinstance(chunk, str) and chunk and "\ud800" <= chunk[-1] <= "\udbff":
            chunk, held = chunk[:-1], chunk[-1]
            if not chunk:
                continue
        yield chunk
    if held:
        yield held


def chunk_data(chunk):
    """A chunk of encode_chunks as the "data" bin: a str as its UTF-8 (utf8)."""
    return utf8(chunk) if isinstance(chunk, str) else chunk


def ids_bin(ids):
    """The ids of a decode packed as uint32 LE.  An id that is not an int, or outside
    uint32, raises the DaemonError the daemon gives such an id in a list (bad_request /
    bad_id, naming its index and value) instead of packing's bare OverflowError or
    TypeError; the ids are looked at one by one only then."""
    if iter(ids) is ids:            # an iterator: kept, to be looked at again on an error
        ids = list(ids)
    try:
        return P.ids_to_bin(ids)
    except (OverflowError, TypeError):
        for i, x in enumerate(ids):
            if not hasattr(x, "__index__"):
                raise DaemonError(P.E_BAD_REQUEST, f"ids[{i}] is {type(x).__name__}, not an "
                                  f"int") from None
            if not 0 <= x.__index__() < 1 << 32:
                raise DaemonError(P.E_BAD_ID, f"ids[{i}] = {x} is not a token id") from None
        raise


def reply_ids(ids, packed=False):
    """The ids of a reply (packed bin, or a list from a peer that sent one) as a list of int,
    or with packed=True as an array of uint32 (P.bin_to_array)."""
    if packed:
        if isinstance(ids, (bytes, bytearray)):
            return P.bin_to_array(ids)
        return P.ids_to_array(ids)
    return P.bin_to_ids(ids) if isinstance(ids, (bytes, bytearray)) else list(ids)


STREAM_BATCH_CHARS = 1 << 20   # characters of text per batched stream request (<= 4 MB)
# stream's default grouping (batch=None): up to this many texts and characters per request.
# A request carries a fixed cost on both sides (thread hand-offs, system calls, Python), which
# one 4 KB text per request pays ~5 times over its encoding; at 64 texts it is small.  The
# daemon encodes a request of up to Handler.SMALL_BATCH (64) texts in one C call.
STREAM_AUTO_TEXTS = 64
STREAM_AUTO_CHARS = 256 << 10
# Errors that one text of a batched stream request can cause.  The stream then sends that
# request's texts one per request: it yields each text before the failing one and raises the
# failing text's own error, exactly as with batch=1.
PER_TEXT_ERRORS = (P.E_BAD_REQUEST, P.E_BAD_MSGPACK, P.E_BAD_UTF8, P.E_TOO_LARGE,
                   P.E_DISALLOWED)


def stream_grouping(batch):
    """(texts, characters) per request for stream's `batch`: None is the default grouping
    (STREAM_AUTO_TEXTS texts, STREAM_AUTO_CHARS characters), an int k >= 1 up to k texts
    (and STREAM_BATCH_CHARS characters)."""
    if batch is None:
        return STREAM_AUTO_TEXTS, STREAM_AUTO_CHARS
    if type(batch) is not int or batch < 1:
        raise ValueError(f"batch must be None or an int >= 1, not {batch!r}")
    return batch, STREAM_BATCH_CHARS


def falls_back_per_text(exc, texts_per_request):
    """True when a batched stream request that failed with exc is to be sent again text by
    text (see PER_TEXT_ERRORS); never for a timeout, nor with one text per request."""
    return (texts_per_request > 1 and not isinstance(exc, DaemonTimeout) and
            getattr(exc, "code", None) in PER_TEXT_ERRORS)


def text_error(exc, k):
    """exc, the error of a stream's text sent alone (as "text"), naming that text texts[k]
    (its index in the stream) as the daemon names the texts of an encode_batch: in a stream
    of a million texts, "text" alone does not say which.  Any other error is left as it is."""
    if isinstance(exc, DaemonTimeout) or exc.code not in PER_TEXT_ERRORS:
        return exc
    field = '"text"'
    if exc.message.startswith(field):
        return DaemonError(exc.code, f'"texts[{k}]"{exc.message[len(field):]}')
    return DaemonError(exc.code, f"texts[{k}]: {exc.message}")


def text_size(text):
    """What a text counts towards a stream group's characters: its length (characters of a
    str, bytes of bytes), 0 for anything else (the daemon refuses it)."""
    return len(text) if isinstance(text, (str, bytes, bytearray)) else 0


def group_request(base, group, per_request):
    """The request of one stream group: base (a request dict without the text) with the
    group's one text, or with all its texts as UTF-8 bins when per_request > 1."""
    msg = dict(base)
    if per_request == 1:
        msg["text"] = group[0]
    else:
        msg["texts"] = utf8_bins(group)
    return msg


def group_ids(rep, per_request, packed):
    """The ids of each text of a stream group from its request's reply (group_request)."""
    if per_request == 1:
        return [reply_ids(rep["ids"], packed)]
    return [reply_ids(ids, packed) for ids in rep["ids"]]


def text_groups(texts, batch, max_chars=None):
    """Yields lists of consecutive texts: up to `batch` texts and max_chars (default
    STREAM_BATCH_CHARS) characters each (a longer text alone)."""
    refuse_one_text(texts, "stream")
    limit = STREAM_BATCH_CHARS if max_chars is None else max_chars
    group, size = [], 0
    for text in texts:
        n = text_size(text)
        if group and (len(group) >= batch or size + n > limit):
            yield group
            group, size = [], 0
        group.append(text)
        size += n
    if group:
        yield group


class _ClientBase:
    """What the blocking and asyncio clients share: endpoints, timeouts, the ZeroMQ context
    (owned only when the client made it), one DEALER socket per endpoint, id counters."""

    _context_type = zmq.Context

    def __init__(self, endpoints, *, tokenizer, timeout, retries, context, curve_server_key,
                 curve_public_key, curve_secret_key, heartbeat_ivl_ms):
        if isinstance(endpoints, str):
            endpoints = [endpoints]
        self.endpoints = list(endpoints)
        if not self.endpoints:
            raise ValueError("no daemon endpoint given")
        self.tokenizer = tokenizer
        self.timeout = float(timeout)
        self.retries = int(retries)
        self._ctx = context or self._context_type()
        self._own_ctx = context is None
        self._sock_opts = dict(curve_server_key=curve_server_key,
                               curve_public_key=curve_public_key,
                               curve_secret_key=curve_secret_key,
                               heartbeat_ivl_ms=heartbeat_ivl_ms)
        self._socks = [self._connect(ep) for ep in self.endpoints]
        self._ids = itertools.count(1)
        self._streams = itertools.count(1)
        self._rr = itertools.count()
        self._closed = False
        self._frame_limit = None      # the smallest max_frame_bytes of the endpoints, once known
        self._pid = os.getpid()
        self._parents = []            # the parent's context and sockets, after a fork

    def _forked(self) -> bool:
        """After fork() in the child: new sockets (and context) of the child's own, the
        parent's left untouched (closing them here could hang); True if that happened.  A
        context given by the caller belongs to the parent: RuntimeError."""
        if self._pid == os.getpid():
            return False
        if not self._own_ctx:
            raise RuntimeError("this client was made before fork() with a ZeroMQ context of "
                               "the parent's, which the child cannot use: make the client, "
                               "and its context, in the child")
        self._parents.append((self._ctx, self._socks))
        self._ctx = self._context_type()
        self._socks = [self._connect(ep) for ep in self.endpoints]
        self._pid = os.getpid()
        return True

    def _learn_frame_limit(self, infos):
        """Keeps the smallest max_frame_bytes of the endpoints' info replies (None: that
        endpoint did not answer; if none did, the protocol's default is assumed)."""
        limits = [i.get("limits", {}).get("max_frame_bytes") for i in infos if i]
        limits = [n for n in limits if isinstance(n, int) and n > 0]
        self._frame_limit = min(limits) if limits else P.Limits().max_frame_bytes

    def _frame_error(self, n):
        """DaemonError(too_large) for a request frame of n bytes over the known limit."""
        if self._frame_limit is not None and n > self._frame_limit:
            return DaemonError(P.E_TOO_LARGE, f"the request is {n:,} bytes, over the "
                               f"daemon's max_frame_bytes ({self._frame_limit:,}), which would "
                               f"drop the connection: send a long document with "
                               f"encode_chunks(), many texts with stream() or in parts")
        return None

    def _connect(self, endpoint):
        s = self._ctx.socket(zmq.DEALER)
        configure_socket(s, **self._sock_opts)
        if endpoint.startswith("tcp://["):      # an IPv6 address: ZeroMQ's IPv4 default
            s.setsockopt(zmq.IPV6, 1)           # would not reach it
        s.connect(endpoint)
        return s


class Client(_ClientBase):
    """Blocking client.  endpoints: one endpoint string or a list (load is spread over them).

    timeout: seconds to wait for one attempt; retries: resends after a timeout (or a retryable
    error such as "busy").  CURVE: give curve_server_key (the daemon's public key, z85 or a
    certificate file) and optionally this client's keys (else a throwaway pair is made)."""

    def __init__(self, endpoints="tcp://127.0.0.1:5555", *, tokenizer=None, timeout=10.0,
                 retries=3, context=None, curve_server_key=None, curve_public_key=None,
                 curve_secret_key=None, heartbeat_ivl_ms=2000):
        super().__init__(endpoints, tokenizer=tokenizer, timeout=timeout, retries=retries,
                         context=context, curve_server_key=curve_server_key,
                         curve_public_key=curve_public_key, curve_secret_key=curve_secret_key,
                         heartbeat_ivl_ms=heartbeat_ivl_ms)
        self._poller = zmq.Poller()
        for s in self._socks:
            self._poller.register(s, zmq.POLLIN)
        self._pending = {}
        self._next_expiry_scan = 0.0
        self._done = {}
        self._pack = msgpack.Packer(use_bin_type=True).pack   # keeps its buffer between calls

    # -- lifecycle -----------------------------------------------------------------------------
    def close(self):
        """Closes the sockets (pending requests are abandoned).  Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        for s in self._socks:
            s.close(0)
        self._pending.clear()
        self._done.clear()
        if self._own_ctx:
            self._ctx.term()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- the request engine --------------------------------------------------------------------
    def submit(self, msg, ep=None):
        """Sends a request (a dict without "id"); returns its id.  ep pins an endpoint."""
        if self._closed:
            raise ValueError("the client is closed")
        if self._forked():            # a client made before fork(), used in the child: the
            self._poller = zmq.Poller()     # requests in flight were the parent's
            for sock in self._socks:
                self._poller.register(sock, zmq.POLLIN)
            self._pending.clear()
            self._done.clear()
        rid = next(self._ids)
        msg["id"] = rid
        packed = pack_request(self._pack, msg)
        if len(packed) > FRAME_CHECK_BYTES:
            if self._frame_limit is None:
                self._learn_frame_limit([self._info_or_none(k) for k in range(len(self._socks))])
            err = self._frame_error(len(packed))
            if err is not None:
                raise err
        pinned = ep is not None
        if ep is None:
            ep = next(self._rr) % len(self._socks)
        p = _Pending(packed, ep, 0.0, self.retries, pinned,
                     time.monotonic() + self.timeout * (self.retries + 1))
        self._pending[rid] = p
        self._send(rid, p)
        return rid

    def _send(self, rid, p):
        """Sends p on its endpoint (or, unpinned, on any that takes it) within the timeout."""
        n = len(self._socks)
        end = time.monotonic() + self.timeout
        order = [p.ep] if p.pinned else [(p.ep + i) % n for i in range(n)]
        while True:
            for ep in order:
                try:
                    self._socks[ep].send(p.packed, zmq.NOBLOCK)
                    p.ep = ep
                    p.deadline = time.monotonic() + self.timeout
                    p.sent = True
                    return
                except zmq.Again:
                    continue
            left = end - time.monotonic()
            if left <= 0:
                # not connected anywhere: count it as a timed-out attempt
                p.deadline = time.monotonic()
                p.why = "no connection to %s within %.3gs" % (
                    " or ".join(self.endpoints[ep] for ep in order), self.timeout)
                return
            self._await_writable(order, min(left, 0.05))

    def _await_writable(self, order, wait):
        """Waits up to `wait` seconds for a socket of `order` to take a message (its
        connection made: IMMEDIATE queues only to live ones), taking in replies meanwhile.
        Waiting for replies alone held a new client's first request ~50 ms."""
        poller = zmq.Poller()
        for k, s in enumerate(self._socks):
            poller.register(s, zmq.POLLIN | (zmq.POLLOUT if k in order else 0))
        ready = poller.poll(max(0, int(wait * 1000)))
        if any(ev & zmq.POLLIN for _, ev in ready):
            self._pump_once(0, resend=False)

    def _pump_once(self, wait, resend=True):
        """Receives whatever replies arrive within `wait` seconds; resends expired requests."""
        got = False
        for sock, _ in self._poller.poll(max(0, int(wait * 1000))):
            while sock.get(_EVENTS) & _POLLIN:     # no zmq.Again raised per call
                try:
                    raw = sock.recv(zmq.NOBLOCK, copy=False)   # a Frame: read in place
                except zmq.Again:  # pragma: no cover - EVENTS said ready
                    break
                self._on_reply(raw)
                got = True
        if not resend:
            return got
        now = time.monotonic()
        if now < self._next_expiry_scan:      # deadlines are seconds: look every few ms,
            return got                        # not at every reply of a deep window
        self._next_expiry_scan = now + 0.005
        for rid, p in list(self._pending.items()):
            if p.deadline <= now and rid not in self._done:
                why, p.why = p.why or "no reply within %.3gs" % self.timeout, None
                if p.free:
                    p.free = False
                    self._send(rid, p)
                else:
                    self._retry(rid, p, why)
        return got

    def _on_reply(self, raw):
        rep, rid = parse_reply(raw)
        p = self._pending.get(rid) if rid is not None else None
        if p is None or rid in self._done:
            return                                   # duplicate or abandoned: drop
        if rep.get("resent"):
            # the daemon had this chunk already: its own reply (with its ids) is on its way,
            # or was lost, and then the retries end in a timeout, never in missing ids
            return
        code = rep.get("code") if not rep.get("ok") else None
        now = time.monotonic()
        if code == P.E_BUSY and now + p.busy_wait < p.budget_end:
            p.free = True                            # see BUSY_WAIT_FIRST
        elif code in P.RETRYABLE and p.retries_left > 0:
            p.busy_wait = BUSY_WAIT_FIRST
        else:
            self._done[rid] = rep
            return
        # resent by the expiry scan after the pause, without holding up the other replies
        p.why = rep.get("message", "")
        p.deadline = now + p.busy_wait
        p.busy_wait = min(p.busy_wait * 2, BUSY_WAIT_MAX)
        self._next_expiry_scan = 0.0

    def _retry(self, rid, p, why):
        if p.retries_left <= 0:
            self._done[rid] = {"id": rid, "ok": False, "code": "timeout",
                               "message": f"{why} after {self.retries + 1} attempts"}
            return
        p.retries_left -= 1
        if not p.pinned:
            p.ep = (p.ep + 1) % len(self._socks)
        self._send(rid, p)

    def result(self, rid):
        """Waits for the reply of request rid; raises DaemonError for an error reply."""
        while rid not in self._done:
            if rid not in self._pending:
                raise KeyError(f"no request {rid} in flight")
            self._pump_once(0.05)
        rep = self._done.pop(rid)
        self._pending.pop(rid, None)
        if not rep.get("ok"):
            if rep.get("code") == "timeout":
                raise DaemonTimeout(rep.get("message", ""))
            raise DaemonError(rep.get("code", "?"), rep.get("message", ""))
        return rep

    def _unsent(self, rid) -> bool:
        """Whether request rid could not go out (no endpoint connected within the timeout).
        A window is not filled past such a request: each further send would wait a timeout
        of its own in turn (a stream of window 64 to a stopped daemon took 64 times as long
        to fail as one request)."""
        p = self._pending.get(rid)
        return p is not None and not p.sent

    def forget(self, rid):
        self._pending.pop(rid, None)
        self._done.pop(rid, None)

    def request(self, msg, ep=None):
        """Sends one request dict and returns its (ok) reply dict."""
        return self.result(self.submit(msg, ep))

    # -- operations ----------------------------------------------------------------------------
    def _msg(self, op, tokenizer, **kw):
        return request_msg(op, tokenizer if tokenizer is not None else self.tokenizer, **kw)

    def encode(self, text, *, tokenizer=None, allowed_special=None, disallowed_special=None,
               packed=False):
        """Token ids of text: a list of int, or with packed=True an array('I') of uint32
        (the reply's bytes as they came: no int per id; numpy.frombuffer reads it).  A lone
        surrogate is encoded as U+FFFD, as in-process (every call that sends text)."""
        rep = self.request(self._msg(P.OP_ENCODE, tokenizer, allowed_special=allowed_special,
                                     disallowed_special=disallowed_special, text=text,
                                     ids=P.IDS_BIN))
        return reply_ids(rep["ids"], packed)

    def encode_batch(self, texts, *, tokenizer=None, allowed_special=None,
                     disallowed_special=None, packed=False):
        """[encode(t) for t in texts] in one request (packed: as encode)."""
        rep = self.request(self._msg(P.OP_ENCODE_BATCH, tokenizer,
                                     allowed_special=allowed_special,
                                     disallowed_special=disallowed_special,
                                     texts=utf8_bins(texts), ids=P.IDS_BIN))
        return [reply_ids(x, packed) for x in rep["ids"]]

    def decode(self, ids, *, tokenizer=None):
        return self.request(self._msg(P.OP_DECODE, tokenizer, ids=ids_bin(ids)))["text"]

    def decode_bytes(self, ids, *, tokenizer=None):
        return self.request(self._msg(P.OP_DECODE, tokenizer, ids=ids_bin(ids),
                                      bytes=True))["data"]

    def count(self, text, *, limit=None, tokenizer=None, allowed_special=None,
              disallowed_special=None):
        """Number of tokens.  With a limit the daemon may stop early once the count passes
        it: then the result is > limit but may be only a lower bound of the true count."""
        fields = {"text": text}
        if limit is not None:
            fields["limit"] = limit
        rep = self.request(self._msg(P.OP_COUNT, tokenizer, allowed_special=allowed_special,
                                     disallowed_special=disallowed_special, **fields))
        return rep["count"]

    def info(self):
        return self.request({"op": P.OP_INFO})

    def _info_or_none(self, ep):
        try:
            return self.request({"op": P.OP_INFO}, ep)
        except DaemonError:
            return None

    def health(self):
        return self.request({"op": P.OP_HEALTH})

    def stats(self):
        return self.request({"op": P.OP_STATS})

    def stream(self, texts, window=64, *, batch=None, tokenizer=None, allowed_special=None,
               disallowed_special=None, packed=False):
        """Encodes every text of an iterable with up to `window` requests in flight; yields
        the ids in input order (packed=True: arrays of uint32, as encode).

        batch: texts per request.  The default (None) groups up to STREAM_AUTO_TEXTS (64)
        consecutive texts of at most STREAM_AUTO_CHARS characters in all per request, which
        is several times the throughput of one text per request (bench_daemon.py).  A group is
        sent once it is full, so a text that arrives from a slow iterator waits for the
        texts after it: pass batch=1 to send each text as soon as it arrives.  An int k sends
        up to k texts (and STREAM_BATCH_CHARS characters) per request.

        Errors: a text the daemon refuses (PER_TEXT_ERRORS) raises DaemonError when that text
        is reached, after the ids of every text before it, whatever the batch (a grouped
        request that fails so is sent again text by text), naming it texts[i] by its index in
        the stream.  Any other error (a timeout, an
        unknown tokenizer) raises when its request's first text is reached."""
        if window < 1:
            raise ValueError("window must be at least 1")
        per_request, max_chars = stream_grouping(batch)
        op = P.OP_ENCODE if per_request == 1 else P.OP_ENCODE_BATCH
        opts = dict(tokenizer=tokenizer, allowed_special=allowed_special,
                    disallowed_special=disallowed_special)
        base = self._msg(op, ids=P.IDS_BIN, **opts)
        groups = text_groups(texts, per_request, max_chars)
        inflight = collections.deque()     # (request id, its texts, index of the first)
        exhausted = False
        start = 0
        try:
            while True:
                while not exhausted and len(inflight) < window:
                    group = next(groups, None)
                    if group is None:
                        exhausted = True
                        break
                    rid = self.submit(group_request(base, group, per_request))
                    inflight.append((rid, group, start))
                    start += len(group)
                    if self._unsent(rid):
                        break
                if not inflight:
                    return
                rid, group, first = inflight[0]
                try:
                    rep = self.result(rid)
                except DaemonError as exc:
                    if per_request == 1:
                        raise text_error(exc, first) from None
                    if not falls_back_per_text(exc, per_request):
                        raise
                    inflight.popleft()
                    yield from self._encode_each(group, first, packed, opts)
                    continue
                inflight.popleft()
                yield from group_ids(rep, per_request, packed)
        finally:
            for rid, _, _ in inflight:
                self.forget(rid)

    def _encode_each(self, group, first, packed, opts):
        """Yields the ids of each text of a stream group (texts[first], ...) encoded alone:
        the failing text raises its own error, naming its index (text_error)."""
        for k, text in enumerate(group, first):
            try:
                ids = self.encode(text, packed=packed, **opts)
            except DaemonError as exc:
                raise text_error(exc, k) from None
            yield ids

    def encode_chunks(self, chunks, *, window=16, tokenizer=None, allowed_special=None,
                      disallowed_special=None):
        """Encodes ONE document sent as a sequence of chunks (bytes or str; a boundary may fall
        anywhere, even inside a UTF-8 character or between the two halves of a surrogate
        pair); returns the ids of the whole document."""
        ep = next(self._rr) % len(self._socks)          # a stream stays on one daemon
        sid = next(self._streams)
        opts = self._msg(P.OP_CHUNK, tokenizer, allowed_special=allowed_special,
                         disallowed_special=disallowed_special, ids=P.IDS_BIN)
        it = pairs_kept_whole(chunks)
        inflight = collections.deque()
        out = []
        seq = 0
        try:
            nxt = next(it, None)
            while nxt is not None or inflight:
                while nxt is not None and len(inflight) < window:
                    data, nxt = nxt, next(it, None)
                    msg = dict(opts) if seq == 0 else {"op": P.OP_CHUNK}
                    msg.update(stream=sid, seq=seq, final=nxt is None, data=chunk_data(data))
                    inflight.append(self.submit(msg, ep))
                    seq += 1
                    if self._unsent(inflight[-1]):
                        break
                rep = self.result(inflight[0])
                inflight.popleft()
                out += reply_ids(rep.get("ids", b""))
            return out
        except BaseException:
            for rid in inflight:
                self.forget(rid)
            try:
                if seq:     # sent once, no reply awaited nor resent (to a daemon gone,
                    #             resending it held up this client's next request)
                    self.forget(self.submit({"op": P.OP_STREAM_ABORT, "stream": sid}, ep))
            except Exception:
                pass
            raise


# replies can be as large as the daemon's frames allow; these bounds only stop garbage
_CLIENT_LIMITS = P.Limits(max_frame_bytes=1 << 31, max_decode_ids=1 << 24,
                          max_batch_texts=1 << 24)
_CLIENT_UNPACK = P.unpack_limits(_CLIENT_LIMITS)
