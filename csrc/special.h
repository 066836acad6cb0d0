/*
 * special.h - internal interface of the special-token scanner (special.c).
 *
 * Finds special tokens (e.g. "<|endoftext|>") in text: the leftmost occurrence, and of those
 * starting there the longest.  Built once per tokenizer or trainer; immutable afterwards, so
 * any number of threads may search with one matcher.
 */
#ifndef BPE_SPECIAL_H
#define BPE_SPECIAL_H

#include <stddef.h>
#include <stdint.h>

typedef struct bpe_special_matcher bpe_special_matcher;

/* Builds a matcher for n tokens (token i is bytes[offsets[i] .. offsets[i+1])).  n may be 0.
 * Empty tokens are BPE_ERR_ARG.  Returns a BPE_ERR_* code. */
int bpe_special_matcher_new(const uint8_t *bytes, const size_t *offsets, size_t n,
                            bpe_special_matcher **out);

void bpe_special_matcher_free(bpe_special_matcher *m);   /* NULL is fine */

/* Searches text[pos..len) for the leftmost-longest occurrence of a token whose mode[i] is
 * nonzero (mode NULL: every token).  Returns 1 and sets *start and *index when found, else 0. */
int bpe_special_find(const bpe_special_matcher *m, const uint8_t *text, size_t len, size_t pos,
                     const uint8_t *mode, size_t *start, size_t *index);

/* The smallest p in [0, len) such that text[p..len) is a nonempty proper prefix of a token whose
 * mode[i] is nonzero (mode NULL: every token), i.e. where a token could begin if more text
 * followed; len when there is none.  (Added by the encoder: streaming holds such a tail back.) */
size_t bpe_special_hold(const bpe_special_matcher *m, const uint8_t *text, size_t len,
                        const uint8_t *mode);

/* Length of token i, and of the longest token (0 when there are none). */
size_t bpe_special_len(const bpe_special_matcher *m, size_t index);
size_t bpe_special_max_len(const bpe_special_matcher *m);

#endif
