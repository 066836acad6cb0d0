/*
 * buffers.c - the public buffer types' growth (buffers.h) and release (bpe.h) functions.
 *
 * A buffer is {pointer, len, cap} with len <= cap; the pointer is NULL only when cap is 0.
 * Growth is geometric (1.5x + 64), so appending one item at a time costs amortised O(1).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "buffers.h"

/* The capacity to grow `cap` to so that it holds `need` items of `size` bytes, or 0 if that
 * many bytes cannot be addressed. */
static size_t grown_capacity(size_t cap, size_t need, size_t size)
{
    if (cap < 64)
        cap = 64;
    while (cap < need) {
        if (cap > SIZE_MAX / 2)
            return 0;
        cap += cap / 2 + 64;
    }
    return cap > SIZE_MAX / size ? 0 : cap;
}

int bpe_ids_reserve(bpe_ids *ids, size_t more)
{
    size_t need = ids->len + more, cap;
    uint32_t *p;
    if (need < ids->len)
        return BPE_ERR_TOOBIG;
    if (need <= ids->cap)
        return BPE_OK;
    if ((cap = grown_capacity(ids->cap, need, sizeof *p)) == 0)
        return BPE_ERR_TOOBIG;
    if ((p = realloc(ids->ids, cap * sizeof *p)) == NULL)
        return BPE_ERR_NOMEM;
    ids->ids = p;
    ids->cap = cap;
    return BPE_OK;
}

int bpe_bytes_reserve(bpe_bytes *b, size_t more)
{
    size_t need = b->len + more, cap;
    uint8_t *p;
    if (need < b->len)
        return BPE_ERR_TOOBIG;
    if (need <= b->cap)
        return BPE_OK;
    if ((cap = grown_capacity(b->cap, need, 1)) == 0)
        return BPE_ERR_TOOBIG;
    if ((p = realloc(b->data, cap)) == NULL)
        return BPE_ERR_NOMEM;
    b->data = p;
    b->cap = cap;
    return BPE_OK;
}

void bpe_ids_free(bpe_ids *ids)
{
    if (ids == NULL)
        return;
    free(ids->ids);
    memset(ids, 0, sizeof *ids);
}

void bpe_bytes_free(bpe_bytes *b)
{
    if (b == NULL)
        return;
    free(b->data);
    memset(b, 0, sizeof *b);
}
