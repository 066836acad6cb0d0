/*
 * longpiece.c - exact byte-pair encoding of long pieces in near-linear time.
 *
 * The heap of merge.c costs O(n log n) with a cache miss at nearly every step, so one
 * never-repeating 10 MB piece ran ~30x slower per byte than prose.  Pieces of at least
 * tok->long_min bytes come here instead: a left-to-right search over token sequences that
 * gives exactly the ids of merge.c.
 *
 * WHY IT IS EXACT.  BPE(s) is what merge.c computes: start from single-byte tokens, merge the
 * adjacent pair of lowest rank, leftmost on ties, until none merges.  Whether two adjacent
 * symbols merge (and at what rank, into what) depends only on their two ids, under both rules
 * (the pair table, tokenizer.c).  A token sequence is "valid" if it is BPE of its own bytes; a
 * token t is "usable" if [t] is valid.
 *   Fact 1 (cutting).  Any run of consecutive tokens of BPE(s) is BPE of its own bytes: within
 *   the run's span, BPE(s) makes exactly the merges inside the span, each one the lowest
 *   (rank, position) candidate of all s, hence of the span; nothing merges across its ends.
 *   Fact 2 (gluing).  If X+[y] and [y]+Z are valid (y a token), X+[y]+Z is valid.  Up to the
 *   first merge across a border of y's span, BPE of the whole interleaves merges inside X, y
 *   and Z, and the ones inside X and y follow the same rule (lower of the next merge of each
 *   side) as BPE of X+[y] alone, which therefore meets the same crossing pair, at the same
 *   state, as its lowest candidate: it would cross too.  Likewise for y|Z with [y]+Z.
 * So a sequence is valid iff each adjacent pair is a valid pair (and a lone token is usable),
 * and BPE(s) is the ONLY such sequence covering s: any search that finds a covering sequence of
 * usable tokens with valid adjacent pairs returns BPE(s), whatever the vocabulary.
 *
 * THE SEARCH (backtracking).  ids[0..k) is a valid sequence covering p[0..pos); by uniqueness
 * it is BPE(p[0..pos)), so a position is reached by one sequence only, and a position from
 * which no completion exists stays a dead end (the bitmap `dead`).  At pos it tries the usable
 * tokens matching there, longest first (the trie gives the longest, `shorter` the rest), and
 * appends the first whose end is not dead and which forms a valid pair with ids[k-1]; when none
 * does it marks pos dead, removes ids[k-1] and tries that token's remaining alternatives.  Each
 * position is entered at most once: O(n x matches per position x pair check).  The order of
 * the candidates does not change the result (it only finds the one covering sequence), so it
 * is chosen for speed: longest first, except that a longest one that defer() judges probably
 * wrong (its last byte would rather merge with the next byte) goes last.  On prose the longest
 * match is nearly always right; on random letters plain longest-first pushed ~1.33 tokens per
 * token kept (a third popped again) and the deferral brings that to ~1.1.
 *
 * THE PAIR CHECK, and the one property of the vocabulary it needs.  A usable multi-byte token
 * t has a split (left, right): BPE of its bytes ends by merging left + right at rank R(t)
 * (level = R + 1; level 0 for single bytes); by Fact 1 both halves are usable, so each usable
 * token has a merge tree.  Property M: for every usable t, R(t) > R(left) and R(t) > R(right).
 * Under M, BPE of a token makes its tree's merges in increasing (rank, position) order (a
 * merge not yet possible has a possible one of lower rank below it), and BPE of a + b (a, b
 * usable) interleaves the merges of a and of b in that order until something crosses.  The
 * crossing candidate is (P, Q): a's current last symbol, a node of a's right spine, and b's
 * first, a node of b's left spine.  As the pending ranks only rise while P and Q stand, it
 * merges iff it beats the next spine merge: rank(P, Q) < R of it when it is a's (a's merges
 * lie to the left and win ties), rank(P, Q) <= R when it is b's; and a + b itself must not
 * merge.  pair_ok walks the two spines back from (a, b), undoing the later spine merge first
 * (b's on equal ranks): 1 + depth(a's right spine) + depth(b's left spine) pair-table probes.
 * Every token is classified on first use as a candidate (classify: the plain quadratic BPE of
 * its bytes, which also yields the split, level and M-status of every token of its tree) and
 * is GOOD (usable, M holds in its tree), UNUSABLE (skipped) or BAD (usable, M fails); meeting
 * a BAD one marks the tokenizer UNSUPPORTED, and that piece and all later ones take the heap
 * (the search has written nothing the heap does not overwrite).
 * So does a vocabulary with a token longer than MAX_TOKEN.  gpt2 (merge list), cl100k_base and
 * o200k_base satisfy M, with every token usable.  ignore_merges is decided before merging
 * (encode.c), so it does not concern this file.
 *
 * PAIR PROBES SPARED (the pair table does not fit in cache; its probes were most of the time).
 * A pair (P, Q) can merge only if P's bytes followed by Q's form a token; P ends where a ends,
 * so those bytes are the text from P's start, and the trie walk from there (its `reach`, the
 * longest prefix of the text that begins some token; memoised, see reach_at()) rules out
 * every Q longer than reach - len(P) without a probe.  Pairs of two single bytes, the most common
 * probes, read a 256 x 256 table instead.  With the walk starting at a 65536-entry table of
 * two-byte nodes, the search of 1 MB of random letters (cl100k, this loaded machine) went
 * from ~0.6 s to ~0.1 s.  Under the tiktoken rule a short pair that passes the filter is
 * looked up in the trie, not the table (probe()): its bytes are a token iff the node at its
 * depth on the walk is, and that token's id is the rank.  Where the reach at P's start is not
 * known yet (P the right part of a token, inside it), such a pair is walked straight away
 * (token_id_at(), a walk of its l <= 4 bytes that stops where the text leaves the trie) rather
 * than walked to the reach first: o200k random letters 4-6% faster, cl100k 3%.
 *
 * THE PAIR MEMO.  Whether a, b form a valid pair depends on a and b only, so for the tokens of
 * one or two bytes (the first n_short slots, at most PAIR_MEMO_MAX) the answer is kept, two
 * bits per pair, once pair_ok has given it (pair_valid()): on random letters nearly three
 * checks in four are of such pairs, and a few hundred thousand pairs cover a long text.  Any
 * caller may fill an entry (an atomic or of a value every caller computes alike), none ever
 * changes one.  o200k, 10 MB of random letters: ~11% faster with the tables warm from
 * another such text (over a fresh tokenizer's first two such texts, 374K checks filled an
 * entry, 4.5M found theirs, 2.0M were of longer tokens).  An earlier memo, timed on 3 MB
 * with slots in byte order, had shown no gain.
 *
 * THE WALK.  A step finds the child with one 16-byte compare of the node's sorted labels
 * (child()), so it mispredicts at most the answer; the walks are most of the search's
 * instructions.  On a run of one byte it scans with branches instead (child_scan()), which
 * the predictor follows down the trie ahead of the loads.  (callgrind, o200k, 1 MB of random
 * letters, the whole search: 216 instructions and 2.3 mispredicted branches per byte; with
 * bisected children, longest-first order and table probes it was 293 and 4.6, and ~1.6x
 * slower on 10 MB.)
 *
 * TABLES (struct bpe_long_tables), built once per tokenizer on first use by the caller whose
 * compare-and-swap moves tok->long_state from UNBUILT to BUILDING; callers that see BUILDING
 * use the heap meanwhile; READY is stored with release order after the tables are complete.
 * The trie holds every ordinary token, its nodes numbered breadth first with children in byte
 * order, so the children of node k are nodes node[k].first .. node[k+1].first - 1 (node 0
 * is the root); node[k].best is the longest token that is a prefix of the node's string, and
 * a token's `shorter` is the next longest prefix token: together they list the candidates at
 * a position; label[] has LABEL_PAD bytes of slack for the 16-byte compares.
 * Inside these tables and the search a token is named by its SLOT, its place among the
 * ordinary tokens ordered by length, then bytes (slot_of / id_of map to and from ids; the
 * search's output is mapped back): tokens[] is indexed by slot, so the tokens a text meets,
 * mostly short and sharing prefixes, have their entries close together.  In id order o200k's
 * 4.8 MB of entries put about one entry a random-letter word reads per cache line; in byte
 * order the search of such a word ran 7-12% faster (one process, turn about; cl100k, half the
 * entries, unchanged), and length first ~7% faster again (o200k, 10 MB, warm tables).  Only
 * tokens[].state and the fields it guards (left, right, level, bottom) change afterwards, each
 * token at most once, by a caller holding fill_lock (a spinlock: a token costs microseconds),
 * and they are published by a release store of the state, so readers take no lock.
 */
#include <sched.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <stdlib.h>
#include <string.h>

#include "buffers.h"
#include "longpiece.h"
#include "tokenizer.h"

#define NONE UINT32_MAX
#if defined(__GNUC__)
#define NOINLINE __attribute__((noinline))
#define ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define NOINLINE
#define ALWAYS_INLINE inline
#endif
#define MAX_TOKEN 1024        /* longest ordinary token the tables accept */
#define TRIE_PROBE_MAX 4      /* longest pair that probe() looks up in the trie */
#define LABEL_PAD 16          /* zero bytes after the labels: child() reads 16 at a time */
#define FILL_SPINS 100000     /* yields while waiting for fill_lock before declining a piece */
#define LATE_SHIFT 30         /* the search's stack: a slot, and its position's `late` above */
#define SLOT_MASK ((1u << LATE_SHIFT) - 1)
#define REACH_RING 65536      /* most entries of the memo of walk reaches: 256 KB */
#define REACH_UNKNOWN 0xffff0000u   /* a ring entry that notes nothing for any position */
#define PAIR_MEMO_MAX 8192    /* most short tokens the pair memo covers (16 MB of bits) */
#define PAIR_VALID 1u
#define PAIR_INVALID 2u

/* States of a token (long_token.state). */
#define TOK_UNKNOWN 0    /* not classified yet */
#define TOK_GOOD 1       /* usable, and property M holds throughout its merge tree */
#define TOK_UNUSABLE 2   /* BPE of its bytes is not [t]: never a candidate */
#define TOK_BAD 3        /* usable, but M fails in its tree: the method is off for the tokenizer */

/* What the long path knows about one ordinary token; in this file tokens are named by their
 * slots (see TABLES above), in these fields too. */
typedef struct long_token {
    uint32_t left;      /* GOOD/BAD multi-byte tokens: BPE of the bytes ends merging left+right;
                           a single-byte token: its byte */
    uint32_t right;
    uint32_t level;     /* rank of that last merge + 1; 0 for a single-byte token */
    uint32_t shorter;   /* the longest token that is a proper prefix of this one, or NONE */
    uint32_t bottom;    /* multi-byte: the rank of the lowest merge of its right spine (the one
                           that joins its last byte), for defer() */
    uint16_t len;       /* byte length (at most MAX_TOKEN) */
    uint16_t state;     /* TOK_*: written (release) under fill_lock, read with acquire; left,
                           right, level and bottom are valid once it is not UNKNOWN */
} long_token;

/* One trie node. */
typedef struct trie_node {
    uint32_t first;   /* its children are nodes first .. (this + 1)->first - 1 */
    uint32_t best;    /* the longest token that is a prefix of its string, NONE for the root */
} trie_node;

struct bpe_long_tables {
    long_token *tokens;   /* an entry per slot; len and shorter set at build */
    uint32_t *slot_of;    /* id_limit entries: the slot of each ordinary id, NONE for others */
    uint32_t *id_of;      /* an entry per slot: the id of each slot */
    uint32_t root[256];   /* the trie node of each one-byte string, NONE if not in the trie */
    uint32_t *node2;      /* 65536 entries: the node of each two-byte string (first byte high),
                             NONE if not in the trie; the walk starts there, skipping the two
                             widest levels (their bisections were half of the walk's
                             mispredicted branches) */
    trie_node *node;      /* n_nodes + 1 entries (first and best side by side: one cache line
                             per step of a walk) */
    uint8_t *label;       /* n_nodes (+ LABEL_PAD zeros): the last byte of each node's string;
                             a node's children have distinct labels, in increasing order */
    size_t n_nodes;
    int all_bytes;        /* 1 if every byte has a single-byte token: no text lacks one */
    int fill_lock;        /* 1 while a caller classifies tokens (atomic exchange) */
    uint32_t *sym;        /* classifier work arrays, MAX_TOKEN entries each, used under */
    uint32_t *sym_level;  /* fill_lock: a symbol's id and level, */
    uint8_t *sym_good;    /* whether M holds in its tree, */
    uint32_t *pair_rank;  /* and the rank and result of the pair it starts, */
    uint32_t *pair_nid;
    uint32_t *sym_start;  /* and where its bytes start in the token's (MAX_TOKEN + 1 entries:
                             sym_start[m] is the token's length) */
    uint32_t n_short;     /* slots below this are the tokens of one or two bytes (at most
                             PAIR_MEMO_MAX): the pairs the memo covers */
    uint32_t *pair_memo;  /* n_short^2 entries of two bits, entry a * n_short + b: whether the
                             GOOD tokens a, b form a valid pair: 0 not known yet, PAIR_VALID
                             or PAIR_INVALID; set by atomic or, by any caller, never changed */
};

void bpe_long_tables_free(bpe_long_tables *t)
{
    if (t == NULL)
        return;
    free(t->tokens);
    free(t->slot_of);
    free(t->id_of);
    free(t->node);
    free(t->label);
    free(t->node2);
    free(t->sym);
    free(t->pair_memo);
    free(t);
}

/* ---- classifying a token (lazily, under fill_lock) --------------------------------------- */

static inline uint32_t token_id_at(const bpe_long_tables *t, const uint8_t *s, size_t l);

/* The rank and result of merging symbols i and i+1 of the simulation of the token whose bytes
 * are p.  Two single bytes: the byte-pair table; under BPE_RULE_TIKTOKEN a pair merges iff its
 * bytes are a token, and the rank is that token's id, which the trie gives; else the pair
 * table, whose probes miss the cache (classifying a token took ~1 us that way). */
static void sim_pair(const bpe_tokenizer *tok, bpe_long_tables *t, const uint8_t *p, size_t i)
{
    uint32_t start = t->sym_start[i], rank, nid;
    if ((t->sym_level[i] | t->sym_level[i + 1]) == 0) {
        const bpe_byte_pair *bp = bpe_byte_pair_of(tok, p[start], p[start + 1]);
        rank = bp->rank;
        nid = bp->new_id;
    } else if (tok->rule == BPE_RULE_TIKTOKEN) {
        rank = nid = token_id_at(t, p + start, t->sym_start[i + 2] - start);
    } else {
        const bpe_pair_entry *e = bpe_pair_find(tok, t->sym[i], t->sym[i + 1]);
        rank = e ? e->rank : NONE;
        nid = e ? e->new_id : 0;
    }
    t->pair_rank[i] = rank;
    t->pair_nid[i] = rank != NONE ? nid : 0;
}

/* Symbols i and i+1 of the simulation merge (of m); the new token is recorded if unknown:
 * every symbol BPE ever forms is usable (the merges inside its span so far are those of BPE of
 * its own bytes, which has reached one symbol), and its split is this merge. */
static void sim_merge(bpe_long_tables *t, size_t i, size_t m)
{
    uint32_t y = t->pair_nid[i], level = t->pair_rank[i] + 1, ys = t->slot_of[y];
    uint32_t ls = t->slot_of[t->sym[i]], rs = t->slot_of[t->sym[i + 1]];
    /* a merge into or of a token that is not ordinary (no slot) cannot come from a spec the
     * tokenizer accepts; should it, the tree is not GOOD and the heap decides */
    int good = t->sym_good[i] && t->sym_good[i + 1] && level > t->sym_level[i] &&
               level > t->sym_level[i + 1] && ys != NONE && ls != NONE && rs != NONE;
    long_token *e = ys != NONE ? &t->tokens[ys] : NULL;
    size_t j;
    if (e != NULL && e->state == TOK_UNKNOWN) {
        e->left = ls;
        e->right = rs;
        e->level = level;
        e->bottom = t->sym_level[i + 1] == 0 || rs == NONE ? level - 1 : t->tokens[rs].bottom;
        __atomic_store_n(&e->state, good ? TOK_GOOD : TOK_BAD, __ATOMIC_RELEASE);
    }
    t->sym[i] = y;
    t->sym_level[i] = level;
    t->sym_good[i] = (uint8_t)good;
    for (j = i + 1; j + 1 < m; j++) {
        t->sym[j] = t->sym[j + 1];
        t->sym_level[j] = t->sym_level[j + 1];
        t->sym_good[j] = t->sym_good[j + 1];
        t->pair_rank[j] = t->pair_rank[j + 1];
        t->pair_nid[j] = t->pair_nid[j + 1];
        t->sym_start[j] = t->sym_start[j + 1];
    }
    t->sym_start[m - 1] = t->sym_start[m];
}

/* Runs BPE on token x's bytes by the plain rule (scan for the lowest rank, leftmost), which
 * records x and the tokens of its tree; x is UNUSABLE if the result is not [x]. */
static void classify(const bpe_tokenizer *tok, bpe_long_tables *t, uint32_t x)
{
    uint32_t id = t->id_of[x];
    const uint8_t *p = tok->bytes + tok->by_id[id].off;
    size_t m = tok->by_id[id].len, i, b;
    for (i = 0; i < m; i++) {
        if ((t->sym[i] = tok->byte_id[p[i]]) == BPE_NO_ID) {
            m = 0;   /* a byte without a token: BPE never forms x */
            break;
        }
        t->sym_level[i] = 0;
        t->sym_good[i] = 1;
        t->sym_start[i] = (uint32_t)i;
    }
    t->sym_start[m] = (uint32_t)m;
    for (i = 0; i + 1 < m; i++)
        sim_pair(tok, t, p, i);
    while (m > 1) {
        uint32_t best = NONE;
        for (i = 0, b = 0; i + 1 < m; i++)
            if (t->pair_rank[i] < best) {
                best = t->pair_rank[i];
                b = i;
            }
        if (best == NONE)
            break;
        sim_merge(t, b, m--);
        if (b + 1 < m)
            sim_pair(tok, t, p, b);
        if (b > 0)
            sim_pair(tok, t, p, b - 1);
    }
    if (t->tokens[x].state == TOK_UNKNOWN)
        __atomic_store_n(&t->tokens[x].state, TOK_UNUSABLE, __ATOMIC_RELEASE);
}

/* token_state's slow path: classifies x under fill_lock. */
static NOINLINE uint32_t fill_state(const bpe_tokenizer *tok, bpe_long_tables *t, uint32_t x)
{
    uint32_t st;
    long i;
    for (i = 0; i < FILL_SPINS; i++) {
        if (!__atomic_load_n(&t->fill_lock, __ATOMIC_RELAXED) &&
            !__atomic_exchange_n(&t->fill_lock, 1, __ATOMIC_ACQUIRE))
            break;
        sched_yield();
    }
    if (i == FILL_SPINS)
        return TOK_UNKNOWN;
    if (t->tokens[x].state == TOK_UNKNOWN)
        classify(tok, t, x);
    st = t->tokens[x].state;
    __atomic_store_n(&t->fill_lock, 0, __ATOMIC_RELEASE);
    return st;
}

/* The state of token x, classifying it first if needed; TOK_UNKNOWN only when fill_lock stayed
 * busy for FILL_SPINS yields (a token takes microseconds: its holder vanished in fork()). */
static inline uint32_t token_state(const bpe_tokenizer *tok, const bpe_long_tables *ct,
                                   uint32_t x)
{
    bpe_long_tables *t = (bpe_long_tables *)ct;   /* the states are its lazily filled part */
    uint32_t st = __atomic_load_n(&t->tokens[x].state, __ATOMIC_ACQUIRE);
    return st != TOK_UNKNOWN ? st : fill_state(tok, t, x);
}

/* ---- building: the sorted tokens --------------------------------------------------------- */

static int is_ordinary(const bpe_tokenizer *tok, uint32_t id)
{
    return tok->by_id[id].len != 0 && tok->is_special[id] != 1;
}

/* One ordinary token, for sorting. */
typedef struct entry {
    const uint8_t *p;   /* the token's bytes */
    uint32_t len;
    uint32_t id;
} entry;

static int entry_cmp(const void *x, const void *y)
{
    const entry *a = x, *b = y;
    int c = memcmp(a->p, b->p, a->len < b->len ? a->len : b->len);
    if (c != 0)
        return c;
    return a->len < b->len ? -1 : a->len > b->len;
}

/* The ordinary tokens into a new array *out of *count entries (free it); BPE_LONG_DECLINED if
 * a token is longer than MAX_TOKEN. */
static int list_tokens(const bpe_tokenizer *tok, entry **out, size_t *count)
{
    size_t n = 0;
    uint32_t id;
    entry *ent;
    for (id = 0; id < tok->id_limit; id++) {
        if (!is_ordinary(tok, id))
            continue;
        if (tok->by_id[id].len > MAX_TOKEN)
            return BPE_LONG_DECLINED;
        n++;
    }
    if (n > SLOT_MASK)
        return BPE_LONG_DECLINED;   /* the search's stack keeps a slot in 30 bits */
    if ((ent = malloc((n ? n : 1) * sizeof *ent)) == NULL)
        return BPE_ERR_NOMEM;
    for (n = 0, id = 0; id < tok->id_limit; id++)
        if (is_ordinary(tok, id)) {
            ent[n].p = tok->bytes + tok->by_id[id].off;
            ent[n].len = tok->by_id[id].len;
            ent[n].id = id;
            n++;
        }
    *out = ent;
    *count = n;
    return BPE_OK;
}

/* The first eight bytes of a token, big-endian, zero-padded: their order is the bytes' order
 * except between strings that agree on them. */
static uint64_t prefix8(const entry *e)
{
    uint64_t k = 0;
    size_t i;
    for (i = 0; i < 8; i++)
        k = k << 8 | (i < e->len ? e->p[i] : 0);
    return k;
}

/* The histograms of the eight bytes of the keys, in one pass: count[b][v] keys have the value
 * v in byte b (byte 0 the lowest). */
static void count_bytes(const uint64_t *k, size_t n, size_t (*count)[256])
{
    size_t i;
    int b;
    memset(count, 0, 8 * sizeof *count);
    for (i = 0; i < n; i++)
        for (b = 0; b < 8; b++)
            count[b][(k[i] >> (8 * b)) & 255]++;
}

/* One pass of the radix sort: by byte `shift / 8` of the keys, stably, from (k, x) to (k2, x2);
 * count is that byte's histogram (turned into the running starts). */
static void radix_pass(const uint64_t *k, const uint32_t *x, uint64_t *k2, uint32_t *x2,
                       size_t n, int shift, size_t *count)
{
    size_t i, sum = 0;
    for (i = 0; i < 256; i++) {
        size_t c = count[i];
        count[i] = sum;
        sum += c;
    }
    for (i = 0; i < n; i++) {
        size_t j = count[(k[i] >> shift) & 255]++;
        k2[j] = k[i];
        x2[j] = x[i];
    }
}

/* Sorts a run of entries that agree on their first eight bytes: by insertion when short (one
 * qsort call per run cost more than the sorting; there are ~10^4 runs in o200k), else qsort. */
static void sort_run(entry *e, size_t n)
{
    size_t i, j;
    if (n > 32) {
        qsort(e, n, sizeof *e, entry_cmp);
        return;
    }
    for (i = 1; i < n; i++) {
        entry x = e[i];
        for (j = i; j > 0 && entry_cmp(&e[j - 1], &x) > 0; j--)
            e[j] = e[j - 1];
        e[j] = x;
    }
}

/* Sorts ent[0..n) by bytes, a prefix before its extensions: a radix sort on the first eight
 * bytes (a comparison sort of 10^5 tokens with memcmp took ~0.2 s), then each run of entries
 * that agree on them by comparison. */
static int sort_entries(entry *ent, size_t n)
{
    uint64_t *k = malloc(2 * (n ? n : 1) * sizeof *k);
    uint32_t *x = malloc(2 * (n ? n : 1) * sizeof *x);
    entry *tmp = malloc((n ? n : 1) * sizeof *tmp);
    size_t count[8][256], i, j;
    int b;
    if (k == NULL || x == NULL || tmp == NULL) {
        free(k);
        free(x);
        free(tmp);
        return BPE_ERR_NOMEM;
    }
    for (i = 0; i < n; i++) {
        k[i] = prefix8(&ent[i]);
        x[i] = (uint32_t)i;
    }
    count_bytes(k, n, count);
    for (b = 0; b < 8; b += 2) {   /* two byte passes per round: back in k, x */
        radix_pass(k, x, k + n, x + n, n, 8 * b, count[b]);
        radix_pass(k + n, x + n, k, x, n, 8 * b + 8, count[b + 1]);
    }
    for (i = 0; i < n; i++)
        tmp[i] = ent[x[i]];
    memcpy(ent, tmp, n * sizeof *ent);
    for (i = 0; i < n; i = j) {
        for (j = i + 1; j < n && k[j] == k[i]; j++)
            ;
        if (j - i > 1)
            sort_run(ent + i, j - i);
    }
    free(k);
    free(x);
    free(tmp);
    return BPE_OK;
}

/* Copies the bytes of the sorted entries end to end into a new buffer *packed (free it) and
 * points the entries there: the trie is built by two passes over the tokens in sorted order,
 * each comparing a token's bytes with the one's before it, which in tok->bytes (id order) lie
 * far apart. */
static int pack_entries(entry *ent, size_t n, uint8_t **packed)
{
    size_t total = 0, i;
    uint8_t *out;
    for (i = 0; i < n; i++)
        total += ent[i].len;
    if ((*packed = out = malloc(total ? total : 1)) == NULL)
        return BPE_ERR_NOMEM;
    for (i = 0; i < n; i++) {
        memcpy(out, ent[i].p, ent[i].len);
        ent[i].p = out;
        out += ent[i].len;
    }
    return BPE_OK;
}

/* ---- building: the trie of all ordinary tokens ------------------------------------------- */

/* The length of the longest common prefix of two sorted neighbours. */
static size_t common_prefix(const entry *a, const entry *b)
{
    size_t n = a->len < b->len ? a->len : b->len, i = 0;
    while (i < n && a->p[i] == b->p[i])
        i++;
    return i;
}

/* Numbers the nodes breadth first: the nodes of depth d (strings of d bytes) are nodes
 * base[d] .. base[d + 1] - 1, in the order of the sorted tokens that make them (token k makes
 * the nodes of depths from[k] .. its length, below its common prefix with the one before it);
 * so the children of a node are consecutive and in byte order.  Sets from[] and returns the
 * number of nodes, the root included. */
static size_t number_depths(const entry *ent, size_t n, uint32_t *base, uint16_t *from)
{
    size_t i, d, total = 1;
    memset(base, 0, (MAX_TOKEN + 2) * sizeof *base);
    for (i = 0; i < n; i++) {
        from[i] = (uint16_t)(i ? common_prefix(&ent[i - 1], &ent[i]) + 1 : 1);
        for (d = from[i]; d <= ent[i].len; d++)
            base[d + 1]++;
    }
    base[1] = 1;
    for (d = 1; d <= MAX_TOKEN; d++) {
        total += base[d + 1];
        base[d + 1] += base[d];
    }
    return total;
}

/* Makes the nodes of the sorted tokens in one pass, token k's of depths from[k] on (see
 * number_depths): labels, first children, best[], and shorter[k] (the best of the node above
 * the one where token k ends; set_slots moves it to tokens[]).  next[d] is the next node
 * number of depth d, path[d] the current token's node of depth d. */
static void add_nodes(bpe_long_tables *t, const entry *ent, size_t n, const uint16_t *from,
                      uint32_t *next, uint32_t *path, uint32_t *shorter)
{
    size_t i, d;
    path[0] = 0;
    for (i = 0; i < n; i++) {
        for (d = from[i]; d <= ent[i].len; d++) {
            uint32_t node = next[d]++, parent = path[d - 1];
            t->label[node] = ent[i].p[d - 1];
            t->node[node].first = NONE;
            t->node[node].best = t->node[parent].best;
            if (t->node[parent].first == NONE)
                t->node[parent].first = node;
            path[d] = node;
        }
        t->node[path[ent[i].len]].best = (uint32_t)i;
        shorter[i] = t->node[path[ent[i].len - 1]].best;
    }
}

static int fill_node2(bpe_long_tables *t)
{
    size_t i, c;
    if ((t->node2 = malloc(65536 * sizeof *t->node2)) == NULL)
        return BPE_ERR_NOMEM;
    for (i = 0; i < 65536; i++)
        t->node2[i] = NONE;
    for (c = 0; c < 256; c++)
        if (t->root[c] != NONE)
            for (i = t->node[t->root[c]].first; i < t->node[t->root[c] + 1].first; i++)
                t->node2[c << 8 | t->label[i]] = (uint32_t)i;
    return BPE_OK;
}

/* The slot of each sorted entry: the entries ordered by length, then bytes (a counting sort by
 * length of the byte-sorted entries), so the short tokens a text meets most lie together. */
static int slot_order(const entry *ent, size_t n, uint32_t **out)
{
    size_t start[MAX_TOKEN + 2] = {0}, i, d;
    uint32_t *slot = malloc((n ? n : 1) * sizeof *slot);
    if ((*out = slot) == NULL)
        return BPE_ERR_NOMEM;
    for (i = 0; i < n; i++)
        start[ent[i].len + 1]++;
    for (d = 1; d <= MAX_TOKEN + 1; d++)
        start[d] += start[d - 1];
    for (i = 0; i < n; i++)
        slot[i] = (uint32_t)start[ent[i].len]++;
    return BPE_OK;
}

/* Numbers the tokens by length, then bytes (their slots): sets every slot's len and shorter,
 * the maps between slots and ids, and turns the trie's best[] from entries into slots.  Slots,
 * not ids, index t->tokens: the tokens a text meets share prefixes and are mostly short, so in
 * this order they lie close together (on random letters the entries the search reads fit in a
 * fraction of the cache lines they took in id order). */
static int set_slots(const bpe_tokenizer *tok, bpe_long_tables *t, const entry *ent,
                     const uint32_t *shorter, size_t n)
{
    size_t lim = tok->id_limit, i;
    uint32_t *slot = NULL;
    t->tokens = calloc(n ? n : 1, sizeof *t->tokens);
    t->id_of = malloc((n ? n : 1) * sizeof *t->id_of);
    t->slot_of = malloc((lim ? lim : 1) * sizeof *t->slot_of);
    if (t->tokens == NULL || t->id_of == NULL || t->slot_of == NULL ||
        slot_order(ent, n, &slot) != BPE_OK)
        return BPE_ERR_NOMEM;
    for (i = 0; i < lim; i++)
        t->slot_of[i] = NONE;
    for (i = 0; i < n; i++) {
        uint32_t x = slot[i];
        t->tokens[x].shorter = shorter[i] != NONE ? slot[shorter[i]] : NONE;
        t->tokens[x].len = (uint16_t)ent[i].len;
        t->id_of[x] = ent[i].id;
        t->slot_of[ent[i].id] = x;
    }
    for (i = 0; i < t->n_nodes; i++)
        if (t->node[i].best != NONE)
            t->node[i].best = slot[t->node[i].best];
    free(slot);
    return BPE_OK;
}

/* The pair memo of the tokens of one or two bytes (the first slots), at most PAIR_MEMO_MAX of
 * them; none (n_short 0) if its memory is not to be had: it only saves time. */
static void alloc_pair_memo(bpe_long_tables *t, size_t n)
{
    size_t s = 0;
    while (s < n && s < PAIR_MEMO_MAX && t->tokens[s].len <= 2)
        s++;
    t->pair_memo = s ? calloc((s * s + 15) / 16, sizeof *t->pair_memo) : NULL;
    t->n_short = t->pair_memo != NULL ? (uint32_t)s : 0;
}

static int build_trie(const bpe_tokenizer *tok, bpe_long_tables *t, const entry *ent, size_t n)
{
    uint32_t *shorter = malloc((n ? n : 1) * sizeof *shorter);
    uint32_t *depth = malloc(2 * (MAX_TOKEN + 2) * sizeof *depth);
    uint16_t *from = malloc((n ? n : 1) * sizeof *from);   /* MAX_TOKEN fits */
    size_t i, total = 0;
    int rc = BPE_ERR_NOMEM;
    if (shorter != NULL && depth != NULL && from != NULL) {
        total = number_depths(ent, n, depth, from);
        if (total < NONE) {
            t->node = malloc((total + 1) * sizeof *t->node);
            t->label = calloc(total + LABEL_PAD, 1);
        }
    }
    if (t->node && t->label) {
        t->n_nodes = total;
        t->node[0].first = NONE;   /* the others when add_nodes makes them */
        t->node[0].best = NONE;
        add_nodes(t, ent, n, from, depth, depth + MAX_TOKEN + 2, shorter);
        t->node[t->n_nodes].first = (uint32_t)t->n_nodes;   /* the sentinel */
        t->node[t->n_nodes].best = NONE;
        for (i = t->n_nodes; i-- > 0;)
            if (t->node[i].first == NONE)
                t->node[i].first = t->node[i + 1].first;
        for (i = 0; i < 256; i++)
            t->root[i] = NONE;
        for (i = t->node[0].first; i < t->node[1].first; i++)
            t->root[t->label[i]] = (uint32_t)i;
        rc = fill_node2(t);
        if (rc == BPE_OK)
            rc = set_slots(tok, t, ent, shorter, n);
        if (rc == BPE_OK)
            alloc_pair_memo(t, n);
    }
    free(shorter);
    free(depth);
    free(from);
    return rc;
}

/* BPE_OK with *out set; BPE_ERR_NOMEM; BPE_LONG_DECLINED for an unsupported vocabulary. */
static int build_tables(const bpe_tokenizer *tok, bpe_long_tables **out)
{
    bpe_long_tables *t = calloc(1, sizeof *t);
    size_t count = 0, i;
    entry *ent = NULL;
    uint8_t *packed = NULL;
    int rc = BPE_ERR_NOMEM;
    if (t != NULL && (t->sym = malloc((5 * MAX_TOKEN + 1) * sizeof *t->sym + MAX_TOKEN)) != NULL)
        rc = BPE_OK;
    if (rc == BPE_OK && (rc = list_tokens(tok, &ent, &count)) == BPE_OK &&
        (rc = sort_entries(ent, count)) == BPE_OK &&
        (rc = pack_entries(ent, count, &packed)) == BPE_OK)
        rc = build_trie(tok, t, ent, count);
    free(packed);
    free(ent);
    if (rc != BPE_OK) {
        bpe_long_tables_free(t);
        return rc;
    }
    t->sym_level = t->sym + MAX_TOKEN;
    t->pair_rank = t->sym_level + MAX_TOKEN;
    t->pair_nid = t->pair_rank + MAX_TOKEN;
    t->sym_start = t->pair_nid + MAX_TOKEN;
    t->sym_good = (uint8_t *)(t->sym_start + MAX_TOKEN + 1);
    t->all_bytes = 1;
    for (i = 0; i < 256; i++)
        if (tok->byte_id[i] == BPE_NO_ID)
            t->all_bytes = 0;
    for (i = 0; i < 256; i++)
        if (tok->byte_id[i] != BPE_NO_ID) {
            uint32_t x = t->slot_of[tok->byte_id[i]];
            if (x == NONE) {   /* byte_id holds ordinary tokens only: never; else the heap */
                bpe_long_tables_free(t);
                return BPE_LONG_DECLINED;
            }
            t->tokens[x].state = TOK_GOOD;   /* level 0, no split */
            t->tokens[x].left = (uint32_t)i;
        }
    *out = t;
    return BPE_OK;
}

/* The tables, building them if this caller is the first; NULL when unavailable. */
static const bpe_long_tables *tables(const bpe_tokenizer *ctok)
{
    bpe_tokenizer *tok = (bpe_tokenizer *)ctok;   /* long_state/long_tables: the lazy part */
    bpe_long_tables *t = NULL;
    int expected = BPE_LONG_UNBUILT, rc;
    int st = __atomic_load_n(&tok->long_state, __ATOMIC_ACQUIRE);
    if (st == BPE_LONG_READY)
        return tok->long_tables;
    if (st != BPE_LONG_UNBUILT ||
        !__atomic_compare_exchange_n(&tok->long_state, &expected, BPE_LONG_BUILDING, 0,
                                     __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
        return NULL;
    rc = build_tables(tok, &t);
    if (rc == BPE_OK)
        tok->long_tables = t;
    st = rc == BPE_OK ? BPE_LONG_READY
                      : rc == BPE_LONG_DECLINED ? BPE_LONG_UNSUPPORTED : BPE_LONG_UNBUILT;
    __atomic_store_n(&tok->long_state, st, __ATOMIC_RELEASE);
    return t;
}

/* ---- encoding ---------------------------------------------------------------------------- */

/* The piece being encoded, with a memo of trie walks. */
typedef struct piece {
    const uint8_t *p;
    size_t n;
    uint32_t *reach;     /* reach_mask + 1 entries: (i >> 16) << 16 | reach; REACH_UNKNOWN
                            (tag 0xffff, reach 0) where nothing is noted */
    size_t reach_mask;
} piece;

/* The noted reach at position i (the length of the longest prefix of p[i..n) that begins
 * some token, at most MAX_TOKEN), 0 if not known.  Position i has entry i & reach_mask of a
 * ring, tagged with i >> 16: a ring of REACH_RING entries tells apart the positions that
 * share an entry (n < 2^32), a smaller one has an entry for every position of its piece.
 * The search reads the reaches of positions near where it stands; a position whose entry
 * was taken is walked again.  An entry per byte (2 bytes a byte: 20 MB for 10 MB of text,
 * zeroed at every call) ran no faster, and where the heap handed a fresh tokenizer new pages
 * (zeroed by the kernel at ~1.6 GB/s here) 6% slower on 10 MB of random letters. */
static inline size_t reach_at(const piece *w, size_t i)
{
    uint32_t e = w->reach[i & w->reach_mask];
    return e >> 16 == i >> 16 ? (size_t)(e & 0xffff) : 0;
}

static inline void note_reach(piece *w, size_t i, size_t r)
{
    w->reach[i & w->reach_mask] = (uint32_t)(i >> 16 << 16 | r);
}

/* Bit i set iff l[i] == c, for i < 16 (l has 16 readable bytes). */
#if defined(__SSE2__)
static inline uint32_t match16(const uint8_t *l, uint8_t c)
{
    __m128i v = _mm_loadu_si128((const __m128i *)(const void *)l);
    __m128i cc = _mm_set1_epi32((int)(c * 0x01010101u));   /* two instructions; epi8: four */
    return (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, cc));
}
#else
static inline uint32_t match16(const uint8_t *l, uint8_t c)
{
    uint32_t m = 0, i;
    for (i = 0; i < 16; i++)
        m |= (uint32_t)(l[i] == c) << i;
    return m;
}
#endif

/* The child of node with byte c, or NONE.  The labels are compared sixteen at a time (the
 * array has LABEL_PAD bytes of slack), the ones past the node's masked off: nearly every node
 * a walk meets has at most sixteen children, so a step takes one load of labels and no branch
 * but the answer's (bisection and a byte-by-byte scan took about two mispredicted branches per
 * step of a walk over random letters). */
static inline uint32_t child(const bpe_long_tables *t, uint32_t node, uint8_t c)
{
    uint32_t lo = t->node[node].first, cnt = t->node[node + 1].first - lo, j = 0;
    const uint8_t *l = t->label + lo;
    for (;;) {
        uint32_t m = match16(l + j, c), k = cnt - j;
        m &= k >= 32 ? ~0u : (1u << k) - 1;
        if (m != 0)
            return lo + j + (uint32_t)__builtin_ctz(m);
        j += 16;
        if (j >= cnt)
            return NONE;
    }
}

/* child() by a scan that branches on every label: slower on random text, but on a run of one
 * byte the predictor follows it and runs ahead down the trie, where child()'s computed answer
 * makes each step wait for the one before (spaces went 20 -> 50 ns per byte with child()). */
static inline uint32_t child_scan(const bpe_long_tables *t, uint32_t node, uint8_t c)
{
    uint32_t lo = t->node[node].first, hi = t->node[node + 1].first;
    for (; lo < hi; lo++)
        if (t->label[lo] >= c)
            return t->label[lo] == c ? lo : NONE;
    return NONE;
}

static uint32_t longest(const bpe_long_tables *t, const uint8_t *p, size_t n, size_t *reach);

/* The reach at text position i by a trie walk, memoised (out of line, like the probe below:
 * the memo and the filter answer most calls of rank_at, which is inlined into the search). */
static NOINLINE size_t walk_reach(const bpe_long_tables *t, piece *w, size_t i)
{
    size_t r;
    longest(t, w->p + i, w->n - i, &r);
    note_reach(w, i, r);
    return r;
}

/* The id of the token whose bytes are s[0..l) (l >= 2), or NONE: a walk of l steps in the
 * trie that stops where the bytes leave it.  Under BPE_RULE_TIKTOKEN that id is the rank of
 * merging any two tokens whose bytes together are s[0..l). */
static inline uint32_t token_id_at(const bpe_long_tables *t, const uint8_t *s, size_t l)
{
    uint32_t node = t->node2[(uint32_t)s[0] << 8 | s[1]], best;
    size_t i;
    for (i = 2; i < l && node != NONE; i++)
        node = child(t, node, s[i]);
    if (node == NONE)
        return NONE;
    best = t->node[node].best;
    return best != NONE && t->tokens[best].len == l ? t->id_of[best] : NONE;
}

/* The rank of merging tokens p, q whose bytes are the text from start on (l > 1 bytes, all
 * within the reach there); NONE if they do not merge.  Under BPE_RULE_TIKTOKEN a pair merges
 * iff its bytes are a token, and the rank is that token's id: for short pairs the trie
 * answers, at depth l on the walk from start, without the pair table (o200k's is 16 MB: a
 * probe missed every cache, and this path made one for every third token of random letters);
 * long ones (runs of one character) take the table rather than a walk of l steps. */
static NOINLINE uint32_t probe(const bpe_tokenizer *tok, const bpe_long_tables *t,
                               const piece *w, size_t start, size_t l, uint32_t p, uint32_t q)
{
    const bpe_pair_entry *e;
    if (tok->rule == BPE_RULE_TIKTOKEN && l <= TRIE_PROBE_MAX)
        return token_id_at(t, w->p + start, l);
    e = bpe_pair_find(tok, t->id_of[p], t->id_of[q]);
    return e ? e->rank : NONE;
}

/* The rank of merging tokens p, q, not both single bytes, p ending at text position end;
 * NONE if they do not merge.  No probe when p's bytes and q's (the text from end - len p on)
 * begin no token. */
static inline uint32_t rank_far(const bpe_tokenizer *tok, const bpe_long_tables *t, piece *w,
                                size_t end, uint32_t p, uint32_t q)
{
    const long_token *tk = t->tokens;
    size_t start = end - tk[p].len, l = (size_t)tk[p].len + tk[q].len, r = reach_at(w, start);
    if (r == 0) {
        if (tok->rule == BPE_RULE_TIKTOKEN && l <= TRIE_PROBE_MAX)
            return token_id_at(t, w->p + start, l);   /* a walk of l steps, not to the reach */
        r = walk_reach(t, w, start);
    }
    if (l > r)
        return NONE;
    return probe(tok, t, w, start, l, p, q);
}

/* The rank of merging single-byte tokens p, q (tok->byte_pairs: most probes of a pair check
 * are of two bytes, and that table stays in cache). */
static inline uint32_t rank_bytes(const bpe_tokenizer *tok, const bpe_long_tables *t,
                                  uint32_t p, uint32_t q)
{
    return bpe_byte_pair_of(tok, (uint8_t)t->tokens[p].left, (uint8_t)t->tokens[q].left)->rank;
}

/* 1 if the GOOD tokens a, b (a ends at text position end) form a valid pair: BPE of a's bytes
 * then b's is [a, b].  Only the last pair of the walk (a's last byte, b's first) is of two
 * single bytes (or the first, when a and b are bytes), so that test is also the walk's end.
 * Inlined into both of pair_valid()'s calls (a pair the memo does not cover, and one it does
 * not know yet): each has its own branch history, and no call (callgrind, o200k, 2 MB of
 * random letters: 181.9 -> 177.7 instructions and 2.00 -> 1.90 mispredicts per byte). */
static ALWAYS_INLINE int pair_ok(const bpe_tokenizer *tok, const bpe_long_tables *t, piece *w,
                                 size_t end, uint32_t a, uint32_t b)
{
    const long_token *tk = t->tokens;
    uint32_t la = tk[a].level, lb = tk[b].level;
    if ((la | lb) == 0)
        return rank_bytes(tok, t, a, b) == NONE;
    if (rank_far(tok, t, w, end, a, b) != NONE)
        return 0;
    for (;;) {
        uint32_t r, rk;
        int b_side = lb >= la;   /* b's last spine merge is the later one (or tied) */
        if (b_side) {
            r = lb - 1;          /* the rank of the merge undone */
            b = tk[b].left;
            lb = tk[b].level;
        } else {
            r = la - 1;
            a = tk[a].right;
            la = tk[a].level;
        }
        rk = (la | lb) == 0 ? rank_bytes(tok, t, a, b) : rank_far(tok, t, w, end, a, b);
        /* the pair crosses if it comes first: below r, or at r against b's merge (a's
         * merges lie to the left and win ties) */
        if (rk < r || (rk == r && b_side))
            return 0;
        if ((la | lb) == 0)
            return 1;
    }
}

/* pair_ok, through the pair memo when both tokens are short: its answer depends on a and b
 * only (the text is their bytes), and on random letters nearly three pairs in four are of
 * tokens of one or two bytes, whose checks were a third of the search's instructions. */
static inline int pair_valid(const bpe_tokenizer *tok, const bpe_long_tables *t, piece *w,
                             size_t end, uint32_t a, uint32_t b)
{
    size_t i;
    uint32_t *word, bits;
    int ok;
    if (a >= t->n_short || b >= t->n_short)
        return pair_ok(tok, t, w, end, a, b);
    i = (size_t)a * t->n_short + b;
    word = &t->pair_memo[i >> 4];
    bits = __atomic_load_n(word, __ATOMIC_RELAXED) >> (2 * (i & 15)) & 3;
    if (bits != 0)
        return bits == PAIR_VALID;
    ok = pair_ok(tok, t, w, end, a, b);
    __atomic_fetch_or(word, (ok ? PAIR_VALID : PAIR_INVALID) << (2 * (i & 15)), __ATOMIC_RELAXED);
    return ok;
}

/* The longest usable token that is a prefix of p[0..n) (n > 0, p[0] has a single-byte token);
 * *reach is the length of the longest prefix of p[0..n) that is a prefix of some token. */
static inline uint32_t longest(const bpe_long_tables *t, const uint8_t *p, size_t n, size_t *reach)
{
    uint32_t node, next;
    size_t i = 2;
    if (n < 2 || (node = t->node2[(uint32_t)p[0] << 8 | p[1]]) == NONE) {
        node = t->root[p[0]];
        i = 1;
    }
    for (; i < n; i++) {
        next = p[i] == p[i - 1] ? child_scan(t, node, p[i]) : child(t, node, p[i]);
        if (next == NONE)
            break;
        node = next;
    }
    *reach = i;
    return t->node[node].best;
}

static int is_dead(const uint64_t *dead, size_t i)
{
    return (int)(dead[i >> 6] >> (i & 63)) & 1;
}

/* The longest token at text position i (NONE if none), noting the walk's reach. */
static uint32_t candidates_at(const bpe_long_tables *t, piece *w, size_t i)
{
    size_t r;
    uint32_t best = longest(t, w->p + i, w->n - i, &r);
    note_reach(w, i, r);
    return best;
}

/* 1 if candidate c, ending at text position e, is probably wrong, so that the search tries it
 * after the other candidates of its position (any order is exact; this one saves most of the
 * backtracking on random text).  c is probably wrong when its last byte v would rather merge
 * with the next byte x: the pair (v, x) ranks below the merge that joins v to c (the lowest
 * of c's right spine), and x does not merge first with the byte after it.  On 1 MB of random
 * letters this flags ~80% of the tokens the search would otherwise push and pop again, and
 * fewer than 0.1% of the right ones. */
static int defer(const bpe_tokenizer *tok, const bpe_long_tables *t, const piece *w,
                 uint32_t c, size_t e)
{
    uint8_t x;
    uint32_t rvx;
    if (t->tokens[c].level == 0 || e >= w->n)
        return 0;
    x = w->p[e];
    rvx = bpe_byte_pair_of(tok, w->p[e - 1], x)->rank;
    if (rvx >= t->tokens[c].bottom)
        return 0;
    return e + 1 == w->n || bpe_byte_pair_of(tok, x, w->p[e + 1])->rank >= rvx;
}

/* Room for the search's stack to hold k + 1 entries at out->ids + out->len: grows out and
 * points *ids and *room at its new place. */
static NOINLINE int grow_stack(bpe_ids *out, size_t k, uint32_t **ids, size_t *room)
{
    int rc = bpe_ids_grow(out, k + 1);
    *ids = out->ids + out->len;
    *room = out->cap - out->len;
    return rc;
}

/* The backtracking search (see the top of the file); every byte of w->p has a single-byte
 * token.  At each position the candidates are tried longest first, except that a longest one
 * that defer() flags is tried last (late: 1 while the others are tried, 2 while it is).  The
 * stack, out->ids from out->len on (grown as it fills; out->len stays), holds each token's
 * slot with the late of its position in the top bits, so that a backtrack resumes there
 * without walking the trie and judging the longest again (on random letters one token in
 * ten is taken back). */
static int search(const bpe_tokenizer *tok, const bpe_long_tables *t, uint64_t *dead,
                  piece *w, bpe_ids *out, size_t *n_ids)
{
    const long_token *tk = t->tokens;
    uint32_t *ids = out->ids + out->len;
    size_t k = 0, pos = 0, room = out->cap - out->len;
    uint32_t head = NONE, cand = NONE;
    int late = 0, fresh = 1;
    for (;;) {
        if (fresh) {   /* a new position: its candidates, in order */
            fresh = 0;
            late = 0;
            head = cand = candidates_at(t, w, pos);
            if (head != NONE && token_state(tok, t, head) == TOK_GOOD &&
                defer(tok, t, w, head, pos + tk[head].len)) {
                late = 1;
                cand = tk[head].shorter;
            }
        }
        while (cand != NONE) {
            size_t end = pos + tk[cand].len;
            uint32_t st = token_state(tok, t, cand);
            if (st == TOK_BAD || st == TOK_UNKNOWN)
                return BPE_LONG_DECLINED;
            if (st == TOK_GOOD && !is_dead(dead, end) &&
                (k == 0 || pair_valid(tok, t, w, pos, ids[k - 1] & SLOT_MASK, cand)))
                break;
            cand = late == 2 ? NONE : tk[cand].shorter;
        }
        if (cand != NONE) {
            if (k == room && grow_stack(out, k, &ids, &room) != BPE_OK)
                return BPE_ERR_NOMEM;
            ids[k++] = cand | (uint32_t)late << LATE_SHIFT;
            pos += tk[cand].len;
            if (pos == w->n)
                break;
            fresh = 1;
            continue;
        }
        if (late == 1) {   /* the deferred longest candidate, alone */
            late = 2;
            cand = head != NONE ? head : candidates_at(t, w, pos);
            continue;
        }
        dead[pos >> 6] |= (uint64_t)1 << (pos & 63);
        if (k == 0)
            return BPE_LONG_DECLINED;   /* impossible by Facts 1-2; the heap would decide */
        cand = ids[--k] & SLOT_MASK;
        late = (int)(ids[k] >> LATE_SHIFT);
        pos -= tk[cand].len;
        /* resume after cand in its position's order, with its `late` from the stack (2: cand
         * was the last); the position's longest is walked again only if it comes next */
        cand = late == 2 ? NONE : tk[cand].shorter;
        head = NONE;
    }
    *n_ids = k;
    return BPE_OK;
}

int bpe_long_tables_ready(const bpe_tokenizer *tok)
{
    return tok != NULL && __atomic_load_n(&tok->long_state, __ATOMIC_ACQUIRE) == BPE_LONG_READY;
}

int bpe_long_merge(const bpe_tokenizer *tok, bpe_merge_scratch *s, const uint8_t *p, size_t n,
                   bpe_ids *out)
{
    const bpe_long_tables *t = tables(tok);
    size_t words = n / 64 + 1, ring = 1024, i, n_ids = 0;
    uint32_t *ids;
    piece w;
    int rc;
    if (t == NULL)
        return BPE_LONG_DECLINED;
    if (n >= (size_t)UINT32_MAX)
        return BPE_ERR_TOOBIG;
    for (i = 0; i < n && !t->all_bytes; i++)
        if (tok->byte_id[p[i]] == BPE_NO_ID)
            return BPE_ERR_NOBYTE;
    if (words > s->dead_cap) {
        uint64_t *d = malloc(words * sizeof *d);
        if (d == NULL)
            return BPE_ERR_NOMEM;
        free(s->dead);
        s->dead = d;
        s->dead_cap = words;
    }
    while (ring < REACH_RING && ring <= n)
        ring *= 2;
    if (ring > s->reach_cap) {
        uint32_t *r = malloc(ring * sizeof *r);
        if (r == NULL)
            return BPE_ERR_NOMEM;
        free(s->reach);
        s->reach = r;
        s->reach_cap = ring;
    }
    memset(s->dead, 0, words * sizeof *s->dead);
    for (i = 0; i < ring; i++)
        s->reach[i] = REACH_UNKNOWN;
    /* a first guess at the room (random letters take ~0.52 ids a byte): reserving one id per
     * byte made a 10 MB piece ask for 40 MB, above glibc's largest mmap threshold, so new
     * memory and ~5K page faults at every call (o200k's 10 MB of random letters ran ~3% faster
     * without them); the search grows out if it needs more */
    if ((rc = bpe_ids_reserve(out, n / 2 + 64 < n ? n / 2 + 64 : n)) != BPE_OK)
        return rc;
    w.p = p;
    w.n = n;
    w.reach = s->reach;
    w.reach_mask = ring - 1;
    rc = search(tok, t, s->dead, &w, out, &n_ids);
    ids = out->ids + out->len;
    for (i = 0; rc == BPE_OK && i < n_ids; i++)
        ids[i] = t->id_of[ids[i] & SLOT_MASK];
    if (rc == BPE_OK)
        out->len += n_ids;
    if (rc == BPE_LONG_DECLINED) {
        /* A token breaks M, or fill_lock stayed busy (a holder gone in fork()), or the
         * impossible: the heap, now and from now on. */
        __atomic_store_n(&((bpe_tokenizer *)tok)->long_state, BPE_LONG_UNSUPPORTED,
                         __ATOMIC_RELEASE);
    }
    return rc;
}
