/*
 * runpiece.c - BPE of a piece that is one byte repeated (a line of '-', '=', '#'...), by
 * blocks of equal symbols instead of one symbol per byte.
 *
 * Why.  The long-piece search (longpiece.c) meets such a run at its worst: where the run's
 * byte has tokens longer than those BPE ends with ('-' has tokens of up to 112 bytes in
 * o200k_base, BPE of a long run ends in tokens of 64), a wrong longest candidate stays a
 * valid sequence for a long way, and the search came back through nearly every position:
 * ~900 ns a byte, 90 times prose and 2-5 times tiktoken.  The heap of merge.c is O(n log n)
 * with a cache miss a step.  Here the cost does not grow with the run's length at all.
 *
 * Data structure.  The symbols of the piece, left to right, as a short array of BLOCKS, each
 * a token id and how many times it repeats; adjacent blocks hold different ids (normalize).
 * The candidate pairs are the pair inside a block of two or more (t, t), at the block's start,
 * and the pair across each border; scanned in that order their positions rise, so the first
 * of the lowest rank is BPE's leftmost lowest pair (ranks name one pair each: two places tie
 * only with the same pair).
 *
 * A step merges that pair, as merge.c would, with one shortcut.  For a block of k copies of t
 * whose (t, t) is the lowest pair, BPE merges positions 1-2 into u, then (while t, t pairs
 * remain to its right) the next lowest pair is again the leftmost (t, t) unless one of the
 * pairs the merges make before it ranks lower: (prev, u), (u, t) or (u, u), prev being the
 * symbol before the block.  When none of them merges at a rank below t, t's, the whole block
 * becomes k / 2 copies of u and k % 2 of t at once (BULK); else one pair is merged, and the
 * loop looks again.  Either way every step is one BPE would take, so the result is merge.c's
 * for any vocabulary (the tests compare runs of every byte with tiktoken's ids); the bulk
 * steps are what make it fast, and with trained vocabularies (a token ranks after its parts)
 * every inner step is one.  Too many blocks or steps (a vocabulary this does not suit)
 * declines, and the caller takes the usual path.
 */
#include "runpiece.h"

#include "buffers.h"
#include "tokenizer.h"

#define MAX_BLOCKS 64
#define MAX_STEPS 4096

typedef struct block {
    uint32_t id;
    size_t count;
} block;

typedef struct run {
    const bpe_tokenizer *tok;
    block b[MAX_BLOCKS];
    size_t n;                 /* blocks in use */
} run;

/* The rank and new id of merging l then r; 0 when they do not merge. */
static int merges(const bpe_tokenizer *tok, uint32_t l, uint32_t r, uint32_t *rank,
                  uint32_t *new_id)
{
    const bpe_pair_entry *e = bpe_pair_find(tok, l, r);
    if (e == NULL)
        return 0;
    *rank = e->rank;
    *new_id = e->new_id;
    return 1;
}

/* 1 if l, r merge at a rank at or below rank. */
static int merges_first(const bpe_tokenizer *tok, uint32_t l, uint32_t r, uint32_t rank)
{
    uint32_t rk, id;
    return merges(tok, l, r, &rk, &id) && rk <= rank;
}

/* Drops empty blocks and joins neighbours with the same id. */
static void normalize(run *w)
{
    size_t i, k = 0;
    for (i = 0; i < w->n; i++) {
        if (w->b[i].count == 0)
            continue;
        if (k > 0 && w->b[k - 1].id == w->b[i].id)
            w->b[k - 1].count += w->b[i].count;
        else
            w->b[k++] = w->b[i];
    }
    w->n = k;
}

/* Inserts `count` copies of id before block i; 0 when there is no room. */
static int insert(run *w, size_t i, uint32_t id, size_t count)
{
    size_t j;
    if (w->n == MAX_BLOCKS)
        return 0;
    for (j = w->n; j > i; j--)
        w->b[j] = w->b[j - 1];
    w->b[i].id = id;
    w->b[i].count = count;
    w->n++;
    return 1;
}

/* Merges the first two symbols of block i (k >= 2 copies of t) into u, and all of the
 * block's pairs at once when nothing it makes merges first (see the top of the file).  0
 * when there is no room. */
static int merge_inside(run *w, size_t i, uint32_t rank, uint32_t u)
{
    const bpe_tokenizer *tok = w->tok;
    uint32_t t = w->b[i].id;
    size_t k = w->b[i].count;
    int bulk = k >= 4 && !merges_first(tok, u, t, rank) && !merges_first(tok, u, u, rank) &&
               (i == 0 || !merges_first(tok, w->b[i - 1].id, u, rank));
    size_t pairs = bulk ? k / 2 : 1;
    w->b[i].count = k - 2 * pairs;
    return insert(w, i, u, pairs);
}

/* Merges the last symbol of block i with the first of block i + 1 into u. */
static int merge_across(run *w, size_t i, uint32_t u)
{
    w->b[i].count--;
    w->b[i + 1].count--;
    return insert(w, i + 1, u, 1);
}

/* One BPE step; *done = 1 when no pair merges.  0 when there is no room. */
static int step(run *w, int *done)
{
    uint32_t best_rank = UINT32_MAX, best_id = 0, rank, id;
    size_t i, best = 0;
    int inside = 0, found = 0;
    for (i = 0; i < w->n; i++) {
        if (w->b[i].count >= 2 && merges(w->tok, w->b[i].id, w->b[i].id, &rank, &id) &&
            (!found || rank < best_rank)) {
            best_rank = rank, best_id = id, best = i, inside = 1, found = 1;
        }
        if (i + 1 < w->n && merges(w->tok, w->b[i].id, w->b[i + 1].id, &rank, &id) &&
            (!found || rank < best_rank)) {
            best_rank = rank, best_id = id, best = i, inside = 0, found = 1;
        }
    }
    *done = !found;
    if (!found)
        return 1;
    if (!(inside ? merge_inside(w, best, best_rank, best_id) : merge_across(w, best, best_id)))
        return 0;
    normalize(w);
    return 1;
}

int bpe_run_merge(const bpe_tokenizer *tok, uint8_t byte, size_t n, bpe_ids *out)
{
    run w;
    size_t i, total = 0, steps;
    int done = 0, rc;
    if (tok->byte_id[byte] == BPE_NO_ID)
        return BPE_RUN_DECLINED;        /* the usual path says which byte */
    w.tok = tok;
    w.b[0].id = tok->byte_id[byte];
    w.b[0].count = n;
    w.n = 1;
    for (steps = 0; !done; steps++)
        if (steps == MAX_STEPS || !step(&w, &done))
            return BPE_RUN_DECLINED;
    for (i = 0; i < w.n; i++)
        total += w.b[i].count;
    if ((rc = bpe_ids_reserve(out, total)) != BPE_OK)
        return rc;
    for (i = 0; i < w.n; i++) {
        size_t j;
        for (j = 0; j < w.b[i].count; j++)
            out->ids[out->len++] = w.b[i].id;
    }
    return BPE_OK;
}
