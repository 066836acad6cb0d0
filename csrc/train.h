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
 *   train_chars.c  character-level training: the alphabet (limit_alphabet, initial_alphabet)
 *                  and the initial symbols of a word (continuing_subword_prefix,
 *                  end_of_word_suffix).
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
    size_t max_token_length;     /* 0: none; else the most units (bytes, or characters when
                                    char_level) a learned token may cover */
    int char_level;              /* initial symbols are characters, not bytes */
    int has_limit_alphabet;      /* char_level: limit_alphabet applies */
    size_t limit_alphabet;       /* char_level: most characters kept */
    uint32_t *initial_alphabet;  /* char_level: code points always kept (owned copy) */
    size_t n_initial_alphabet;
    uint8_t *prefix;             /* char_level: continuing_subword_prefix (owned), or NULL */
    size_t prefix_len;
    uint8_t *suffix;             /* char_level: end_of_word_suffix (owned), or NULL */
    size_t suffix_len;

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

/* ---- character-level alphabet (train_chars.c) ------------------------------------------ */

/* The initial tokens of a char-level training and how a word maps onto them.
 * Ids 0..n_alpha-1 are the kept characters in code point order; ids n_alpha..n_tokens-1 are
 * the decorated symbols (prefix + c, c + suffix, prefix + c + suffix) that occur in some
 * word, in byte order, each string once.  sym[4 * a + kind] is the id of kept character a
 * with kind = (not first in its word) | 2 * (last in its word); UINT32_MAX if unused. */
typedef struct train_alphabet {
    uint32_t *index;       /* 0x110000 entries: kept character's index + 1, 0 if dropped */
    uint32_t *sym;         /* 4 per kept character, see above */
    size_t n_alpha;        /* kept characters */
    uint8_t *bytes;        /* the initial tokens' strings (UTF-8) back to back */
    size_t *off;           /* n_tokens + 1 offsets into bytes */
    size_t n_tokens;       /* initial tokens: characters + decorated symbols */
    int prefix, suffix;    /* the trainer has a prefix / a suffix */
} train_alphabet;

/* Builds the alphabet of t->words under t's options (every word is valid UTF-8).  Returns
 * BPE_OK or BPE_ERR_NOMEM; free with train_alphabet_free (also after an error). */
int train_alphabet_build(const bpe_trainer *t, train_alphabet *a);
void train_alphabet_free(train_alphabet *a);
/* Writes the initial symbols of word p[0..len) (valid UTF-8) to out (room for len ids);
 * characters outside the alphabet are dropped; returns how many were written. */
size_t train_alphabet_word(const train_alphabet *a, const uint8_t *p, size_t len,
                           uint32_t *out);
/* Decodes the valid UTF-8 character at p (n bytes remain): its code point; *used = length. */
uint32_t train_utf8_next(const uint8_t *p, size_t n, size_t *used);

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
