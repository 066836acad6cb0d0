/*
 * batch_stream.c - bpe_batch_start / bpe_batch_next / bpe_batch_finish: a batch encoded by
 * background threads and collected by the caller group by group, in input order, while the
 * rest is still being encoded.
 *
 * Why.  Turning ids into Python ints costs about as much as encoding them, and only the
 * thread that holds the GIL can do it.  With the one-shot bpe_encode_batch_flat, that work
 * starts after the last text is encoded, so a second core buys little end to end.  Here the
 * caller converts group k while the workers encode the groups after it; when group k is not
 * ready, the caller encodes an unclaimed group itself instead of waiting, so with n threads
 * (n - 1 workers plus the caller) no core sits idle.
 *
 * Data structure.  The texts, laid end to end as for bpe_encode_batch_flat, are cut into
 * groups of consecutive whole texts of about GROUP_BYTES each.  A group holds its state, its
 * ids (one buffer: its texts' ids back to back) and the end of each text's ids in it.  Groups
 * are claimed in increasing order from one atomic counter (next_claim), by workers and by
 * the caller alike, and handed to the caller in increasing order (next_out).
 *
 * Invariants:
 *   - a group goes UNCLAIMED -> CLAIMED (by whoever took its index) -> DONE or FAILED; the
 *     last step is made under `lock` after its buffers are complete, and the caller reads a
 *     group only after seeing DONE under the lock;
 *   - claims are made in index order, so when the caller reaches group g every group before
 *     it was claimed and returned; the first FAILED group it reaches holds the smallest
 *     failing text of the batch, as bpe_encode_batch reports;
 *   - after a failure (`stop` set) nothing new is claimed, but the groups already claimed
 *     finish, so that an earlier failure is still found; bpe_batch_finish also sets `cancel`,
 *     which the encoders running poll, and joins every worker before freeing anything.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "encode.h"
#include "tokenizer.h"

#define GROUP_BYTES (64 * 1024)
#define MIN_BYTES_PER_WORKER (64 * 1024)

enum { UNCLAIMED, CLAIMED, DONE, FAILED };

typedef struct group {
    size_t first;      /* index of its first text */
    size_t count;      /* texts in it (>= 1) */
    int state;         /* UNCLAIMED..FAILED; DONE/FAILED are written under job->lock */
    int rc;            /* error code when FAILED */
    size_t bad;        /* index of the failing text when FAILED */
    bpe_ids ids;       /* the ids of its texts, back to back */
    size_t *id_ends;   /* count entries: end of text first + k's ids in ids */
} group;

struct bpe_batch_job {
    const bpe_tokenizer *tok;
    const uint8_t *data;         /* the texts, end to end (the caller keeps them alive) */
    const size_t *ends;          /* end of each text in data */
    const uint8_t *mode;         /* special_mode */
    size_t n_groups;
    group *groups;
    size_t next_claim;           /* next group index to claim (atomic) */
    size_t next_out;             /* next group to return (caller only) */
    int stop;                    /* nonzero: claim nothing more (atomic) */
    int cancel;                  /* nonzero: encoders running stop too (atomic; set only by
                                    finish, so a failure never cancels an earlier group) */
    pthread_mutex_t lock;
    pthread_cond_t changed;      /* signalled when a group becomes DONE or FAILED */
    int n_workers;               /* threads started */
    pthread_t *workers;
    bpe_work caller_work;        /* the caller's work slot, for the groups it encodes */
};

static size_t text_start(const bpe_batch_job *job, size_t i)
{
    return i ? job->ends[i - 1] : 0;
}

/* Encodes every text of group g with the work area w and publishes the result. */
static void encode_group(bpe_batch_job *job, bpe_work *w, group *g)
{
    size_t k, info = 0;
    int rc = BPE_OK;
    for (k = 0; k < g->count && rc == BPE_OK; k++) {
        size_t i = g->first + k, start = text_start(job, i);
        size_t len = job->ends[i] - start;
        if (len)
            rc = bpe_encode_work(job->tok, w, job->data + start, len, job->mode, &g->ids,
                                 &info, &job->cancel);
        if (rc != BPE_OK)
            g->bad = i;
        g->id_ends[k] = g->ids.len;
    }
    pthread_mutex_lock(&job->lock);
    g->rc = rc;
    g->state = rc == BPE_OK ? DONE : FAILED;
    pthread_cond_broadcast(&job->changed);
    pthread_mutex_unlock(&job->lock);
    if (rc != BPE_OK)
        __atomic_store_n(&job->stop, 1, __ATOMIC_RELEASE);
}

/* Claims the next unclaimed group, or returns NULL when there is none (or the job stops). */
static group *claim(bpe_batch_job *job)
{
    size_t c;
    if (__atomic_load_n(&job->stop, __ATOMIC_ACQUIRE))
        return NULL;
    c = __atomic_fetch_add(&job->next_claim, 1, __ATOMIC_RELAXED);
    return c < job->n_groups ? &job->groups[c] : NULL;
}

static void *worker_main(void *p)
{
    bpe_batch_job *job = p;
    bpe_work w;
    group *g;
    bpe_work_open(job->tok, &w);
    while ((g = claim(job)) != NULL)
        encode_group(job, &w, g);
    bpe_work_close(&w);
    return NULL;
}

/* Cuts the texts into groups of about GROUP_BYTES; BPE_ERR_ARG on decreasing ends. */
static int make_groups(bpe_batch_job *job, size_t n)
{
    size_t i, n_groups = 0, group_start = 0;
    for (i = 0; i < n; i++) {
        if (job->ends[i] < text_start(job, i))
            return BPE_ERR_ARG;
        if (job->ends[i] - group_start >= GROUP_BYTES || i + 1 == n) {
            n_groups++;
            group_start = job->ends[i];
        }
    }
    job->groups = calloc(n_groups, sizeof *job->groups);
    if (job->groups == NULL)
        return BPE_ERR_NOMEM;
    job->n_groups = n_groups;
    n_groups = 0;
    group_start = 0;
    for (i = 0; i < n; i++) {
        group *g = &job->groups[n_groups];
        if (g->count++ == 0)
            g->first = i;
        if (job->ends[i] - group_start >= GROUP_BYTES || i + 1 == n) {
            if ((g->id_ends = malloc(g->count * sizeof *g->id_ends)) == NULL)
                return BPE_ERR_NOMEM;
            n_groups++;
            group_start = job->ends[i];
        }
    }
    return BPE_OK;
}

static void start_workers(bpe_batch_job *job, int n_threads, size_t total_bytes)
{
    int wanted = bpe_thread_count(n_threads, job->n_groups) - 1;
    if ((size_t)wanted > total_bytes / MIN_BYTES_PER_WORKER)
        wanted = (int)(total_bytes / MIN_BYTES_PER_WORKER);
    if (wanted <= 0)
        return;
    job->workers = malloc((size_t)wanted * sizeof *job->workers);
    if (job->workers == NULL)
        return;   /* the caller encodes every group itself: slower, still correct */
    while (job->n_workers < wanted &&
           pthread_create(&job->workers[job->n_workers], NULL, worker_main, job) == 0)
        job->n_workers++;
}

int bpe_batch_start(const bpe_tokenizer *tok, size_t n, const uint8_t *data,
                    const size_t *ends, const uint8_t *special_mode, int n_threads,
                    bpe_batch_job **out)
{
    bpe_batch_job *job;
    int rc;
    if (out == NULL)
        return BPE_ERR_ARG;
    *out = NULL;
    if (tok == NULL || (n && (data == NULL || ends == NULL)))
        return BPE_ERR_ARG;
    if (tok->pattern == BPE_PATTERN_EXTERNAL)
        return BPE_ERR_ARG;
    if ((rc = bpe_check_mode(tok, special_mode)) != BPE_OK)
        return rc;
    if ((job = calloc(1, sizeof *job)) == NULL)
        return BPE_ERR_NOMEM;
    job->tok = tok;
    job->data = data;
    job->ends = ends;
    job->mode = special_mode;
    pthread_mutex_init(&job->lock, NULL);
    pthread_cond_init(&job->changed, NULL);
    bpe_work_open(tok, &job->caller_work);
    if (n && (rc = make_groups(job, n)) != BPE_OK) {
        bpe_batch_finish(job);
        return rc;
    }
    start_workers(job, n_threads, n ? ends[n - 1] : 0);
    *out = job;
    return BPE_OK;
}

static void free_group(group *g)
{
    bpe_ids_free(&g->ids);
    free(g->id_ends);
    g->id_ends = NULL;
}

/* Waits until group g is DONE or FAILED, encoding unclaimed groups while it is not. */
static int wait_for(bpe_batch_job *job, group *g)
{
    int state;
    for (;;) {
        group *other;
        pthread_mutex_lock(&job->lock);
        state = g->state;
        pthread_mutex_unlock(&job->lock);
        if (state == DONE || state == FAILED)
            return state;
        if ((other = claim(job)) == NULL)
            break;
        encode_group(job, &job->caller_work, other);
    }
    pthread_mutex_lock(&job->lock);
    while (g->state != DONE && g->state != FAILED)
        pthread_cond_wait(&job->changed, &job->lock);
    state = g->state;
    pthread_mutex_unlock(&job->lock);
    return state;
}

int bpe_batch_next(bpe_batch_job *job, size_t *first, size_t *count, const uint32_t **ids,
                   const size_t **id_ends, size_t *info)
{
    group *g;
    if (job == NULL || first == NULL || count == NULL || ids == NULL || id_ends == NULL)
        return BPE_ERR_ARG;
    if (job->next_out > 0)
        free_group(&job->groups[job->next_out - 1]);   /* the caller is done with it */
    *count = 0;
    if (job->next_out >= job->n_groups)
        return BPE_OK;
    g = &job->groups[job->next_out];
    if (wait_for(job, g) == FAILED) {
        if (info)
            *info = g->bad;
        job->next_out = job->n_groups;   /* nothing more to return */
        return g->rc;
    }
    *first = g->first;
    *count = g->count;
    *ids = g->ids.ids;
    *id_ends = g->id_ends;
    job->next_out++;
    return BPE_OK;
}

void bpe_batch_finish(bpe_batch_job *job)
{
    size_t i;
    int k;
    if (job == NULL)
        return;
    __atomic_store_n(&job->stop, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&job->cancel, 1, __ATOMIC_RELEASE);
    for (k = 0; k < job->n_workers; k++)
        pthread_join(job->workers[k], NULL);
    free(job->workers);
    for (i = 0; i < job->n_groups; i++)
        free_group(&job->groups[i]);
    free(job->groups);
    bpe_work_close(&job->caller_work);
    pthread_cond_destroy(&job->changed);
    pthread_mutex_destroy(&job->lock);
    free(job);
}
