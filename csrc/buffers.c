/*
 * buffers.c - the public buffer types' growth (buffers.h) and release (bpe.h) functions, and
 * the growth of the encoder's scratch arrays (bpe_grow_array).
 *
 * A buffer is {pointer, len, cap} with len <= cap; the pointer is NULL only when cap is 0.
 * Growth is geometric (1.5x + 64), so appending one item at a time costs amortised O(1).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "buffers.h"

#define HUGE_PAGE ((size_t)2 << 20)
#define MAPPED_MIN ((size_t)1 << 20)   /* smaller tables come from malloc */

/* Tables of megabytes are probed at random: with 4 KiB pages nearly every probe into the pair
 * and token tables of a large vocabulary also misses the TLB, which a virtual machine pays for
 * with a two-level page walk.  Such a table gets its own mapping, aligned to a huge page and
 * marked MADV_HUGEPAGE (transparent huge pages in "madvise" mode, the common default).  Not
 * malloc: glibc serves a block of some megabytes from memory it already has, whose pages
 * are in place as small ones, so the advice would come too late (measured: only the first
 * tokenizer of a process got huge pages).  The advice is only a hint; if the kernel ignores
 * it the memory is ordinary, and where mmap or the advice is missing malloc serves. */
#if defined(__SANITIZE_ADDRESS__)
#define MAPPED_TABLES 0   /* AddressSanitizer checks the bounds of malloc blocks only */
#elif defined(MADV_HUGEPAGE) && defined(MAP_ANONYMOUS)
#define MAPPED_TABLES 1
#else
#define MAPPED_TABLES 0
#endif

#if MAPPED_TABLES
/* The length of the mapping of a table of size bytes (>= MAPPED_MIN): whole huge pages, or 0
 * when that overflows. */
static size_t mapped_len(size_t size)
{
    return size > SIZE_MAX - HUGE_PAGE ? 0 : (size + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
}
#endif

/* See buffers.h.  Maps len + one huge page, then unmaps the unaligned head and the tail so
 * that exactly [aligned, aligned + len) stays mapped. */
void *bpe_table_alloc(size_t size)
{
#if MAPPED_TABLES
    size_t len = mapped_len(size), head;
    uint8_t *m;
    if (size >= MAPPED_MIN) {
        if (len == 0 || len > SIZE_MAX - HUGE_PAGE)
            return NULL;
        m = mmap(NULL, len + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                 -1, 0);
        if (m == MAP_FAILED)
            return NULL;
        head = (HUGE_PAGE - (uintptr_t)m % HUGE_PAGE) % HUGE_PAGE;
        if (head > 0)
            munmap(m, head);
        munmap(m + head + len, HUGE_PAGE - head);
        (void)madvise(m + head, len, MADV_HUGEPAGE);
        return m + head;
    }
#endif
    return malloc(size ? size : 1);
}

/* See buffers.h. */
void bpe_table_free(void *p, size_t size)
{
    if (p == NULL)
        return;
#if MAPPED_TABLES
    if (size >= MAPPED_MIN) {
        munmap(p, mapped_len(size));
        return;
    }
#else
    (void)size;
#endif
    free(p);
}

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

/* The array `data` of `cap` items of `size` bytes, `len` of them in use, moved to a block of
 * `c` items (c > cap) with only those `len` items copied, or NULL (data unchanged).  For a
 * buffer reserved ahead, whose tail was never written (bpe_bytes_room): realloc would copy
 * that tail too, and reading a page never written maps the kernel's shared zero page there;
 * whoever writes that memory once it is freed and handed out again then takes a
 * write-protect fault, whose TLB flush interrupts every core the process runs on (45 us
 * each on this project's virtual machine: 63 of them, 2.8 ms, in the thread that makes the
 * lists of the first encode_batch after single calls).  A block at least half in use still
 * goes to realloc, which may grow it in place or move a large one's pages without copying. */
static void *moved(void *data, size_t len, size_t cap, size_t c, size_t size)
{
    void *p;
    if (len >= cap / 2)
        return realloc(data, c * size);
    if ((p = malloc(c * size)) == NULL)
        return NULL;
    if (len > 0)
        memcpy(p, data, len * size);
    free(data);
    return p;
}

/* Room for `more` items of `size` bytes after the `len` in use of the array *data of *cap
 * items; the policy of grown_capacity.  tail_kept: the items past len are kept too (the
 * long-piece search keeps its stack there), else they may be lost.  On failure *data and
 * *cap are unchanged. */
static int reserve(void **data, size_t len, size_t *cap, size_t more, size_t size,
                   int tail_kept)
{
    size_t need = len + more, c;
    void *p;
    if (need < len)
        return BPE_ERR_TOOBIG;
    if (need <= *cap)
        return BPE_OK;
    if ((c = grown_capacity(*cap, need, size)) == 0)
        return BPE_ERR_TOOBIG;
    p = tail_kept ? realloc(*data, c * size) : moved(*data, len, *cap, c, size);
    if (p == NULL)
        return BPE_ERR_NOMEM;
    *data = p;
    *cap = c;
    return BPE_OK;
}

int bpe_ids_grow(bpe_ids *ids, size_t more)
{
    void *p = ids->ids;
    int rc = reserve(&p, ids->len, &ids->cap, more, sizeof *ids->ids, 1);
    ids->ids = p;
    return rc;
}

int bpe_bytes_reserve(bpe_bytes *b, size_t more)
{
    void *p = b->data;
    int rc = reserve(&p, b->len, &b->cap, more, 1, 1);
    b->data = p;
    return rc;
}

int bpe_bytes_room(bpe_bytes *b, size_t more)
{
    void *p = b->data;
    int rc = reserve(&p, b->len, &b->cap, more, 1, 0);
    b->data = p;
    return rc;
}

int bpe_grow_array(void **buf, size_t *cap, size_t need, size_t elem)
{
    size_t c = *cap ? *cap : 64;
    void *p;
    if (need <= *cap)
        return BPE_OK;
    while (c < need) {
        if (c > SIZE_MAX / 2 / elem)
            return BPE_ERR_TOOBIG;
        c *= 2;
    }
    if ((p = realloc(*buf, c * elem)) == NULL)
        return BPE_ERR_NOMEM;
    *buf = p;
    *cap = c;
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
