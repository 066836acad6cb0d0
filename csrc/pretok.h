/*
 * pretok.h - internal interface of the hand-written pre-tokenizers (pretok.c).
 *
 * A pre-tokenizer splits a segment of UTF-8 text (the text between two special tokens) into
 * pieces exactly as the `regex` module splits it with the pattern's regex (see
 * bpe_cffi/patterns.py for the pattern strings).  The segment must be valid UTF-8.
 */
#ifndef BPE_PRETOK_H
#define BPE_PRETOK_H

#include <stddef.h>
#include <stdint.h>

/* The end of the piece that starts at pos (pos < len) in seg[0..len), for a built-in
 * pattern (BPE_PATTERN_GPT2 / CL100K / O200K).  Always > pos.  The pieces of a segment are
 * found by calling it from 0 until it returns len. */
size_t bpe_pretok_next(int pattern, const uint8_t *seg, size_t len, size_t pos);

#endif
