/*
 * encode_file.c - bpe_encode_file: a file of any size -> a flat file of little-endian ids.
 *
 * Pipeline, repeated until the input ends: the calling thread reads raw bytes, keeps an
 * incomplete trailing UTF-8 sequence for the next read (bpe_utf8_complete_prefix), decodes the
 * rest with U+FFFD replacement exactly as errors="replace" (bpe_utf8_replace_invalid), and cuts
 * the decoded text into chunks of about CHUNK / JOBS_PER_THREAD bytes at stable points
 * (bpe_stable_prefix: the pre-tokenizer's safe cut, never inside or just before a possible
 * special token), so encoding the chunks separately gives the ids of the whole text.  A round
 * takes JOBS_PER_THREAD chunks per thread, which the threads claim one at a time (threads
 * started and joined per round, see batch.c), then writes their ids in order.  With one chunk
 * per thread, a thread whose chunk went slower (or which the scheduler set aside) kept the
 * others waiting at the end of every round; smaller chunks claimed in turn even that out.
 * Memory is bounded by a round's chunks (text + ids) plus the carry, a few tens of MB
 * whatever the file size, plus each thread's work slot (its word cache: up to ~5 MB at the
 * default capacity), so it grows with the thread count: ~95 MB peak RSS on 1 thread, ~130
 * on 2, ~560 on 64 (a 1.4 GB file, gpt2; chunks shrink as threads grow, see chunk_size).
 * Only a text with no stable cut for a long stretch (megabytes of one piece) grows a
 * chunk, until a cut appears.
 *
 * A stream (a pipe, a terminal, a socket) may bring text slowly: there a round does not wait
 * for its full text.  When a read would block (poll), a round ends with the chunks it has,
 * and its last chunk is what has arrived up to a stable cut, so the ids of a slow producer's
 * text are written as it comes, not once 8 MB have gathered.  The cuts stay stable ones, so
 * the ids do not depend on the timing.
 *
 * The ids are written to a file descriptor the caller opened (and closes): which file that
 * is, a temporary one renamed over the destination on success or a pipe or device written
 * as it goes, is the caller's policy (bpe_cffi/formats.py, atomic_output).  On an I/O error
 * errno is kept for the caller.  progress->done counts input bytes whose ids are written;
 * progress->cancel is read between rounds and every few thousand pieces inside the encoder
 * (well under 0.1 s).
 *
 * BPE_CFFI_FILE_CHUNK (environment, bytes, >= 64) overrides the chunk size; tests use it to
 * force many chunks on small files.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "buffers.h"
#include "batch.h"
#include "encode.h"
#include "tokenizer.h"
#include "utf8.h"

#define CHUNK ((size_t)4 << 20)      /* text of one round per thread */
#define JOBS_PER_THREAD 4
#define ROUND_BUDGET ((size_t)32 << 20)   /* text of one round, all threads together */
#define MIN_CHUNK ((size_t)256 << 10)
#define MIN_READ ((size_t)64 << 10)

/* The input side: raw bytes not yet decoded, decoded text not yet cut into a chunk. */
typedef struct reader {
    int fd;                     /* the input file */
    int stream;                 /* 1 when it is not a regular file (a pipe, a terminal) */
    int eof;                    /* 1 once read() returned 0 */
    uint64_t read_total;        /* raw bytes read so far */
    bpe_bytes raw;              /* raw bytes awaiting decoding (an incomplete UTF-8 tail) */
    bpe_bytes text;             /* decoded text not yet handed out */
    size_t chunk;               /* target chunk size */
    const bpe_tokenizer *tok;
    const uint8_t *mode;        /* special_mode of the call */
} reader;

/* One chunk of a round. */
typedef struct job {
    bpe_bytes text;             /* its text */
    bpe_ids ids;                /* its ids */
    int rc;                     /* its result */
    size_t info;                /* special index on BPE_ERR_DISALLOWED */
} job;

/* A round: the jobs being encoded in parallel. */
typedef struct round {
    const bpe_tokenizer *tok;
    const uint8_t *mode;
    const int *cancel;
    job *jobs;
    size_t n;                   /* jobs in this round */
    size_t next;                /* next job to claim (atomic) */
} round_t;

static void drop_front(bpe_bytes *b, size_t n)
{
    if (n == 0)
        return;
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
}

/* Reads up to `want` more raw bytes and decodes every complete UTF-8 sequence into r->text. */
static int fill(reader *r, size_t want)
{
    size_t complete;
    ssize_t got;
    int rc;
    if ((rc = bpe_bytes_reserve(&r->raw, want)) != BPE_OK)
        return rc;
    do
        got = read(r->fd, r->raw.data + r->raw.len, want);
    while (got < 0 && errno == EINTR);
    if (got < 0)
        return BPE_ERR_IO;
    if (got == 0)
        r->eof = 1;
    r->raw.len += (size_t)got;
    r->read_total += (uint64_t)got;
    complete = r->eof ? r->raw.len : bpe_utf8_complete_prefix(r->raw.data, r->raw.len);
    if (complete > 0 &&
        (rc = bpe_utf8_replace_invalid(r->raw.data, complete, &r->text)) != BPE_OK)
        return rc;
    drop_front(&r->raw, complete);
    return BPE_OK;
}

/* For a stream: whether a read would now wait for its writer (nothing has arrived). */
static int would_wait(const reader *r)
{
    struct pollfd p;
    if (!r->stream || r->eof)
        return 0;
    p.fd = r->fd;
    p.events = POLLIN;
    p.revents = 0;
    return poll(&p, 1, 0) == 0;
}

/* Moves the next chunk of text into dst (emptied first); dst->len == 0 at the end.  From a
 * stream whose writer is slow, the chunk is what has arrived (up to a stable cut) rather
 * than a full one, so that ids come out as text comes in; only when that holds no stable
 * cut does it wait for more. */
static int next_chunk(reader *r, bpe_bytes *dst)
{
    size_t goal = r->chunk, cut;
    int rc, short_of_goal;
    dst->len = 0;
    for (;;) {
        short_of_goal = 0;
        while (!r->eof && r->text.len < goal) {
            size_t want = goal - r->text.len;
            if (r->text.len > 0 && would_wait(r)) {
                short_of_goal = 1;
                break;
            }
            if ((rc = fill(r, want < MIN_READ ? MIN_READ : want)) != BPE_OK)
                return rc;
        }
        if (r->text.len <= goal && r->eof) {
            cut = r->text.len;
        } else {
            cut = bpe_stable_prefix(r->tok, r->text.data,
                                    r->text.len < goal ? r->text.len : goal, r->mode);
            if (cut == 0 && r->eof)
                cut = r->text.len;
        }
        if (cut > 0 || r->text.len == 0)
            break;
        if (!short_of_goal)
            goal *= 2;     /* no stable cut yet: take a longer stretch */
        else if ((rc = fill(r, MIN_READ)) != BPE_OK)
            return rc;     /* nothing stable in what arrived: wait for some more */
    }
    if (cut == 0)
        return BPE_OK;   /* the end of the input */
    if ((rc = bpe_bytes_reserve(dst, cut)) != BPE_OK)
        return rc;
    memcpy(dst->data, r->text.data, cut);
    dst->len = cut;
    drop_front(&r->text, cut);
    return BPE_OK;
}

static void round_worker(void *p)
{
    round_t *rd = p;
    bpe_work w;
    bpe_work_open(rd->tok, &w);
    for (;;) {
        size_t i = __atomic_fetch_add(&rd->next, 1, __ATOMIC_RELAXED);
        job *j;
        if (i >= rd->n)
            break;
        j = &rd->jobs[i];
        j->ids.len = 0;
        j->rc = bpe_encode_work(rd->tok, &w, j->text.data, j->text.len, rd->mode, &j->ids,
                                &j->info, rd->cancel);
    }
    bpe_work_close(&w);
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return BPE_ERR_IO;
        p += k;
        n -= (size_t)k;
    }
    return BPE_OK;
}

/* Writes ids as little-endian integers of `width` bytes, through buf. */
static int write_ids(int fd, const bpe_ids *ids, int width, bpe_bytes *buf)
{
    size_t i, n = ids->len * (size_t)width;
    int rc;
    buf->len = 0;
    if ((rc = bpe_bytes_reserve(buf, n)) != BPE_OK)
        return rc;
    for (i = 0; i < ids->len; i++) {
        uint32_t v = ids->ids[i];
        uint8_t *d = buf->data + i * (size_t)width;
        d[0] = (uint8_t)v;
        d[1] = (uint8_t)(v >> 8);
        if (width == 4) {
            d[2] = (uint8_t)(v >> 16);
            d[3] = (uint8_t)(v >> 24);
        }
    }
    return write_all(fd, buf->data, n);
}

/* The chunk size: CHUNK / JOBS_PER_THREAD, smaller with many threads so that a round's text
 * (and with it the ids, the write buffer, the reader's carry) stays within ROUND_BUDGET. */
static size_t chunk_size(int threads)
{
    const char *s = getenv("BPE_CFFI_FILE_CHUNK");
    long v = s ? atol(s) : 0;
    size_t c = CHUNK / JOBS_PER_THREAD, jobs = (size_t)threads * JOBS_PER_THREAD;
    if (v >= 64)
        return (size_t)v;
    if (jobs * c > ROUND_BUDGET)
        c = ROUND_BUDGET / jobs;
    return c < MIN_CHUNK ? MIN_CHUNK : c;
}

/* Everything of one call that must be released at the end. */
typedef struct file_call {
    reader r;
    job *jobs;
    int n_jobs;                 /* chunks per round */
    int n_threads;
    bpe_bytes wbuf;
    int out_fd;                 /* the caller's */
} file_call;

static void set_progress(bpe_progress *pg, const reader *r, uint64_t total)
{
    uint64_t pending = (uint64_t)r->raw.len + r->text.len, done;
    if (pg == NULL)
        return;
    done = r->read_total > pending ? r->read_total - pending : 0;
    __atomic_store_n(&pg->done, done < total ? done : total, __ATOMIC_RELAXED);
}

/* One round: cut up to n_jobs chunks, encode them, write them.  *more = 0 at the end. */
static int do_round(file_call *fc, const bpe_tokenizer *tok, const uint8_t *mode, int width,
                    const int *cancel, uint64_t *n_tokens, size_t *info, int *more)
{
    round_t rd = {tok, mode, cancel, fc->jobs, 0, 0};
    size_t i;
    int rc;
    while (rd.n < (size_t)fc->n_jobs) {
        if (rd.n > 0 && would_wait(&fc->r))
            break;        /* a stream with nothing more yet: encode what came */
        if ((rc = next_chunk(&fc->r, &fc->jobs[rd.n].text)) != BPE_OK)
            return rc;
        if (fc->jobs[rd.n].text.len == 0)
            break;
        rd.n++;
    }
    *more = rd.n > 0;
    if (rd.n == 0)
        return BPE_OK;
    bpe_run_threads(rd.n < (size_t)fc->n_threads ? (int)rd.n : fc->n_threads, round_worker,
                    &rd);
    for (i = 0; i < rd.n; i++) {
        job *j = &fc->jobs[i];
        if (j->rc != BPE_OK) {
            if (j->rc == BPE_ERR_DISALLOWED && info)
                *info = j->info;
            return j->rc;
        }
        if ((rc = write_ids(fc->out_fd, &j->ids, width, &fc->wbuf)) != BPE_OK)
            return rc;
        *n_tokens += j->ids.len;
    }
    return BPE_OK;
}

static int open_input(file_call *fc, const char *in_path, uint64_t *size)
{
    struct stat st;
    if ((fc->r.fd = open(in_path, O_RDONLY | O_CLOEXEC)) < 0 || fstat(fc->r.fd, &st) != 0)
        return BPE_ERR_IO;
    *size = S_ISREG(st.st_mode) ? (uint64_t)st.st_size : 0;
    fc->r.stream = !S_ISREG(st.st_mode);
    return BPE_OK;
}

static int finish(file_call *fc, int rc)
{
    int err = errno, i;
    if (fc->r.fd >= 0)
        close(fc->r.fd);
    for (i = 0; fc->jobs != NULL && i < fc->n_jobs; i++) {
        bpe_bytes_free(&fc->jobs[i].text);
        bpe_ids_free(&fc->jobs[i].ids);
    }
    free(fc->jobs);
    bpe_bytes_free(&fc->r.raw);
    bpe_bytes_free(&fc->r.text);
    bpe_bytes_free(&fc->wbuf);
    errno = err;
    return rc;
}

int bpe_encode_file(const bpe_tokenizer *tok, const char *in_path, int out_fd, int id_width, const uint8_t *special_mode, int n_threads,
                    bpe_progress *progress, uint64_t *n_tokens, size_t *info)
{
    file_call fc;
    uint64_t size = 0, count = 0;
    const int *cancel = progress ? &progress->cancel : NULL;
    int rc, more = 1;
    if (tok == NULL || in_path == NULL || out_fd < 0 ||
        (id_width != 2 && id_width != 4) || tok->pattern == BPE_PATTERN_EXTERNAL ||
        (id_width == 2 && tok->id_limit > 65536))
        return BPE_ERR_ARG;
    if ((rc = bpe_check_mode(tok, special_mode)) != BPE_OK)
        return rc;
    memset(&fc, 0, sizeof fc);
    fc.r.fd = -1;
    fc.out_fd = out_fd;
    fc.r.tok = tok;
    fc.r.mode = special_mode;
    fc.n_threads = bpe_thread_count(n_threads, SIZE_MAX);
    fc.n_jobs = fc.n_threads * JOBS_PER_THREAD;
    fc.r.chunk = chunk_size(fc.n_threads);
    if ((rc = open_input(&fc, in_path, &size)) != BPE_OK)
        return finish(&fc, rc);
    if (progress) {
        progress->phase = BPE_PHASE_READ;
        __atomic_store_n(&progress->total, size, __ATOMIC_RELAXED);
        __atomic_store_n(&progress->done, 0, __ATOMIC_RELAXED);
    }
    if ((fc.jobs = calloc((size_t)fc.n_jobs, sizeof *fc.jobs)) == NULL)
        return finish(&fc, BPE_ERR_NOMEM);
    while (rc == BPE_OK && more) {
        if (cancel && __atomic_load_n(cancel, __ATOMIC_RELAXED))
            rc = BPE_ERR_CANCELLED;
        else
            rc = do_round(&fc, tok, special_mode, id_width, cancel, &count, info, &more);
        set_progress(progress, &fc.r, size);
    }
    if (rc == BPE_OK && n_tokens)
        *n_tokens = count;
    if (rc == BPE_OK && progress)
        __atomic_store_n(&progress->done, size, __ATOMIC_RELAXED);
    return finish(&fc, rc);
}
