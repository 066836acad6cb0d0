/*
 * train_count.c - reading a file and counting its pre-tokens on worker threads
 * (bpe_trainer_count_file).
 *
 * Data flow: raw bytes are read in blocks of block_size; the part that forms complete UTF-8
 * is converted (invalid sequences -> U+FFFD, as Python's errors="replace") and appended to
 * the reader's text buffer, and an unfinished trailing sequence waits for the next block.
 * The text is handed out in chunks cut only where the counts cannot change:
 *   - right after a special token that the text after the buffer cannot change (one that
 *     starts at least the longest special token's length before its end), or
 *   - at bpe_pretok_safe_cut inside the last segment, and never within the last
 *     (longest special token - 1) bytes, so a special token is never split;
 * if no such cut exists yet (one huge pre-token), the reader keeps reading until one does or
 * the file ends.  Memory therefore grows with the distinct pre-tokens (and the longest
 * pre-token), not with the file size.
 *
 * Threads: each round the reader prepares one chunk per thread; every thread (the caller is
 * thread 0) splits its chunk on the special tokens, pre-tokenizes each segment with
 * bpe_pretok_next and counts the pieces in its own word table.  After the last round the
 * tables are added, in thread order, into the trainer's table.  Counts are sums, so the
 * result is the same for every thread count and block size.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "buffers.h"
#include "pretok.h"
#include "train.h"
#include "utf8.h"

typedef struct reader {
    int fd;
    int eof;
    size_t block;         /* bytes per read */
    uint8_t *raw;         /* block + 4 bytes: an unfinished UTF-8 sequence, then new bytes */
    size_t raw_len;       /* bytes of raw in use (the unfinished tail after a conversion) */
    bpe_bytes text;       /* converted text not yet handed out */
    uint64_t consumed;    /* raw bytes read so far */
    const bpe_trainer *t;
} reader;

typedef struct worker {
    const bpe_trainer *t;
    bpe_bytes chunk;      /* the text to count this round */
    train_words words;    /* this thread's counts */
    int rc;
} worker;

/* Reads one block and appends its complete UTF-8 part to r->text. */
static int read_block(reader *r)
{
    size_t got = 0;
    while (got < r->block) {
        ssize_t n = read(r->fd, r->raw + r->raw_len + got, r->block - got);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return BPE_ERR_IO;
        }
        if (n == 0) {
            r->eof = 1;
            break;
        }
        got += (size_t)n;
    }
    r->consumed += got;
    size_t have = r->raw_len + got;
    size_t complete = r->eof ? have : bpe_utf8_complete_prefix(r->raw, have);
    int rc = bpe_utf8_replace_invalid(r->raw, complete, &r->text);
    if (rc != BPE_OK)
        return rc;
    memmove(r->raw, r->raw + complete, have - complete);
    r->raw_len = have - complete;
    return BPE_OK;
}

/* The end of the last special token in text[0..len) that more text cannot change (0 if
 * none).  A match starting within the longest token's length of len is not final: a longer
 * token at the same start ("<|end" inside "<|endoftext|>"), or one starting earlier, may
 * complete with the text after len; every later match starts later still. */
static size_t last_special_end(const bpe_trainer *t, const uint8_t *text, size_t len)
{
    size_t pos = 0, end = 0, start, index, longest;
    if (!t->special)
        return 0;
    longest = bpe_special_max_len(t->special);
    while (pos < len && bpe_special_find(t->special, text, len, pos, NULL, &start, &index)) {
        if (start + longest > len)
            break;
        end = start + bpe_special_len(t->special, index);
        pos = end;
    }
    return end;
}

/* A cut the trainer can prove safe for all three built-in patterns, used when
 * bpe_pretok_safe_cut finds none: the largest p <= len with text[p-2] a visible ASCII
 * character, text[p-1] == '\n' and text[p] an ASCII letter.  Why it is safe: the newline is
 * a piece of its own or ends the piece before it (cl100k/o200k's punctuation[\r\n]*), both
 * with and without the cut (no whitespace run precedes it, so "\s++$" at the cut matches just
 * "\n"); and a piece that starts with a letter after a newline does not look behind it
 * (the optional prefix of every letter rule excludes \n).  text[len] must be readable. */
static size_t fallback_cut(const uint8_t *text, size_t len)
{
    for (size_t p = len; p >= 2; p--) {
        uint8_t c = text[p], nl = text[p - 1], prev = text[p - 2];
        if (nl == '\n' && prev > 0x20 && prev < 0x7f &&
            ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')))
            return p;
    }
    return 0;
}

/* A position in text[0..len) where it may be cut (see the top of the file), or 0. */
static size_t find_cut(const bpe_trainer *t, const uint8_t *text, size_t len)
{
    size_t seg = last_special_end(t, text, len);
    size_t keep = t->special ? bpe_special_max_len(t->special) : 0;
    size_t limit = keep > 1 ? (len > keep - 1 ? len - (keep - 1) : 0) : len;
    /* end the view on a character boundary (the text is valid UTF-8 after conversion, so
     * len itself is one): bpe_pretok_safe_cut misjudges a character cut in half */
    while (limit > seg && limit < len && (text[limit] & 0xC0) == 0x80)
        limit--;
    if (limit > seg) {
        size_t c = bpe_pretok_safe_cut(t->pattern, text + seg, limit - seg);
        if (c == 0 && limit < len)
            c = fallback_cut(text + seg, limit - seg);
        else if (c == 0 && limit > seg + 1)
            c = fallback_cut(text + seg, limit - seg - 1);
        if (c > 0)
            return seg + c;
    }
    return seg;
}

/* Fills chunk with the next chunk of text; an empty chunk means the file is done. */
static int next_chunk(reader *r, bpe_bytes *chunk)
{
    size_t want = r->block, cut;
    chunk->len = 0;
    for (;;) {
        while (r->text.len < want && !r->eof) {
            int rc = read_block(r);
            if (rc != BPE_OK)
                return rc;
        }
        if (r->eof) {
            cut = r->text.len;
            break;
        }
        cut = find_cut(r->t, r->text.data, r->text.len);
        if (cut > 0)
            break;
        want = r->text.len + r->block;   /* one pre-token longer than the text: read on */
    }
    /* hand out text[0..cut): swap the buffers, keep the tail */
    bpe_bytes whole = r->text;
    r->text = *chunk;
    r->text.len = 0;
    int rc = bpe_bytes_reserve(&r->text, whole.len - cut);
    if (rc != BPE_OK) {
        *chunk = whole;
        chunk->len = 0;
        return rc;
    }
    if (whole.len > cut)
        memcpy(r->text.data, whole.data + cut, whole.len - cut);
    r->text.len = whole.len - cut;
    *chunk = whole;
    chunk->len = cut;
    return BPE_OK;
}

static int count_segment(worker *w, const uint8_t *seg, size_t len)
{
    int pattern = w->t->pattern;
    for (size_t pos = 0; pos < len;) {
        size_t end = bpe_pretok_next(pattern, seg, len, pos);
        if (end <= pos || end > len)
            return BPE_ERR_ARG;    /* a broken pre-tokenizer: never loop forever */
        int rc = train_words_add(&w->words, seg + pos, end - pos, 1);
        if (rc != BPE_OK)
            return rc;
        pos = end;
    }
    return BPE_OK;
}

/* Counts w->chunk: segments between special tokens, each pre-tokenized. */
static void *count_chunk(void *arg)
{
    worker *w = arg;
    const bpe_trainer *t = w->t;
    const uint8_t *text = w->chunk.data;
    size_t len = w->chunk.len, pos = 0;
    w->rc = BPE_OK;
    while (pos < len && w->rc == BPE_OK) {
        size_t start = len, index = 0;
        int found = t->special && bpe_special_find(t->special, text, len, pos, NULL, &start,
                                                   &index);
        w->rc = count_segment(w, text + pos, (found ? start : len) - pos);
        pos = found ? start + bpe_special_len(t->special, index) : len;
    }
    return NULL;
}

/* Counts every chunk of one round (k chunks) on k threads. */
static int count_round(worker *ws, int k)
{
    pthread_t tid[256];
    int started = 1, rc = BPE_OK;
    for (int i = 1; i < k; i++) {
        if (pthread_create(&tid[i], NULL, count_chunk, &ws[i]) != 0) {
            rc = BPE_ERR_THREAD;
            break;
        }
        started++;
    }
    count_chunk(&ws[0]);
    for (int i = 1; i < started; i++)
        pthread_join(tid[i], NULL);
    for (int i = 0; i < started && rc == BPE_OK; i++)
        rc = ws[i].rc;
    if (rc == BPE_OK && started < k) {
        /* the chunks of threads that could not start are counted here, in order */
        for (int i = started; i < k && rc == BPE_OK; i++) {
            count_chunk(&ws[i]);
            rc = ws[i].rc;
        }
    }
    return rc;
}

static int count_all(bpe_trainer *t, reader *r, worker *ws, bpe_progress *progress)
{
    int n = t->n_threads, rc = BPE_OK;
    uint64_t reported = 0;
    for (;;) {
        if (train_cancelled(progress)) {
            rc = BPE_ERR_CANCELLED;
            break;
        }
        int k = 0;
        while (k < n) {
            rc = next_chunk(r, &ws[k].chunk);
            if (rc != BPE_OK || ws[k].chunk.len == 0)
                break;
            k++;
        }
        if (rc == BPE_OK && k > 0)
            rc = count_round(ws, k);
        if (progress) {
            __atomic_fetch_add(&progress->done, r->consumed - reported, __ATOMIC_RELAXED);
            reported = r->consumed;
        }
        if (rc != BPE_OK || k < n)
            break;
    }
    for (int i = 0; i < n && rc == BPE_OK; i++)
        rc = train_words_merge_into(&t->words, &ws[i].words);
    return rc;
}

int bpe_trainer_count_file(bpe_trainer *t, const char *path, bpe_progress *progress)
{
    if (t == NULL || path == NULL || t->merged || t->pattern == BPE_PATTERN_EXTERNAL)
        return BPE_ERR_ARG;
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return BPE_ERR_IO;
    struct stat st;
    int bad = fstat(fd, &st) != 0 ? errno : (S_ISDIR(st.st_mode) ? EISDIR : 0);
    if (bad) {
        int e = bad;
        close(fd);
        errno = e;
        return BPE_ERR_IO;
    }
    if (progress) {
        progress->phase = BPE_PHASE_READ;
        if (progress->total == 0)
            __atomic_store_n(&progress->total, (uint64_t)st.st_size, __ATOMIC_RELAXED);
    }
    reader r;
    memset(&r, 0, sizeof r);
    r.fd = fd;
    r.block = t->block_size;
    r.t = t;
    r.raw = malloc(r.block + 8);
    worker *ws = calloc((size_t)t->n_threads, sizeof *ws);
    int rc = (r.raw && ws) ? BPE_OK : BPE_ERR_NOMEM;
    for (int i = 0; ws && i < t->n_threads; i++) {
        ws[i].t = t;
        train_words_init(&ws[i].words);
    }
    if (rc == BPE_OK)
        rc = count_all(t, &r, ws, progress);
    int saved = errno;
    for (int i = 0; ws && i < t->n_threads; i++) {
        train_words_free(&ws[i].words);
        bpe_bytes_free(&ws[i].chunk);
    }
    free(ws);
    free(r.raw);
    bpe_bytes_free(&r.text);
    close(fd);
    errno = saved;
    return rc;
}
