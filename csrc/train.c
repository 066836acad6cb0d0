/*
 * train.c - the bpe_trainer object: its configuration, the caller-counted words
 * (bpe_trainer_add_words, for patterns run in Python), and the result accessors.
 *
 * Lifecycle: new -> any number of count_file / add_words (they only add to one word table,
 * trainer->words) -> merge (once; it fills tok_* and merges) -> result -> free.
 * Invariants: words holds every pre-token counted so far with its total count (with
 * char_level, each is valid UTF-8); after merge, the first tokens are the initial ones (the
 * 256 single bytes, or with char_level the alphabet of train_chars.c) and the rest are the
 * learned ones, all with distinct bytes, and merges[3i..3i+2] = (left, right, result) of
 * merge i.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buffers.h"
#include "train.h"
#include "utf8.h"

#define DEFAULT_BLOCK (4u << 20)

static int default_threads(void)
{
    int n = bpe_cores_available();
    return n > 64 ? 64 : n;
}

/* The char-level options: scalar values, a limit that keeps them, valid prefix/suffix. */
static int check_char_options(const bpe_trainer_config *c)
{
    if (!c->char_level)
        return c->has_limit_alphabet || c->n_initial_alphabet || c->prefix_len ||
               c->suffix_len ? BPE_ERR_ARG : BPE_OK;
    if (c->n_initial_alphabet && c->initial_alphabet == NULL)
        return BPE_ERR_ARG;
    for (size_t i = 0; i < c->n_initial_alphabet; i++) {
        uint32_t cp = c->initial_alphabet[i];
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return BPE_ERR_ARG;
    }
    if (c->has_limit_alphabet && c->limit_alphabet < c->n_initial_alphabet)
        return BPE_ERR_ARG;
    if ((c->prefix_len && (c->prefix == NULL || !bpe_utf8_valid(c->prefix, c->prefix_len))) ||
        (c->suffix_len && (c->suffix == NULL || !bpe_utf8_valid(c->suffix, c->suffix_len))))
        return BPE_ERR_ARG;
    return BPE_OK;
}

static int check_config(const bpe_trainer_config *c)
{
    if (c->pattern < BPE_PATTERN_EXTERNAL || c->pattern > BPE_PATTERN_O200K)
        return BPE_ERR_ARG;
    if (c->vocab_size < (c->char_level ? 0 : 256) + c->n_special || c->vocab_size > UINT32_MAX)
        return BPE_ERR_ARG;
    if (check_char_options(c) != BPE_OK)
        return BPE_ERR_ARG;
    if (c->n_threads < 0)
        return BPE_ERR_ARG;
    if (c->n_special && (c->special_bytes == NULL || c->special_offsets == NULL))
        return BPE_ERR_ARG;
    for (size_t i = 0; i < c->n_special; i++)
        if (c->special_offsets[i + 1] <= c->special_offsets[i])
            return BPE_ERR_ARG;
    return BPE_OK;
}

static void *copy_of(const void *p, size_t bytes)
{
    void *q = malloc(bytes ? bytes : 1);
    if (q != NULL && bytes)
        memcpy(q, p, bytes);
    return q;
}

/* Copies max_token_length and the char-level options (checked) into t. */
static int copy_char_options(bpe_trainer *t, const bpe_trainer_config *c)
{
    t->max_token_length = c->max_token_length;
    t->char_level = c->char_level != 0;
    t->has_limit_alphabet = c->has_limit_alphabet != 0;
    t->limit_alphabet = c->limit_alphabet;
    t->n_initial_alphabet = c->n_initial_alphabet;
    t->prefix_len = c->prefix_len;
    t->suffix_len = c->suffix_len;
    if (c->n_initial_alphabet &&
        (t->initial_alphabet = copy_of(c->initial_alphabet,
                                       c->n_initial_alphabet * sizeof(uint32_t))) == NULL)
        return BPE_ERR_NOMEM;
    if (c->prefix_len && (t->prefix = copy_of(c->prefix, c->prefix_len)) == NULL)
        return BPE_ERR_NOMEM;
    if (c->suffix_len && (t->suffix = copy_of(c->suffix, c->suffix_len)) == NULL)
        return BPE_ERR_NOMEM;
    return BPE_OK;
}

int bpe_trainer_new(const bpe_trainer_config *config, bpe_trainer **out)
{
    if (out == NULL)
        return BPE_ERR_ARG;
    *out = NULL;
    if (config == NULL)
        return BPE_ERR_ARG;
    int rc = check_config(config);
    if (rc != BPE_OK)
        return rc;
    bpe_trainer *t = calloc(1, sizeof *t);
    if (t == NULL)
        return BPE_ERR_NOMEM;
    t->pattern = config->pattern;
    t->vocab_size = config->vocab_size;
    t->min_frequency = config->min_frequency;
    t->n_threads = config->n_threads ? config->n_threads : default_threads();
    if (t->n_threads > BPE_MAX_THREADS)
        t->n_threads = BPE_MAX_THREADS;
    t->block_size = config->block_size ? config->block_size : DEFAULT_BLOCK;
    t->parallel_words = config->parallel_words ? config->parallel_words : 2048;
    t->long_word = config->long_word ? config->long_word : 64;
    t->n_special = config->n_special;
    train_words_init(&t->words);
    rc = copy_char_options(t, config);
    if (rc != BPE_OK) {
        bpe_trainer_free(t);
        return rc;
    }
    if (config->n_special && config->pattern != BPE_PATTERN_EXTERNAL) {
        /* only count_file splits on them; with EXTERNAL the caller already did */
        rc = bpe_special_matcher_new(config->special_bytes, config->special_offsets,
                                     config->n_special, &t->special);
        if (rc != BPE_OK) {
            bpe_trainer_free(t);
            return rc;
        }
    }
    *out = t;
    return BPE_OK;
}

void bpe_trainer_free(bpe_trainer *t)
{
    if (t == NULL)
        return;
    bpe_special_matcher_free(t->special);
    train_words_free(&t->words);
    free(t->initial_alphabet);
    free(t->prefix);
    free(t->suffix);
    free(t->tok_bytes);
    free(t->tok_off);
    free(t->merges);
    free(t);
}

int bpe_trainer_add_words(bpe_trainer *t, const uint8_t *bytes, const size_t *offsets,
                          const uint64_t *counts, size_t n)
{
    if (t == NULL || (n && (bytes == NULL || offsets == NULL || counts == NULL)))
        return BPE_ERR_ARG;
    if (t->merged)
        return BPE_ERR_ARG;
    for (size_t i = 0; i < n; i++)
        if (offsets[i + 1] <= offsets[i] ||
            (t->char_level && !bpe_utf8_valid(bytes + offsets[i], offsets[i + 1] - offsets[i])))
            return BPE_ERR_ARG;
    for (size_t i = 0; i < n; i++) {
        if (counts[i] == 0)
            continue;
        int rc = train_words_add(&t->words, bytes + offsets[i], offsets[i + 1] - offsets[i],
                                 counts[i]);
        if (rc != BPE_OK)
            return rc;
    }
    return BPE_OK;
}

size_t bpe_trainer_n_words(const bpe_trainer *t)
{
    return t ? t->words.n : 0;
}

static int bytes_append(bpe_bytes *b, const uint8_t *p, size_t len)
{
    int rc;
    if (len == 0)
        return BPE_OK;
    if ((rc = bpe_bytes_reserve(b, len)) != BPE_OK)
        return rc;
    memcpy(b->data + b->len, p, len);
    b->len += len;
    return BPE_OK;
}

int bpe_trainer_result(const bpe_trainer *t, bpe_bytes *token_bytes, bpe_ids *token_offsets,
                       bpe_ids *merges)
{
    if (t == NULL || token_bytes == NULL || token_offsets == NULL || merges == NULL)
        return BPE_ERR_ARG;
    if (!t->merged)
        return BPE_ERR_ARG;
    if (t->tok_bytes_len > UINT32_MAX)
        return BPE_ERR_TOOBIG;
    int rc = bytes_append(token_bytes, t->tok_bytes, t->tok_bytes_len);
    if (rc == BPE_OK)
        rc = bpe_ids_reserve(token_offsets, t->n_tokens + 1);
    if (rc == BPE_OK)
        rc = bpe_ids_reserve(merges, 3 * t->n_merges);
    if (rc != BPE_OK)
        return rc;
    for (size_t i = 0; i <= t->n_tokens; i++)
        token_offsets->ids[token_offsets->len++] = (uint32_t)t->tok_off[i];
    if (t->n_merges)
        memcpy(merges->ids + merges->len, t->merges, 3 * t->n_merges * sizeof *t->merges);
    merges->len += 3 * t->n_merges;
    return BPE_OK;
}
