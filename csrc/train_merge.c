/*
 * train_merge.c - the merge loop of the BPE trainer (bpe_trainer_merge).
 *
 * Data structures:
 *   words   every distinct pre-token of two or more symbols as an array of token ids
 *           (symbols) in one arena, with its 64-bit count.  The initial symbols are its bytes,
 *           or with char_level its characters as train_chars.c maps them (the alphabet,
 *           prefix and suffix).  A merge rewrites a word in place (it only shrinks).  A word
 *           of one symbol can never hold a pair and is left out.
 *   tokens  the bytes of every token (the initial ones: 0..255 = single bytes, or the
 *           char-level alphabet; then learned ones), a hash map bytes -> id, and each token's
 *           units (bytes or characters covered, for max_token_length).  Token bytes are
 *           unique: a merge whose bytes already name a token reuses that id, so comparing ids
 *           is comparing bytes.  A learned token is left + right, less right's leading
 *           continuing_subword_prefix (char_level).
 *   pairs   a hash map (left id, right id) -> pair record {count, list of words that may
 *           contain it}.  A word list may hold stale entries (words that lost the pair) and
 *           repeats; a merge skips both, so each merge touches only words that held the pair.
 *   heap    a 4-ary max-heap of (count, pair) entries ordered by count, then by the pair's
 *           (left bytes, right bytes) compared like Python bytes.  Entries are never removed
 *           or updated in place ("lazy refresh").
 *
 * Invariants:
 *   - pairs[p].count = sum over words of (adjacent positions holding p) x (word count):
 *     every adjacent position counts, overlapping ones included ("aaa" counts (a,a) twice).
 *     With max_token_length, a pair whose token would be too long (units[l] + units[r] >
 *     max) has no record at all: its deltas are dropped.  Units never change once a token
 *     exists, so a pair is allowed for the whole training or never.
 *   - every pair with count > 0 has at least one heap entry whose count is >= its count.
 *     Popping therefore finds the best pair: an entry whose count equals the pair's count is
 *     the true maximum; an entry with a higher count is pushed back with the current one; an
 *     entry with a lower count is dropped (another, fresher entry exists).
 *   - a merge rewrites each word holding the pair left to right without overlap and turns
 *     the positions it changed into count deltas: minus every old adjacency touching a
 *     merged position, plus every new adjacency touching a new symbol.  Pairs whose count
 *     rose get a fresh heap entry.
 *
 * Long words (at least long_word symbols, e.g. a 1 MB line without spaces) are kept apart:
 * their symbols form a doubly linked list (nxt/prv, a merged-away symbol becomes DEAD) and
 * instead of the word, a pair record lists the positions (word, index) where the pair may
 * start in them.  A merge visits those positions in ascending order, checks each still holds
 * the pair, and rewrites it in O(1): the cost follows the occurrences, not the word length.
 * Invariant: every current occurrence of a pair in a long word is in the pair's position list.
 *
 * Threads: when a merge touches many words, the words are split into contiguous slices, one
 * per thread; each thread rewrites its words (disjoint memory) and writes its deltas to its
 * own list.  The lists are then applied in thread order by one thread.  Counts are sums, so
 * the result does not depend on the number of threads.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "train.h"

#define NO_WORD UINT32_MAX
#define NO_POS UINT32_MAX     /* no position: a short word, or the end of a linked word */
#define DEAD UINT32_MAX       /* the symbol of a merged-away position in a long word */

/* ---- tokens ------------------------------------------------------------------------- */

typedef struct tokens {
    bpe_trainer *t;        /* owner of tok_bytes / tok_off / merges */
    uint32_t *map;         /* open addressing: id + 1, 0 = empty */
    size_t map_cap;        /* power of two, >= 2 x tokens */
    uint32_t *units;       /* per token: the bytes (characters when char_level) of the word it
                              covers; an initial token is 1, a learned one left + right when
                              it is new (a merge that spells an existing token keeps it) */
    size_t n_initial;      /* 256, or the char-level alphabet's initial tokens */
} tokens;

static const uint8_t *tok_ptr(const bpe_trainer *t, uint32_t id)
{
    return t->tok_bytes + t->tok_off[id];
}

static size_t tok_len(const bpe_trainer *t, uint32_t id)
{
    return t->tok_off[id + 1] - t->tok_off[id];
}

/* Python's bytes ordering: memcmp on the common prefix, then the shorter is smaller. */
static int cmp_tokens(const bpe_trainer *t, uint32_t x, uint32_t y)
{
    if (x == y)
        return 0;
    size_t lx = tok_len(t, x), ly = tok_len(t, y);
    int c = memcmp(tok_ptr(t, x), tok_ptr(t, y), lx < ly ? lx : ly);
    if (c)
        return c;
    return lx < ly ? -1 : (lx > ly ? 1 : 0);
}

static int map_insert(tokens *k, uint32_t id)
{
    const bpe_trainer *t = k->t;
    size_t j = train_hash_bytes(tok_ptr(t, id), tok_len(t, id)) & (k->map_cap - 1);
    while (k->map[j])
        j = (j + 1) & (k->map_cap - 1);
    k->map[j] = id + 1;
    return BPE_OK;
}

/* The id of the token with bytes p[0..len), or UINT32_MAX. */
static uint32_t map_find(const tokens *k, const uint8_t *p, size_t len)
{
    const bpe_trainer *t = k->t;
    size_t j = train_hash_bytes(p, len) & (k->map_cap - 1);
    while (k->map[j]) {
        uint32_t id = k->map[j] - 1;
        if (tok_len(t, id) == len && memcmp(tok_ptr(t, id), p, len) == 0)
            return id;
        j = (j + 1) & (k->map_cap - 1);
    }
    return UINT32_MAX;
}

/* 1 if merging the pair makes a token no longer than max_token_length (or there is none). */
static int pair_allowed(const tokens *k, uint64_t key)
{
    size_t max = k->t->max_token_length;
    return max == 0 || (size_t)k->units[key >> 32] + k->units[(uint32_t)key] <= max;
}

/* Appends a token with bytes left + right (right without a leading continuing_subword_prefix,
 * as HF's trainer does); sets *id. */
static int token_append(tokens *k, uint32_t left, uint32_t right, uint32_t *id)
{
    bpe_trainer *t = k->t;
    size_t ll = tok_len(t, left), lr = tok_len(t, right), skip = 0;
    if (t->prefix_len && lr >= t->prefix_len &&
        memcmp(tok_ptr(t, right), t->prefix, t->prefix_len) == 0)
        skip = t->prefix_len;
    lr -= skip;
    if (t->tok_bytes_len + ll + lr > t->tok_bytes_cap) {
        size_t cap = t->tok_bytes_cap * 2 + ll + lr;
        uint8_t *b = realloc(t->tok_bytes, cap);
        if (b == NULL)
            return BPE_ERR_NOMEM;
        t->tok_bytes = b;
        t->tok_bytes_cap = cap;
    }
    /* left and right point into tok_bytes: copy after the realloc */
    memcpy(t->tok_bytes + t->tok_bytes_len, tok_ptr(t, left), ll);
    memcpy(t->tok_bytes + t->tok_bytes_len + ll, tok_ptr(t, right) + skip, lr);
    uint32_t found = map_find(k, t->tok_bytes + t->tok_bytes_len, ll + lr);
    if (found != UINT32_MAX) {
        *id = found;
        return BPE_OK;
    }
    if (t->n_tokens >= t->tok_cap)
        return BPE_ERR_TOOBIG;     /* cannot happen: tok_cap bounds the possible merges */
    t->tok_bytes_len += ll + lr;
    t->tok_off[t->n_tokens + 1] = t->tok_bytes_len;
    *id = (uint32_t)t->n_tokens++;
    k->units[*id] = k->units[left] + k->units[right];
    return map_insert(k, *id);
}

/* The initial tokens: the 256 single bytes, or (alpha != NULL) the char-level alphabet. */
static int tokens_init(tokens *k, bpe_trainer *t, size_t max_tokens, const train_alphabet *alpha)
{
    size_t n = alpha ? alpha->n_tokens : 256, n_bytes = alpha ? alpha->off[n] : 256;
    k->t = t;
    k->n_initial = n;
    k->map_cap = 1;
    while (k->map_cap < 2 * max_tokens)
        k->map_cap *= 2;
    k->map = calloc(k->map_cap, sizeof *k->map);
    k->units = malloc((max_tokens ? max_tokens : 1) * sizeof *k->units);
    t->tok_cap = max_tokens;
    t->tok_off = malloc((max_tokens + 1) * sizeof *t->tok_off);
    t->tok_bytes_cap = n_bytes > 4096 ? n_bytes : 4096;
    t->tok_bytes = malloc(t->tok_bytes_cap);
    if (k->map == NULL || k->units == NULL || t->tok_off == NULL || t->tok_bytes == NULL)
        return BPE_ERR_NOMEM;
    t->tok_off[0] = 0;
    for (size_t i = 0; i < n; i++) {
        if (alpha) {
            t->tok_off[i + 1] = alpha->off[i + 1];
        } else {
            t->tok_bytes[i] = (uint8_t)i;
            t->tok_off[i + 1] = i + 1;
        }
        k->units[i] = 1;
    }
    if (alpha && n_bytes)
        memcpy(t->tok_bytes, alpha->bytes, n_bytes);
    t->tok_bytes_len = n_bytes;
    t->n_tokens = n;
    for (uint32_t i = 0; i < n; i++)
        map_insert(k, i);
    return BPE_OK;
}

/* ---- pairs -------------------------------------------------------------------------- */

typedef struct pair_rec {
    uint64_t key;          /* left << 32 | right */
    int64_t count;         /* see the invariant above */
    uint32_t *words;       /* short words that may hold the pair (stale entries allowed) */
    uint32_t n_words, cap_words;
    uint64_t *pos;         /* long words: word << 32 | index where the pair may start */
    size_t n_pos, cap_pos;
    uint32_t raised;       /* the step in which its count last rose, + 1 */
} pair_rec;

typedef struct pairs {
    pair_rec *recs;        /* records, by index */
    size_t n, cap;
    uint32_t *slots;       /* open addressing: index + 1, 0 = empty; load <= 1/2 */
    size_t n_slots;
} pairs;

static uint64_t pair_key(uint32_t l, uint32_t r) { return (uint64_t)l << 32 | r; }

static size_t key_hash(uint64_t key)
{
    key ^= key >> 31;
    key *= 0x9E3779B97F4A7C15ull;
    key ^= key >> 29;
    return (size_t)key;
}

static int pairs_grow_slots(pairs *ps)
{
    size_t n = ps->n_slots ? ps->n_slots * 2 : 1 << 14;
    uint32_t *slots = calloc(n, sizeof *slots);
    if (slots == NULL)
        return BPE_ERR_NOMEM;
    for (size_t i = 0; i < ps->n; i++) {
        size_t j = key_hash(ps->recs[i].key) & (n - 1);
        while (slots[j])
            j = (j + 1) & (n - 1);
        slots[j] = (uint32_t)i + 1;
    }
    free(ps->slots);
    ps->slots = slots;
    ps->n_slots = n;
    return BPE_OK;
}

/* The index of the record for key, created with count 0 if new. */
static int pairs_get(pairs *ps, uint64_t key, uint32_t *index)
{
    if ((ps->n + 1) * 2 > ps->n_slots) {
        int rc = pairs_grow_slots(ps);
        if (rc != BPE_OK)
            return rc;
    }
    size_t mask = ps->n_slots - 1;
    size_t j = key_hash(key) & mask;
    while (ps->slots[j]) {
        uint32_t i = ps->slots[j] - 1;
        if (ps->recs[i].key == key) {
            *index = i;
            return BPE_OK;
        }
        j = (j + 1) & mask;
    }
    if (ps->n >= UINT32_MAX - 1)
        return BPE_ERR_TOOBIG;
    if (ps->n == ps->cap) {
        size_t cap = ps->cap ? ps->cap * 2 : 1 << 14;
        pair_rec *r = realloc(ps->recs, cap * sizeof *r);
        if (r == NULL)
            return BPE_ERR_NOMEM;
        ps->recs = r;
        ps->cap = cap;
    }
    pair_rec *r = &ps->recs[ps->n];
    memset(r, 0, sizeof *r);
    r->key = key;
    ps->slots[j] = (uint32_t)ps->n + 1;
    *index = (uint32_t)ps->n++;
    return BPE_OK;
}

/* Notes that word w may hold the pair (skipping an immediate repeat). */
static int pair_add_word(pair_rec *r, uint32_t w)
{
    if (r->n_words && r->words[r->n_words - 1] == w)
        return BPE_OK;
    if (r->n_words == r->cap_words) {
        uint32_t cap = r->cap_words ? r->cap_words * 2 : 4;
        if (cap < r->cap_words)
            return BPE_ERR_TOOBIG;
        uint32_t *p = realloc(r->words, (size_t)cap * sizeof *p);
        if (p == NULL)
            return BPE_ERR_NOMEM;
        r->words = p;
        r->cap_words = cap;
    }
    r->words[r->n_words++] = w;
    return BPE_OK;
}

/* Notes that the pair may start at index i of long word w. */
static int pair_add_pos(pair_rec *r, uint32_t w, uint32_t i)
{
    if (r->n_pos == r->cap_pos) {
        size_t cap = r->cap_pos ? r->cap_pos * 2 : 4;
        uint64_t *p = realloc(r->pos, cap * sizeof *p);
        if (p == NULL)
            return BPE_ERR_NOMEM;
        r->pos = p;
        r->cap_pos = cap;
    }
    r->pos[r->n_pos++] = (uint64_t)w << 32 | i;
    return BPE_OK;
}

static void pairs_free(pairs *ps)
{
    for (size_t i = 0; i < ps->n; i++) {
        free(ps->recs[i].words);
        free(ps->recs[i].pos);
    }
    free(ps->recs);
    free(ps->slots);
}

/* ---- heap --------------------------------------------------------------------------- */

typedef struct heap_entry {
    int64_t count;
    uint32_t left, right;
} heap_entry;

typedef struct heap {
    heap_entry *e;
    size_t n, cap;
    const bpe_trainer *t;   /* for the byte order of ties */
} heap;

/* 1 if a ranks above b: higher count, then greater (left bytes, right bytes). */
static int above(const heap *h, const heap_entry *a, const heap_entry *b)
{
    if (a->count != b->count)
        return a->count > b->count;
    int c = cmp_tokens(h->t, a->left, b->left);
    if (c == 0)
        c = cmp_tokens(h->t, a->right, b->right);
    return c > 0;
}

static void sift_up(heap *h, size_t i)
{
    heap_entry x = h->e[i];
    while (i > 0) {
        size_t parent = (i - 1) / 4;
        if (!above(h, &x, &h->e[parent]))
            break;
        h->e[i] = h->e[parent];
        i = parent;
    }
    h->e[i] = x;
}

static void sift_down(heap *h, size_t i)
{
    heap_entry x = h->e[i];
    for (;;) {
        size_t first = 4 * i + 1, best = i;
        const heap_entry *bx = &x;
        for (size_t c = first; c < first + 4 && c < h->n; c++)
            if (above(h, &h->e[c], bx)) {
                best = c;
                bx = &h->e[c];
            }
        if (best == i)
            break;
        h->e[i] = h->e[best];
        i = best;
    }
    h->e[i] = x;
}

static int heap_push(heap *h, int64_t count, uint64_t key)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 1024;
        heap_entry *e = realloc(h->e, cap * sizeof *e);
        if (e == NULL)
            return BPE_ERR_NOMEM;
        h->e = e;
        h->cap = cap;
    }
    h->e[h->n].count = count;
    h->e[h->n].left = (uint32_t)(key >> 32);
    h->e[h->n].right = (uint32_t)key;
    sift_up(h, h->n++);
    return BPE_OK;
}

static heap_entry heap_pop(heap *h)
{
    heap_entry top = h->e[0];
    h->e[0] = h->e[--h->n];
    if (h->n)
        sift_down(h, 0);
    return top;
}

/* ---- words and deltas ----------------------------------------------------------------- */

typedef struct words {
    uint32_t *sym;          /* all symbols */
    size_t *off;            /* start of word w in sym */
    uint32_t *len;          /* current length of word w */
    uint64_t *count;        /* count of word w */
    uint32_t *seen;         /* merge step + 1 in which w was last collected */
    uint32_t *nxt, *prv;    /* long words only: links by index within the word, NO_POS at
                               the ends (NULL when there is no long word) */
    size_t long_min;        /* a word of at least this many symbols is long */
    size_t n;
} words;

static int is_long(const words *ws, size_t w) { return ws->len[w] >= ws->long_min; }

typedef struct delta {
    uint64_t key;
    int64_t delta;
    uint32_t word;          /* NO_WORD, or the word that now holds the pair */
    uint32_t pos;           /* NO_POS, or (long word) the index where the pair starts */
} delta;

/* One thread's work on one merge: a slice of the affected words and its own deltas. */
typedef struct slice {
    words *ws;
    const uint32_t *affected;
    size_t begin, end;
    uint32_t a, b, z;       /* merge (a, b) -> z */
    delta *d;               /* deltas out */
    size_t n_d, cap_d;
    uint32_t *scratch;      /* 2 x longest word: new symbols, then flags */
    size_t scratch_cap;
    int rc;
} slice;

static int delta_push_at(slice *s, uint64_t key, int64_t d, uint32_t word, uint32_t pos)
{
    if (s->n_d == s->cap_d) {
        size_t cap = s->cap_d ? s->cap_d * 2 : 4096;
        delta *p = realloc(s->d, cap * sizeof *p);
        if (p == NULL)
            return BPE_ERR_NOMEM;
        s->d = p;
        s->cap_d = cap;
    }
    s->d[s->n_d].key = key;
    s->d[s->n_d].delta = d;
    s->d[s->n_d].word = word;
    s->d[s->n_d].pos = pos;
    s->n_d++;
    return BPE_OK;
}

static int delta_push(slice *s, uint64_t key, int64_t d, uint32_t word)
{
    return delta_push_at(s, key, d, word, NO_POS);
}

/* 1 if an occurrence of (a, b) starts at old position i of sym[0..n). */
static int starts_pair(const uint32_t *sym, size_t n, size_t i, uint32_t a, uint32_t b)
{
    return i + 1 < n && sym[i] == a && sym[i + 1] == b;
}

/* Rewrites word w with every (a, b) -> z, left to right without overlap, in place (the write
 * position j never passes the read position i), and records the deltas: minus each old
 * adjacency touching a merged position, plus each new adjacency touching a new z, each once.
 * Example: "hello" with count 3 and merge (l, l) -> L: (e,l) (l,l) (l,o) each -3; the word
 * becomes h e L o; (e,L) and (L,o) each +3, noted as held by w; (h,e) is untouched.
 * With "aaaa" and (a, a) -> A: (a,a) x3 each -1 ... the adjacency between two occurrences
 * is counted once, as the left one of the second occurrence: A A gets (A,A) +1.
 * A word that no longer holds the pair (a stale list entry) is left alone. */
static int merge_one_word(slice *s, uint32_t w)
{
    words *ws = s->ws;
    uint32_t *sym = ws->sym + ws->off[w];
    const size_t n = ws->len[w];
    const uint32_t a = s->a, b = s->b, z = s->z;
    const int64_t c = (int64_t)ws->count[w];
    size_t i = 0;
    while (i + 1 < n && !(sym[i] == a && sym[i + 1] == b))
        i++;
    if (i + 1 >= n)
        return BPE_OK;
    size_t j = i;              /* symbols before the first occurrence stay where they are */
    uint32_t prev_old = i ? sym[i - 1] : 0;    /* old symbol before position i */
    int rc = BPE_OK;
    while (i < n && rc == BPE_OK) {
        if (!starts_pair(sym, n, i, a, b)) {
            prev_old = sym[i];
            sym[j++] = sym[i++];
            continue;
        }
        rc = delta_push(s, pair_key(a, b), -c, NO_WORD);
        if (i > 0 && rc == BPE_OK)
            rc = delta_push(s, pair_key(prev_old, a), -c, NO_WORD);
        if (j > 0 && rc == BPE_OK)
            rc = delta_push(s, pair_key(sym[j - 1], z), c, w);
        int next_is_pair = starts_pair(sym, n, i + 2, a, b);
        if (i + 2 < n && !next_is_pair && rc == BPE_OK) {
            rc = delta_push(s, pair_key(b, sym[i + 2]), -c, NO_WORD);
            if (rc == BPE_OK)
                rc = delta_push(s, pair_key(z, sym[i + 2]), c, w);
        }
        prev_old = b;
        sym[j++] = z;
        i += 2;
    }
    ws->len[w] = (uint32_t)j;
    return rc;
}

static void *run_slice(void *arg)
{
    slice *s = arg;
    s->n_d = 0;
    s->rc = BPE_OK;
    for (size_t i = s->begin; i < s->end && s->rc == BPE_OK; i++)
        s->rc = merge_one_word(s, s->affected[i]);
    return NULL;
}

/* ---- long words ------------------------------------------------------------------------ */

/* 1 if (a, b) starts at index i of a linked word (i may be NO_POS). */
static int linked_pair_at(const uint32_t *sym, const uint32_t *nx, uint32_t i, uint32_t a,
                          uint32_t b)
{
    return i != NO_POS && sym[i] == a && nx[i] != NO_POS && sym[nx[i]] == b;
}

/* Merges the occurrence of (a, b) at index i of long word w (the same deltas as
 * merge_one_word; last is the index of the z this pass made just before, or NO_POS). */
static int merge_linked_at(slice *s, uint32_t w, uint32_t i, uint32_t last)
{
    words *ws = s->ws;
    uint32_t *sym = ws->sym + ws->off[w], *nx = ws->nxt + ws->off[w];
    uint32_t *pv = ws->prv + ws->off[w];
    const uint32_t a = s->a, b = s->b, z = s->z, j = nx[i], l = pv[i], r = nx[j];
    const int64_t c = (int64_t)ws->count[w];
    int rc = delta_push(s, pair_key(a, b), -c, NO_WORD);
    if (l != NO_POS && rc == BPE_OK) {
        /* l == last: an occurrence merged just before, so the old left symbol was its b */
        uint32_t old_left = l == last ? b : sym[l];
        rc = delta_push(s, pair_key(old_left, a), -c, NO_WORD);
        if (rc == BPE_OK)
            rc = delta_push_at(s, pair_key(sym[l], z), c, w, l);
    }
    if (r != NO_POS && !linked_pair_at(sym, nx, r, a, b) && rc == BPE_OK) {
        rc = delta_push(s, pair_key(b, sym[r]), -c, NO_WORD);
        if (rc == BPE_OK)
            rc = delta_push_at(s, pair_key(z, sym[r]), c, w, i);
    }
    sym[i] = z;
    sym[j] = DEAD;
    nx[i] = r;
    if (r != NO_POS)
        pv[r] = i;
    return rc;
}

static int cmp_u64(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

/* Merges (a, b) -> z at every listed position of pair record r in long words, in ascending
 * (word, index) order, so each word is rewritten left to right without overlap; positions
 * that no longer hold the pair (stale, or consumed by the occurrence just before) are
 * skipped.  Takes the list from r and frees it. */
static int merge_long_words(words *ws, slice *s, pair_rec *r, uint32_t a, uint32_t b,
                            uint32_t z)
{
    uint64_t *pos = r->pos;
    size_t n = r->n_pos;
    r->pos = NULL;
    r->n_pos = r->cap_pos = 0;
    s->ws = ws;
    s->a = a;
    s->b = b;
    s->z = z;
    s->n_d = 0;
    if (n == 0)
        return BPE_OK;
    qsort(pos, n, sizeof *pos, cmp_u64);
    int rc = BPE_OK;
    uint32_t cur_w = NO_WORD, last = NO_POS;
    for (size_t k = 0; k < n && rc == BPE_OK; k++) {
        if (k && pos[k] == pos[k - 1])
            continue;
        uint32_t w = (uint32_t)(pos[k] >> 32), i = (uint32_t)pos[k];
        if (w != cur_w) {
            cur_w = w;
            last = NO_POS;
        }
        if (!linked_pair_at(ws->sym + ws->off[w], ws->nxt + ws->off[w], i, a, b))
            continue;
        rc = merge_linked_at(s, w, i, last);
        last = i;
    }
    free(pos);
    return rc;
}

/* ---- the loop ------------------------------------------------------------------------- */

typedef struct state {
    bpe_trainer *t;
    tokens tok;
    pairs ps;
    heap h;
    words ws;
    uint32_t *affected;     /* the words of the current merge */
    size_t cap_affected;
    slice *slices;          /* one per thread */
    int n_slices;
    slice long_slice;       /* the deltas of long words (merged on the calling thread) */
    uint32_t *raised;       /* pairs whose count rose in this step */
    size_t n_raised, cap_raised;
    size_t longest;         /* longest word, in symbols */
    train_alphabet alpha;   /* char_level: the initial tokens (index == NULL otherwise) */
} state;

/* Links the symbols of every long word (nxt/prv by index within the word). */
static int link_long_words(words *ws, size_t total)
{
    int any = 0;
    for (size_t w = 0; w < ws->n && !any; w++)
        any = is_long(ws, w);
    if (!any)
        return BPE_OK;
    ws->nxt = malloc(total * sizeof *ws->nxt);
    ws->prv = malloc(total * sizeof *ws->prv);
    if (ws->nxt == NULL || ws->prv == NULL)
        return BPE_ERR_NOMEM;
    for (size_t w = 0; w < ws->n; w++) {
        if (!is_long(ws, w))
            continue;
        uint32_t *nx = ws->nxt + ws->off[w], *pv = ws->prv + ws->off[w];
        for (uint32_t i = 0; i < ws->len[w]; i++) {
            nx[i] = i + 1 < ws->len[w] ? i + 1 : NO_POS;
            pv[i] = i ? i - 1 : NO_POS;
        }
    }
    return BPE_OK;
}

/* Appends word s as symbols (its bytes, or its char-level symbols); a word of fewer than two
 * symbols can never hold a pair and is left out. */
static void add_word(state *st, const train_word_slot *s, size_t *pos)
{
    words *ws = &st->ws;
    const uint8_t *p = train_slot_bytes(&st->t->words, s);
    uint32_t *sym = ws->sym + *pos;
    size_t n = s->len;
    if (st->alpha.index != NULL)
        n = train_alphabet_word(&st->alpha, p, s->len, sym);
    else
        for (uint32_t k = 0; k < s->len; k++)
            sym[k] = p[k];
    if (n < 2)
        return;
    ws->off[ws->n] = *pos;
    ws->len[ws->n] = (uint32_t)n;
    ws->count[ws->n] = s->count;
    *pos += n;
    if (n > st->longest)
        st->longest = n;
    ws->n++;
}

static int build_words(state *st)
{
    const train_words *tw = &st->t->words;
    words *ws = &st->ws;
    size_t total = 0, n = 0;     /* bytes bound the symbols of a word from above */
    for (size_t i = 0; i < tw->capacity; i++)
        if (tw->slots[i].hash && tw->slots[i].len >= 2) {
            total += tw->slots[i].len;
            n++;
        }
    if (n >= UINT32_MAX)
        return BPE_ERR_TOOBIG;
    ws->sym = malloc((total ? total : 1) * sizeof *ws->sym);
    ws->off = malloc((n ? n : 1) * sizeof *ws->off);
    ws->len = malloc((n ? n : 1) * sizeof *ws->len);
    ws->count = malloc((n ? n : 1) * sizeof *ws->count);
    ws->seen = calloc(n ? n : 1, sizeof *ws->seen);
    if (!ws->sym || !ws->off || !ws->len || !ws->count || !ws->seen)
        return BPE_ERR_NOMEM;
    ws->long_min = st->t->long_word;
    size_t pos = 0;
    for (size_t i = 0; i < tw->capacity; i++)
        if (tw->slots[i].hash != 0 && tw->slots[i].len >= 2)
            add_word(st, &tw->slots[i], &pos);
    return link_long_words(ws, total);
}

static int count_initial_pairs(state *st)
{
    words *ws = &st->ws;
    for (size_t w = 0; w < ws->n; w++) {
        const uint32_t *sym = ws->sym + ws->off[w];
        for (uint32_t i = 0; i + 1 < ws->len[w]; i++) {
            uint32_t idx;
            if (!pair_allowed(&st->tok, pair_key(sym[i], sym[i + 1])))
                continue;
            int rc = pairs_get(&st->ps, pair_key(sym[i], sym[i + 1]), &idx);
            if (rc == BPE_OK)
                rc = is_long(ws, w) ? pair_add_pos(&st->ps.recs[idx], (uint32_t)w, i)
                                    : pair_add_word(&st->ps.recs[idx], (uint32_t)w);
            if (rc != BPE_OK)
                return rc;
            st->ps.recs[idx].count += (int64_t)ws->count[w];
        }
    }
    /* heapify every pair at once (bottom-up) */
    heap *h = &st->h;
    h->cap = st->ps.n ? st->ps.n : 1;
    h->e = malloc(h->cap * sizeof *h->e);
    if (h->e == NULL)
        return BPE_ERR_NOMEM;
    for (size_t i = 0; i < st->ps.n; i++) {
        h->e[h->n].count = st->ps.recs[i].count;
        h->e[h->n].left = (uint32_t)(st->ps.recs[i].key >> 32);
        h->e[h->n].right = (uint32_t)st->ps.recs[i].key;
        h->n++;
    }
    for (size_t i = h->n / 4 + 1; i-- > 0;)
        if (i < h->n)
            sift_down(h, i);
    return BPE_OK;
}

/* Pops the best pair with a count > 0 into *best; 0 when there is none. */
static int pop_best(state *st, heap_entry *best, uint32_t *index, int *rc)
{
    *rc = BPE_OK;
    while (st->h.n) {
        heap_entry e = heap_pop(&st->h);
        uint32_t idx;
        *rc = pairs_get(&st->ps, pair_key(e.left, e.right), &idx);
        if (*rc != BPE_OK)
            return 0;
        int64_t now = st->ps.recs[idx].count;
        if (now == e.count && now > 0) {
            *best = e;
            *index = idx;
            return 1;
        }
        if (now < e.count && now > 0) {
            *rc = heap_push(&st->h, now, pair_key(e.left, e.right));
            if (*rc != BPE_OK)
                return 0;
        }
    }
    return 0;
}

/* Collects the words of pair idx (each once) into st->affected; frees its word list. */
static int collect_words(state *st, uint32_t idx, uint32_t step, size_t *n_out)
{
    pair_rec *r = &st->ps.recs[idx];
    if (r->n_words > st->cap_affected) {
        uint32_t *p = realloc(st->affected, (size_t)r->n_words * sizeof *p);
        if (p == NULL)
            return BPE_ERR_NOMEM;
        st->affected = p;
        st->cap_affected = r->n_words;
    }
    size_t n = 0;
    for (uint32_t i = 0; i < r->n_words; i++) {
        uint32_t w = r->words[i];
        if (st->ws.seen[w] != step + 1) {
            st->ws.seen[w] = step + 1;
            st->affected[n++] = w;
        }
    }
    free(r->words);
    r->words = NULL;
    r->n_words = r->cap_words = 0;
    *n_out = n;
    return BPE_OK;
}

static int run_slices(state *st, size_t n_affected, uint32_t a, uint32_t b, uint32_t z)
{
    int k = st->n_slices;
    if (k > 1 && n_affected < st->t->parallel_words * (size_t)k)
        k = 1;
    for (int i = 0; i < k; i++) {
        slice *s = &st->slices[i];
        s->ws = &st->ws;
        s->affected = st->affected;
        s->begin = n_affected * (size_t)i / (size_t)k;
        s->end = n_affected * (size_t)(i + 1) / (size_t)k;
        s->a = a;
        s->b = b;
        s->z = z;
    }
    if (k == 1) {
        run_slice(&st->slices[0]);
        return st->slices[0].rc;
    }
    pthread_t tid[256];
    int started = 1, rc = BPE_OK;
    for (int i = 1; i < k; i++) {
        if (pthread_create(&tid[i], NULL, run_slice, &st->slices[i]) != 0) {
            rc = BPE_ERR_THREAD;
            break;
        }
        started++;
    }
    run_slice(&st->slices[0]);
    for (int i = 1; i < started; i++)
        pthread_join(tid[i], NULL);
    for (int i = 0; i < started && rc == BPE_OK; i++)
        rc = st->slices[i].rc;
    if (rc == BPE_OK && started < k)
        rc = BPE_ERR_THREAD;
    return rc;
}

static int note_raised(state *st, uint32_t idx, uint32_t step)
{
    pair_rec *r = &st->ps.recs[idx];
    if (r->raised == step + 1)
        return BPE_OK;
    r->raised = step + 1;
    if (st->n_raised == st->cap_raised) {
        size_t cap = st->cap_raised ? st->cap_raised * 2 : 1024;
        uint32_t *p = realloc(st->raised, cap * sizeof *p);
        if (p == NULL)
            return BPE_ERR_NOMEM;
        st->raised = p;
        st->cap_raised = cap;
    }
    st->raised[st->n_raised++] = idx;
    return BPE_OK;
}

/* Applies every slice's deltas in slice order, then gives each raised pair a heap entry. */
static int apply_deltas(state *st, uint32_t step)
{
    st->n_raised = 0;
    for (int i = 0; i <= st->n_slices; i++) {
        slice *s = i < st->n_slices ? &st->slices[i] : &st->long_slice;
        for (size_t j = 0; j < s->n_d; j++) {
            const delta *d = &s->d[j];
            uint32_t idx;
            if (!pair_allowed(&st->tok, d->key))
                continue;
            int rc = pairs_get(&st->ps, d->key, &idx);
            if (rc != BPE_OK)
                return rc;
            pair_rec *r = &st->ps.recs[idx];
            r->count += d->delta;
            if (d->delta > 0) {
                rc = note_raised(st, idx, step);
                if (rc == BPE_OK && d->pos != NO_POS)
                    rc = pair_add_pos(&st->ps.recs[idx], d->word, d->pos);
                else if (rc == BPE_OK && d->word != NO_WORD)
                    rc = pair_add_word(&st->ps.recs[idx], d->word);
                if (rc != BPE_OK)
                    return rc;
            }
        }
        s->n_d = 0;
    }
    for (size_t i = 0; i < st->n_raised; i++) {
        const pair_rec *r = &st->ps.recs[st->raised[i]];
        if (r->count > 0) {
            int rc = heap_push(&st->h, r->count, r->key);
            if (rc != BPE_OK)
                return rc;
        }
    }
    return BPE_OK;
}

static int record_merge(bpe_trainer *t, uint32_t a, uint32_t b, uint32_t z)
{
    if (t->n_merges == t->merges_cap) {
        size_t cap = t->merges_cap ? t->merges_cap * 2 : 1024;
        uint32_t *m = realloc(t->merges, 3 * cap * sizeof *m);
        if (m == NULL)
            return BPE_ERR_NOMEM;
        t->merges = m;
        t->merges_cap = cap;
    }
    t->merges[3 * t->n_merges] = a;
    t->merges[3 * t->n_merges + 1] = b;
    t->merges[3 * t->n_merges + 2] = z;
    t->n_merges++;
    return BPE_OK;
}

/* One merge step; *done = 1 when training is over. */
static int step_once(state *st, uint32_t step, int *done)
{
    bpe_trainer *t = st->t;
    heap_entry best;
    uint32_t idx;
    int rc;
    if (!pop_best(st, &best, &idx, &rc)) {
        *done = 1;
        return rc;
    }
    if (t->min_frequency && (uint64_t)best.count < t->min_frequency) {
        *done = 1;
        return BPE_OK;
    }
    uint32_t z;
    rc = token_append(&st->tok, best.left, best.right, &z);
    if (rc == BPE_OK)
        rc = record_merge(t, best.left, best.right, z);
    size_t n_affected = 0;
    if (rc == BPE_OK)
        rc = collect_words(st, idx, step, &n_affected);
    if (rc == BPE_OK)
        rc = run_slices(st, n_affected, best.left, best.right, z);
    if (rc == BPE_OK)
        rc = merge_long_words(&st->ws, &st->long_slice, &st->ps.recs[idx], best.left,
                              best.right, z);
    if (rc == BPE_OK)
        rc = apply_deltas(st, step);
    return rc;
}

static int state_init(state *st, bpe_trainer *t)
{
    memset(st, 0, sizeof *st);
    st->t = t;
    st->h.t = t;
    int rc = t->char_level ? train_alphabet_build(t, &st->alpha) : BPE_OK;
    if (rc == BPE_OK)
        rc = build_words(st);
    if (rc != BPE_OK)
        return rc;
    size_t n_initial = t->char_level ? st->alpha.n_tokens : 256;
    /* every merge removes at least one symbol, and a word keeps at least one: no more than
     * sum(len - 1) merges can happen, whatever vocab_size asks for */
    size_t possible = 0;
    for (size_t w = 0; w < st->ws.n; w++)
        possible += st->ws.len[w] - 1;
    size_t max_tokens = t->vocab_size - t->n_special;
    if (max_tokens > n_initial + possible)
        max_tokens = n_initial + possible;
    rc = tokens_init(&st->tok, t, max_tokens < n_initial ? n_initial : max_tokens,
                     t->char_level ? &st->alpha : NULL);
    train_alphabet_free(&st->alpha);     /* copied into the tokens; only index was needed */
    if (rc == BPE_OK)
        rc = count_initial_pairs(st);
    if (rc != BPE_OK)
        return rc;
    st->n_slices = t->n_threads;
    st->slices = calloc((size_t)st->n_slices, sizeof *st->slices);
    if (st->slices == NULL)
        return BPE_ERR_NOMEM;
    for (int i = 0; i < st->n_slices; i++) {
        st->slices[i].scratch_cap = 2 * (st->longest + 1);
        st->slices[i].scratch = malloc(st->slices[i].scratch_cap * sizeof(uint32_t));
        if (st->slices[i].scratch == NULL)
            return BPE_ERR_NOMEM;
    }
    return BPE_OK;
}

static void state_free(state *st)
{
    train_alphabet_free(&st->alpha);
    free(st->tok.map);
    free(st->tok.units);
    pairs_free(&st->ps);
    free(st->h.e);
    free(st->ws.sym);
    free(st->ws.off);
    free(st->ws.len);
    free(st->ws.count);
    free(st->ws.seen);
    free(st->ws.nxt);
    free(st->ws.prv);
    free(st->long_slice.d);
    free(st->affected);
    for (int i = 0; st->slices && i < st->n_slices; i++) {
        free(st->slices[i].d);
        free(st->slices[i].scratch);
    }
    free(st->slices);
    free(st->raised);
}

static void reset_result(bpe_trainer *t)
{
    free(t->tok_bytes);
    free(t->tok_off);
    free(t->merges);
    t->tok_bytes = NULL;
    t->tok_off = NULL;
    t->merges = NULL;
    t->tok_bytes_len = t->tok_bytes_cap = t->n_tokens = t->tok_cap = 0;
    t->n_merges = t->merges_cap = 0;
}

int bpe_trainer_merge(bpe_trainer *t, bpe_progress *progress)
{
    if (t == NULL || t->merged)
        return BPE_ERR_ARG;
    size_t target = t->vocab_size - t->n_special;
    train_progress_set(progress, BPE_PHASE_MERGE, 0, 0);
    state st;
    int rc = state_init(&st, t);
    size_t n_initial = st.tok.n_initial;
    if (rc == BPE_OK)
        train_progress_set(progress, BPE_PHASE_MERGE, 0,
                           target > n_initial ? target - n_initial : 0);
    uint32_t step = 0;
    while (rc == BPE_OK && t->n_tokens < target) {
        if (train_cancelled(progress)) {
            rc = BPE_ERR_CANCELLED;
            break;
        }
        int done = 0;
        rc = step_once(&st, step++, &done);
        if (done)
            break;
        if (progress)
            __atomic_store_n(&progress->done, t->n_tokens - n_initial, __ATOMIC_RELAXED);
    }
    state_free(&st);
    if (rc != BPE_OK) {
        reset_result(t);
        return rc;
    }
    /* no pair was left before the target: the work is done, and the bar says so */
    train_progress_set(progress, BPE_PHASE_MERGE, t->n_tokens - n_initial,
                       t->n_tokens - n_initial);
    t->merged = 1;
    return BPE_OK;
}
