/*
 * encode.h - the encoder's internal entry points shared by encode.c, batch.c and
 * encode_file.c.
 */
#ifndef BPE_ENCODE_H
#define BPE_ENCODE_H

#include <stddef.h>
#include <stdint.h>

#include "bpe.h"
#include "cache.h"

/* A work area for one call: a claimed slot of the tokenizer, or a private one. */
typedef struct bpe_work {
    bpe_slot *slot;   /* the slot in use: claimed, or &own */
    bpe_slot own;     /* used when every slot of the tokenizer is busy (uncached) */
} bpe_work;

void bpe_work_open(const bpe_tokenizer *tok, bpe_work *w);
void bpe_work_close(bpe_work *w);

/* Seeding w's word cache, when it is empty, with a copy of from's (a new slot starts warm),
 * on another thread than from's user.  bpe_work_seed_begin: 1 when w wants the copy, and
 * from's cache is then held (its user may go on encoding with it: it looks words up but adds
 * none); nothing else may use w until bpe_work_seed_end(w, from, copy), which makes the copy
 * (when copy is nonzero) and releases the hold.  Each 1 from begin needs its end. */
int bpe_work_seed_begin(bpe_work *w, const bpe_work *from);
void bpe_work_seed_end(bpe_work *w, const bpe_work *from, int copy);

/* Checks special_mode (NULL or n_special values <= 2): BPE_OK or BPE_ERR_ARG. */
int bpe_check_mode(const bpe_tokenizer *tok, const uint8_t *special_mode);

/* BPE_ERR_ARG when an encode call cannot run: no tokenizer or output, no text for len > 0,
 * or a pattern only Python can apply (BPE_PATTERN_EXTERNAL); else BPE_OK. */
int bpe_check_encode_args(const bpe_tokenizer *tok, const uint8_t *text, size_t len,
                          const bpe_ids *out);

/* bpe_encode with a given work area, checking *cancel (may be NULL) every few thousand
 * pieces (BPE_ERR_CANCELLED).  Appends to out; on error out->len is restored. */
int bpe_encode_work(const bpe_tokenizer *tok, bpe_work *w, const uint8_t *text, size_t len,
                    const uint8_t *special_mode, bpe_ids *out, size_t *info,
                    const int *cancel);

/* Room in out, before a text of n bytes or code units (n >= 64 KiB) is encoded, for n / 3
 * more ids: one allocation instead of the ~25 growth steps of a buffer of a million ids,
 * which copy what is there when they cannot grow in place.  Text averages ~4 bytes a token
 * (English, code), so n / 3 is seldom outgrown; when it is, the buffer grows as before.  A
 * hint: it fails quietly, and the encoding then makes its room as it goes.  (4 MB slices of
 * English, turn about without it: 3-6% less time for the whole encode_ordinary.) */
void bpe_ids_presize(bpe_ids *out, size_t n);

/* The length of the longest prefix of text[0..len) whose ids cannot change whatever text
 * follows (special tokens of nonzero mode and the pattern's safe cut considered).  Does not
 * encode.  special_mode NULL: no special tokens are matched. */
size_t bpe_stable_prefix(const bpe_tokenizer *tok, const uint8_t *text, size_t len,
                         const uint8_t *special_mode);

#endif
