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
