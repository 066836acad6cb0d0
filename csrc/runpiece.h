/*
 * runpiece.h - BPE of a piece that is one byte repeated, by blocks (runpiece.c).
 */
#ifndef BPE_RUNPIECE_H
#define BPE_RUNPIECE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "bpe.h"

/* Returned by bpe_run_merge when it did not encode the run: the caller takes its usual
 * path. */
#define BPE_RUN_DECLINED (-1)

/* The shortest run (bytes) worth this path: shorter pieces merge fast anyway. */
#define BPE_RUN_MIN 32

/* 1 if the n >= 1 bytes at p are all the same byte. */
static inline int bpe_is_run(const uint8_t *p, size_t n)
{
    return memcmp(p, p + 1, n - 1) == 0;
}

/* Appends the ids of n copies of `byte`, exactly as bpe_merge_piece gives them (out grows as
 * needed).  Returns BPE_OK, BPE_ERR_NOMEM, or BPE_RUN_DECLINED (the byte has no token, or
 * the vocabulary makes the run need too many blocks or steps), out->len then unchanged. */
int bpe_run_merge(const bpe_tokenizer *tok, uint8_t byte, size_t n, bpe_ids *out);

#endif
