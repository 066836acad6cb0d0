/*
 * merge.h - the byte-pair merging of one piece (merge.c).
 */
#ifndef BPE_MERGE_H
#define BPE_MERGE_H

#include <stddef.h>
#include <stdint.h>

#include "bpe.h"

/* One symbol of a piece being merged: a node of an array-backed doubly linked list. */
typedef struct bpe_sym {
    uint32_t id;     /* token id of the symbol */
    uint32_t prev;   /* index of the previous live symbol, BPE_SYM_NONE at the start */
    uint32_t next;   /* index of the next live symbol, BPE_SYM_NONE at the end */
    uint32_t len;    /* bytes covered; 0 once merged into its left neighbour */
} bpe_sym;

#define BPE_SYM_NONE UINT32_MAX

/* Merges symbol i with its right neighbour (which must exist) into token new_id: i covers
 * both, the neighbour is unlinked and marked dead (len 0).  Nothing moves in the array. */
static inline void bpe_sym_absorb_right(bpe_sym *syms, uint32_t i, uint32_t new_id)
{
    bpe_sym *l = &syms[i], *r = &syms[l->next];
    l->id = new_id;
    l->len += r->len;
    r->len = 0;
    l->next = r->next;
    if (l->next != BPE_SYM_NONE)
        syms[l->next].prev = i;
}

/* A candidate merge in the heap. */
typedef struct bpe_heap_entry {
    uint64_t key;    /* rank << 32 | index of the left symbol: the heap order */
    uint32_t new_id; /* the id the pair merges into */
    uint32_t span;   /* bytes covered by left + right when pushed (validity check) */
} bpe_heap_entry;

/* Reusable buffers of the heap path, grown on demand; zero-initialise before first use. */
typedef struct bpe_merge_scratch {
    bpe_sym *syms;           /* symbols of the current piece */
    size_t sym_cap;          /* allocated symbols */
    bpe_heap_entry *heap;    /* the 4-ary min-heap: heap_mem + 3, so that the four children
                                4i+1..4i+4 of every node share one 64-byte cache line */
    size_t heap_cap;         /* allocated entries */
    void *heap_mem;          /* the allocation (64-byte aligned) behind heap */
    uint64_t *dead;          /* longpiece.c: bitmap of dead-end positions of the piece */
    size_t dead_cap;         /* allocated 64-bit words of dead */
    uint32_t *reach;         /* longpiece.c: the ring of noted trie reaches */
    size_t reach_cap;        /* allocated entries of reach */
} bpe_merge_scratch;

/* Per-slot buffers of the option-aware merge (model.c); zero-initialise before first use. */
typedef struct bpe_model_scratch {
    bpe_sym *syms;             /* the symbols of the piece */
    size_t sym_cap;
    struct bpe_model_entry *heap;   /* binary min-heap of candidate merges */
    size_t heap_cap;
    struct bpe_model_entry *skip;   /* dropout: entries popped and skipped */
    size_t skip_cap;
    uint8_t *key;              /* a symbol's lookup string (prefix + unit + suffix) */
    size_t key_cap;
} bpe_model_scratch;

/* Merges the n > 0 bytes p[0..n) into token ids written to ids[0..*n_ids) (ids has room for
 * n), by the heap (or, up to SMALL_PIECE bytes, a scan); a long piece should try
 * bpe_long_merge (longpiece.h) first.  Does not look at ignore_merges or any cache.  Returns
 * BPE_OK, BPE_ERR_NOBYTE (a byte with no single-byte token), BPE_ERR_NOMEM or
 * BPE_ERR_TOOBIG (n >= 2^32 - 1). */
int bpe_merge_piece(const bpe_tokenizer *tok, bpe_merge_scratch *s, const uint8_t *p,
                    size_t n, uint32_t *ids, size_t *n_ids);

/* Frees the scratch buffers and zeroes the struct.  NULL is fine. */
void bpe_merge_scratch_free(bpe_merge_scratch *s);

#endif
