"""Daemon throughput and latency against in-process encode_batch, in one run.

    python benchmarks/bench_daemon.py [--docs 16000] [--clients 1,4,16] [--workers N]
                                      [--batches auto,1,16] [--rounds 5]

Starts a real daemon process on a free loopback port, then for 1, 4 and 16 client processes
(each a bpe_cffi.daemon.Client streaming its share of the 4 KB documents with
Client.stream(docs, window=8): `--window` requests in flight, and the stream's default
grouping of up to 64 documents per request) measures documents/s and MB/s, and per-request
round-trip latency (p50/p99) with the same number of clients sending one document at a
time.  The baseline is Tokenizer.encode_batch of the same documents in this process (all
cores).  Also: p50/p99 of a single small request at light load (one client, one request at a
time); a new client's first request (its connection made while it waits); 16 clients
sending 1 or 16 documents per request (stream(batch=k); --batches); and 16
clients that keep the ids packed (stream(packed=True): arrays of uint32, no int object per
id; --packed-batches).  Every daemon reply of the throughput runs is checked against the
in-process ids.  Numbers on a shared machine are noisy: read the RATIOS.  Each throughput
client first makes one untimed pass over its documents (results dropped), as a long-lived
client's heap and the in-process baseline (run once before it is timed) are warm; then all
start together.  The rows with the most clients are run --rounds times, each round with its
own baseline just before it, and report the median ratio and the range: on this shared
machine the baseline alone swings by a third from one minute to the next.
"""
import argparse
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"


def find_shared():
    for parent in REPO.parents:
        if (parent / "shared" / "vocab").is_dir():
            return parent / "shared"
    return REPO.parent / "shared"


def make_docs(n, size, seed=0):
    import lzma
    import random
    rng = random.Random(seed)
    corpora = find_shared() / "corpora"
    pool = []
    for name in ("en_books", "multilingual", "code", "web"):
        p = corpora / f"{name}.txt.xz"
        if p.exists():
            with lzma.open(p, "rb") as f:
                pool.append(f.read(2_000_000))
    if not pool:
        pool = [("Hello wörld, the quick brown fox 12345 漢字 🎉\n" * 50000).encode()]
    docs = []
    for _ in range(n):
        src = rng.choice(pool)
        a = rng.randrange(0, len(src) - size)
        docs.append(src[a:a + size].decode("utf-8", "ignore"))
    return docs


def loader(name):
    if name == "bpe_cffi:load":
        import bpe_cffi
        return bpe_cffi.load
    sys.path.insert(0, str(TESTS))
    import test_daemon_support
    return test_daemon_support.load


def start_daemon(loader_spec, path, workers):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS)] + [
        p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    args = [sys.executable, "-m", "bpe_cffi.daemon", "--loader", loader_spec, "--tokenizer",
            f"t={path}", "--bind", "tcp://127.0.0.1:0"]
    if workers:
        args += ["--workers", str(workers)]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, env=env, cwd=str(REPO))
    line = proc.stdout.readline().decode().strip()
    if not line:
        proc.kill()
        raise SystemExit("the daemon did not start")
    return proc, line


# ---- client processes ------------------------------------------------------------------------

def client_proc(idx, endpoint, docs, expect, mode, window, batch, packed, start, done, out):
    from bpe_cffi.daemon import Client
    with Client(endpoint, timeout=60, retries=0) as c:
        for d in docs[:5]:
            c.encode(d)                               # connected
        if mode == "throughput":
            # A serving client lives long: its heap already holds the memory its results take
            # (as the in-process baseline's does, which is run once before it is timed).  One
            # untimed pass whose results are dropped gives these fresh processes the same
            # start, instead of timing the first touch of every page of their results.
            for _ in c.stream(docs, window=window, batch=batch, packed=packed):
                pass
        start.wait()
        c0 = time.process_time()
        t0 = time.perf_counter()
        lat = []
        result = []
        if mode == "throughput":
            result = list(c.stream(docs, window=window, batch=batch, packed=packed))
        else:
            for d in docs:
                t = time.perf_counter()
                c.encode(d)
                lat.append(time.perf_counter() - t)
        t1 = time.perf_counter()
        cpu = time.process_time() - c0
    # Checking the replies and sending the report back is not part of the timed work: wait
    # until every client has finished, so that none of it competes with a client still timing.
    done.wait()
    wrong = None
    if mode == "throughput":
        wrong = sum(1 for got, want in zip(result, expect)
                    if (got.tolist() if packed else got) != want)
        wrong += len(expect) - len(result)
    out.put((idx, t0, t1, lat, wrong, cpu))


def batch_list(spec):
    """--batches "auto,1,16" -> [None, 1, 16] (None: stream's default grouping)."""
    return [None if b.strip() == "auto" else int(b) for b in spec.split(",") if b.strip()]


def run_clients(endpoint, docs, n_clients, mode, window=8, batch=None, expect=None,
                daemon_pid=None, packed=False):
    """Returns (wall seconds, sorted latencies, wrong-or-missing replies, client CPU seconds,
    daemon CPU seconds from the start of the timed work to the last report, or 0.0 without
    daemon_pid)."""
    ctx = mp.get_context("spawn")
    start = ctx.Barrier(n_clients + 1)                # every client warm, then all at once
    done = ctx.Barrier(n_clients)
    out = ctx.Queue()
    share = [docs[i::n_clients] for i in range(n_clients)]
    want = [expect[i::n_clients] if expect is not None else [] for i in range(n_clients)]
    procs = [ctx.Process(target=client_proc, args=(i, endpoint, share[i], want[i], mode, window,
                                                  batch, packed, start, done, out))
             for i in range(n_clients)]
    for p in procs:
        p.start()
    start.wait(timeout=600)
    d0 = proc_cpu(daemon_pid) if daemon_pid else 0.0
    results = [out.get(timeout=600) for _ in procs]
    dcpu = proc_cpu(daemon_pid) - d0 if daemon_pid else 0.0
    for p in procs:
        p.join(60)
    t0 = min(r[1] for r in results)
    t1 = max(r[2] for r in results)
    lat = sorted(x for r in results for x in r[3])
    wrong = sum(r[4] or 0 for r in results)
    cpu = sum(r[5] for r in results)
    return t1 - t0, lat, wrong, cpu, dcpu


def proc_cpu(pid):
    """CPU seconds (user + system, all threads) used so far by process pid."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(lat, p):
    if not lat:
        return float("nan")
    return lat[min(len(lat) - 1, int(p / 100 * len(lat)))] * 1000


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vocab", default=None, help="tokenizer file (default cl100k_base)")
    ap.add_argument("--docs", type=int, default=16000,
                    help="4 KB documents per run (fewer: shorter rows, noisier ratios)")
    ap.add_argument("--doc-bytes", type=int, default=4096)
    ap.add_argument("--clients", default="1,4,16")
    ap.add_argument("--window", type=int, default=8)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--latency-requests", type=int, default=1000)
    ap.add_argument("--loader", default=None)
    ap.add_argument("--batches", default="auto,1,16",
                    help="documents per request tried with the largest client count; auto: "
                         "Client.stream's default grouping (up to 64 per request), which "
                         "the smaller counts use")
    ap.add_argument("--rounds", type=int, default=5,
                    help="rounds (baseline, then daemon) of each row with the most clients; "
                         "the row reports their median ratio and range")
    ap.add_argument("--packed-batches", default="auto",
                    help="documents per request of extra rows with the largest client count "
                         "whose clients keep the ids packed (Client.stream(packed=True): "
                         "arrays of uint32, no int per id); empty: none")
    args = ap.parse_args()

    vocab = args.vocab or str(find_shared() / "vocab" / "cl100k_base.tiktoken")
    spec = args.loader
    if spec is None:
        import bpe_cffi
        spec = "bpe_cffi:load" if hasattr(bpe_cffi, "load") else "test_daemon_support:load"
    tok = loader(spec)(vocab)
    docs = make_docs(args.docs, args.doc_bytes)
    mb = sum(len(d.encode()) for d in docs) / 1e6
    print(f"# tokenizer {Path(vocab).name} via {spec}; {len(docs)} docs, {mb:.1f} MB; "
          f"cores {len(os.sched_getaffinity(0))}; load {os.getloadavg()[0]:.1f}")

    batch_fn, label = tok.encode_batch, "encode_batch"
    try:
        batch_fn(docs[:200])
    except Exception as exc:          # an unfinished build: threads calling encode instead
        from concurrent.futures import ThreadPoolExecutor
        pool = ThreadPoolExecutor(len(os.sched_getaffinity(0)))
        batch_fn, label = (lambda ds: list(pool.map(tok.encode, ds, chunksize=64))), \
            f"threads x encode (encode_batch failed: {exc})"

    def baseline():
        """(docs/s wall, docs per CPU-second) of in-process encode_batch, best of 2."""
        best, cpu = float("inf"), float("inf")
        for _ in range(2):
            c, t = time.process_time(), time.perf_counter()
            batch_fn(docs)
            best = min(best, time.perf_counter() - t)
            cpu = min(cpu, time.process_time() - c)
        return len(docs) / best, len(docs) / cpu

    expect = batch_fn(docs)
    base, base_cpu = baseline()
    print(f"in-process {label}: {base:,.0f} docs/s  {mb * base / len(docs):.1f} MB/s  "
          f"({base_cpu:,.0f} docs per CPU-second)")

    proc, endpoint = start_daemon(spec, vocab, args.workers)
    rows = []
    try:
        from bpe_cffi.daemon import Client
        from bpe_cffi.daemon.client import STREAM_AUTO_TEXTS
        with Client(endpoint) as c:
            c.encode("warm up")
            lat = []
            for _ in range(args.latency_requests):
                t = time.perf_counter()
                c.encode("hello world")
                lat.append(time.perf_counter() - t)
            lat.sort()
        print(f"single small request, light load: p50 {pct(lat, 50):.3f} ms  "
              f"p99 {pct(lat, 99):.3f} ms")
        first = []
        for _ in range(20):           # a new client's first request: its connection is made
            t = time.perf_counter()   # while the request waits
            with Client(endpoint) as c:
                c.encode("hello world")
            first.append(time.perf_counter() - t)
        first.sort()
        print(f"new client, first request (connect included): median "
              f"{statistics.median(first) * 1e3:.2f} ms  max {first[-1] * 1e3:.2f} ms")
        for n in [int(x) for x in args.clients.split(",")]:
            most = n == max(int(x) for x in args.clients.split(","))
            kinds = [(b, False) for b in batch_list(args.batches)] if most else [(None, False)]
            if most and args.packed_batches:
                kinds += [(b, True) for b in batch_list(args.packed_batches)]
            for batch, packed in kinds:
                # Each round: the in-process baseline, then the daemon right after it.  The
                # machine is shared and its speed swings by a third within a minute, so one
                # pair decides little; the row gives the median over the rounds (the rows
                # with the most clients) and their range.
                got = []
                for _ in range(args.rounds if most else 1):
                    base, base_cpu = baseline()
                    dt, _, wrong, ccpu, dcpu = run_clients(endpoint, docs, n, "throughput",
                                                           window=args.window, batch=batch,
                                                           expect=expect, daemon_pid=proc.pid,
                                                           packed=packed)
                    rate = len(docs) / dt
                    got.append((rate / base, rate, len(docs) / (dcpu + ccpu) / base_cpu,
                                len(docs) / dcpu / base_cpu, wrong))
                lat_docs = docs[:max(n * 20, min(len(docs), args.latency_requests))]
                _, lat, _, _, _ = run_clients(endpoint, lat_docs, n, "latency")
                ratios = sorted(g[0] for g in got)
                rate = statistics.median(g[1] for g in got)
                label = f"auto (<= {STREAM_AUTO_TEXTS})" if batch is None else batch
                rows.append((n, label, "packed" if packed else "list", rate, mb * rate / len(docs),
                             statistics.median(ratios), ratios[0], ratios[-1], len(got),
                             statistics.median(g[2] for g in got),
                             statistics.median(g[3] for g in got), pct(lat, 50), pct(lat, 99),
                             sum(g[4] for g in got)))
    finally:
        proc.terminate()
        proc.wait(30)

    print()
    print("| clients | docs/request | ids | docs/s | MB/s | wall vs in-process encode_batch "
          "(median) | range, rounds | per CPU-s, daemon+clients | per CPU-s, daemon only | "
          "p50 ms (1 in flight) | p99 ms | wrong |")
    print("|---:|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|")
    for (n, batch, ids, rate, mbs, ratio, low, high, rounds, cpu_ratio, dcpu_ratio, p50, p99,
         bad) in rows:
        print(f"| {n} | {batch} | {ids} | {rate:,.0f} | {mbs:.1f} | {ratio:.0%} | "
              f"{low:.0%}-{high:.0%}, {rounds} | {cpu_ratio:.0%} | {dcpu_ratio:.0%} | "
              f"{p50:.2f} | {p99:.2f} | {bad} |")
    print("\nids: what the clients yield, lists of int (as in-process encode_batch returns) or "
          "packed arrays of uint32; wall: daemon docs/s over in-process encode_batch docs/s "
          "(best of 2) measured just before, per round, the median over the rounds and their "
          "range (docs/s: the median round); "
          "per CPU-s: docs per CPU-second (daemon process + client processes, or the daemon "
          "alone) over in-process docs per CPU-second, medians over the rounds.")

if __name__ == "__main__":
    main()
