"""asyncio client of the bpe_cffi daemon (zmq.asyncio; one DEALER per endpoint).

One reader task per socket resolves the future of each reply's id; replies for ids nobody
awaits (duplicates after a resend, abandoned requests) are dropped.  Each attempt waits
`timeout` seconds, then the request is resent (to the next endpoint when there are several),
`retries` times at most, then DaemonTimeout is raised.  Use it from one event loop.
"""
import asyncio
import collections
import os

import zmq
import zmq.asyncio

from . import protocol as P
from .client import (BUSY_WAIT_FIRST, BUSY_WAIT_MAX, FRAME_CHECK_BYTES, DaemonError,
                     DaemonTimeout, _ClientBase, chunk_data, falls_back_per_text, group_ids,
                     group_request, ids_bin, pack_request, pairs_kept_whole, parse_reply,
                     reply_ids, request_msg, stream_grouping, text_error, text_size,
                     utf8_bins)


async def _wait(fut, delay):
    """await fut for at most delay seconds (asyncio.TimeoutError after), a cancellation of the
    caller always propagating.  Not asyncio.wait_for: before 3.12 it returns a result that
    lands together with a cancellation of the caller and drops the cancellation (the
    caller's own wait_for / cancel is then ignored).  asyncio.timeout on 3.11+; before,
    asyncio.wait, which never swallows the caller's cancellation."""
    if hasattr(asyncio, "timeout"):
        async with asyncio.timeout(delay):
            return await fut
    fut = asyncio.ensure_future(fut)
    try:
        done, _ = await asyncio.wait({fut}, timeout=delay)
    except asyncio.CancelledError:
        fut.cancel()
        raise
    if not done:
        fut.cancel()
        raise asyncio.TimeoutError
    return fut.result()


class AsyncClient(_ClientBase):
    """Same operations as Client, as coroutines; `stream` is an async generator."""

    _context_type = zmq.asyncio.Context

    def __init__(self, endpoints="tcp://127.0.0.1:5555", *, tokenizer=None, timeout=10.0,
                 retries=3, context=None, curve_server_key=None, curve_public_key=None,
                 curve_secret_key=None, heartbeat_ivl_ms=2000):
        super().__init__(endpoints, tokenizer=tokenizer, timeout=timeout, retries=retries,
                         context=context, curve_server_key=curve_server_key,
                         curve_public_key=curve_public_key, curve_secret_key=curve_secret_key,
                         heartbeat_ivl_ms=heartbeat_ivl_ms)
        self._futures = {}
        self._readers = None
        self._loop = None         # the event loop of its readers (the first used)

    def _ensure_readers(self):
        loop = asyncio.get_running_loop()
        if self._readers is None:
            self._loop = loop
            self._readers = [asyncio.ensure_future(self._reader(s)) for s in self._socks]
        elif loop is not self._loop:
            # its readers run on the first loop: from another one no reply would arrive,
            # and every request would end in a timeout that says nothing of why
            raise RuntimeError("this AsyncClient was first used in another event loop "
                               "(asyncio.run closes its loop): make an AsyncClient per loop")

    async def _reader(self, sock):
        while True:
            try:
                raw = await sock.recv()
            except (zmq.ZMQError, asyncio.CancelledError):
                return
            rep, rid = parse_reply(raw)
            if rep is None or rep.get("resent"):
                # unreadable (answers nothing of ours: dropped, as Client drops it; reading
                # .get of None here ended this reader, and every later request timed out),
                # or a resend's: the chunk's own reply is on its way (or lost: a timeout)
                continue
            fut = self._futures.get(rid) if rid is not None else None
            if fut is not None and not fut.done():
                fut.set_result(rep)

    # -- lifecycle -----------------------------------------------------------------------------
    async def close(self):
        """Cancels the readers and closes the sockets.  Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._readers:
            for t in self._readers:
                t.cancel()
            await asyncio.gather(*self._readers, return_exceptions=True)
        for s in self._socks:
            s.close(0)
        for f in self._futures.values():
            if not f.done():
                f.cancel()
        self._futures.clear()
        if self._own_ctx:
            self._ctx.term()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    # -- the request engine --------------------------------------------------------------------
    async def request(self, msg, ep=None):
        """Sends one request dict (without "id"); returns the ok reply dict or raises."""
        if self._closed:
            raise ValueError("the client is closed")
        if self._pid != os.getpid():
            raise RuntimeError("this AsyncClient was made before fork(): its sockets and "
                               "event loop are the parent's; make one in the child")
        self._ensure_readers()
        rid = next(self._ids)
        msg["id"] = rid
        packed = pack_request(P.packb, msg)
        if len(packed) > FRAME_CHECK_BYTES:
            if self._frame_limit is None:
                self._learn_frame_limit([await self._info_or_none(k)
                                         for k in range(len(self._socks))])
            err = self._frame_error(len(packed))
            if err is not None:
                raise err
        pinned = ep is not None
        if ep is None:
            ep = next(self._rr) % len(self._socks)
        loop = asyncio.get_running_loop()
        budget_end = loop.time() + self.timeout * (self.retries + 1)
        busy_wait = BUSY_WAIT_FIRST
        attempt = 0
        try:
            # one future for every attempt until a reply comes: a reply that lands just as an
            # attempt times out is still taken (a chunk's reply cannot be had again: its
            # resend is answered `resent`)
            fut = self._futures[rid] = loop.create_future()
            while True:
                if not fut.done():
                    if attempt > self.retries:
                        raise DaemonTimeout(f"no reply within {self.timeout:.3g}s after "
                                            f"{self.retries + 1} attempts")
                    ep = await self._send_within(packed, ep, pinned, self.timeout, fut)
                    if not fut.done():
                        attempt += 1
                        if not pinned:
                            ep = (ep + 1) % len(self._socks)
                        continue
                rep = fut.result()
                if rep.get("ok"):
                    return rep
                code = rep.get("code")
                fut = self._futures[rid] = loop.create_future()     # for the next reply
                if code == P.E_BUSY and loop.time() + busy_wait < budget_end:
                    await asyncio.sleep(busy_wait)          # flow control: not an attempt
                    busy_wait = min(busy_wait * 2, BUSY_WAIT_MAX)
                    continue
                if code not in P.RETRYABLE or attempt >= self.retries:
                    raise DaemonError(code or "?", rep.get("message", ""))
                await asyncio.sleep(BUSY_WAIT_FIRST)
                attempt += 1
                if not pinned:
                    ep = (ep + 1) % len(self._socks)
        finally:
            self._futures.pop(rid, None)

    async def _send_within(self, packed, ep, pinned, timeout, fut):
        """Sends packed on endpoint ep (or, unpinned, on any that takes it), then waits for fut
        (left pending on a timeout), all within `timeout` seconds; returns the endpoint used."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        order = [ep] if pinned else [(ep + i) % len(self._socks) for i in range(len(self._socks))]
        pause = 0.001
        while loop.time() < end and not fut.done():
            for e in order:
                try:   # zmq.asyncio reports EAGAIN through the returned future
                    await self._socks[e].send(packed, zmq.NOBLOCK)
                except zmq.Again:
                    continue
                try:
                    await _wait(asyncio.shield(fut), max(0.0, end - loop.time()))
                except asyncio.TimeoutError:
                    pass
                return e
            # no connection made yet (IMMEDIATE queues nothing before): try again soon, the
            # pause doubling from 1 ms (a new client's connection takes ~1 ms on loopback).
            # Not a zmq.asyncio poll for POLLOUT: its event stays queued on the socket when
            # it times out, and a NOBLOCK send queued behind it would wait for ever.
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.01)
        return ep

    def _msg(self, op, tokenizer, **kw):
        return request_msg(op, tokenizer if tokenizer is not None else self.tokenizer, **kw)

    # -- operations ----------------------------------------------------------------------------
    async def encode(self, text, *, tokenizer=None, allowed_special=None,
                     disallowed_special=None, packed=False):
        """As Client.encode (packed=True: an array('I') of uint32)."""
        rep = await self.request(self._msg(P.OP_ENCODE, tokenizer,
                                           allowed_special=allowed_special,
                                           disallowed_special=disallowed_special, text=text,
                                           ids=P.IDS_BIN))
        return reply_ids(rep["ids"], packed)

    async def encode_batch(self, texts, *, tokenizer=None, allowed_special=None,
                           disallowed_special=None, packed=False):
        rep = await self.request(self._msg(P.OP_ENCODE_BATCH, tokenizer,
                                           allowed_special=allowed_special,
                                           disallowed_special=disallowed_special,
                                           texts=utf8_bins(texts), ids=P.IDS_BIN))
        return [reply_ids(x, packed) for x in rep["ids"]]

    async def decode(self, ids, *, tokenizer=None):
        rep = await self.request(self._msg(P.OP_DECODE, tokenizer, ids=ids_bin(ids)))
        return rep["text"]

    async def decode_bytes(self, ids, *, tokenizer=None):
        rep = await self.request(self._msg(P.OP_DECODE, tokenizer, ids=ids_bin(ids),
                                           bytes=True))
        return rep["data"]

    async def count(self, text, *, limit=None, tokenizer=None, allowed_special=None,
                    disallowed_special=None):
        fields = {"text": text}
        if limit is not None:
            fields["limit"] = limit
        rep = await self.request(self._msg(P.OP_COUNT, tokenizer,
                                           allowed_special=allowed_special,
                                           disallowed_special=disallowed_special, **fields))
        return rep["count"]

    async def info(self):
        return await self.request({"op": P.OP_INFO})

    async def _info_or_none(self, ep):
        try:
            return await self.request({"op": P.OP_INFO}, ep)
        except DaemonError:
            return None

    async def health(self):
        return await self.request({"op": P.OP_HEALTH})

    async def stats(self):
        return await self.request({"op": P.OP_STATS})

    async def stream(self, texts, window=64, *, batch=None, tokenizer=None,
                     allowed_special=None, disallowed_special=None, packed=False):
        """Async generator: encodes texts (an iterable or async iterable) with up to `window`
        requests in flight and yields the ids in input order.  batch (None: up to 64 texts
        per request), packed and the errors: as Client.stream."""
        if window < 1:
            raise ValueError("window must be at least 1")
        per_request, max_chars = stream_grouping(batch)
        op = P.OP_ENCODE if per_request == 1 else P.OP_ENCODE_BATCH
        opts = dict(tokenizer=tokenizer, allowed_special=allowed_special,
                    disallowed_special=disallowed_special)
        base = self._msg(op, ids=P.IDS_BIN, **opts)
        if hasattr(texts, "__aiter__"):
            ait = texts.__aiter__()

            async def next_text():
                try:
                    return True, await ait.__anext__()
                except StopAsyncIteration:
                    return False, None
        else:
            it = iter(texts)

            async def next_text():
                for t in it:
                    return True, t
                return False, None

        async def next_group():
            """(more, [texts]): up to per_request texts and max_chars characters."""
            group, size = [], 0
            while len(group) < per_request:
                if pending:
                    text = pending.pop()
                else:
                    more, text = await next_text()
                    if not more:
                        return bool(group), group
                n = text_size(text)
                if group and size + n > max_chars:
                    pending.append(text)       # starts the next group
                    break
                group.append(text)
                size += n
            return True, group

        async def one(group, first):
            """(the ids of the group's texts, None), or (the ids of the texts before the
            failing one, its error) when the group was sent again text by text.  first: the
            index of the group's first text in the stream, which a text's error names
            (text_error)."""
            try:
                rep = await self.request(group_request(base, group, per_request))
            except DaemonError as exc:
                if per_request == 1:
                    raise text_error(exc, first) from None
                if not falls_back_per_text(exc, per_request):
                    raise
                done = []
                for k, text in enumerate(group, first):
                    try:
                        done.append(await self.encode(text, packed=packed, **opts))
                    except DaemonError as one_exc:
                        return done, text_error(one_exc, k)
                return done, None
            return group_ids(rep, per_request, packed), None

        pending = []
        tasks = collections.deque()
        more = True
        start = 0
        try:
            while True:
                while more and len(tasks) < window:
                    more, group = await next_group()
                    if more:
                        tasks.append(asyncio.ensure_future(one(group, start)))
                        start += len(group)
                if not tasks:
                    return
                results, failed = await tasks[0]
                tasks.popleft()
                for ids in results:
                    yield ids
                if failed is not None:
                    raise failed
        finally:
            for t in tasks:
                t.cancel()
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)

    async def encode_chunks(self, chunks, *, window=16, tokenizer=None, allowed_special=None,
                            disallowed_special=None):
        """Encodes ONE document sent as numbered chunks (bytes or str, split anywhere)."""
        ep = next(self._rr) % len(self._socks)
        sid = next(self._streams)
        opts = self._msg(P.OP_CHUNK, tokenizer, allowed_special=allowed_special,
                         disallowed_special=disallowed_special, ids=P.IDS_BIN)
        chunks = list(pairs_kept_whole(chunks))
        tasks = collections.deque()
        out = []
        try:
            for seq, data in enumerate(chunks):
                msg = dict(opts) if seq == 0 else {"op": P.OP_CHUNK}
                msg.update(stream=sid, seq=seq, final=seq == len(chunks) - 1,
                           data=chunk_data(data))
                tasks.append(asyncio.ensure_future(self.request(msg, ep)))
                while len(tasks) >= window:
                    out += reply_ids((await tasks.popleft()).get("ids", b""))
            while tasks:
                out += reply_ids((await tasks.popleft()).get("ids", b""))
            return out
        except BaseException:
            for t in tasks:
                t.cancel()
            if chunks:      # as Client does: the daemon drops the stream at once
                self._send_abort(sid, ep)
            raise

    def _send_abort(self, sid, ep):
        """Sends stream_abort without waiting for its reply (this may run while the caller is
        being cancelled); a failure to send is ignored, the daemon drops the stream when it
        has been idle too long."""
        try:
            sent = self._socks[ep].send(P.packb({"op": P.OP_STREAM_ABORT, "id": next(self._ids),
                                                 "stream": sid}), zmq.NOBLOCK)
        except (zmq.ZMQError, ValueError):
            return
        if isinstance(sent, asyncio.Future):
            sent.add_done_callback(lambda f: f.cancelled() or f.exception())
