/*
 * tokenizer.h - the internal layout of a bpe_tokenizer, and the helpers the encoder files share.
 *
 * A tokenizer is built once by bpe_tokenizer_new (tokenizer.c) and is immutable afterwards,
 * except for its array of per-call work slots (cache.h), whose ownership is handed out with an
 * atomic compare-and-swap.  Ids are dense enough to index arrays by id (id_limit is bounded
 * relative to the number of tokens, see tokenizer.c).
 */
#ifndef BPE_TOKENIZER_H
#define BPE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "bpe.h"
#include "buffers.h"
#include "cache.h"
#include "special.h"

#define BPE_NO_ID UINT32_MAX

/* One entry of the pair table: (left id, right id) -> (rank, new id). */
typedef struct bpe_pair_entry {
    uint64_t key;       /* (uint64)left << 32 | right; BPE_PAIR_EMPTY when the slot is free */
    uint32_t rank;      /* merge priority: lower merges first */
    uint32_t new_id;    /* id of the token whose bytes are left's then right's */
} bpe_pair_entry;

/* A merge of two single-byte tokens, by their bytes: every piece's first pairs are of those,
 * and this table (512 KiB) stays in cache where the pair table does not (see merge.c). */
typedef struct bpe_byte_pair {
    uint32_t rank;      /* UINT32_MAX: the two do not merge */
    uint32_t new_id;
} bpe_byte_pair;

#define BPE_PAIR_EMPTY UINT64_MAX

/* Where the bytes of one id live. */
typedef struct bpe_token_ref {
    uint32_t off;       /* offset into tok->bytes */
    uint32_t len;       /* byte length; 0 means "no token has this id" */
} bpe_token_ref;

/* Tokens of at most this many bytes are kept in their slot of a bytes -> id table. */
#define BPE_SLOT_INLINE 7

/* One slot of the bytes -> id table (open addressing, linear probing): 16 bytes, so a slot
 * never straddles a cache line.  A short token's bytes sit in the slot itself, and looking it
 * up reads nothing else.  A longer one's slot holds where its bytes are (its long key): its
 * comparison reads the byte buffer, one more cache miss, which encode.c prefetches a little
 * ahead (some 7% of the pieces of English prose are tokens of 8 bytes or more). */
typedef struct bpe_bytes_slot {
    uint32_t hash;      /* low 32 bits of the bytes' hash, to skip most comparisons */
    uint32_t id;        /* BPE_NO_ID when the slot is free */
    uint8_t len;        /* the token's length when <= BPE_SLOT_INLINE, else 0 */
    uint8_t bytes[BPE_SLOT_INLINE];   /* its bytes when len != 0, else its long key */
} bpe_bytes_slot;

/* A long key: where a long token's bytes are, kept in its slot's bytes[]: their offset in
 * tok->bytes (4 bytes, little-endian) and their length (3 bytes; BPE_LONG_KEY_FAR stands for
 * 2^24 - 1 bytes or more, whose length is by_id's). */
#define BPE_LONG_KEY_FAR 0xFFFFFFu

static inline uint32_t bpe_long_key_off(const bpe_bytes_slot *s)
{
    return (uint32_t)s->bytes[0] | (uint32_t)s->bytes[1] << 8 | (uint32_t)s->bytes[2] << 16 |
           (uint32_t)s->bytes[3] << 24;
}

static inline uint32_t bpe_long_key_len(const bpe_bytes_slot *s)
{
    return (uint32_t)s->bytes[4] | (uint32_t)s->bytes[5] << 8 | (uint32_t)s->bytes[6] << 16;
}

struct bpe_tokenizer {
    int rule;                     /* BPE_RULE_* */
    int pattern;                  /* BPE_PATTERN_* */
    int ignore_merges;            /* 1: a piece that is a token is emitted whole */
    size_t cache_capacity;        /* entries per word cache; 0: no cache */

    uint32_t id_limit;            /* largest id + 1 over ordinary and special tokens */
    uint8_t *bytes;               /* every token's bytes (ordinary, then special) */
    size_t bytes_size;            /* bytes allocated for bytes (bpe_table_alloc) */
    bpe_token_ref *by_id;         /* id_limit entries: the bytes of each id */
    uint8_t *is_special;          /* id_limit flags: 1 for a special token's id */
    uint32_t byte_id[256];        /* id of each single-byte token, BPE_NO_ID if none */

    bpe_bytes_slot *ordinary;     /* bytes -> id over ordinary tokens; ordinary_mask + 1 slots */
    size_t ordinary_mask;
    bpe_bytes_slot *special_tab;  /* bytes -> id over special tokens */
    size_t special_mask;

    bpe_pair_entry *pairs;        /* pair table; pair_mask + 1 slots, load <= 1/2 */
    size_t pair_mask;
    int pair_shift;               /* 64 - log2(pair_mask + 1), for the multiplicative hash */
    uint8_t (*pair_bits)[2];      /* id_limit filters over the pair table: pair_bits[a][0] has
                                     bpe_pair_bit(b) set for every pair (a, b) in it, and
                                     pair_bits[b][1] has bpe_pair_bit(a) set */
    bpe_byte_pair *byte_pairs;    /* 65536 entries: the pair table's answer for the tokens of
                                     bytes a, b at byte_pairs[a << 8 | b] (rank UINT32_MAX: no
                                     merge, or a byte without a token) */

    size_t n_special;             /* special tokens, in spec order */
    uint32_t *special_ids;        /* their ids */
    bpe_special_matcher *matcher; /* finds them in text; NULL when n_special == 0 */

    bpe_slot slots[BPE_N_SLOTS];  /* per-call work areas (word cache + merge scratch) */

    struct bpe_model *model;      /* the model options (model.h); NULL when all are off */
    size_t long_min;              /* pieces of at least this many bytes try longpiece.c;
                                     SIZE_MAX: never (BPE_CFFI_LONG_PIECE=0) */
    int long_state;               /* BPE_LONG_* (longpiece.h); atomic, see longpiece.c */
    struct bpe_long_tables *long_tables;   /* built lazily; valid once long_state is READY */
    size_t medium_bytes;          /* bytes of medium pieces merged by the heap before the
                                     long-piece tables existed (atomic; encode.c) */
};

/* 64-bit hash of a byte string (our own multiply-xor mix; not cryptographic). */
static inline uint64_t bpe_hash_bytes(const uint8_t *p, size_t n)
{
    const uint64_t k = 0x9E3779B97F4A7C15ull;
    uint64_t h = 0x6A09E667F3BCC909ull ^ (n * k);
    uint64_t w;
    while (n >= 8) {
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 31;
        p += 8;
        n -= 8;
    }
    if (n >= 4) {
        uint32_t a, b;
        memcpy(&a, p, 4);
        memcpy(&b, p + n - 4, 4);
        w = ((uint64_t)a << 32) | b;
    } else if (n > 0) {
        w = ((uint64_t)p[0] << 16) | ((uint64_t)p[n >> 1] << 8) | p[n - 1];
    } else {
        w = 0;
    }
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 29;
    h *= k;
    h ^= h >> 32;
    return h;
}

/* The pair table probe: the entry for (left, right), or NULL if the pair never merges. */
static inline const bpe_pair_entry *bpe_pair_probe(const bpe_tokenizer *tok, uint32_t left,
                                                   uint32_t right)
{
    uint64_t key = ((uint64_t)left << 32) | right;
    size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> tok->pair_shift);
    for (;;) {
        const bpe_pair_entry *e = &tok->pairs[i];
        if (e->key == key)
            return e;
        if (e->key == BPE_PAIR_EMPTY)
            return NULL;
        i = (i + 1) & tok->pair_mask;
    }
}

/* The bit of pair_bits that stands for id x (a multiplicative hash: 3 bits). */
static inline unsigned bpe_pair_bit(uint32_t x)
{
    return 1u << ((x * 0x9E3779B1u) >> 29);
}

/* The pair table lookup: the entry for (left, right), or NULL if the pair never merges.  The
 * two filter bytes of pair_bits (ids < id_limit) rule out most pairs that do not merge before
 * the probe, which is usually a cache miss. */
static inline const bpe_pair_entry *bpe_pair_find(const bpe_tokenizer *tok, uint32_t left,
                                                  uint32_t right)
{
    if (!(tok->pair_bits[left][0] & bpe_pair_bit(right)) ||
        !(tok->pair_bits[right][1] & bpe_pair_bit(left)))
        return NULL;
    return bpe_pair_probe(tok, left, right);
}

/* Starts loading the slot where bpe_ordinary_lookup(tok, ..., h) begins its probe. */
static inline void bpe_ordinary_prefetch(const bpe_tokenizer *tok, uint64_t h)
{
    BPE_PREFETCH(&tok->ordinary[(size_t)h & tok->ordinary_mask]);
}

/* The second step, once that slot has had time to arrive: when it holds a long token of this
 * hash, a hint to load the bytes its lookup will compare. */
static inline void bpe_ordinary_prefetch_bytes(const bpe_tokenizer *tok, uint64_t h)
{
    const bpe_bytes_slot *s = &tok->ordinary[(size_t)h & tok->ordinary_mask];
    if (s->hash == (uint32_t)h && s->len == 0 && s->id != BPE_NO_ID)
        BPE_PREFETCH(tok->bytes + bpe_long_key_off(s));
}

/* byte_pairs' entry for the single-byte tokens of bytes a then b. */
static inline const bpe_byte_pair *bpe_byte_pair_of(const bpe_tokenizer *tok, uint8_t a,
                                                    uint8_t b)
{
    return &tok->byte_pairs[(uint32_t)a << 8 | b];
}

/* The id of the ordinary token with exactly these bytes (hash h = bpe_hash_bytes), or
 * BPE_NO_ID. */
uint32_t bpe_ordinary_lookup(const bpe_tokenizer *tok, const uint8_t *p, size_t n, uint64_t h);

/* The final split of each of sp's ordinary tokens, for the tiktoken rule's pair table
 * (final_split.c): split[2i], split[2i + 1] for token i, BPE_NO_ID when it has none;
 * *kept = how many have one.  BPE_OK or BPE_ERR_NOMEM. */
int bpe_final_splits(const bpe_tokenizer *tok, const bpe_spec *sp, uint32_t *split,
                     size_t *kept);

#endif
