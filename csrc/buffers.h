/*
 * buffers.h - growing the two public buffer types (bpe_ids, bpe_bytes) of bpe.h.
 *
 * Every C file that appends to a caller's buffer grows it here, with one policy: at least
 * 64 items, then 1.5x + 64 until the need is met, and a size overflow is BPE_ERR_TOOBIG.
 * On failure the buffer is unchanged (same data, len and cap).
 */
#ifndef BPE_BUFFERS_H
#define BPE_BUFFERS_H

#include <stddef.h>

#include "bpe.h"

/* Makes room for `more` ids after ids->len.  BPE_OK, BPE_ERR_NOMEM or BPE_ERR_TOOBIG.
 * Inline, since the encoder reserves once per piece and there is nearly always room; the
 * growing is bpe_ids_grow's.  (cap >= len always holds, so cap - len cannot wrap.) */
int bpe_ids_grow(bpe_ids *ids, size_t more);

static inline int bpe_ids_reserve(bpe_ids *ids, size_t more)
{
    return ids->cap - ids->len >= more ? BPE_OK : bpe_ids_grow(ids, more);
}

/* Makes room for `more` bytes after b->len.  BPE_OK, BPE_ERR_NOMEM or BPE_ERR_TOOBIG.  Like
 * bpe_ids_grow, it keeps the bytes past b->len too. */
int bpe_bytes_reserve(bpe_bytes *b, size_t more);

/* bpe_bytes_reserve for a caller that reserves ahead of what it writes (the largest size of a
 * text's UTF-8): only the bytes up to b->len are kept when the buffer moves, so the tail it
 * never wrote is not copied (read) at all.  See buffers.c, `moved`. */
int bpe_bytes_room(bpe_bytes *b, size_t more);

/* Grows a scratch array *buf of *cap items of elem bytes to hold at least need items
 * (doubling from 64), keeping its contents.  BPE_OK, BPE_ERR_NOMEM or BPE_ERR_TOOBIG; on
 * failure *buf and *cap are unchanged.  (merge.c, model.c) */
int bpe_grow_array(void **buf, size_t *cap, size_t need, size_t elem);

/* Memory for a large read-mostly lookup table of size bytes (0 is fine), or NULL when out of
 * memory; its contents are undefined.  Where the system allows, a table of at least 1 MiB is
 * a fresh 2 MiB-aligned mapping that asks for transparent huge pages, so that random probes
 * into it do not also miss the TLB.  Release it with bpe_table_free and the same size. */
void *bpe_table_alloc(size_t size);

/* Releases a block of bpe_table_alloc(size).  NULL is fine. */
void bpe_table_free(void *p, size_t size);

#endif
