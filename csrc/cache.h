/*
 * cache.h - the per-call work slots of a tokenizer: a bounded word cache (piece bytes -> ids)
 * plus merge scratch buffers.  See cache.c for the design.
 */
#ifndef BPE_CACHE_H
#define BPE_CACHE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "bpe.h"
#include "merge.h"

#define BPE_N_SLOTS 64          /* work slots per tokenizer (concurrent cached callers) */
#define BPE_CACHE_MAX_PIECE 256 /* only pieces shorter than this are cached */

#define BPE_CACHE_EMPTY UINT32_MAX
#define BPE_CACHE_GROWTH 4      /* a cache grows to at most this times its capacity */

/* A hint to start loading the cache line at address a (a read soon follows); no effect on
 * results, and nothing where the compiler has no prefetch builtin. */
#if defined(__GNUC__)
#define BPE_PREFETCH(a) __builtin_prefetch((a), 0, 3)
#else
#define BPE_PREFETCH(a) ((void)(a))
#endif

/* 1 if a[0..n) == b[0..n); inline word compares (keys are short, a libc call costs more). */
static inline int bpe_bytes_equal(const uint8_t *a, const uint8_t *b, size_t n)
{
    uint64_t x, y;
    uint32_t u, v;
    while (n >= 8) {
        memcpy(&x, a, 8);
        memcpy(&y, b, 8);
        if (x != y)
            return 0;
        a += 8;
        b += 8;
        n -= 8;
    }
    if (n >= 4) {
        memcpy(&u, a, 4);
        memcpy(&v, b, 4);
        if (u != v)
            return 0;
        memcpy(&u, a + n - 4, 4);
        memcpy(&v, b + n - 4, 4);
        return u == v;
    }
    if (n == 0)
        return 1;   /* n in 1..3: positions 0, n/2 and n-1 cover every byte */
    return a[0] == b[0] && a[n >> 1] == b[n >> 1] && a[n - 1] == b[n - 1];
}

/* One slot of the cache's hash table. */
typedef struct bpe_cache_slot {
    uint64_t hash;     /* full hash of the key */
    uint32_t rec;      /* offset of the record in the arena; BPE_CACHE_EMPTY if free */
    uint16_t key_len;  /* bytes of the key */
    uint16_t n_ids;    /* ids of the value */
} bpe_cache_slot;

/* The word cache (see cache.c). */
struct bpe_cache {
    size_t capacity;      /* most entries held at once (grows up to capacity_max) */
    size_t capacity_max;  /* BPE_CACHE_GROWTH times the capacity it was made with */
    size_t count;         /* entries held */
    bpe_cache_slot *tab;  /* mask + 1 slots */
    size_t mask;
    uint8_t *arena;       /* records */
    size_t arena_used;    /* bytes of arena in use */
    size_t arena_cap;     /* bytes allocated */
    size_t arena_max;     /* arena never grows past this */
    uint64_t *gone;       /* one bit per bucket of the hashes of entries emptied out, since
                             gone was last cleared; NULL until the cache first fills */
    size_t gone_mask;     /* bits of gone - 1 */
    size_t gone_marks;    /* entries marked in gone since it was cleared */
    size_t puts;          /* entries put since the cache last filled */
    size_t returns;       /* of those, how many had a bit in gone: emptied out, then missed */
    int copiers;          /* other threads copying this cache now (atomic): while nonzero,
                             bpe_cache_put adds nothing, so the owner can still look entries
                             up but changes nothing the copiers read */
};

typedef struct bpe_cache bpe_cache;

/* A work area owned by one encode call at a time. */
typedef struct bpe_slot {
    int busy;                    /* 1 while a call owns the slot (atomic CAS) */
    int cache_failed;            /* 1 after the cache could not be allocated: run uncached */
    bpe_cache *cache;            /* the word cache; NULL until first use or when disabled */
    bpe_merge_scratch scratch;   /* buffers for long pieces */
    bpe_model_scratch mscratch;  /* buffers of the option-aware merge (model.c) */
    uint64_t rng;                /* dropout generator state of the owning call (model.c) */
} bpe_slot;

/* Claims a free slot of tok for the calling thread (creating its cache lazily), or returns
 * NULL when all are busy (the caller then works uncached with its own scratch). */
bpe_slot *bpe_slot_claim(const bpe_tokenizer *tok);

/* Gives a claimed slot back.  NULL is fine. */
void bpe_slot_release(bpe_slot *slot);

/* Frees the cache and scratch of a slot (tokenizer teardown only). */
void bpe_slot_destroy(bpe_slot *slot);

/* A new empty cache holding up to capacity entries (> 0), growing to at most
 * BPE_CACHE_GROWTH times that; NULL when out of memory. */
bpe_cache *bpe_cache_new(size_t capacity);
void bpe_cache_free(bpe_cache *c);   /* NULL is fine */

/* Makes the empty cache dst a copy of src (same capacity): 1 if copied, 0 if dst was not empty,
 * src was, or memory ran out (dst then stays as it was).  Nothing may use dst meanwhile, nor
 * put to src unless a hold on src (bpe_cache_hold) stops that. */
int bpe_cache_copy(bpe_cache *dst, const bpe_cache *src);

/* 1 when dst is empty and could start as a copy of src (bpe_cache_copy). */
int bpe_cache_can_copy(const bpe_cache *dst, const bpe_cache *src);

/* A hold on c for a thread about to copy it: bpe_cache_put on c adds nothing until every
 * hold is released (bpe_cache_release, by the copying thread once its copy is made). */
void bpe_cache_hold(bpe_cache *c);
void bpe_cache_release(bpe_cache *c);

/* The ids cached for key[0..n) (hash h = bpe_hash_bytes(key, n)) or NULL; *n_ids set on a
 * hit.  The pointer is valid until the next bpe_cache_put on this cache. */
static inline const uint32_t *bpe_cache_get(const bpe_cache *c, const uint8_t *key, size_t n,
                                            uint64_t h, size_t *n_ids)
{
    size_t i = (size_t)h & c->mask;
    for (;;) {
        const bpe_cache_slot *s = &c->tab[i];
        if (s->rec == BPE_CACHE_EMPTY)
            return NULL;
        if (s->hash == h && s->key_len == n) {
            const uint8_t *rec = c->arena + s->rec;
            if (bpe_bytes_equal(rec + 4 * (size_t)s->n_ids, key, n)) {
                *n_ids = s->n_ids;
                return (const uint32_t *)(const void *)rec;
            }
        }
        i = (i + 1) & c->mask;
    }
}

/* Starts loading the table slot where bpe_cache_get(c, ..., h, ...) begins its probe. */
static inline void bpe_cache_prefetch(const bpe_cache *c, uint64_t h)
{
    BPE_PREFETCH(&c->tab[(size_t)h & c->mask]);
}

/* Remembers key -> ids (n < BPE_CACHE_MAX_PIECE, n_ids <= n).  When full, grows or evicts
 * everything (see cache.c); a failed allocation just leaves the entry out. */
void bpe_cache_put(bpe_cache *c, const uint8_t *key, size_t n, uint64_t h,
                   const uint32_t *ids, size_t n_ids);

#endif
