/*
 * train.h - internal interface between the trainer's C files.
 *
 *   train_words.c  the word table: distinct pre-tokens (byte strings) with 64-bit counts, an
 *                  open-addressing hash table over an append-only byte arena.  One per
 *                  counting thread, combined at the end.
 *   train_count.c  reading files in blocks, cutting them where counts cannot change, and
 *                  counting pre-tokens on worker threads (bpe_trainer_count_file).
 *   train_merge.c  the merge loop: words as symbol arrays, the pair index, the 4-ary max-heap
 *                  (bpe_trainer_merge).
 *   train.c        the bpe_trainer object: config, add_words, result accessors, free.
 */
#ifndef BPE_TRAIN_H
#define BPE_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "bpe.h"
#include "special.h"

/* ---- word table ------------------------------------------------------------------------ */

typedef struct train_word_slot {
    uint64_t hash;      /* full hash of the bytes; 0 marks an empty slot */
    uint64_t count;     /* occurrences of the word */
    uint64_t offset;    /* len <= 8: the bytes themselves (zero padded); else their start in
                           the arena.  Most pre-tokens are short: no second cache miss. */
    uint32_t len;       /* length in bytes (> 0) */
    uint32_t pad;
} train_word_slot;

typedef struct train_words {
    train_word_slot *slots;  /* capacity slots, a power of two; load kept <= 1/2 */
    size_t capacity;
    size_t n;                /* words in the table */
    uint8_t *arena;          /* the bytes of every word, back to back */
    size_t arena_len;
    size_t arena_cap;
} train_words;

/* The bytes of a slot's word (inline or in the arena). */
static inline const uint8_t *train_slot_bytes(const train_words *w, const train_word_slot *s)
{
    return s->len <= 8 ? (const uint8_t *)&s->offset : w->arena + s->offset;
}

uint64_t train_hash_bytes(const uint8_t *p, size_t len);   /* never 0 */
void train_words_init(train_words *w);
void train_words_free(train_words *w);
/* Adds count occurrences of the word p[0..len), len > 0.  BPE_OK or BPE_ERR_NOMEM/TOOBIG. */
int train_words_add(train_words *w, const uint8_t *p, size_t len, uint64_t count);
/* Adds every word of src into dst (src unchanged). */
int train_words_merge_into(train_words *dst, const train_words *src);

/* ---- the trainer object ---------------------------------------------------------------- */

struct bpe_trainer {
    int pattern;                 /* BPE_PATTERN_* */
    size_t vocab_size;           /* total ids wanted, bytes + merges + specials */
    uint64_t min_frequency;      /* stop below this count (0: no minimum) */
    int n_threads;               /* >= 1 */
    size_t block_size;           /* bytes per reading block */
    size_t parallel_words;       /* words per thread before a merge runs on threads */
    size_t long_word;            /* a word of at least this many bytes is merged by position */
    size_t n_special;
    bpe_special_matcher *special;/* NULL when n_special == 0 */

    train_words words;           /* every pre-token counted so far */
    int merged;                  /* bpe_trainer_merge has run */

    /* the result, once merged */
    uint8_t *tok_bytes;          /* bytes of tokens 0..n_tokens-1, back to back */
    size_t tok_bytes_len, tok_bytes_cap;
    size_t *tok_off;             /* n_tokens + 1 offsets into tok_bytes */
    size_t n_tokens, tok_cap;
    uint32_t *merges;            /* 3 per merge: left id, right id, result id */
    size_t n_merges, merges_cap;
};

/* Reads cancel with an atomic load (Python writes it from another thread). */
static inline int train_cancelled(const bpe_progress *p)
{
    return p != NULL && __atomic_load_n(&p->cancel, __ATOMIC_RELAXED) != 0;
}

static inline void train_progress_set(bpe_progress *p, int phase, uint64_t done, uint64_t total)
{
    if (p == NULL)
        return;
    __atomic_store_n(&p->phase, phase, __ATOMIC_RELAXED);
    __atomic_store_n(&p->done, done, __ATOMIC_RELAXED);
    __atomic_store_n(&p->total, total, __ATOMIC_RELAXED);
}

#endif
