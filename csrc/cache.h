/*
 * cache.h - the per-call work slots of a tokenizer: a bounded word cache (piece bytes -> ids)
 * plus merge scratch buffers.  See cache.c for the design.
 */
#ifndef BPE_CACHE_H
#define BPE_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "bpe.h"
#include "merge.h"

#define BPE_N_SLOTS 64          /* work slots per tokenizer (concurrent cached callers) */
#define BPE_CACHE_MAX_PIECE 256 /* only pieces shorter than this are cached */

typedef struct bpe_cache bpe_cache;

/* A work area owned by one encode call at a time. */
typedef struct bpe_slot {
    int busy;                    /* 1 while a call owns the slot (atomic CAS) */
    int cache_failed;            /* 1 after the cache could not be allocated: run uncached */
    bpe_cache *cache;            /* the word cache; NULL until first use or when disabled */
    bpe_merge_scratch scratch;   /* buffers for long pieces */
} bpe_slot;

/* Claims a free slot of tok for the calling thread (creating its cache lazily), or returns
 * NULL when all are busy (the caller then works uncached with its own scratch). */
bpe_slot *bpe_slot_claim(const bpe_tokenizer *tok);

/* Gives a claimed slot back.  NULL is fine. */
void bpe_slot_release(bpe_slot *slot);

/* Frees the cache and scratch of a slot (tokenizer teardown only). */
void bpe_slot_destroy(bpe_slot *slot);

/* A new empty cache holding up to capacity entries (> 0); NULL when out of memory. */
bpe_cache *bpe_cache_new(size_t capacity);
void bpe_cache_free(bpe_cache *c);   /* NULL is fine */

/* The ids cached for key[0..n) (hash h = bpe_hash_bytes(key, n)) or NULL; *n_ids set on a
 * hit.  The pointer is valid until the next bpe_cache_put on this cache. */
const uint32_t *bpe_cache_get(const bpe_cache *c, const uint8_t *key, size_t n, uint64_t h,
                              size_t *n_ids);

/* Remembers key -> ids (n < BPE_CACHE_MAX_PIECE, n_ids <= n).  May evict everything to make
 * room; a failed allocation just leaves the entry out. */
void bpe_cache_put(bpe_cache *c, const uint8_t *key, size_t n, uint64_t h,
                   const uint32_t *ids, size_t n_ids);

#endif
