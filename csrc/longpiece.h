/*
 * longpiece.h - exact BPE of long pieces in near-linear time (longpiece.c).
 */
#ifndef BPE_LONGPIECE_H
#define BPE_LONGPIECE_H

#include <stddef.h>
#include <stdint.h>

#include "bpe.h"
#include "merge.h"

/* Default for the shortest piece (in bytes) that takes the long-piece path; the environment
 * variable BPE_CFFI_LONG_PIECE, read when a tokenizer is built, overrides it (0: never). */
#define BPE_LONG_PIECE_DEFAULT 4096

/* Returned by bpe_long_merge when it did not encode the piece: the caller must use the heap. */
#define BPE_LONG_DECLINED (-1)

/* States of tok->long_state (changed only with atomics, see longpiece.c). */
#define BPE_LONG_UNBUILT 0       /* tables not built yet (or a build ran out of memory) */
#define BPE_LONG_BUILDING 1      /* one caller is building them; others use the heap */
#define BPE_LONG_READY 2         /* tok->long_tables is valid */
#define BPE_LONG_UNSUPPORTED 3   /* the vocabulary lacks a property the method needs */

typedef struct bpe_long_tables bpe_long_tables;

/* Encodes the n > 0 bytes p[0..n) exactly as bpe_merge_piece would, appending the ids to out,
 * which it grows as its search goes (a piece of n bytes can take up to n ids, but rarely
 * does).  Builds the tokenizer's tables on first use.  Returns BPE_OK; BPE_ERR_NOBYTE (a
 * byte with no single-byte token), BPE_ERR_NOMEM (scratch or out), BPE_ERR_TOOBIG; or
 * BPE_LONG_DECLINED when the tables are unavailable (unsupported vocabulary, being built by
 * another thread, out of memory while building them).  Unless it returns BPE_OK, out->len is
 * unchanged (out->cap may have grown). */
int bpe_long_merge(const bpe_tokenizer *tok, bpe_merge_scratch *s, const uint8_t *p, size_t n,
                   bpe_ids *out);

/* Frees the tables; NULL is fine. */
void bpe_long_tables_free(bpe_long_tables *t);

#endif
