"""The daemon against a REAL daemon process: every reply is compared with the in-process
encode of the same text by the same tokenizer files."""
import asyncio
import os
import random
import threading
import time

import msgpack
import pytest
import zmq

from test_daemon_support import LONG, Daemon, corpus_texts, in_process_loader, vocab_file

from bpe_cffi.daemon import AsyncClient, Client, DaemonError, DaemonTimeout
from bpe_cffi.daemon import protocol as P
from bpe_cffi.daemon.server import Handler


@pytest.fixture(scope="module")
def paths():
    return {"cl100k": vocab_file("cl100k_base.tiktoken"), "gpt2": vocab_file("gpt2_vocab.json")}


@pytest.fixture(scope="module")
def refs(paths):
    load = in_process_loader()
    return {name: load(str(p)) for name, p in paths.items()}


@pytest.fixture(scope="module")
def daemon(paths):
    d = Daemon(paths, workers=2)
    yield d
    d.stop()
    err = d.stderr_text()
    assert "Traceback" not in err and "worker error" not in err, err[-3000:]


@pytest.fixture(scope="module")
def texts():
    return corpus_texts(300, seed=1)


def raw_socket(endpoint, ctx=None):
    ctx = ctx or zmq.Context.instance()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(endpoint)
    return s


def recv_reply(sock, timeout=10.0):
    assert sock.poll(int(timeout * 1000)), "no reply from the daemon"
    return msgpack.unpackb(sock.recv(), raw=False)


def test_info_matches_tokenizers(daemon, refs):
    with Client(daemon.endpoint, timeout=10) as c:
        info = c.info()
        assert info["protocol"] == P.PROTOCOL_VERSION
        assert info["default"] == "cl100k"
        for name, tok in refs.items():
            t = info["tokenizers"][name]
            assert t["n_vocab"] == tok.n_vocab
            assert t["special_tokens"] == dict(tok.special_tokens)
        assert c.health()["status"] == "ok"


def test_encode_matches_in_process(daemon, refs, texts):
    with Client(daemon.endpoint, timeout=10) as c:
        for name, tok in refs.items():
            for t in texts[:60]:
                assert c.encode(t, tokenizer=name) == tok.encode(t)
        t = "héllo <|endoftext|> wörld 🎉 " * 3
        assert c.encode(t) == refs["cl100k"].encode(t)
        assert c.encode("") == []


def test_ids_formats_and_bin_text(daemon, refs):
    tok = refs["cl100k"]
    s = raw_socket(daemon.endpoint)
    try:
        text = "Ids as a list or as packed uint32 — ünïcödé 12345"
        s.send(P.packb({"op": "encode", "id": 1, "text": text, "ids": "list"}))
        rep = recv_reply(s)
        assert rep["ok"] and rep["ids"] == tok.encode(text) and rep["n"] == len(rep["ids"])
        s.send(P.packb({"op": "encode", "id": "two", "text": text.encode(), "ids": "bin"}))
        rep = recv_reply(s)
        assert rep["id"] == "two" and P.bin_to_ids(rep["ids"]) == tok.encode(text)
        s.send(P.packb({"op": "encode", "id": 3, "text": text}))        # default: list
        assert recv_reply(s)["ids"] == tok.encode(text)
    finally:
        s.close()


def test_encode_batch_of_bins_matches_in_process(daemon, refs, texts):
    """encode_batch with texts as UTF-8 bin (what the Python client sends: checked and
    joined in C), as str, or both; replies with more than 15 texts and a text of more than
    16384 ids (every msgpack header width of the reply the daemon packs itself)."""
    tok = refs["cl100k"]
    long_text = " ".join(texts)[:200_000]
    batch = texts[:20] + [long_text, "", "héllo <|endoftext|> 🎉"]
    assert len(tok.encode(long_text)) > 16384
    s = raw_socket(daemon.endpoint)
    try:
        for rid, sent in enumerate([[t.encode() for t in batch], batch,
                                    [t.encode() if i % 2 else t for i, t in enumerate(batch)]]):
            s.send(P.packb({"op": "encode_batch", "id": rid, "texts": sent, "ids": "bin"}))
            rep = recv_reply(s)
            assert rep["ok"] and rep["id"] == rid, rep
            assert [P.bin_to_ids(b) for b in rep["ids"]] == [tok.encode(t) for t in batch]
            assert rep["n"] == [len(tok.encode(t)) for t in batch]
            s.send(P.packb({"op": "encode_batch", "id": rid, "texts": sent}))    # as lists
            assert recv_reply(s)["ids"] == [tok.encode(t) for t in batch]
        bad = [t.encode() for t in batch[:5]]
        for wrong in (b"\xed\xa0\x80", b"ab\xe2\x82", b"\xf4\x90\x80\x80", b"\xff"):
            bad[3] = wrong
            s.send(P.packb({"op": "encode_batch", "id": 9, "texts": bad, "ids": "bin"}))
            rep = recv_reply(s)
            assert not rep["ok"] and rep["code"] == P.E_BAD_UTF8 and rep["id"] == 9, rep
            assert "texts[3]" in rep["message"]
    finally:
        s.close()


def test_requests_handed_over_together_get_their_own_replies(refs, texts):
    """Handler.handle_many (a worker's batch of requests): plain encode_batch requests of
    one tokenizer are encoded by one C call, the rest one by one; every request gets exactly
    its own reply, and a bad text fails only its own request."""
    from bpe_cffi.daemon.server import Server
    server = Server(refs, bind="tcp://127.0.0.1:0", workers=1, context=zmq.Context.instance())
    h = server.handler
    t = texts[:12] + ["", "héllo <|endoftext|> 🎉"]
    jobs, want = [], {}

    def add(fields, expect):
        ident = b"c%d" % len(jobs)
        fields.setdefault("id", len(jobs))
        jobs.append((ident, b"\x00", P.packb(fields)))
        want[ident] = (fields["id"], expect)

    def batch(name, items):
        return [refs[name].encode(x) for x in items]

    add({"op": "encode_batch", "texts": [x.encode() for x in t[:5]], "ids": "bin"},
        batch("cl100k", t[:5]))
    add({"op": "encode_batch", "texts": [x.encode() for x in t[5:]], "ids": "bin"},
        batch("cl100k", t[5:]))
    add({"op": "encode_batch", "texts": [], "ids": "bin", "id": "empty"}, [])
    add({"op": "encode_batch", "texts": [x.encode() for x in t[2:9]], "ids": "bin",
         "tokenizer": "gpt2"}, batch("gpt2", t[2:9]))
    add({"op": "encode_batch", "texts": t[:3], "ids": "bin"}, batch("cl100k", t[:3]))
    add({"op": "encode_batch", "texts": [x.encode() for x in t[:3]]}, batch("cl100k", t[:3]))
    add({"op": "encode_batch", "texts": [b"<|endoftext|>"], "ids": "bin",
         "allowed_special": "none"}, [refs["cl100k"].encode("<|endoftext|>",
                                                             allowed_special=set())])
    add({"op": "encode", "text": t[0], "ids": "bin"}, refs["cl100k"].encode(t[0]))
    add({"op": "fly"}, P.E_UNKNOWN_OP)
    jobs.append((b"junk", b"\x00", b"\xc1"))
    want[b"junk"] = (None, P.E_BAD_MSGPACK)
    for rounds in range(2):
        replies = h.handle_many(jobs)
        assert sorted(r[0] for r in replies) == sorted(want)
        for ident, flag, raw in replies:
            rep = msgpack.unpackb(raw)
            rid, expect = want[ident]
            assert flag == b"\x00" and rep["id"] == rid
            if isinstance(expect, str):
                assert rep["ok"] is False and rep["code"] == expect
                continue
            assert rep["ok"] is True, rep
            ids = rep["ids"]
            if isinstance(ids, bytes):
                ids = P.bin_to_ids(ids)
            elif ids and isinstance(ids[0], bytes):
                ids = [P.bin_to_ids(x) for x in ids]
            assert ids == expect
        # a text that is not UTF-8 in one plain request: only that one fails
        bad = (b"bad", b"\x00", P.packb({"op": "encode_batch", "id": "bad", "ids": "bin",
                                          "texts": [b"ok", b"\xed\xa0\x80"]}))
        jobs.append(bad)
        want[b"bad"] = ("bad", P.E_BAD_UTF8)


def test_batch_decode_count(daemon, refs, texts):
    tok = refs["gpt2"]
    with Client(daemon.endpoint, timeout=10, tokenizer="gpt2") as c:
        batch = texts[:40]
        assert c.encode_batch(batch) == [tok.encode(t) for t in batch]
        assert c.encode_batch([]) == []
        edge = ["", "a<|endoftext|>b", "", "<|endoftext|>", " x  \n"]   # one C call for all
        assert c.encode_batch(edge) == [tok.encode(t) for t in edge]
        many = texts[:150]                      # a big batch: the tokenizer's encode_batch
        assert c.encode_batch(many) == [tok.encode(t) for t in many]
        for t in batch[:10]:
            ids = tok.encode(t)
            assert c.decode(ids) == tok.decode(ids)
            assert c.decode_bytes(ids) == tok.decode_bytes(ids)
            assert c.count(t) == len(ids)
            assert c.count(t, limit=len(ids)) == len(ids)
            if ids:
                assert c.count(t, limit=len(ids) - 1) > len(ids) - 1
        big = " ".join(texts)
        n = len(tok.encode(big))
        assert c.count(big) == n
        assert c.count(big, limit=10) > 10


def test_count_limit_reply_fields(daemon, refs):
    tok = refs["cl100k"]
    text = "word " * 5000
    n = len(tok.encode(text))
    s = raw_socket(daemon.endpoint)
    try:
        s.send(P.packb({"op": "count", "id": 1, "text": text, "limit": n}))
        rep = recv_reply(s)
        assert rep["ok"] and rep["count"] == n and rep["exceeded"] is False
        s.send(P.packb({"op": "count", "id": 2, "text": text, "limit": 3}))
        rep = recv_reply(s)
        assert rep["ok"] and rep["exceeded"] is True and 3 < rep["count"] <= n
    finally:
        s.close()


def test_special_token_options(daemon, refs):
    tok = refs["cl100k"]
    eot = tok.special_tokens["<|endoftext|>"]
    text = "a<|endoftext|>b<|fim_prefix|>c"
    with Client(daemon.endpoint, timeout=10) as c:
        assert c.encode(text) == tok.encode(text)
        assert eot in c.encode(text)
        plain = c.encode(text, allowed_special="none")
        assert plain == tok.encode(text, allowed_special=set()) and eot not in plain
        only = c.encode(text, allowed_special=["<|endoftext|>"])
        assert only == tok.encode(text, allowed_special={"<|endoftext|>"})
        with pytest.raises(DaemonError) as ei:
            c.encode(text, allowed_special="none", disallowed_special="all")
        assert ei.value.code == P.E_DISALLOWED
        # in the protocol's terms, naming the token (not tiktoken's Python advice)
        assert "'<|endoftext|>'" in ei.value.message and '"allowed_special"' in \
            ei.value.message and "enc.special_tokens_set" not in ei.value.message
        with pytest.raises(DaemonError, match=r"the special token '<\|endoftext\|>'"):
            c.encode_chunks(["a <|endo", "ftext|> b"], allowed_special="none",
                            disallowed_special="all")
        with pytest.raises(DaemonError) as ei:
            c.encode_batch(["ok", text], allowed_special="none", disallowed_special="all")
        assert ei.value.code == P.E_DISALLOWED
        with pytest.raises(DaemonError) as ei:
            c.encode(text, allowed_special=["<|nope|>"])
        assert ei.value.code == P.E_BAD_REQUEST
        with pytest.raises(DaemonError) as ei:
            c.encode("x", tokenizer="nope")
        assert ei.value.code == P.E_UNKNOWN_TOKENIZER
        with pytest.raises(DaemonError) as ei:
            c.decode([tok.n_vocab + 10_000_000])
        assert ei.value.code == P.E_BAD_ID


def test_out_of_order_pipelining(daemon, refs, texts):
    """Many requests in flight at once; replies matched by id, whatever their order."""
    tok = refs["cl100k"]
    s = raw_socket(daemon.endpoint)
    rng = random.Random(5)
    try:
        sent = {}
        for i in range(150):
            t = rng.choice(texts) * rng.choice([1, 1, 1, 20])   # mixed sizes
            sent[i] = t
            s.send(P.packb({"op": "encode", "id": i, "text": t, "ids": "bin"}))
        order = []
        while len(order) < len(sent):
            rep = recv_reply(s)
            assert rep["ok"], rep
            assert P.bin_to_ids(rep["ids"]) == tok.encode(sent[rep["id"]])
            order.append(rep["id"])
        assert sorted(order) == sorted(sent)
    finally:
        s.close()


def _split_everywhere(data, rng, n):
    cuts = sorted(rng.sample(range(1, len(data)), min(n, len(data) - 1)))
    return [data[a:b] for a, b in zip([0] + cuts, cuts + [len(data)])]


def test_chunked_document_equals_whole(daemon, refs, texts):
    """A document sent as chunks cut anywhere (inside UTF-8 characters, pieces and special
    tokens) and delivered out of order encodes exactly as the whole document."""
    tok = refs["cl100k"]
    rng = random.Random(7)
    doc = ("<|endoftext|>".join(texts[:80]) + " ünï🎉<|fim_middle|>").encode()
    chunks = _split_everywhere(doc, rng, 150)
    # cuts inside a special token and inside a 4-byte character, on purpose
    k = doc.index(b"<|fim_middle|>") + 5
    j = doc.index("🎉".encode()) + 2
    cuts = sorted(set([0, j, k, len(doc)] + list(range(0, len(doc), 997))))
    chunks2 = [doc[a:b] for a, b in zip(cuts, cuts[1:])]
    expect = tok.encode(doc.decode())
    with Client(daemon.endpoint, timeout=10) as c:
        assert c.encode_chunks(chunks) == expect
        assert c.encode_chunks(chunks2, window=4) == expect
        assert c.encode_chunks([doc]) == expect
        assert c.encode_chunks([]) == []
    s = raw_socket(daemon.endpoint)
    try:
        order = list(range(len(chunks)))
        rng.shuffle(order)
        for seq in order:
            msg = {"op": "chunk", "id": 1000 + seq, "stream": "doc-1", "seq": seq,
                   "final": seq == len(chunks) - 1, "data": chunks[seq]}
            if seq == 0:
                msg["ids"] = "bin"
            s.send(P.packb(msg))
        replies = {}
        while len(replies) < len(chunks):
            rep = recv_reply(s)
            assert rep["ok"], rep
            replies[rep["id"] - 1000] = rep
        ids = []
        for seq in range(len(chunks)):
            ids += P.bin_to_ids(replies[seq]["ids"]) if isinstance(
                replies[seq]["ids"], bytes) else replies[seq]["ids"]
        assert replies[len(chunks) - 1]["final"] is True
        assert ids == expect
    finally:
        s.close()


def test_stream_errors(daemon):
    s = raw_socket(daemon.endpoint)
    try:
        # bad UTF-8: an error on the chunk where it is seen; the stream is then dead
        s.send(P.packb({"op": "chunk", "id": 1, "stream": 9, "seq": 0, "data": b"ok \xff"}))
        rep = recv_reply(s)
        assert not rep["ok"] and rep["code"] == P.E_BAD_UTF8 and rep["id"] == 1
        s.send(P.packb({"op": "chunk", "id": 2, "stream": 9, "seq": 1, "data": b"x",
                        "final": True}))
        rep = recv_reply(s)
        assert not rep["ok"] and rep["code"] == P.E_BAD_UTF8 and rep["id"] == 2
        # a character cut at the very end of the document
        s.send(P.packb({"op": "chunk", "id": 7, "stream": 12, "seq": 0, "data": b"ab\xe2\x82"}))
        assert recv_reply(s)["ok"]
        s.send(P.packb({"op": "chunk", "id": 8, "stream": 12, "seq": 1, "data": b"",
                        "final": True}))
        rep = recv_reply(s)
        assert not rep["ok"] and rep["code"] == P.E_BAD_UTF8 and rep["id"] == 8
        # a chunk past the final one
        s.send(P.packb({"op": "chunk", "id": 3, "stream": 10, "seq": 1, "data": b"b",
                        "final": True}))
        s.send(P.packb({"op": "chunk", "id": 4, "stream": 10, "seq": 2, "data": b"c"}))
        got = {}
        while len(got) < 2:
            rep = recv_reply(s)
            got[rep["id"]] = rep
        # whichever a worker sees first, the final chunk fails (a chunk after it exists)
        assert got[3]["code"] == P.E_STREAM
        assert got[4].get("code") == P.E_STREAM or (got[4]["ok"] and got[4]["ids"] == [])
        # abort frees the state and answers a waiting final chunk
        s.send(P.packb({"op": "chunk", "id": 5, "stream": 11, "seq": 3, "data": b"d",
                        "final": True}))
        s.send(P.packb({"op": "stream_abort", "id": 6, "stream": 11}))
        got = {}
        while len(got) < 2:
            rep = recv_reply(s)
            got[rep["id"]] = rep
        assert got[6]["ok"]             # (existed is False if a worker saw the abort first)
        assert got[5]["code"] == P.E_STREAM
    finally:
        s.close()


def test_async_client(daemon, refs, texts):
    tok = refs["cl100k"]

    async def main():
        async with AsyncClient(daemon.endpoint, timeout=10) as c:
            assert await c.encode(texts[0]) == tok.encode(texts[0])
            got = await asyncio.gather(*(c.encode(t) for t in texts[:50]))
            assert got == [tok.encode(t) for t in texts[:50]]
            assert await c.encode_batch(texts[:5]) == [tok.encode(t) for t in texts[:5]]
            ids = tok.encode(texts[1])
            assert await c.decode(ids) == tok.decode(ids)
            assert await c.count(texts[1]) == len(ids)
            out = [ids async for ids in c.stream(texts, window=16)]
            assert out == [tok.encode(t) for t in texts]

            async def agen():
                for t in texts[:30]:
                    yield t
            out = [ids async for ids in c.stream(agen(), window=8)]
            assert out == [tok.encode(t) for t in texts[:30]]
            doc = "".join(texts[:20]).encode()
            chunks = [doc[i:i + 333] for i in range(0, len(doc), 333)]
            assert await c.encode_chunks(chunks) == tok.encode(doc.decode())
            with pytest.raises(DaemonError) as ei:
                await c.encode("x", tokenizer="nope")
            assert ei.value.code == P.E_UNKNOWN_TOKENIZER
        await c.close()                                   # twice is fine

    asyncio.run(main())


def _is_u32_array(a):
    from array import array
    return type(a) is array and a.itemsize == 4 and a.typecode in "IL"


def test_packed_ids_equal_lists(daemon, refs, texts):
    """packed=True gives the same ids as arrays of uint32, for every way in, both clients."""
    tok = refs["cl100k"]
    some = texts[:40] + ["", "héllo <|endoftext|> wörld 🎉"]
    want = [tok.encode(t) for t in some]
    with Client(daemon.endpoint, timeout=10) as c:
        one = c.encode(some[0], packed=True)
        assert _is_u32_array(one) and one.tolist() == want[0]
        assert c.encode("", packed=True).tolist() == []
        for got in (c.encode_batch(some, packed=True),
                    list(c.stream(some, window=4, packed=True)),
                    list(c.stream(some, window=4, batch=7, packed=True))):
            assert all(_is_u32_array(a) for a in got)
            assert [a.tolist() for a in got] == want
        assert c.encode(some[1]) == want[1]                      # lists still by default
    assert P.bin_to_array(b"\x01\x00\x00\x00\xff\xff\xff\xff").tolist() == [1, 2 ** 32 - 1]
    with pytest.raises(ValueError, match="multiple of 4"):
        P.bin_to_array(b"abc")
    from bpe_cffi.daemon.client import reply_ids
    assert reply_ids([5, 2 ** 32 - 1], packed=True).tolist() == [5, 2 ** 32 - 1]

    async def main():
        async with AsyncClient(daemon.endpoint, timeout=10) as c:
            got = [await c.encode(some[2], packed=True)] + \
                await c.encode_batch(some[3:6], packed=True)
            got += [a async for a in c.stream(some, window=8, batch=5, packed=True)]
            assert all(_is_u32_array(a) for a in got)
            assert [a.tolist() for a in got] == want[2:6] + want

    asyncio.run(main())


def test_batched_streams(daemon, refs, texts, monkeypatch):
    """stream(batch=k) sends up to k texts per request and still yields every text's ids in
    input order, in both clients; groups also end at STREAM_BATCH_CHARS characters; an error
    in one text raises, naming it."""
    from bpe_cffi.daemon import client as client_mod
    tok = refs["cl100k"]
    expect = [tok.encode(t) for t in texts]
    groups = list(client_mod.text_groups(["ab", "c", "", "defg"], 2))
    assert groups == [["ab", "c"], ["", "defg"]]
    monkeypatch.setattr(client_mod, "STREAM_BATCH_CHARS", 5)
    assert list(client_mod.text_groups(["abc", "de", "f", "ghijklm", "n"], 10)) == \
        [["abc", "de"], ["f"], ["ghijklm"], ["n"]]
    monkeypatch.undo()
    assert len(texts) > client_mod.STREAM_AUTO_TEXTS
    assert client_mod.STREAM_AUTO_TEXTS <= Handler.SMALL_BATCH   # one C call per request
    # the default grouping: up to STREAM_AUTO_TEXTS texts per request
    default = -(-len(texts) // client_mod.STREAM_AUTO_TEXTS)
    with Client(daemon.endpoint, timeout=30) as c:
        for batch, window in [(1, 8), (3, 2), (16, 8), (1000, 4), (None, 8)]:
            before = c.stats()["requests"]
            assert list(c.stream(iter(texts), window=window, batch=batch)) == expect
            sent = c.stats()["requests"] - before - 1          # minus the stats request
            assert sent == (-(-len(texts) // batch) if batch else default)
        before = c.stats()["requests"]
        assert list(c.stream(texts)) == expect
        assert c.stats()["requests"] - before - 1 == default
        for wrong in (0, -1, 2.0, "4"):
            with pytest.raises(ValueError):
                list(c.stream(texts, batch=wrong))

    clean = [t.replace("<|endoftext|>", "") for t in texts[:20]]
    bad = clean[:10] + ["x <|endoftext|> y"] + clean[10:]
    strict = dict(allowed_special="none", disallowed_special="all")
    want_before = [tok.encode(t) for t in clean[:10]]
    # a refused text raises when it is reached, after every text before it, whatever the
    # grouping (a group that fails is sent again text by text)
    with Client(daemon.endpoint, timeout=30) as c:
        for batch in (None, 1, 4, 16):
            got = []
            with pytest.raises(DaemonError) as ei:
                for ids in c.stream(bad, window=2, batch=batch, **strict):
                    got.append(ids)
            assert ei.value.code == P.E_DISALLOWED
            assert got == want_before
        # a text over the daemon's limit: the texts before it still come out first
        got = []
        with pytest.raises(DaemonError) as ei:
            for ids in c.stream(clean[:3] + ["x" * (P.Limits().max_text_bytes + 1)]):
                got.append(ids)
        assert ei.value.code == P.E_TOO_LARGE and got == want_before[:3]

    async def main():
        async with AsyncClient(daemon.endpoint, timeout=10) as c:
            for batch in (7, None):
                out = [ids async for ids in c.stream(texts, window=3, batch=batch)]
                assert out == expect

            async def agen():
                for t in texts[:30]:
                    yield t
            out = [ids async for ids in c.stream(agen(), window=2, batch=4)]
            assert out == expect[:30]
            out = [ids async for ids in c.stream(agen())]
            assert out == expect[:30]
            for batch in (None, 4):
                got = []
                with pytest.raises(DaemonError) as ei:
                    async for ids in c.stream(bad, window=2, batch=batch, **strict):
                        got.append(ids)
                assert ei.value.code == P.E_DISALLOWED and got == want_before
    asyncio.run(main())


def test_32_concurrent_streaming_clients(daemon, refs, texts):
    tok = refs["cl100k"]
    n_clients, per_client = 32, (1000 if LONG else 200)
    expect = {i: tok.encode(t) for i, t in enumerate(texts)}
    errors = []

    def run(k):
        rng = random.Random(k)
        picks = [rng.randrange(len(texts)) for _ in range(per_client)]
        try:
            with Client(daemon.endpoint, timeout=30, retries=1) as c:
                # batch=1: one request per text, hundreds per client
                for i, ids in zip(picks, c.stream((texts[i] for i in picks), window=32,
                                                  batch=1)):
                    if ids != expect[i]:
                        errors.append((k, i))
        except Exception as exc:  # reported below
            errors.append((k, repr(exc)))

    threads = [threading.Thread(target=run, args=(k,)) for k in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    with Client(daemon.endpoint) as c:
        st = c.stats()
        assert st["requests"] >= n_clients * per_client
        assert st["latency_ms"]["samples"] > 0


def test_several_endpoints_spread_and_fail_over(paths, refs, texts):
    tok = refs["cl100k"]
    a = Daemon({"cl100k": paths["cl100k"]}, workers=1)
    b = Daemon({"cl100k": paths["cl100k"]}, workers=1)
    try:
        with Client([a.endpoint, b.endpoint], timeout=2, retries=3) as c:
            out = list(c.stream(texts[:100], window=8, batch=1))   # a request per text
            assert out == [tok.encode(t) for t in texts[:100]]
        ra = Client(a.endpoint).request({"op": "stats"})["requests"]
        rb = Client(b.endpoint).request({"op": "stats"})["requests"]
        assert ra > 20 and rb > 20
        # b is frozen: requests sent to it time out and are resent to a (Lazy Pirate);
        # when b wakes up its late duplicate replies are dropped by id.
        import os
        import signal
        os.kill(b.pid, signal.SIGSTOP)
        try:
            with Client([a.endpoint, b.endpoint], timeout=1.0, retries=6) as c:
                got = [c.encode(t) for t in texts[:10]]
                os.kill(b.pid, signal.SIGCONT)
                got += list(c.stream(texts[10:60], window=8, batch=1))
                assert got == [tok.encode(t) for t in texts[:60]]
        finally:
            os.kill(b.pid, signal.SIGCONT)
        b.stop()
        with Client([b.endpoint, a.endpoint], timeout=1.0, retries=6) as c:
            assert [c.encode(t) for t in texts[:5]] == [tok.encode(t) for t in texts[:5]]
        with Client(b.endpoint, timeout=0.3, retries=1) as c:
            with pytest.raises(DaemonTimeout):
                c.encode("nobody listens")
    finally:
        a.stop()
        b.stop()


def test_client_close_twice_and_context_manager(daemon):
    c = Client(daemon.endpoint)
    assert c.health()["ok"]
    c.close()
    c.close()
    with pytest.raises(ValueError):
        c.encode("closed")


def test_req_socket_envelope(daemon, refs):
    """A plain REQ socket (empty delimiter frame) is answered with the same envelope."""
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq.REQ)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(daemon.endpoint)
    try:
        s.send(P.packb({"op": "encode", "id": 1, "text": "req socket"}))
        rep = recv_reply(s)
        assert rep["ids"] == refs["cl100k"].encode("req socket")
    finally:
        s.close()


def test_cli_registers_serve():
    from bpe_cffi.cli import build_parser
    args = build_parser().parse_args(["serve", "--tokenizer", "a=b", "--bind",
                                      "tcp://127.0.0.1:0"])
    assert args.func.__module__ == "bpe_cffi.daemon.cli"


@pytest.mark.parametrize("extra, message", [
    ([], "Address already in use"),
    (["--max-inflight", "0"], "--max-inflight must be at least 1"),
    (["--max-text-bytes", "-5"], "--max-text-bytes must be at least 1"),
    (["--stream-idle", "-1"], "--stream-idle must be at least"),
    (["--heap-trim-mb", "-1"], "--heap-trim-mb must be at least 0"),
    (["--heap-trim-mb", "nan"], "--heap-trim-mb must be at least 0"),
    (["--heap-trim-mb", "inf"], "--heap-trim-mb must be a number of MB"),
    # below 1 MiB the clients, which check only larger messages, timed out instead of
    # hearing too_large; a text limit over the frame limit disconnects instead of answering
    (["--max-frame-bytes", "65536"], "--max-frame-bytes must be at least 1,048,576"),
    (["--max-frame-bytes", "2000000", "--max-text-bytes", "3000000"],
     "--max-text-bytes 3,000,000 is larger than --max-frame-bytes 2,000,000"),
    (["--loader", "no_such_module:load"], "No module named"),
])
def test_serve_errors_are_one_line(daemon, paths, extra, message):
    """A second daemon on a port in use, limits with which nothing could be served, or a
    loader that cannot be imported: exit 1 with one line, no traceback."""
    import subprocess
    import sys
    bind = daemon.endpoint if not extra else "tcp://127.0.0.1:0"
    r = subprocess.run([sys.executable, "-m", "bpe_cffi", "serve", "-t",
                        f"a={paths['gpt2']}", "--bind", bind, *extra],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    assert message in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_async_client_timeouts_and_failover(daemon, refs):
    tok = refs["cl100k"]
    dead = "tcp://127.0.0.1:1"                 # nothing listens there (loopback only)

    async def main():
        async with AsyncClient(dead, timeout=0.3, retries=1) as c:
            with pytest.raises(DaemonTimeout):
                await c.encode("nobody")
        async with AsyncClient([dead, daemon.endpoint], timeout=2, retries=2) as c:
            got = await asyncio.gather(*(c.encode(f"text {i}") for i in range(20)))
            assert got == [tok.encode(f"text {i}") for i in range(20)]

    asyncio.run(main())
    with Client([dead, daemon.endpoint], timeout=2, retries=2) as c:
        assert [c.encode(f"t {i}") for i in range(10)] == [tok.encode(f"t {i}")
                                                              for i in range(10)]


def test_count_limit_on_a_long_text(daemon, refs):
    """Long texts: the daemon may stop once the limit is passed (streaming count); the count
    is exact whenever the limit is not exceeded."""
    tok = refs["cl100k"]
    text = "word and 12345 more words, " * 8000            # ~216 KB
    n = len(tok.encode(text))
    s = raw_socket(daemon.endpoint)
    try:
        s.send(P.packb({"op": "count", "id": 1, "text": text, "limit": 10_000}))
        rep = recv_reply(s)
        assert rep["ok"] and rep["exceeded"] is True and 10_000 < rep["count"] <= n
        s.send(P.packb({"op": "count", "id": 2, "text": text, "limit": n}))
        rep = recv_reply(s)
        assert rep == {"id": 2, "ok": True, "count": n, "exceeded": False, "exact": True}
        s.send(P.packb({"op": "count", "id": 3, "text": text, "limit": n - 1}))
        rep = recv_reply(s)
        assert rep["exceeded"] is True and rep["count"] == n
    finally:
        s.close()


def _long_doc(n_bytes, seed=0):
    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "délta", "42", "x", "\n", "ünï", "🎉"]
    out, size = [], 0
    while size < n_bytes:
        w = rng.choice(words) + rng.choice(" ,.")
        out.append(w)
        size += len(w.encode())
    return "".join(out).encode()


def test_a_resent_chunk_never_replaces_its_reply(daemon, refs):
    """A chunk sent again (same request id) while its first copy is being encoded, or after
    its stream completed, is answered with a reply marked `resent` that is not the chunk's:
    the real one still comes, and the clients wait for it.  With a timeout far shorter than
    a chunk's encoding, encode_chunks returns every id (before: the resend's empty reply was
    taken and the ids were lost without an error)."""
    tok = refs["cl100k"]
    doc = _long_doc(6 << 20)
    chunks = [doc[i:i + (3 << 20)] for i in range(0, len(doc), 3 << 20)]
    expect = tok.encode(doc.decode())
    s = raw_socket(daemon.endpoint)
    try:
        msg = P.packb({"op": "chunk", "id": 77, "stream": "resent-1", "seq": 0, "final": True,
                       "ids": "bin", "data": chunks[0]})
        s.send(msg)
        s.send(msg)                                   # while the first is being encoded
        first, second = recv_reply(s), recv_reply(s)
        real = first if not first.get("resent") else second
        assert real["final"] is True and P.bin_to_ids(real["ids"]) == tok.encode(
            chunks[0].decode())
        other = second if real is first else first
        assert other["resent"] is True and other["ids"] == [] and other["id"] == 77
        s.send(msg)                                   # after the stream completed
        again = recv_reply(s)
        assert again["resent"] is True and again["id"] == 77
    finally:
        s.close()
    with Client(daemon.endpoint, timeout=0.05, retries=40) as c:
        assert c.encode_chunks(chunks) == expect
        assert c.stats()["streams"] == 0              # no stream left waiting for a chunk 0

    async def run():
        async with AsyncClient(daemon.endpoint, timeout=0.05, retries=40) as c:
            return await c.encode_chunks(chunks)
    assert asyncio.run(run()) == expect


def test_stream_abort_checks_the_stream_id_and_errors_are_counted(daemon):
    s = raw_socket(daemon.endpoint)
    try:
        s.send(P.packb({"op": "stats", "id": 1}))
        before = recv_reply(s)["errors_by_code"].get(P.E_STREAM, 0)
        s.send(P.packb({"op": "stream_abort", "id": 2, "stream": b"x" * 300}))
        rep = recv_reply(s)
        assert not rep["ok"] and rep["code"] == P.E_BAD_REQUEST and "256" in rep["message"]
        s.send(P.packb({"op": "chunk", "id": 3, "stream": "counted", "seq": 0, "data": b"a",
                        "final": True}))
        assert recv_reply(s)["final"] is True
        for i in range(3):                             # chunks after the final one
            s.send(P.packb({"op": "chunk", "id": 4 + i, "stream": "counted", "seq": 5,
                            "data": b"b"}))
            assert recv_reply(s)["code"] == P.E_STREAM
        s.send(P.packb({"op": "stats", "id": 9}))
        assert recv_reply(s)["errors_by_code"].get(P.E_STREAM, 0) == before + 3
    finally:
        s.close()


def test_busy_replies_are_flow_control(paths, refs):
    """More requests in flight than the daemon takes from one client: the busy ones are sent
    again after a growing pause, not counted as attempts, and nothing blocks the other
    replies (each busy reply used to cost a 10 ms sleep on the receive path)."""
    import time
    tok = refs["cl100k"]
    texts = [f"text number {i} " * 200 for i in range(2000)]    # over inline_max: queued
    d = Daemon({"cl100k": paths["cl100k"]}, "--max-inflight", 32, workers=2)
    try:
        with Client(d.endpoint, timeout=10, retries=1) as c:
            t0 = time.monotonic()
            out = list(c.stream(texts, window=500, batch=1))
            elapsed = time.monotonic() - t0
            assert out == [tok.encode(t) for t in texts]
            busy = c.stats()["errors_by_code"].get(P.E_BUSY, 0)
            assert busy > 100                          # the limit was hit, often
            assert elapsed < busy * 0.01 / 2, (elapsed, busy)

        async def run():
            async with AsyncClient(d.endpoint, timeout=10, retries=1) as c:
                return await asyncio.gather(*(c.encode(t) for t in texts[:400]))
        assert asyncio.run(run()) == [tok.encode(t) for t in texts[:400]]
    finally:
        d.stop()


def test_async_cancel_is_honoured_and_aborts_the_stream(daemon):
    """Cancelling AsyncClient.encode_chunks (wait_for's timeout) raises at once, every time,
    and the stream it opened is aborted on the daemon."""
    import time
    chunks = [b"hello world " * 1000] * 3000

    async def run():
        async with AsyncClient(daemon.endpoint, timeout=10) as c:
            for _ in range(5):
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(c.encode_chunks(chunks, window=4), 0.05)
            for _ in range(100):                       # the aborts are not awaited
                if (await c.stats())["streams"] == 0:
                    return True
                await asyncio.sleep(0.05)
            return False
    t0 = time.monotonic()
    assert asyncio.run(run())
    assert time.monotonic() - t0 < 30


def test_async_client_survives_an_unreadable_reply():
    """A frame that is not msgpack (a peer that is not the daemon, a corrupted reply) ended
    AsyncClient's reader task (None.get), and every later request timed out; it is dropped,
    as Client drops it."""
    import threading
    import zmq as _zmq
    ctx = _zmq.Context.instance()
    router = ctx.socket(_zmq.ROUTER)
    router.setsockopt(_zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")

    def serve():
        for _ in range(2):
            if not router.poll(20_000):
                return
            ident, payload = router.recv_multipart()
            req = msgpack.unpackb(payload, raw=False)
            router.send_multipart([ident, b"\xc1 not msgpack"])
            router.send_multipart([ident, msgpack.packb({"id": req["id"], "ok": True,
                                                         "status": "ok"})])

    t = threading.Thread(target=serve)
    t.start()

    async def run():
        async with AsyncClient(f"tcp://127.0.0.1:{port}", timeout=5, retries=0) as c:
            first = await c.request({"op": "health"})
            second = await c.request({"op": "health"})
            return first["status"], second["status"]
    try:
        assert asyncio.run(run()) == ("ok", "ok")
    finally:
        t.join()
        router.close()


def _burst(endpoint, texts, clients=4):
    """clients threads, each sending all of texts in one encode_batch at once."""
    errors = []

    def run():
        try:
            with Client(endpoint, timeout=60) as c:
                c.encode_batch(texts)
        except Exception as exc:       # noqa: BLE001 - reported by the assert below
            errors.append(exc)
    threads = [threading.Thread(target=run) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and not any(t.is_alive() for t in threads), errors


def _wait_for_trims(endpoint, least, seconds):
    end = time.monotonic() + seconds
    with Client(endpoint) as c:
        while True:
            # a stats request is traffic too, but far less than the daemon's quiet limit
            trims = c.stats()["heap_trims"]
            if trims >= least or time.monotonic() > end:
                return trims
            time.sleep(0.5)


@pytest.mark.skipif("ASAN_OPTIONS" in os.environ, reason="under scripts/sanitize.sh: "
                    "AddressSanitizer's allocator replaces malloc, so malloc_trim has nothing "
                    "to give back")
def test_quiet_daemon_gives_freed_memory_back(paths):
    """After a burst of big batches the daemon, once idle for a second, returns the memory it
    freed to the system (--heap-trim-mb): its resident size falls well below what the burst
    left; with --heap-trim-mb 0 it never trims."""
    texts = corpus_texts(1500, seed=7, max_len=4000)       # ~3 MB a batch
    d = Daemon({"cl100k": paths["cl100k"]}, "--heap-trim-mb", 1, workers=2)
    try:
        _burst(d.endpoint, texts)
        after_burst = d.rss_kb()
        assert _wait_for_trims(d.endpoint, 1, 20) >= 1
        after_trim = d.rss_kb()
        print(f"daemon RSS after the burst / once trimmed: {after_burst} / {after_trim} kB")
        assert after_trim < after_burst - 20_000, (after_burst, after_trim)
    finally:
        d.stop()
    d = Daemon({"cl100k": paths["cl100k"]}, "--heap-trim-mb", 0, workers=2)
    try:
        _burst(d.endpoint, texts)
        time.sleep(2.5)
        assert _wait_for_trims(d.endpoint, 1, 0) == 0
    finally:
        d.stop()


# Texts with surrogates, which UTF-8 cannot hold: in-process encode (as tiktoken) makes a pair
# written as two code units its one character, and a lone surrogate U+FFFD.
SURROGATE_TEXTS = ["a\ud800b", "a\udc00b", "\ud800 at the start", "at the end \udbff",
                   "\udc00", "\ud83c\udf89 a pair as two code units", "x\ud83c\udf89",
                   "\udc00\ud800 reversed", "\ud800\ud800\udc00 one lone, one pair",
                   "plain text", "ünï 🎉 \udfff<|endoftext|>"]


def test_surrogates_give_the_in_process_ids(daemon, refs):
    """Every client call that sends a text gives, for a text with surrogates, the ids of
    in-process encode (which was UnicodeEncodeError: msgpack packs no surrogate)."""
    tok = refs["cl100k"]
    want = [tok.encode(t) for t in SURROGATE_TEXTS]
    assert want[0] == tok.encode("a\ufffdb") and want[5] == tok.encode("🎉 a pair as two "
                                                                       "code units")
    doc = "".join(SURROGATE_TEXTS)
    # chunks of 3 characters or fewer, cut also between the two halves of every pair
    pairs = [i + 1 for i in range(len(doc) - 1) if "\ud800" <= doc[i] <= "\udbff" and
             "\udc00" <= doc[i + 1] <= "\udfff"]
    cuts = sorted(set(range(0, len(doc), 3)) | set(pairs)) + [len(doc)]
    cut_pairs = [doc[a:b] for a, b in zip(cuts, cuts[1:])]
    assert len(pairs) == 4 and "".join(cut_pairs) == doc   # (one where two texts meet)
    pair_at = doc.index("\ud83c\udf89")
    with Client(daemon.endpoint, timeout=10) as c:
        for t, ids in zip(SURROGATE_TEXTS, want):
            assert c.encode(t) == ids, t
            assert list(c.encode(t, packed=True)) == ids
            assert c.count(t) == len(ids)
            assert c.count(t, limit=1) >= min(len(ids), 2)
        assert c.encode_batch(SURROGATE_TEXTS) == want
        for batch in (None, 1, 4):
            assert list(c.stream(SURROGATE_TEXTS, batch=batch, window=2)) == want
        assert c.encode(doc, tokenizer="gpt2") == refs["gpt2"].encode(doc)
        assert c.encode("after them") == tok.encode("after them")    # the packer is fine
        assert c.encode_chunks([doc]) == tok.encode(doc)
        assert c.encode_chunks(doc[:3]) == tok.encode(doc[:3])
        assert c.encode_chunks([doc[:pair_at + 1], doc[pair_at + 1:]]) == tok.encode(doc)
        assert c.encode_chunks(cut_pairs, window=4) == tok.encode(doc)
        assert c.encode_chunks([doc[:1], doc[1:]]) == tok.encode(doc)
        # a high surrogate before bytes, or at the very end, is lone: U+FFFD
        assert c.encode_chunks(["ab\ud83c", b"cd"]) == tok.encode("ab\ufffdcd")
        assert c.encode_chunks(["ab", "\ud83c"]) == tok.encode("ab\ufffd")

    async def main():
        async with AsyncClient(daemon.endpoint, timeout=10) as c:
            for t, ids in zip(SURROGATE_TEXTS, want):
                assert await c.encode(t) == ids, t
                assert await c.count(t) == len(ids)
            assert await c.encode_batch(SURROGATE_TEXTS) == want
            for batch in (None, 1):
                assert [ids async for ids in c.stream(SURROGATE_TEXTS, batch=batch)] == want
            assert await c.encode_chunks(cut_pairs) == tok.encode(doc)
            assert await c.encode_chunks(["ab\ud83c", b"cd"]) == tok.encode("ab\ufffdcd")
    asyncio.run(main())


BAD_IDS = [([-1], P.E_BAD_ID, "ids[0] = -1 is not a token id"),
           ([5, 1 << 32], P.E_BAD_ID, f"ids[1] = {1 << 32} is not a token id"),
           ([1, 2, 1 << 40], P.E_BAD_ID, f"ids[2] = {1 << 40} is not a token id"),
           ([1, "a"], P.E_BAD_REQUEST, "ids[1] is str, not an int"),
           ([1.5], P.E_BAD_REQUEST, "ids[0] is float, not an int"),
           ([7, None], P.E_BAD_REQUEST, "ids[1] is NoneType, not an int")]


def test_decode_of_a_bad_id_raises_the_daemons_error(daemon, refs):
    """decode of an id packing cannot hold (< 0, >= 2**32, not an int) raises the DaemonError
    the daemon gives that id in a list (was OverflowError / TypeError from packing)."""
    tok = refs["cl100k"]
    s = raw_socket(daemon.endpoint)
    try:                             # what the daemon says of such ids
        for k, (ids, code, message) in enumerate(BAD_IDS[:3]):
            s.send(P.packb({"op": "decode", "id": k, "ids": ids}))
            rep = recv_reply(s)
            assert (rep["code"], rep["message"]) == (code, message)
    finally:
        s.close()
    with Client(daemon.endpoint, timeout=10) as c:
        for ids, code, message in BAD_IDS:
            for call in (c.decode, c.decode_bytes):
                with pytest.raises(DaemonError) as ei:
                    call(ids)
                assert (ei.value.code, ei.value.message) == (code, message)
        with pytest.raises(DaemonError, match=r"ids\[2\] = -3 "):
            c.decode(iter([1, 2, -3]))                     # an iterator is looked at again
        assert c.decode(iter(tok.encode("fine"))) == "fine"
        assert c.decode([]) == ""

    async def main():
        async with AsyncClient(daemon.endpoint, timeout=10) as c:
            for ids, code, message in BAD_IDS:
                for call in (c.decode, c.decode_bytes):
                    with pytest.raises(DaemonError) as ei:
                        await call(ids)
                    assert (ei.value.code, ei.value.message) == (code, message)
            assert await c.decode(tok.encode("fine")) == "fine"
    asyncio.run(main())


def test_stream_names_the_bad_text_by_its_index(daemon, refs):
    """A text the daemon refuses in stream() is named by its index in the stream, as
    encode_batch names it (was "text" alone), whatever the grouping, after the ids of every
    text before it."""
    tok = refs["cl100k"]
    texts = [f"text {k}" for k in range(10)]
    want = [tok.encode(t) for t in texts]
    cases = [(None, P.E_BAD_REQUEST, '"texts[7]" must be a str (or UTF-8 bin), not nil'),
             (5, P.E_BAD_REQUEST, '"texts[7]" must be a str (or UTF-8 bin), not int'),
             (b"ok \xff", P.E_BAD_UTF8, '"texts[7]" is not valid UTF-8'),
             ("a <|endoftext|>", P.E_DISALLOWED, "texts[7]: ")]
    strict = dict(disallowed_special="all", allowed_special="none")

    def check(exc, code, start, got):
        assert exc.code == code and exc.message.startswith(start), exc
        assert got == want[:7]

    with Client(daemon.endpoint, timeout=10) as c:
        with pytest.raises(DaemonError, match=r'"texts\[1\]" must be a str'):
            c.encode_batch(["a", None])
        for bad, code, start in cases:
            for batch in (None, 1, 3):
                got = []
                with pytest.raises(DaemonError) as ei:
                    for ids in c.stream(texts[:7] + [bad] + texts[8:], window=2,
                                        batch=batch, **strict):
                        got.append(ids)
                check(ei.value, code, start, got)
        with pytest.raises(DaemonError, match=r"unknown_tokenizer\] no tokenizer"):
            list(c.stream(["a"], batch=1, tokenizer="nope"))      # not a text's error

    async def main():
        async with AsyncClient(daemon.endpoint, timeout=10) as c:
            for bad, code, start in cases:
                for batch in (None, 1, 3):
                    got = []
                    with pytest.raises(DaemonError) as ei:
                        async for ids in c.stream(texts[:7] + [bad] + texts[8:], window=2,
                                                  batch=batch, **strict):
                            got.append(ids)
                    check(ei.value, code, start, got)
    asyncio.run(main())


def test_a_single_text_where_a_list_belongs_is_refused():
    """Client.encode_batch("hello") iterated the str and encoded five one-letter texts; the
    in-process encode_batch raises TypeError, and so does the client now (no daemon needed:
    it is refused before anything is sent)."""
    with Client("tcp://127.0.0.1:1", timeout=0.5, retries=0) as c:
        for bad in ("hello", b"hi"):
            with pytest.raises(TypeError, match="not a"):
                c.encode_batch(bad)
            with pytest.raises(TypeError, match="not a"):
                list(c.stream(bad))


def test_a_window_of_requests_to_a_stopped_daemon_fails_like_one_request():
    """Each request of a stream's window waited a timeout of its own for a connection, in
    turn: window 64, timeout 1 s, one retry took 128 s to fail (about 45 minutes with the
    defaults).  Bounded here at a tenth of that, to stay clear of a loaded machine."""
    with Client("tcp://127.0.0.1:1", timeout=0.5, retries=1) as c:
        t0 = time.monotonic()
        with pytest.raises(DaemonTimeout, match="no connection to tcp://127.0.0.1:1"):
            list(c.stream(["x"] * 1000, batch=1, window=64))
        with pytest.raises(DaemonTimeout):
            c.encode_chunks([b"x"] * 40, window=16)
        assert time.monotonic() - t0 < 0.1 * 0.5 * 2 * (64 + 16)


def test_a_client_made_before_fork_works_in_the_child(daemon, refs):
    """A Client made in the parent (gunicorn's preload, a multiprocessing pool) hung for ever
    in the child: its ZeroMQ context was the parent's.  The child now gets sockets of its
    own; the parent's client goes on working."""
    tok = refs["cl100k"]
    with Client(daemon.endpoint, timeout=5, retries=1) as c:
        assert c.encode("before") == tok.encode("before")
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:                                   # the child: report, never return
            code = 1
            try:
                os.close(r)
                os.write(w, repr(c.encode("in the child")).encode())
                code = 0
            finally:
                os._exit(code)
        os.close(w)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            _, status = os.waitpid(pid, os.WNOHANG)
            if _:
                break
            time.sleep(0.05)
        else:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the child hung with the parent's client")
        with os.fdopen(r, "rb") as f:
            got = f.read()
        assert os.waitstatus_to_exitcode(status) == 0
        assert got.decode() == repr(tok.encode("in the child"))
        assert c.encode("after") == tok.encode("after")


def test_count_with_a_limit_on_a_tokenizer_that_drops_text(tmp_path, paths):
    """count(limit) took a text of more than (limit + 1) * the longest token's bytes for more
    than `limit` tokens: wrong where a normalizer deletes characters (5000 zero-width spaces
    and 'hello', limit 10: 'exceeded', count 118; it is 1 token).  And a text over 131,072
    characters failed as an internal error for such a tokenizer (its streaming count)."""
    import json
    from bpe_cffi import load
    src = load(paths["gpt2"])
    src.save(tmp_path / "gpt2.json")
    doc = json.loads((tmp_path / "gpt2.json").read_text("utf-8"))
    doc["normalizer"] = {"type": "Replace", "pattern": {"String": "\u200b"}, "content": ""}
    (tmp_path / "zw.json").write_text(json.dumps(doc), "utf-8")
    tok = load(tmp_path / "zw.json")
    d = Daemon({"zw": tmp_path / "zw.json"}, workers=1)
    try:
        with Client(d.endpoint, timeout=20, retries=0) as c:
            text = "\u200b" * 5000 + "hello"
            rep = c.request({"op": "count", "text": text, "limit": 10, "tokenizer": "zw"})
            assert rep["count"] == len(tok.encode(text)) == 1 and rep["exceeded"] is False
            long = "hello world " * 20_000
            n = len(tok.encode(long))
            rep = c.request({"op": "count", "text": long, "limit": n + 5, "tokenizer": "zw"})
            assert rep["count"] == n and rep["exceeded"] is False and rep["exact"] is True
    finally:
        d.stop()


def test_an_ipc_endpoint_is_not_taken_over_and_its_file_is_removed(tmp_path, paths):
    """A second daemon bound to a live daemon's ipc:// path replaced its file (libzmq does),
    leaving the first running where no client reached it; and a clean exit left the file."""
    import subprocess
    import sys
    sock = tmp_path / "d.sock"
    d = Daemon({"gpt2": paths["gpt2"]}, bind=f"ipc://{sock}", workers=1)
    try:
        r = subprocess.run([sys.executable, "-m", "bpe_cffi", "serve", "-t",
                            f"a={paths['gpt2']}", "--bind", f"ipc://{sock}"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 1 and "Address already in use" in r.stderr, r.stderr
        with Client(d.endpoint, timeout=10) as c:          # the first still answers
            assert c.health()["status"] == "ok"
    finally:
        d.stop()
    assert not sock.exists()


def test_an_async_client_used_from_a_second_event_loop_says_so(daemon, refs):
    """A second asyncio.run() with the same AsyncClient timed out ('no reply within 2s')
    though the daemon had answered: its readers ran on the first, closed loop."""
    c = AsyncClient(daemon.endpoint, timeout=2, retries=1)

    async def one():
        return await c.encode("hello")

    try:
        assert asyncio.run(one()) == refs["cl100k"].encode("hello")
        with pytest.raises(RuntimeError, match="another event loop"):
            asyncio.run(one())
    finally:
        c._ctx.destroy(0)
