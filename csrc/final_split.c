/*
 * final_split.c - the final split of every token, from which tokenizer.c builds the pair
 * table of the tiktoken rule (bpe_final_splits).
 *
 * Under BPE_RULE_TIKTOKEN two adjacent tokens L, R merge (at rank T, into T) exactly when their
 * bytes together are a token T.  Yet of the splits of a token T into two tokens, only ONE can
 * ever be adjacent: the pair that BPE of T's own bytes merges last, its FINAL SPLIT.  Proof:
 * say the merge of some piece has L and R as adjacent symbols covering T's bytes.  Nothing
 * has crossed the ends of that span (symbols only grow), so every merge made inside it was
 * the lowest (rank, position) candidate of the whole piece, hence of the span: BPE of T's
 * bytes alone makes the same merges in the same order and so reaches [L, R] too, whose only
 * candidate is L + R -> T, its last merge.  A token whose own bytes do not end as [T] (or
 * hold a byte without a token) has no final split and is never formed.  So the table holds
 * the final splits only: no merge of any piece ever looks up a pair left out, so every
 * result is that of the rule (the differential tests of test_c_core.py use random
 * vocabularies with shuffled ranks, where tokens have many splits).  o200k_base: 446,189
 * splits, 199,742 final ones, so the table is 8 MiB instead of 16 (cl100k_base: 4 instead of
 * 8) and its probes, most of the time of merging pieces that are not tokens, miss the cache
 * less.  (The table of all splits, built first and used for that BPE, took two passes of
 * lookups over every split point of every token: o200k_base loaded in 0.9 s.)
 *
 * How.  Each final split comes from BPE of the token's bytes under the rule itself, by the
 * plain quadratic algorithm (tokens are short): two adjacent symbols merge when their bytes
 * are one token, found in the whole-token hash table, except that a span of two bytes (every
 * first candidate) is read from a 64K array of the two-byte tokens made first.  Those lookups
 * are most of a tokenizer's load time (a random probe of a table of megabytes each), so the
 * tokens are shared out in contiguous ranges among up to bpe_cores_available() threads (at
 * least MIN_PER_THREAD tokens each), each writing only its own range of split[] with its own
 * work arrays; the tokenizer is only read.  The result does not depend on the thread count.
 */
#include <pthread.h>
#include <stdlib.h>

#include "tokenizer.h"

#define MAX_THREADS 16
#define MIN_PER_THREAD 4096

/* What one thread needs: a range of the spec's tokens, and work room for the longest. */
typedef struct split_range {
    const bpe_tokenizer *tok;
    const bpe_spec *sp;
    const uint32_t *two_byte;   /* [a << 8 | b]: the id of the token of bytes a, b, or NO_ID */
    uint32_t *split;            /* split[2i], split[2i + 1]: token i's final split */
    size_t begin, end;          /* the token indexes of this range */
    size_t longest;             /* the longest token's length, >= 2 */
    size_t kept;                /* out: how many tokens of the range have a final split */
    int rc;                     /* out: BPE_OK or BPE_ERR_NOMEM */
} split_range;

/* Symbols of the BPE of one token: symbol i is ids[i], covering p[start[i] .. start[i + 1]),
 * and rank[i] is the id of the token that symbols i and i + 1 make together, or
 * UINT32_MAX. */
typedef struct symbols {
    const bpe_tokenizer *tok;
    const uint32_t *two_byte;
    const uint8_t *p;
    uint32_t *ids, *start, *rank;
} symbols;

/* Sets s->rank[i] from the bytes of symbols i and i + 1. */
static void span_rank(symbols *s, size_t i)
{
    const uint8_t *b = s->p + s->start[i];
    size_t n = s->start[i + 2] - s->start[i];
    uint32_t id = n == 2 ? s->two_byte[(uint32_t)b[0] << 8 | b[1]]
                         : bpe_ordinary_lookup(s->tok, b, n, bpe_hash_bytes(b, n));
    s->rank[i] = id == BPE_NO_ID ? UINT32_MAX : id;
}

/* Replaces symbols b and b + 1 of m by the token they make (rank[b]); m - 1 remain. */
static void merge_at(symbols *s, size_t b, size_t m)
{
    size_t i;
    s->ids[b] = s->rank[b];
    for (i = b + 1; i + 1 < m; i++) {   /* remove symbol b + 1 */
        s->ids[i] = s->ids[i + 1];
        s->rank[i] = s->rank[i + 1];
    }
    for (i = b + 1; i < m; i++)
        s->start[i] = s->start[i + 1];
    m--;
    if (b + 1 < m)
        span_rank(s, b);
    if (b > 0)
        span_rank(s, b - 1);
}

/* The final split of the token whose bytes are s->p[0..n), n >= 2: BPE of the bytes under the
 * tiktoken rule (lowest id first, leftmost on ties) ends by merging *left and *right.  The
 * work arrays of s: room for n ids and ranks, n + 1 starts.  Returns 0 when the bytes do not
 * end as one token. */
static int final_split(symbols *s, size_t n, uint32_t *left, uint32_t *right)
{
    size_t m = n, i, b;
    for (i = 0; i < n; i++) {
        if ((s->ids[i] = s->tok->byte_id[s->p[i]]) == BPE_NO_ID)
            return 0;
        s->start[i] = (uint32_t)i;
    }
    s->start[n] = (uint32_t)n;
    for (i = 0; i + 1 < n; i++)
        span_rank(s, i);
    for (;;) {
        for (b = 0, i = 1; i + 1 < m; i++)
            if (s->rank[i] < s->rank[b])
                b = i;
        if (s->rank[b] == UINT32_MAX)
            return 0;
        if (m == 2) {
            *left = s->ids[0];
            *right = s->ids[1];
            return 1;
        }
        merge_at(s, b, m);
        m--;
    }
}

static void *split_range_main(void *arg)
{
    split_range *r = arg;
    symbols s;
    uint32_t *work;
    size_t i;
    r->kept = 0;
    r->rc = BPE_OK;
    if ((work = malloc((3 * r->longest + 1) * sizeof *work)) == NULL) {
        r->rc = BPE_ERR_NOMEM;
        return NULL;
    }
    s.tok = r->tok;
    s.two_byte = r->two_byte;
    s.ids = work;
    s.rank = work + r->longest;
    s.start = work + 2 * r->longest;
    for (i = r->begin; i < r->end; i++) {
        const bpe_token_ref *t = &r->tok->by_id[r->sp->token_ids[i]];
        r->split[2 * i] = r->split[2 * i + 1] = BPE_NO_ID;
        s.p = r->tok->bytes + t->off;
        if (t->len >= 2 && final_split(&s, t->len, &r->split[2 * i], &r->split[2 * i + 1]))
            r->kept++;
    }
    free(work);
    return NULL;
}

/* The 64K array of two-byte token ids (BPE_NO_ID where none), or NULL without memory. */
static uint32_t *two_byte_tokens(const bpe_tokenizer *tok, const bpe_spec *sp)
{
    uint32_t *ids = malloc(65536 * sizeof *ids);
    size_t i;
    if (ids == NULL)
        return NULL;
    for (i = 0; i < 65536; i++)
        ids[i] = BPE_NO_ID;
    for (i = 0; i < sp->n_tokens; i++) {
        const bpe_token_ref *t = &tok->by_id[sp->token_ids[i]];
        if (t->len == 2)
            ids[(uint32_t)tok->bytes[t->off] << 8 | tok->bytes[t->off + 1]] = sp->token_ids[i];
    }
    return ids;
}

/* How many threads to share n tokens among. */
static size_t thread_count(size_t n)
{
    size_t k = (size_t)bpe_cores_available(), most = n / MIN_PER_THREAD;
    if (k > MAX_THREADS)
        k = MAX_THREADS;
    if (k > most)
        k = most;
    return k ? k : 1;
}

/* Runs the ranges on k threads (the caller is one; a range whose thread cannot start runs
 * on the caller after its own) and joins them. */
static void run_ranges(split_range *r, size_t k)
{
    pthread_t tid[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    size_t i;
    for (i = 1; i < k; i++)
        started[i] = pthread_create(&tid[i], NULL, split_range_main, &r[i]) == 0;
    split_range_main(&r[0]);
    for (i = 1; i < k; i++) {
        if (started[i])
            pthread_join(tid[i], NULL);
        else
            split_range_main(&r[i]);
    }
}

/* Writes the final split of every ordinary token of sp (spec order) into split[2i],
 * split[2i + 1] (BPE_NO_ID when it has none); *kept = how many have one.  BPE_OK or
 * BPE_ERR_NOMEM. */
int bpe_final_splits(const bpe_tokenizer *tok, const bpe_spec *sp, uint32_t *split,
                     size_t *kept)
{
    split_range r[MAX_THREADS];
    size_t i, n = sp->n_tokens, longest = 2, k = thread_count(n);
    uint32_t *two_byte;
    int rc = BPE_OK;
    for (i = 0; i < n; i++)
        if (tok->by_id[sp->token_ids[i]].len > longest)
            longest = tok->by_id[sp->token_ids[i]].len;
    if (longest > (SIZE_MAX / sizeof(uint32_t) - 1) / 3 ||
        (two_byte = two_byte_tokens(tok, sp)) == NULL)
        return BPE_ERR_NOMEM;
    for (i = 0; i < k; i++) {
        r[i].tok = tok;
        r[i].sp = sp;
        r[i].two_byte = two_byte;
        r[i].split = split;
        r[i].begin = n * i / k;
        r[i].end = n * (i + 1) / k;
        r[i].longest = longest;
    }
    run_ranges(r, k);
    *kept = 0;
    for (i = 0; i < k; i++) {
        *kept += r[i].kept;
        if (r[i].rc != BPE_OK)
            rc = r[i].rc;
    }
    free(two_byte);
    return rc;
}
