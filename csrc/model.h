/*
 * model.h - the HF BPE model options (model.c): character-level symbols, subword prefix and
 * end-of-word suffix, unknown token, byte fallback, BPE-dropout.
 *
 * A tokenizer built with every option off (and, for a byte-level merge-list vocabulary, a
 * token for every single byte) has no bpe_model (tok->model == NULL) and encodes
 * through merge.c alone; the choice is made once per piece by one pointer test in encode.c.
 */
#ifndef BPE_MODEL_H
#define BPE_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "bpe.h"
#include "buffers.h"
#include "cache.h"
#include "merge.h"

typedef struct bpe_model {
    int char_level;            /* 1: initial symbols are UTF-8 characters; 0: bytes */
    int byte_fallback;         /* 1: an unknown symbol becomes "<0xNN>" tokens if all exist */
    int fuse_unk;              /* 1: consecutive unknown symbols become one unk_id */
    uint32_t unk_id;           /* the unknown token; BPE_NO_ID: unknown symbols are dropped */
    float dropout;             /* probability of skipping a popped merge; 0: off */
    uint64_t seed;             /* the dropout generators' seed (atomic: bpe_tokenizer_reseed) */
    uint64_t calls;            /* encode calls seeded so far (atomic): call k's generator is
                                  seeded from (seed, k) */
    uint8_t *prefix;           /* continuing-subword prefix (owned), NULL when none */
    size_t prefix_len;
    uint8_t *suffix;           /* end-of-word suffix (owned), NULL when none */
    size_t suffix_len;
    uint32_t fallback_id[256]; /* id of the token "<0xNN>" for byte NN; BPE_NO_ID if absent */
    uint8_t mapped[256][2];    /* byte-level only: UTF-8 of the GPT-2 alphabet character of
                                  each byte (what HF's byte fallback sees) ... */
    uint8_t mapped_len[256];   /* ... and its length, 1 or 2 */
} bpe_model;


/* Makes tok->model from the spec's option fields (tok's tokens must already be added), or
 * leaves it NULL when every option is off and a byte-level merge-list vocabulary has every
 * single byte.  BPE_ERR_ARG on a bad option (dropout outside [0, 1], unk_id not an ordinary
 * token, options with BPE_RULE_TIKTOKEN, a NULL prefix or suffix with a nonzero length),
 * BPE_ERR_NOMEM. */
int bpe_model_new(const bpe_spec *spec, bpe_tokenizer *tok);

/* Frees a model; NULL is fine. */
void bpe_model_free(bpe_model *m);

/* Bytes of the continuing-subword prefix (cut from the right part of each merge). */
size_t bpe_model_prefix_len(const bpe_tokenizer *tok);

/* Seeds the dropout generator of the slot for one encode call (no-op without dropout). */
void bpe_model_begin_call(const bpe_tokenizer *tok, bpe_slot *slot);

/* Appends the ids of the nonempty piece p[0..n) under the model options (tok->model != NULL):
 * the slot's word cache and ignore_merges apply only without dropout, as in HF.  On error
 * out->len is unchanged.  BPE_OK, BPE_ERR_NOMEM, BPE_ERR_TOOBIG. */
int bpe_model_piece(const bpe_tokenizer *tok, bpe_slot *slot, const uint8_t *p, size_t n,
                    bpe_ids *out);

/* Frees a slot's model scratch and zeroes it.  NULL is fine. */
void bpe_model_scratch_free(bpe_model_scratch *s);

#endif
