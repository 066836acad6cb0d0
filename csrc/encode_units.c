/*
 * encode_units.c - bpe_encode_units: the ids of one text stored as code units (Latin-1, UCS-2
 * or UCS-4: how CPython keeps a str that is not all ASCII), converted to UTF-8 a part at a
 * time instead of whole.
 *
 * Why.  Converting a text of megabytes whole and then encoding it reads the text, writes its
 * UTF-8 and reads that again, all from memory: the UTF-8 is far larger than the core's
 * cache.  Here the text is cut into parts of about PART_UNITS code units where cutting cannot
 * change its ids (bpe_text_cuts, batch_cut.c: the cuts the batch encoder shares a large text
 * among its threads by), and each part is converted into one small buffer, reused for every
 * part, and encoded while its UTF-8 is still in the cache.
 *
 * Invariants: the parts are encoded in order, each with the same work slot, so the ids are
 * those of bpe_encode of the whole text's UTF-8 (batch_cut.c says why the cuts keep them);
 * on any error *out keeps its length on entry.  A text where no cut is found is one part, and
 * so is the text of a tokenizer with model options (model.c): a call with dropout draws from
 * a stream of its own, which parts encoded as calls of their own would change.
 */
#include <stdlib.h>

#include "encode.h"
#include "tokenizer.h"
#include "utf8.h"

#define PART_UNITS (128 * 1024)   /* UTF-8 of up to 512 KB: stays in a core's cache */

/* Converts and encodes the parts of the text between the given cuts, in order. */
static int encode_parts(const bpe_tokenizer *tok, bpe_work *w, const uint8_t *units, size_t n,
                        int kind, const size_t *cuts, size_t n_cuts, const uint8_t *mode,
                        const int *cancel, bpe_bytes *utf8, bpe_ids *out, size_t *info)
{
    size_t begin = 0, k;
    int rc = BPE_OK;
    for (k = 0; k <= n_cuts && rc == BPE_OK; k++) {
        size_t end = k < n_cuts ? cuts[k] : n;
        utf8->len = 0;
        rc = bpe_utf8_from_units(units + begin * (size_t)kind, end - begin, kind, utf8);
        if (rc == BPE_OK)
            rc = bpe_encode_work(tok, w, utf8->data, utf8->len, mode, out, info, cancel);
        begin = end;
    }
    return rc;
}

int bpe_encode_units(const bpe_tokenizer *tok, const uint8_t *units, size_t n, int kind,
                     const uint8_t *special_mode, const int *cancel, bpe_ids *out,
                     size_t *info)
{
    size_t old, max_cuts, n_cuts, *cuts;
    bpe_bytes utf8 = {0};
    bpe_work w;
    int rc;
    if (kind == BPE_TEXT_UTF8)
        return bpe_encode_cancellable(tok, units, n, special_mode, cancel, out, info);
    if ((rc = bpe_check_encode_args(tok, units, n, out)) != BPE_OK)
        return rc;
    if (!bpe_units_ok(units, kind))
        return BPE_ERR_ARG;
    if ((rc = bpe_check_mode(tok, special_mode)) != BPE_OK || n == 0)
        return rc;
    max_cuts = n / PART_UNITS + 1;
    if ((cuts = malloc(max_cuts * sizeof *cuts)) == NULL)
        return BPE_ERR_NOMEM;
    n_cuts = tok->model != NULL ? 0 : bpe_text_cuts(tok, units, n, kind, special_mode,
                                                     PART_UNITS, cuts, max_cuts, &utf8);
    old = out->len;
    bpe_ids_presize(out, n);
    bpe_work_open(tok, &w);
    rc = encode_parts(tok, &w, units, n, kind, cuts, n_cuts, special_mode, cancel, &utf8, out,
                      info);
    bpe_work_close(&w);
    bpe_bytes_free(&utf8);
    free(cuts);
    if (rc != BPE_OK)
        out->len = old;
    return rc;
}
