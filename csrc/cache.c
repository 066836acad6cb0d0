/*
 * cache.c - per-call work slots and the word cache (piece bytes -> ids).
 *
 * DESIGN.  A tokenizer owns a fixed array of BPE_N_SLOTS work slots.  An encode call claims
 * one free slot with a single atomic compare-and-swap on slot->busy and releases it (atomic
 * store) when it returns, so while a call runs it owns its slot exclusively and the hot path
 * (one hash of the piece, one probe, a memcpy of the ids) takes no lock.  A single-threaded
 * user always claims slot 0 and finds its cache warm; N concurrent callers get N different
 * slots; when all slots are busy a call runs uncached with its own scratch (correct, slower).
 * The cost is one CAS per call, not per piece.  Compared with pthread keys this needs no
 * destructor bookkeeping when threads exit or tokenizers are freed many times: the slots die
 * with their tokenizer, and a thread that goes away leaves nothing behind.  Across fork() a
 * slot that some other parent thread held stays marked busy in the child; the child simply
 * uses another slot.
 *
 * The cache of a slot is created lazily on first claim and starts small (256 table slots,
 * 16 KiB of records) so that a single short encode stays within a few KiB of new memory; it
 * doubles as it fills, up to `capacity` entries.  It is bounded: when an insertion would
 * exceed capacity entries, or the record arena reaches its limit, the whole cache is emptied
 * (eviction by reset: O(1) amortised, no per-entry bookkeeping on the hot path) and refilled
 * from then on.  Only pieces shorter than BPE_CACHE_MAX_PIECE bytes are cached.
 *
 * Growth.  Text that comes round again after more distinct pieces than the cache holds (the
 * same large text encoded twice) would find nothing: each piece is emptied out before it
 * returns.  So when the cache fills, the hashes of the entries it empties out are marked in
 * `gone` (a bitset of about 8 bits per entry of the largest capacity, cleared once an eighth
 * of its bits are marked), and each piece put afterwards is counted as a return when its bit
 * is set.  If at least half of the pieces put since the cache last filled were returns, a
 * larger cache would have held them, and it doubles its capacity (and its arena's limit)
 * instead of emptying itself, up to BPE_CACHE_GROWTH times the capacity it was made with.  New
 * text hardly grows it: most of the pieces it misses occur once (16 MB of the multilingual
 * corpus with o200k: 356K of its 875K merged pieces distinct; a return is then a piece seen
 * before the last emptying, or a false positive of the bitset, under 1 in 8).  A batch's
 * worker slot whose cache is empty starts as a copy of the caller's (bpe_cache_copy): the
 * first multi-threaded call after single-threaded ones then finds its words already merged
 * on every thread, not on one (the first 2-thread encode_batch of 8 MB of English after three
 * single calls took 12-21% longer than the later ones without the copy, 0-1% with it).  The
 * worker makes the copy on its own thread while the caller encodes: the caller's cache is
 * held meanwhile (bpe_cache_hold), looked up but not added to.  Made by the caller before
 * starting the worker, the copy (megabytes of new memory) kept both threads waiting ~1 ms.
 *
 * Table: open addressing with linear probing, load factor <= 1/2, no deletions (only full
 * resets).  A table slot holds the full 64-bit hash, the key length and id count, and the
 * offset of the entry's record in the arena.  A record is the ids (uint32, 4-aligned) followed
 * by the key bytes.  Invariant: every occupied slot's record lies in arena[0..arena_used).
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "model.h"
#include "tokenizer.h"

#define EMPTY BPE_CACHE_EMPTY
#define START_SLOTS 256
#define START_ARENA 16384
#define ARENA_PER_ENTRY 48   /* arena limit = capacity * this (an English word needs ~16) */
#define GONE_BITS_PER_ENTRY 8
#define GONE_BITS_MAX ((size_t)1 << 27)   /* 16 MB: a larger cache remembers less of what went */

static size_t arena_limit(size_t capacity)
{
    size_t max = capacity > SIZE_MAX / ARENA_PER_ENTRY ? SIZE_MAX : capacity * ARENA_PER_ENTRY;
    if (max > UINT32_MAX / 2)
        max = UINT32_MAX / 2;   /* record offsets are uint32 */
    return max < START_ARENA ? START_ARENA : max;
}

static void clear_table(bpe_cache_slot *tab, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++)
        tab[i].rec = EMPTY;
}

bpe_cache *bpe_cache_new(size_t capacity)
{
    bpe_cache *c = calloc(1, sizeof *c);
    if (c == NULL)
        return NULL;
    c->capacity = capacity;
    c->capacity_max = capacity > SIZE_MAX / BPE_CACHE_GROWTH ? capacity
                                                             : capacity * BPE_CACHE_GROWTH;
    c->mask = START_SLOTS - 1;
    c->arena_max = arena_limit(capacity);
    c->arena_cap = START_ARENA;
    c->tab = malloc(START_SLOTS * sizeof *c->tab);
    c->arena = malloc(START_ARENA);
    if (c->tab == NULL || c->arena == NULL) {
        bpe_cache_free(c);
        return NULL;
    }
    clear_table(c->tab, START_SLOTS);
    return c;
}

void bpe_cache_free(bpe_cache *c)
{
    if (c == NULL)
        return;
    free(c->tab);
    free(c->arena);
    free(c->gone);
    free(c);
}

static void reset(bpe_cache *c)
{
    clear_table(c->tab, c->mask + 1);
    c->count = 0;
    c->arena_used = 0;
}

static size_t gone_bit(const bpe_cache *c, uint64_t h)
{
    return (size_t)(h >> 32) & c->gone_mask;   /* the table's slot comes from the low bits */
}

/* Marks the entries held in gone (made on first use; without memory, nothing is marked and
 * the cache never grows). */
static void mark_gone(bpe_cache *c)
{
    size_t i, bits;
    if (c->gone == NULL) {
        bits = 4096;
        while (bits / GONE_BITS_PER_ENTRY < c->capacity_max && bits < GONE_BITS_MAX)
            bits *= 2;
        if ((c->gone = calloc(bits / 64, sizeof *c->gone)) == NULL)
            return;
        c->gone_mask = bits - 1;
    }
    bits = c->gone_mask + 1;
    if (c->gone_marks + c->count > bits / 8) {   /* keep at most an eighth of the bits set */
        memset(c->gone, 0, bits / CHAR_BIT);
        c->gone_marks = 0;
    }
    for (i = 0; i <= c->mask; i++)
        if (c->tab[i].rec != EMPTY) {
            size_t b = gone_bit(c, c->tab[i].hash);
            c->gone[b >> 6] |= (uint64_t)1 << (b & 63);
        }
    c->gone_marks += c->count;
}

/* The cache is full: doubles its capacity and arena limit (1) when at least half of the
 * entries put since it last filled had been emptied out before and it may still grow, else
 * marks its entries as gone and empties it (0). */
static int grow_or_empty(bpe_cache *c)
{
    int returning = c->puts > 0 && 2 * c->returns >= c->puts;
    c->puts = 0;
    c->returns = 0;
    if (returning && c->capacity < c->capacity_max) {
        c->capacity = c->capacity > c->capacity_max / 2 ? c->capacity_max : 2 * c->capacity;
        c->arena_max = arena_limit(c->capacity);
        return 1;
    }
    mark_gone(c);
    reset(c);
    return 0;
}

int bpe_cache_can_copy(const bpe_cache *dst, const bpe_cache *src)
{
    return dst->count == 0 && src->count != 0 && dst->capacity_max == src->capacity_max;
}

void bpe_cache_hold(bpe_cache *c)
{
    __atomic_add_fetch(&c->copiers, 1, __ATOMIC_RELAXED);
}

/* Release order: the copier's reads of c happen before a put that sees no hold. */
void bpe_cache_release(bpe_cache *c)
{
    __atomic_sub_fetch(&c->copiers, 1, __ATOMIC_RELEASE);
}

int bpe_cache_copy(bpe_cache *dst, const bpe_cache *src)
{
    size_t slots = src->mask + 1;
    size_t arena_cap = src->arena_cap;   /* the source's room: the next puts need not grow it
                                            (a copy of what is used, then the rest untouched) */
    bpe_cache_slot *tab;
    uint8_t *arena;
    if (!bpe_cache_can_copy(dst, src))
        return 0;
    tab = malloc(slots * sizeof *tab);
    arena = malloc(arena_cap);
    if (tab == NULL || arena == NULL) {
        free(tab);
        free(arena);
        return 0;
    }
    memcpy(tab, src->tab, slots * sizeof *tab);
    memcpy(arena, src->arena, src->arena_used);
    free(dst->tab);
    free(dst->arena);
    dst->tab = tab;
    dst->mask = src->mask;
    dst->arena = arena;
    dst->arena_cap = arena_cap;
    dst->arena_used = src->arena_used;
    dst->count = src->count;
    dst->capacity = src->capacity;
    dst->arena_max = src->arena_max;
    return 1;
}

/* Doubles the table (rehashing); 0 when out of memory. */
static int grow_table(bpe_cache *c)
{
    size_t n = (c->mask + 1) * 2, i;
    bpe_cache_slot *t = malloc(n * sizeof *t);
    if (t == NULL)
        return 0;
    clear_table(t, n);
    for (i = 0; i <= c->mask; i++) {
        size_t j;
        if (c->tab[i].rec == EMPTY)
            continue;
        j = (size_t)c->tab[i].hash & (n - 1);
        while (t[j].rec != EMPTY)
            j = (j + 1) & (n - 1);
        t[j] = c->tab[i];
    }
    free(c->tab);
    c->tab = t;
    c->mask = n - 1;
    return 1;
}

/* Grows the arena, within arena_max, to hold `need` more bytes: 0 when it cannot. */
static int arena_grow(bpe_cache *c, size_t need)
{
    size_t cap = c->arena_cap;
    uint8_t *p;
    while (cap < c->arena_used + need && cap < c->arena_max)
        cap *= 2;
    if (cap > c->arena_max)
        cap = c->arena_max;
    if (cap < c->arena_used + need || (p = realloc(c->arena, cap)) == NULL)
        return 0;
    c->arena = p;
    c->arena_cap = cap;
    return 1;
}

/* Makes room for a record of `need` bytes; 0 if the cache was emptied and still lacks it. */
static int arena_room(bpe_cache *c, size_t need)
{
    if (c->arena_used + need <= c->arena_cap || arena_grow(c, need))
        return 1;
    if (grow_or_empty(c)) {          /* a larger limit: try again */
        if (arena_grow(c, need))
            return 1;
        reset(c);                    /* out of memory */
    }
    return need <= c->arena_cap;
}

void bpe_cache_put(bpe_cache *c, const uint8_t *key, size_t n, uint64_t h,
                   const uint32_t *ids, size_t n_ids)
{
    size_t need = (4 * n_ids + n + 3) & ~(size_t)3, i;
    if (n >= BPE_CACHE_MAX_PIECE || n_ids > n || __atomic_load_n(&c->copiers, __ATOMIC_ACQUIRE))
        return;
    if (c->gone != NULL) {
        size_t b = gone_bit(c, h);
        c->returns += (c->gone[b >> 6] >> (b & 63)) & 1;
    }
    c->puts++;
    if (c->count + 1 > c->capacity)
        grow_or_empty(c);
    if (2 * (c->count + 1) > c->mask + 1 && !grow_table(c))
        return;
    if (!arena_room(c, need))
        return;
    i = (size_t)h & c->mask;
    while (c->tab[i].rec != EMPTY)
        i = (i + 1) & c->mask;
    memcpy(c->arena + c->arena_used, ids, 4 * n_ids);
    memcpy(c->arena + c->arena_used + 4 * n_ids, key, n);
    c->tab[i].hash = h;
    c->tab[i].rec = (uint32_t)c->arena_used;
    c->tab[i].key_len = (uint16_t)n;
    c->tab[i].n_ids = (uint16_t)n_ids;
    c->arena_used += need;
    c->count++;
}

/* ---- work slots -------------------------------------------------------------------------- */

bpe_slot *bpe_slot_claim(const bpe_tokenizer *ctok)
{
    bpe_tokenizer *tok = (bpe_tokenizer *)ctok;   /* the slots are the one mutable part */
    size_t i;
    for (i = 0; i < BPE_N_SLOTS; i++) {
        bpe_slot *s = &tok->slots[i];
        int expected = 0;
        if (__atomic_load_n(&s->busy, __ATOMIC_RELAXED))
            continue;
        if (!__atomic_compare_exchange_n(&s->busy, &expected, 1, 0, __ATOMIC_ACQUIRE,
                                         __ATOMIC_RELAXED))
            continue;
        if (s->cache == NULL && !s->cache_failed && tok->cache_capacity > 0) {
            s->cache = bpe_cache_new(tok->cache_capacity);
            s->cache_failed = s->cache == NULL;
        }
        return s;
    }
    return NULL;
}

void bpe_slot_release(bpe_slot *slot)
{
    if (slot != NULL)
        __atomic_store_n(&slot->busy, 0, __ATOMIC_RELEASE);
}

void bpe_tokenizer_cache_size(const bpe_tokenizer *tok, size_t slot, size_t *count,
                              size_t *capacity)
{
    const bpe_cache *c = slot < BPE_N_SLOTS ? tok->slots[slot].cache : NULL;
    *count = c != NULL ? c->count : 0;
    *capacity = c != NULL ? c->capacity : 0;
}

void bpe_slot_destroy(bpe_slot *slot)
{
    bpe_cache_free(slot->cache);
    slot->cache = NULL;
    bpe_merge_scratch_free(&slot->scratch);
    bpe_model_scratch_free(&slot->mscratch);
}
