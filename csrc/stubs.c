/*
 * stubs.c - TEMPORARY weak definitions of the public functions whose real code is still being
 * written, so that the extension links and loads while the parts land one by one.  A real
 * definition elsewhere overrides the weak one at link time.  This file is deleted once every
 * function of bpe.h has a real definition.
 */
#include "bpe.h"

#define WEAK __attribute__((weak))

WEAK int bpe_tokenizer_new(const bpe_spec *spec, bpe_tokenizer **out, size_t *bad_index)
{ if (out) *out = 0; return BPE_ERR_ARG; }
WEAK void bpe_tokenizer_free(bpe_tokenizer *tok) { }
WEAK uint32_t bpe_tokenizer_id_limit(const bpe_tokenizer *tok) { return 0; }
WEAK int bpe_token_bytes(const bpe_tokenizer *tok, uint32_t id, const uint8_t **bytes, size_t *len)
{ return BPE_ERR_ARG; }
WEAK int bpe_token_id(const bpe_tokenizer *tok, const uint8_t *bytes, size_t len, uint32_t *id)
{ return BPE_ERR_ARG; }
WEAK int bpe_encode(const bpe_tokenizer *tok, const uint8_t *text, size_t len,
                    const uint8_t *special_mode, bpe_ids *out, size_t *info)
{ return BPE_ERR_ARG; }
WEAK int bpe_encode_prefix(const bpe_tokenizer *tok, const uint8_t *text, size_t len,
                           const uint8_t *special_mode, int final, bpe_ids *out,
                           size_t *consumed, size_t *info)
{ return BPE_ERR_ARG; }
WEAK int bpe_encode_pieces(const bpe_tokenizer *tok, const uint8_t *text,
                           const size_t *piece_ends, size_t n_pieces, bpe_ids *out)
{ return BPE_ERR_ARG; }
WEAK int bpe_encode_batch(const bpe_tokenizer *tok, size_t n, const uint8_t *const *texts,
                          const size_t *lens, const uint8_t *special_mode, int n_threads,
                          bpe_ids *outs, size_t *info)
{ return BPE_ERR_ARG; }
WEAK int bpe_encode_file(const bpe_tokenizer *tok, const char *in_path, const char *out_path,
                         int id_width, const uint8_t *special_mode, int n_threads,
                         bpe_progress *progress, uint64_t *n_tokens, size_t *info)
{ return BPE_ERR_ARG; }
WEAK int bpe_decode(const bpe_tokenizer *tok, const uint32_t *ids, size_t n, bpe_bytes *out,
                    size_t *bad_index)
{ return BPE_ERR_ARG; }
WEAK int bpe_pretokenize(int pattern, const uint8_t *text, size_t len, bpe_ids *ends)
{ return BPE_ERR_ARG; }
WEAK size_t bpe_pretok_safe_cut(int pattern, const uint8_t *text, size_t len) { return 0; }

/* internal interfaces (pretok.h, special.h, utf8.h) */
#include <stdlib.h>
#include <string.h>
#include "pretok.h"
#include "special.h"
#include "utf8.h"

WEAK size_t bpe_pretok_next(int pattern, const uint8_t *seg, size_t len, size_t pos) { return len; }
WEAK int bpe_special_matcher_new(const uint8_t *bytes, const size_t *offsets, size_t n,
                                 bpe_special_matcher **out)
{ *out = 0; return n == 0 ? BPE_OK : BPE_ERR_ARG; }
WEAK void bpe_special_matcher_free(bpe_special_matcher *m) { }
WEAK int bpe_special_find(const bpe_special_matcher *m, const uint8_t *text, size_t len, size_t pos,
                          const uint8_t *mode, size_t *start, size_t *index) { return 0; }
WEAK size_t bpe_special_len(const bpe_special_matcher *m, size_t index) { return 0; }
WEAK size_t bpe_special_max_len(const bpe_special_matcher *m) { return 0; }
WEAK size_t bpe_utf8_complete_prefix(const uint8_t *buf, size_t len) { return len; }
WEAK int bpe_utf8_valid(const uint8_t *buf, size_t len) { return 1; }
WEAK int bpe_utf8_replace_invalid(const uint8_t *buf, size_t len, bpe_bytes *out)
{
    if (out->len + len > out->cap) {
        uint8_t *p = realloc(out->data, out->len + len + 1);
        if (!p) return BPE_ERR_NOMEM;
        out->data = p; out->cap = out->len + len + 1;
    }
    memcpy(out->data + out->len, buf, len); out->len += len;
    return BPE_OK;
}
