/*
 * utf8.h - internal UTF-8 helpers (utf8.c), shared by file encoding, training and the batch
 * encoder.
 */
#ifndef BPE_UTF8_H
#define BPE_UTF8_H

#include <stddef.h>
#include <stdint.h>

#include "bpe.h"

/* Length of the longest prefix of buf[0..len) that does not end inside a UTF-8 sequence that
 * more bytes could still complete (so a reader can keep the tail for the next block). */
size_t bpe_utf8_complete_prefix(const uint8_t *buf, size_t len);

/* 1 if buf[0..len) is valid UTF-8, else 0. */
int bpe_utf8_valid(const uint8_t *buf, size_t len);

/* Appends buf[0..len) to *out with every invalid sequence replaced by U+FFFD exactly as
 * Python's bytes.decode("utf-8", errors="replace") does.  Returns a BPE_ERR_* code. */
int bpe_utf8_replace_invalid(const uint8_t *buf, size_t len, bpe_bytes *out);

/* 1 if kind is a storage kind (BPE_TEXT_*) and units lies aligned to its width, else 0. */
int bpe_units_ok(const uint8_t *units, int kind);

/* Appends the UTF-8 of the n code units stored at units as `kind` (BPE_TEXT_LATIN1, _UCS2 or
 * _UCS4, aligned to its width) to *out; surrogates as utf8.c says.  BPE_ERR_TEXT for a code
 * point above U+10FFFF (nothing is appended then), BPE_ERR_ARG for another kind,
 * BPE_ERR_NOMEM, BPE_ERR_TOOBIG.  Bytes of *out past out->len are not kept (bpe_bytes_room). */
int bpe_utf8_from_units(const uint8_t *units, size_t n, int kind, bpe_bytes *out);

#endif
