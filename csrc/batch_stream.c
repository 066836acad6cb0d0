/*
 * batch_stream.c - bpe_batch_start (or bpe_batch_open + bpe_batch_begin) / bpe_batch_next /
 * bpe_batch_finish: a batch encoded by background threads and collected by the caller group
 * by group, while the rest is still being encoded.
 *
 * Why.  Turning ids into Python ints costs about as much as encoding them, and only the
 * thread that holds the GIL can do it.  With the one-shot bpe_encode_batch_flat, that work
 * starts after the last text is encoded, so a second core buys little end to end.  Here the
 * caller converts each group as soon as it is finished while the workers encode the rest;
 * when no group is finished, the caller encodes an unclaimed group itself instead of waiting,
 * so with n threads (n - 1 workers plus the caller) no core sits idle.
 *
 * Groups are handed out in the order they FINISH, not in input order, so one slow group (a
 * worker the scheduler put aside on a busy machine) holds up nothing but itself.  And at the
 * tail, when nothing is left to claim and nothing finished is waiting, the caller encodes a
 * group still running in a worker a second time (each at most once): whichever copy is done
 * first is published, the other is thrown away.  That wastes at most a group per worker and
 * bounds the wait for a descheduled worker by the time to encode one group.
 *
 * Data structure.  The texts, laid end to end as for bpe_encode_batch_flat (or each where it
 * lies, given by `starts`: Python's strs are read in place, and `kinds` says how each stores
 * its characters), are cut into groups of consecutive whole texts of about GROUP_BYTES each
 * (a text of n code units of width w counting n * w bytes).  An encoder turns a text that
 * is not UTF-8 into UTF-8 in a scratch buffer of its own (kept for the whole job) just
 * before encoding it, so that work is spread over the threads instead of done by the caller
 * before any thread starts.
 * Groups are claimed in increasing order from one atomic counter (next_claim), by workers
 * and by the caller alike.  Each worker's work slot is claimed before its thread starts; a
 * slot whose word cache is still empty starts as a copy of the caller's, made by the worker
 * first thing, while the caller already encodes with its own cache held
 * (bpe_work_seed_begin/_end: looked up, not added to, until every copy is made).
 * bpe_batch_start starts the workers once the texts are cut into groups, as many as their
 * size is worth.  bpe_batch_open starts them before the texts are given (one per thread
 * but the caller's): they make their copies and wait (`begun`, under the lock) while the
 * caller still gathers the texts (Python: locates 30K strs, ~1 ms), and bpe_batch_begin
 * then cuts the groups and wakes them.
 * An encoder works into output buffers of its own (an outbuf) and then publishes them into
 * the group; `finished` lists the groups in the order they were published, and the caller
 * returns them from it.  Once the caller is done with a group, its outbuf goes to the job's
 * spares, and the next group encoded takes it instead of growing new buffers from nothing:
 * the encoder of a group then makes no allocation after the first few groups of a job (in a
 * process whose heap other libraries had left fragmented, the reallocations of the calling
 * thread's group buffers had taken ~5% of a batch's time).
 *
 * Cut texts.  When the job has worker threads, a text of at least SPLIT_BYTES is cut into
 * parts of about PART_BYTES where cutting cannot change its ids (bpe_text_cuts, batch_cut.c),
 * so that a batch of a few large texts still uses every thread.  It becomes a join group
 * (never claimed) followed by one group per part, each encoding its code units [begin, end)
 * of the text (converted to UTF-8 by its encoder, as a whole text is).  A published part is
 * kept in its group; the encoder that publishes the last one concatenates the parts' ids
 * into the join's buffers (a copy of 4 bytes an id, on that worker) and publishes the join,
 * which the caller gets as the group of that one text.  A failing part fails its join at
 * once, naming the text.  Parts are never in finished[].
 *
 * Invariants:
 *   - a group is published once: under `lock`, only while it is not yet DONE or FAILED; the
 *     publisher moves its buffers in, the group's state becomes DONE or FAILED, its index is
 *     appended to finished[] and `changed` is broadcast; an encoder finding the group already
 *     published gives its buffers back to the spares;
 *   - the caller reads a group's buffers only after seeing it in finished[] under the lock;
 *     nothing writes them until the caller's next bpe_batch_next, which gives them to the
 *     spares (a failed group's stay until bpe_batch_finish);
 *   - spares[0..n_spares) are outbufs that no group and no encoder holds (under lock);
 *   - a group is claimed once (next_claim) and its encoder reads its texts only before it
 *     publishes it, so once a group that was never stolen (nor any of its parts) is
 *     returned, nothing reads its texts again: the caller is told so (texts_released) and
 *     may let them go (encode_batch drops its references to those strs as it collects,
 *     while the workers still encode, instead of all of them after the job);
 *   - claims are made in index order, so when group f fails every group before it has been
 *     claimed and will be published; first_failed is the smallest failing group so far, and
 *     the error is reported only once every group before it is published, so the failing
 *     text named is the smallest of the batch, as bpe_encode_batch reports;
 *   - after a failure (`stop` set) nothing new is claimed; bpe_batch_finish also sets
 *     `cancel`, which the encoders running poll, and joins every worker before freeing.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "encode.h"
#include "tokenizer.h"
#include "utf8.h"

#define GROUP_BYTES (64 * 1024)
#define SPLIT_BYTES (1024 * 1024)  /* a text this large is cut into parts (with workers) */
#define PART_BYTES (512 * 1024)    /* the size the parts of a cut text aim at */
#define MIN_BYTES_PER_WORKER (64 * 1024)
#define SOLO_BYTES (1024 * 1024)   /* encoded per bpe_batch_next when there is no worker */

#define NONE ((size_t)-1)

enum { RUNNING, DONE, FAILED };   /* RUNNING: not published yet (unclaimed or being encoded) */

#define MAX_SPARES 8   /* output buffers a job keeps for reuse */

/* The output of one encoding of a group: the ids of its texts back to back, and where each
 * text's ids end. */
typedef struct outbuf {
    bpe_ids ids;
    size_t *id_ends;   /* id_ends[k]: end of text first + k's ids in ids */
    size_t ends_cap;   /* entries id_ends has room for */
} outbuf;

typedef struct group {
    size_t first;      /* index of its first text */
    size_t count;      /* texts in it (>= 1) */
    int state;         /* RUNNING, DONE or FAILED; written under job->lock */
    int stolen;        /* the caller has encoded it a second time (caller only) */
    int rc;            /* error code when FAILED */
    size_t bad;        /* index of the failing text when FAILED */
    outbuf out;        /* its ids (once published) */
    /* A cut text (see "Cut texts" above) is a join group followed by its parts. */
    int is_join;       /* 1: never claimed; published once its parts are joined */
    size_t parts_left; /* a join: parts not yet published (under job->lock) */
    size_t join;       /* a part: the index of its join group; NONE for any other group */
    size_t begin, end; /* a part: code units [begin, end) of text `first` */
} group;

struct bpe_batch_job {
    const bpe_tokenizer *tok;
    const uint8_t *data;         /* the texts, end to end (the caller keeps them alive) */
    const uint8_t *const *starts;   /* or, when not NULL, where each text starts (data
                                       unused) */
    const size_t *ends;          /* end of each text in data: running total of the lengths */
    const uint8_t *kinds;        /* BPE_TEXT_* of each text, or NULL: all UTF-8 */
    const uint8_t *mode;         /* special_mode */
    size_t total_size;           /* the sum of text_size over the texts */
    size_t n_groups;
    size_t n_results;            /* groups the caller gets: all but the parts */
    group *groups;
    size_t next_claim;           /* next group index to claim (atomic) */
    int stop;                    /* nonzero: claim nothing more (atomic) */
    int cancel;                  /* nonzero: encoders running stop too (atomic; set only by
                                    finish, so a failure never cancels an earlier group) */
    pthread_mutex_t lock;
    pthread_cond_t changed;      /* broadcast when a group is published */
    size_t *finished;            /* group indices in publication order (n_groups entries) */
    size_t n_finished;           /* entries of finished[] (under lock) */
    size_t seen_finished;        /* n_finished when the caller last found nothing to take
                                    (caller only, read under lock) */
    size_t first_failed;         /* smallest FAILED group index, or NONE (under lock) */
    size_t next_out;             /* next entry of finished[] to return (caller only) */
    size_t last_out;             /* the group returned last, freed on the next call, or NONE */
    int ended;                   /* every group returned, or the error reported (caller) */
    int n_workers;               /* threads started */
    int n_threads;               /* as given to bpe_batch_open / bpe_batch_start */
    int given;                   /* 1 once bpe_batch_begin was called (caller only) */
    int begun;                   /* 1 once it succeeded (atomic, set under lock: workers
                                    started before, by bpe_batch_open, wait for it) */
    struct worker *workers;
    bpe_work caller_work;        /* the caller's work slot, for the groups it encodes */
    bpe_bytes caller_scratch;    /* the caller's UTF-8 of a text stored otherwise */
    outbuf spares[MAX_SPARES];   /* buffers of groups returned, for the next ones (under
                                    lock) */
    int n_spares;
};

/* A worker thread and its work slot, claimed before the thread starts. */
typedef struct worker {
    pthread_t thread;
    bpe_work work;
    int seed;            /* 1: its work slot is to start as a copy of the caller's, made first
                            thing on its thread (bpe_work_seed_begin holds the caller's) */
    bpe_bytes scratch;   /* its UTF-8 of a text stored otherwise */
    bpe_batch_job *job;
} worker;

static size_t text_start(const bpe_batch_job *job, size_t i)
{
    return i ? job->ends[i - 1] : 0;
}

static void free_outbuf(outbuf *b)
{
    bpe_ids_free(&b->ids);
    free(b->id_ends);
    memset(b, 0, sizeof *b);
}

/* Output buffers for a group of `count` texts, emptied: a spare when the job has one, else
 * new ones.  BPE_ERR_NOMEM when room for the ends cannot be made. */
static int take_outbuf(bpe_batch_job *job, size_t count, outbuf *b)
{
    memset(b, 0, sizeof *b);
    pthread_mutex_lock(&job->lock);
    if (job->n_spares > 0)
        *b = job->spares[--job->n_spares];
    pthread_mutex_unlock(&job->lock);
    b->ids.len = 0;
    if (b->ends_cap < count) {
        size_t *ends = realloc(b->id_ends, count * sizeof *ends);
        if (ends == NULL)
            return BPE_ERR_NOMEM;
        b->id_ends = ends;
        b->ends_cap = count;
    }
    return BPE_OK;
}

/* Keeps b's buffers for a later group (or frees them when the job has enough). */
static void give_outbuf(bpe_batch_job *job, outbuf *b)
{
    int kept = 0;
    pthread_mutex_lock(&job->lock);
    if (job->n_spares < MAX_SPARES) {
        job->spares[job->n_spares++] = *b;
        kept = 1;
    }
    pthread_mutex_unlock(&job->lock);
    if (kept)
        memset(b, 0, sizeof *b);
    else
        free_outbuf(b);
}

/* Records group g's outcome: DONE, or FAILED with rc and the failing text.  Under the lock. */
static void set_outcome(group *g, int rc, size_t bad)
{
    g->rc = rc;
    g->bad = bad;
    g->state = rc == BPE_OK ? DONE : FAILED;
}

/* Marks group g published with rc, lists it in finished[] and wakes the caller.  Under the
 * lock. */
static void finish_locked(bpe_batch_job *job, group *g, int rc, size_t bad)
{
    size_t index = (size_t)(g - job->groups);
    set_outcome(g, rc, bad);
    job->finished[job->n_finished++] = index;
    if (rc != BPE_OK && (job->first_failed == NONE || index < job->first_failed))
        job->first_failed = index;
    pthread_cond_broadcast(&job->changed);
}

/* Publishes join group j once all its parts are: their ids end to end in new buffers (the
 * parts' go to the spares).  Called by the encoder that published the last part, without
 * the lock: published parts are no longer written by anyone. */
static void join_parts(bpe_batch_job *job, group *j)
{
    size_t index = (size_t)(j - job->groups), k, total = 0;
    outbuf out;
    int rc = take_outbuf(job, 1, &out);
    for (k = index + 1; k < job->n_groups && job->groups[k].join == index; k++)
        total += job->groups[k].out.ids.len;
    if (rc == BPE_OK)
        rc = bpe_ids_reserve(&out.ids, total);
    for (k = index + 1; k < job->n_groups && job->groups[k].join == index; k++) {
        bpe_ids *part = &job->groups[k].out.ids;
        if (rc == BPE_OK) {
            memcpy(out.ids.ids + out.ids.len, part->ids, part->len * sizeof *part->ids);
            out.ids.len += part->len;
        }
        give_outbuf(job, &job->groups[k].out);
    }
    if (rc == BPE_OK)
        out.id_ends[0] = out.ids.len;
    pthread_mutex_lock(&job->lock);
    j->out = out;
    finish_locked(job, j, rc, j->first);
    pthread_mutex_unlock(&job->lock);
    if (rc != BPE_OK)
        __atomic_store_n(&job->stop, 1, __ATOMIC_RELEASE);
}

/* Publishes an encoding of group g (see the invariants), or gives its buffers back if g
 * already was.  A part is kept in its group (its join fails at once if it did), and the
 * last part to be published has its join published (join_parts). */
static void publish(bpe_batch_job *job, group *g, outbuf *out, int rc, size_t bad)
{
    int won, join_ready = 0;
    pthread_mutex_lock(&job->lock);
    won = g->state == RUNNING;
    if (won) {
        g->out = *out;
        if (g->join == NONE) {
            finish_locked(job, g, rc, bad);
        } else {
            group *j = &job->groups[g->join];
            set_outcome(g, rc, bad);                    /* not in finished[]: see above */
            if (j->state == RUNNING && rc != BPE_OK)
                finish_locked(job, j, rc, bad);
            else if (j->state == RUNNING)
                join_ready = --j->parts_left == 0;
        }
    }
    pthread_mutex_unlock(&job->lock);
    if (!won)
        give_outbuf(job, out);
    if (rc != BPE_OK)
        __atomic_store_n(&job->stop, 1, __ATOMIC_RELEASE);
    if (join_ready)
        join_parts(job, &job->groups[g->join]);
}

/* The first byte of text i, which starts at offset `start` of the texts laid end to end. */
static const uint8_t *text_at(const bpe_batch_job *job, size_t i, size_t start)
{
    return job->starts != NULL ? job->starts[i] : job->data + start;
}

/* How text i stores its characters (BPE_TEXT_*). */
static int text_kind(const bpe_batch_job *job, size_t i)
{
    return job->kinds != NULL ? job->kinds[i] : BPE_TEXT_UTF8;
}

/* Bytes per code unit of a storage kind. */
static size_t unit_width(int kind)
{
    return kind == BPE_TEXT_UTF8 ? 1 : (size_t)kind;
}

/* Points *text and *len at the UTF-8 of code units [begin, end) of text i (end NONE: to its
 * end): where they lie, or written into *scratch (emptied first) from another storage
 * kind. */
static int text_utf8(const bpe_batch_job *job, size_t i, size_t begin, size_t end,
                     bpe_bytes *scratch, const uint8_t **text, size_t *len)
{
    int kind = text_kind(job, i), rc;
    size_t start = text_start(job, i);
    *text = text_at(job, i, start) + begin * unit_width(kind);
    *len = (end == NONE ? job->ends[i] - start : end) - begin;
    if (kind == BPE_TEXT_UTF8)
        return BPE_OK;
    scratch->len = 0;
    if ((rc = bpe_utf8_from_units(*text, *len, kind, scratch)) != BPE_OK)
        return rc;
    *text = scratch->data;
    *len = scratch->len;
    return BPE_OK;
}

/* Encodes every text of group g with the work area w (and the encoder's scratch for UTF-8)
 * into output buffers and publishes them. */
static void encode_group(bpe_batch_job *job, bpe_work *w, bpe_bytes *scratch, group *g)
{
    outbuf out;
    size_t k, info = 0, bad = g->first;
    int rc = take_outbuf(job, g->count, &out);
    for (k = 0; k < g->count && rc == BPE_OK; k++) {
        size_t i = g->first + k, len;
        const uint8_t *text;
        rc = g->join == NONE ? text_utf8(job, i, 0, NONE, scratch, &text, &len)
                             : text_utf8(job, i, g->begin, g->end, scratch, &text, &len);
        if (rc == BPE_OK && len)
            rc = bpe_encode_work(job->tok, w, text, len, job->mode, &out.ids, &info,
                                 &job->cancel);
        if (rc != BPE_OK)
            bad = i;
        out.id_ends[k] = out.ids.len;
    }
    publish(job, g, &out, rc, bad);
}

static int cancelled(const bpe_batch_job *job)
{
    return __atomic_load_n(&job->cancel, __ATOMIC_ACQUIRE);
}

/* Claims the next unclaimed group, or returns NULL when there is none (or the job stops). */
static group *claim(bpe_batch_job *job)
{
    size_t c;
    do {
        if (__atomic_load_n(&job->stop, __ATOMIC_ACQUIRE))
            return NULL;
        c = __atomic_fetch_add(&job->next_claim, 1, __ATOMIC_RELAXED);
    } while (c < job->n_groups && job->groups[c].is_join);
    return c < job->n_groups ? &job->groups[c] : NULL;
}

/* Waits until the job's texts are given or it is stopped. */
static void wait_for_texts(bpe_batch_job *job)
{
    pthread_mutex_lock(&job->lock);
    while (!job->begun && !cancelled(job))
        pthread_cond_wait(&job->changed, &job->lock);
    pthread_mutex_unlock(&job->lock);
}

static void *worker_main(void *p)
{
    worker *me = p;
    group *g;
    if (me->seed)
        bpe_work_seed_end(&me->work, &me->job->caller_work, 1);
    wait_for_texts(me->job);
    while ((g = claim(me->job)) != NULL)
        encode_group(me->job, &me->work, &me->scratch, g);
    return NULL;
}

/* The size text i counts for when the texts are cut into groups: its code units times their
 * width (UTF-8 and Latin-1: one byte each). */
static size_t text_size(const bpe_batch_job *job, size_t i)
{
    int kind = text_kind(job, i);
    return (job->ends[i] - text_start(job, i)) * (kind == BPE_TEXT_UTF8 ? 1 : (size_t)kind);
}

/* 1 if text i's storage kind is known and its start is aligned to its width. */
static int kind_ok(const bpe_batch_job *job, size_t i)
{
    int kind = text_kind(job, i);
    return kind == BPE_TEXT_UTF8 || bpe_units_ok(job->starts[i], kind);
}

/* The size a group counts for (text_size of its texts, or of its part's units). */
static size_t group_size(const bpe_batch_job *job, const group *g)
{
    size_t i, size = 0;
    if (g->join != NONE)
        return (g->end - g->begin) * unit_width(text_kind(job, g->first));
    for (i = g->first; i < g->first + g->count; i++)
        size += text_size(job, i);
    return size;
}

/* Appends a zeroed group whose first text is i to job->groups (room for *cap, grown as
 * needed); NULL when it cannot grow.  Pointers into the groups do not survive this call. */
static group *push_group(bpe_batch_job *job, size_t *cap, size_t i)
{
    group *g;
    if (job->n_groups == *cap) {
        size_t more = *cap ? 2 * *cap : 16;
        group *grown = realloc(job->groups, more * sizeof *grown);
        if (grown == NULL)
            return NULL;
        job->groups = grown;
        *cap = more;
    }
    g = &job->groups[job->n_groups++];
    memset(g, 0, sizeof *g);
    g->first = i;
    g->join = NONE;
    return g;
}

/* Adds text i as a join group and its parts (see "Cut texts") when cuts are found in it: 1
 * if it did, 0 if the text stays whole, -1 when memory ran out. */
static int cut_text(bpe_batch_job *job, size_t i, size_t *cap, bpe_bytes *scratch)
{
    int kind = text_kind(job, i);
    size_t start = text_start(job, i), n = job->ends[i] - start, join = job->n_groups, k;
    size_t part_units = PART_BYTES / unit_width(kind), max_cuts = n / part_units + 1, n_cuts;
    size_t *cuts = malloc(max_cuts * sizeof *cuts);
    group *g;
    if (cuts == NULL)
        return -1;
    n_cuts = bpe_text_cuts(job->tok, text_at(job, i, start), n, kind, job->mode, part_units,
                           cuts, max_cuts, scratch);
    if (n_cuts > 0 && (g = push_group(job, cap, i)) != NULL) {
        g->count = 1;
        g->is_join = 1;
        g->parts_left = n_cuts + 1;
        for (k = 0; k <= n_cuts && (g = push_group(job, cap, i)) != NULL; k++) {
            g->count = 1;
            g->join = join;
            g->begin = k ? cuts[k - 1] : 0;
            g->end = k < n_cuts ? cuts[k] : n;
        }
    }
    free(cuts);
    if (n_cuts == 0)
        return 0;
    return job->n_groups == join + n_cuts + 2 ? 1 : -1;
}

/* Cuts the texts into groups of consecutive whole texts of about GROUP_BYTES, or, with
 * cut_large, a large text into parts (cut_text); sets job->total_size, job->n_results and
 * finished[].  BPE_ERR_ARG on decreasing ends or a bad kind (the groups made before it are
 * freed with the job).  One pass over the texts: 29.6K of them took 0.2-0.3 ms in two. */
static int make_groups(bpe_batch_job *job, size_t n, int cut_large)
{
    size_t i, cap = 0, size = 0, open = NONE;
    bpe_bytes scratch = {0};
    int cut = 0, rc = BPE_OK;
    for (i = 0; i < n && rc == BPE_OK; i++) {
        size_t this_size;
        if (job->ends[i] < text_start(job, i) || !kind_ok(job, i)) {
            rc = BPE_ERR_ARG;
            break;
        }
        this_size = text_size(job, i);
        job->total_size += this_size;
        if (cut_large && this_size >= SPLIT_BYTES &&
            (cut = cut_text(job, i, &cap, &scratch)) != 0) {
            open = NONE;                /* the group before it is closed */
            size = 0;
            rc = cut < 0 ? BPE_ERR_NOMEM : BPE_OK;
            continue;
        }
        if (open == NONE) {
            if (push_group(job, &cap, i) == NULL) {
                rc = BPE_ERR_NOMEM;
                break;
            }
            open = job->n_groups - 1;
        }
        job->groups[open].count++;
        size += this_size;
        if (size >= GROUP_BYTES) {
            open = NONE;
            size = 0;
        }
    }
    bpe_bytes_free(&scratch);
    if (rc != BPE_OK)
        return rc;
    if ((job->finished = malloc((job->n_groups ? job->n_groups : 1) *
                                sizeof *job->finished)) == NULL)
        return BPE_ERR_NOMEM;
    for (i = 0; i < job->n_groups; i++)
        job->n_results += job->groups[i].join == NONE;
    return BPE_OK;
}

/* Starts worker threads until the job has `wanted` (no more than its threads but the
 * caller's), each with a work slot of its own (seeded from the caller's on its thread when
 * the slot's cache is empty); fewer when a thread cannot start.  The workers' array is made
 * once, for the most the job can have: a running worker holds its entry's address. */
static void start_workers(bpe_batch_job *job, int wanted)
{
    int most = bpe_thread_count(job->n_threads, (size_t)-1) - 1;
    if (wanted > most)
        wanted = most;
    if (wanted <= job->n_workers)
        return;
    if (job->workers == NULL &&
        (job->workers = malloc((size_t)most * sizeof *job->workers)) == NULL)
        return;   /* the caller encodes every group itself: slower, still correct */
    while (job->n_workers < wanted) {
        worker *w = &job->workers[job->n_workers];
        w->job = job;
        memset(&w->scratch, 0, sizeof w->scratch);
        bpe_work_open(job->tok, &w->work);
        w->seed = bpe_work_seed_begin(&w->work, &job->caller_work);
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            if (w->seed)
                bpe_work_seed_end(&w->work, &job->caller_work, 0);
            bpe_work_close(&w->work);
            break;
        }
        job->n_workers++;
    }
}

/* The workers a job of total_bytes is worth: one per thread but the caller's, none for less
 * than MIN_BYTES_PER_WORKER each. */
static int workers_for(const bpe_batch_job *job, size_t total_bytes)
{
    int wanted = bpe_thread_count(job->n_threads, job->n_groups) - 1;
    if (wanted > 0 && (size_t)wanted > total_bytes / MIN_BYTES_PER_WORKER)
        wanted = (int)(total_bytes / MIN_BYTES_PER_WORKER);
    return wanted;
}

/* A job of tok's with no texts yet and no workers in *job, or an error (*job NULL); *out
 * (the caller's, checked) is set to NULL meanwhile: the job is published only when ready. */
static int new_job(const bpe_tokenizer *tok, int n_threads, bpe_batch_job **out,
                   bpe_batch_job **made)
{
    bpe_batch_job *job;
    *made = NULL;
    if (out == NULL)
        return BPE_ERR_ARG;
    *out = NULL;
    if (tok == NULL || tok->pattern == BPE_PATTERN_EXTERNAL)
        return BPE_ERR_ARG;
    if ((job = calloc(1, sizeof *job)) == NULL)
        return BPE_ERR_NOMEM;
    job->tok = tok;
    job->n_threads = n_threads;
    job->first_failed = NONE;
    job->last_out = NONE;
    pthread_mutex_init(&job->lock, NULL);
    pthread_cond_init(&job->changed, NULL);
    bpe_work_open(tok, &job->caller_work);
    *made = job;
    return BPE_OK;
}

int bpe_batch_open(const bpe_tokenizer *tok, int n_threads, size_t n_texts,
                   bpe_batch_job **out)
{
    bpe_batch_job *job;
    int rc = new_job(tok, n_threads, out, &job);
    if (rc != BPE_OK)
        return rc;
    start_workers(job, bpe_thread_count(n_threads, n_texts) - 1);
    *out = job;
    return BPE_OK;
}

/* Marks the texts given and wakes the workers waiting for them. */
static void set_begun(bpe_batch_job *job)
{
    pthread_mutex_lock(&job->lock);
    __atomic_store_n(&job->begun, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&job->changed);
    pthread_mutex_unlock(&job->lock);
}

int bpe_batch_begin(bpe_batch_job *job, size_t n, const uint8_t *data,
                    const uint8_t *const *starts, const size_t *ends, const uint8_t *kinds,
                    const uint8_t *special_mode)
{
    int rc;
    if (job == NULL || job->given || (n && ((data == NULL && starts == NULL) || ends == NULL)) ||
        (kinds != NULL && starts == NULL))
        return BPE_ERR_ARG;
    job->given = 1;
    if ((rc = bpe_check_mode(job->tok, special_mode)) != BPE_OK)
        return rc;
    job->data = data;
    job->starts = starts;
    job->ends = ends;
    job->kinds = kinds;
    job->mode = special_mode;
    /* large texts are cut only when there are threads to share them */
    if (n && (rc = make_groups(job, n, bpe_thread_count(job->n_threads, (size_t)-1) > 1)) !=
                 BPE_OK)
        return rc;
    set_begun(job);
    start_workers(job, workers_for(job, job->total_size));   /* more, if it is worth it */
    return BPE_OK;
}

int bpe_batch_start(const bpe_tokenizer *tok, size_t n, const uint8_t *data,
                    const uint8_t *const *starts, const size_t *ends, const uint8_t *kinds,
                    const uint8_t *special_mode, int n_threads, bpe_batch_job **out)
{
    bpe_batch_job *job;
    int rc = new_job(tok, n_threads, out, &job);
    if (rc != BPE_OK)
        return rc;
    if ((rc = bpe_batch_begin(job, n, data, starts, ends, kinds, special_mode)) != BPE_OK) {
        bpe_batch_finish(job);
        return rc;
    }
    *out = job;   /* only now: another thread may read it to cancel the job */
    return BPE_OK;
}


/* The group a worker is still encoding that the caller has not encoded a second time yet
 * (the lowest such), or NULL.  Under the lock. */
static group *steal_candidate(bpe_batch_job *job)
{
    size_t claimed = __atomic_load_n(&job->next_claim, __ATOMIC_RELAXED), i;
    if (claimed > job->n_groups)
        claimed = job->n_groups;
    for (i = 0; i < claimed; i++) {
        group *g = &job->groups[i];
        if (g->state == RUNNING && !g->stolen && !g->is_join)
            return g;
    }
    return NULL;
}

/* 1 when every group before `limit` is published.  Under the lock. */
static int published_before(const bpe_batch_job *job, size_t limit)
{
    size_t i;
    for (i = 0; i < limit; i++)
        if (job->groups[i].state == RUNNING)
            return 0;
    return 1;
}

/* Makes progress while the caller has nothing to return: encodes an unclaimed group (with no
 * worker, several of about SOLO_BYTES in all, so that a caller taking a lock between calls,
 * Python's GIL, takes it rarely), else a running one a second time, else waits for a
 * publication or a cancellation.  Called without the lock, only after a take() that found
 * nothing to return. */
static void help_or_wait(bpe_batch_job *job)
{
    group *g = claim(job);
    size_t done = 0;
    if (g == NULL) {
        pthread_mutex_lock(&job->lock);
        if (job->first_failed == NONE && (g = steal_candidate(job)) != NULL)
            g->stolen = 1;
        /* nothing to encode: sleep until something is published since the caller last
         * looked (take), not since now: what a worker published in between (the last
         * group, say, before the worker ended) is what the caller waits for (a failure waits
         * for the groups before it; they are all claimed, hence running somewhere) */
        while (g == NULL && job->n_finished == job->seen_finished && !cancelled(job))
            pthread_cond_wait(&job->changed, &job->lock);
        pthread_mutex_unlock(&job->lock);
        if (g == NULL)
            return;
    }
    for (;;) {
        encode_group(job, &job->caller_work, &job->caller_scratch, g);
        if (job->n_workers > 0 || g->state == FAILED)
            return;
        done += group_size(job, g);
        if (done >= SOLO_BYTES || (g = claim(job)) == NULL)
            return;
    }
}

/* 1 when no encoder reads the texts of group g (returned to the caller) any more: it was
 * claimed once and published by its encoder after its last read.  A group the caller
 * encoded a second time (stolen) may still be read by the copy that lost, and a cut text
 * by such a copy of one of its parts.  Caller only (it alone writes `stolen`). */
static int texts_released(const bpe_batch_job *job, const group *g)
{
    size_t index = (size_t)(g - job->groups), k;
    if (g->stolen)
        return 0;
    for (k = index + 1; g->is_join && k < job->n_groups && job->groups[k].join == index; k++)
        if (job->groups[k].stolen)
            return 0;
    return 1;
}

/* One look at the job for the caller: a finished group to return (BPE_OK, *count > 0, *info
 * texts_released), the error that ends the job, the end (BPE_OK, *count 0), or, with
 * *pending set, nothing yet. */
static int take(bpe_batch_job *job, size_t *first, size_t *count, const uint32_t **ids,
                const size_t **id_ends, size_t *info, int *pending)
{
    group *g = NULL;
    size_t failed;
    *pending = 0;
    pthread_mutex_lock(&job->lock);
    failed = job->first_failed;
    job->seen_finished = job->n_finished;
    if (failed == NONE && job->next_out < job->n_finished)
        g = &job->groups[job->finished[job->next_out++]];
    else if (failed != NONE && published_before(job, failed))
        g = &job->groups[failed];
    pthread_mutex_unlock(&job->lock);
    if (g != NULL && g->state == FAILED) {
        if (info)
            *info = g->bad;
        job->ended = 1;                      /* nothing more to return */
        return g->rc;
    }
    if (g != NULL) {
        *first = g->first;
        *count = g->count;
        *ids = g->out.ids.ids;
        *id_ends = g->out.id_ends;
        if (info)
            *info = (size_t)texts_released(job, g);
        job->last_out = (size_t)(g - job->groups);
        return BPE_OK;
    }
    if (failed == NONE && job->next_out == job->n_results)
        job->ended = 1;                      /* every group returned */
    else
        *pending = 1;
    return BPE_OK;
}

/* The start of bpe_batch_next / bpe_batch_poll: checks the arguments and gives the group
 * returned last to the spares (the caller is done with it). */
static int begin_call(bpe_batch_job *job, size_t *first, size_t *count, const uint32_t **ids,
                      const size_t **id_ends)
{
    if (job == NULL || first == NULL || count == NULL || ids == NULL || id_ends == NULL ||
        !__atomic_load_n(&job->begun, __ATOMIC_ACQUIRE))
        return BPE_ERR_ARG;
    if (job->last_out != NONE)
        give_outbuf(job, &job->groups[job->last_out].out);
    job->last_out = NONE;
    *count = 0;
    return BPE_OK;
}

/* take(), and when there is nothing to return yet from a cancelled job, its end
 * (BPE_ERR_CANCELLED). */
static int look(bpe_batch_job *job, size_t *first, size_t *count, const uint32_t **ids,
                const size_t **id_ends, size_t *info, int *pending)
{
    int rc = take(job, first, count, ids, id_ends, info, pending);
    if (*pending && cancelled(job)) {
        *pending = 0;
        job->ended = 1;
        return BPE_ERR_CANCELLED;
    }
    return rc;
}

int bpe_batch_next(bpe_batch_job *job, size_t *first, size_t *count, const uint32_t **ids,
                   const size_t **id_ends, size_t *info)
{
    int rc = begin_call(job, first, count, ids, id_ends), pending;
    if (rc != BPE_OK)
        return rc;
    while (!job->ended) {
        rc = look(job, first, count, ids, id_ends, info, &pending);
        if (!pending)
            return rc;
        help_or_wait(job);
    }
    return BPE_OK;
}

int bpe_batch_poll(bpe_batch_job *job, size_t *first, size_t *count, const uint32_t **ids,
                   const size_t **id_ends, size_t *info)
{
    int rc = begin_call(job, first, count, ids, id_ends), pending;
    if (rc != BPE_OK || job->ended)
        return rc;
    rc = look(job, first, count, ids, id_ends, info, &pending);
    return pending ? BPE_BATCH_PENDING : rc;
}

int bpe_batch_step(bpe_batch_job *job, size_t *first, size_t *count, const uint32_t **ids,
                   const size_t **id_ends, size_t *info)
{
    int rc = bpe_batch_poll(job, first, count, ids, id_ends, info), pending;
    if (rc != BPE_BATCH_PENDING)
        return rc;
    help_or_wait(job);
    rc = look(job, first, count, ids, id_ends, info, &pending);
    return pending ? BPE_BATCH_PENDING : rc;
}

void bpe_batch_cancel(bpe_batch_job *job)
{
    if (job == NULL)
        return;
    __atomic_store_n(&job->stop, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&job->cancel, 1, __ATOMIC_RELEASE);
    pthread_mutex_lock(&job->lock);           /* wake a caller waiting for a publication */
    pthread_cond_broadcast(&job->changed);
    pthread_mutex_unlock(&job->lock);
}

size_t bpe_batch_size(const bpe_batch_job *job)
{
    return job != NULL ? job->total_size : 0;
}

void bpe_batch_finish(bpe_batch_job *job)
{
    size_t i;
    int k;
    if (job == NULL)
        return;
    bpe_batch_cancel(job);            /* wakes workers still waiting for the texts */
    for (k = 0; k < job->n_workers; k++) {
        pthread_join(job->workers[k].thread, NULL);
        bpe_work_close(&job->workers[k].work);
        bpe_bytes_free(&job->workers[k].scratch);
    }
    free(job->workers);
    for (i = 0; job->groups != NULL && i < job->n_groups; i++)
        free_outbuf(&job->groups[i].out);
    for (k = 0; k < job->n_spares; k++)
        free_outbuf(&job->spares[k]);
    bpe_bytes_free(&job->caller_scratch);
    free(job->groups);
    free(job->finished);
    bpe_work_close(&job->caller_work);
    pthread_cond_destroy(&job->changed);
    pthread_mutex_destroy(&job->lock);
    free(job);
}
