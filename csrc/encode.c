/*
 * encode.c - text -> ids (bpe_encode, bpe_encode_prefix, bpe_encode_pieces) and ids -> bytes
 * (bpe_decode).
 *
 * Flow of bpe_encode: (1) if some special token is DISALLOWED, the whole text is searched for
 * one first (tiktoken checks the raw text the same way); (2) the text is cut at each ALLOWED
 * special token (leftmost, longest; special.c), whose id is emitted; (3) each segment in
 * between is split into pieces by the built-in pre-tokenizer (bpe_pretok_next), a few pieces
 * ahead of the encoding so that their first table slots can be prefetched; (4) each piece
 * goes through (for ignore_merges) the whole-token lookup, then the word cache of the call's
 * work slot, then the merge of merge.c.  The piece's hash is computed once and serves both the
 * whole-token lookup and the cache.  Whole tokens are looked up before the cache and never
 * stored in it: most pieces of prose are whole tokens, so this saves a cache probe and an
 * insertion for them and leaves the cache to the pieces that need merging (measured with
 * benchmarks/bench_single.py: o200k English 3.5-3.8x tiktoken before, 4.35x after).  A
 * tokenizer with HF model options (tok->model != NULL: character-level symbols, prefix/suffix,
 * unk, byte fallback, dropout) sends every piece to model.c instead; that test is the only
 * cost the options add to the plain path.
 *
 * Output invariant: ids are appended to a caller-owned bpe_ids that grows geometrically; on any
 * error its length is restored to what it was on entry, so the caller never sees half a
 * result.  No function here allocates per piece: small pieces merge on the stack, long ones in
 * the slot's reusable scratch.
 */
#include <stdlib.h>
#include <string.h>

#include "encode.h"
#include "longpiece.h"
#include "merge.h"
#include "model.h"
#include "pretok.h"
#include "runpiece.h"
#include "special.h"
#include "tokenizer.h"
#include "utf8.h"

/* The room encode_piece makes before it knows whether the piece merges (see there). */
#define PIECE_ROOM 4096
#if PIECE_ROOM < BPE_CACHE_MAX_PIECE
#error "PIECE_ROOM must cover the pieces the word cache holds"
#endif

#define CANCEL_EVERY 4096   /* pieces between two looks at the cancel flag */
#define PRESIZE_MIN 65536   /* texts from this size on get room for their ids first */

void bpe_work_open(const bpe_tokenizer *tok, bpe_work *w)
{
    memset(&w->own, 0, sizeof w->own);
    w->slot = bpe_slot_claim(tok);
    if (w->slot == NULL)
        w->slot = &w->own;
}

int bpe_work_seed_begin(bpe_work *w, const bpe_work *from)
{
    bpe_cache *dst = w->slot->cache, *src = from->slot->cache;
    if (dst == NULL || src == NULL || !bpe_cache_can_copy(dst, src))
        return 0;
    bpe_cache_hold(src);
    return 1;
}

void bpe_work_seed_end(bpe_work *w, const bpe_work *from, int copy)
{
    if (copy)
        bpe_cache_copy(w->slot->cache, from->slot->cache);
    bpe_cache_release(from->slot->cache);
}

void bpe_work_close(bpe_work *w)
{
    if (w->slot == &w->own)
        bpe_slot_destroy(&w->own);
    else
        bpe_slot_release(w->slot);
    w->slot = NULL;
}

int bpe_check_mode(const bpe_tokenizer *tok, const uint8_t *special_mode)
{
    size_t i;
    if (special_mode == NULL)
        return BPE_OK;
    for (i = 0; i < tok->n_special; i++)
        if (special_mode[i] > BPE_SPECIAL_DISALLOWED)
            return BPE_ERR_ARG;
    return BPE_OK;
}

/* 1 if encode_piece would use the piece's hash (whole-token lookup or the cache). */
static int wants_hash(const bpe_tokenizer *tok, const bpe_slot *s, size_t n)
{
    return tok->model == NULL && n > 1 &&
           (tok->ignore_merges || (s->cache != NULL && n < BPE_CACHE_MAX_PIECE));
}

/* Medium pieces: from MEDIUM_PIECE bytes to long_min, a piece that misses the word cache also
 * goes to longpiece.c, but only once its tables exist, and this path builds them only after
 * MEDIUM_BUILD_AFTER bytes of such pieces were merged by the heap.  The search is 2-4x faster
 * than the heap on such pieces when they need many merges (random letters or DNA, 64 to 512
 * bytes: o200k 10 -> 24-28 MB/s, gpt2 16 -> 31-36, ACGT 11-13 -> 37-45); the tables cost a
 * tokenizer 5-31 ms once (gpt2 to o200k), so a text with a few such pieces should not pay it,
 * and past that many bytes (about 0.1 s of heap work) it is at most a third more.  Prose
 * hardly has such pieces (none of 64 bytes or more in 4 MB of web text, 60 in 4 MB of code),
 * so its time does not move.  BPE_CFFI_LONG_PIECE=0 (long_min SIZE_MAX) turns this off too. */
#define MEDIUM_PIECE 64
#define MEDIUM_BUILD_AFTER ((size_t)1 << 20)

/* 1 when the medium piece of n < long_min bytes should try longpiece.c (see above). */
static int medium_to_long(const bpe_tokenizer *tok, size_t n)
{
    int state;
    if (n < MEDIUM_PIECE || tok->long_min == SIZE_MAX)
        return 0;
    state = __atomic_load_n(&tok->long_state, __ATOMIC_ACQUIRE);
    if (state == BPE_LONG_READY)
        return 1;
    if (state != BPE_LONG_UNBUILT)
        return 0;
    return __atomic_add_fetch(&((bpe_tokenizer *)tok)->medium_bytes, n, __ATOMIC_RELAXED) >=
           MEDIUM_BUILD_AFTER;
}

/* Appends the ids of the n > 0 bytes p[0..n) by merging them: runpiece.c first for a run of
 * one byte, longpiece.c for a piece of at least long_min bytes or a medium one (it makes its
 * own room as its search goes, see bpe_long_merge), else or when they decline the heap of
 * merge.c (room for n ids). */
#if defined(__GNUC__)
__attribute__((noinline))   /* the path of cache misses: inlined, it kept encode_piece out of
                               encode_segment (callgrind, o200k prose: +10% instructions) */
#endif
static int merge_piece(const bpe_tokenizer *tok, bpe_slot *s, const uint8_t *p, size_t n,
                       bpe_ids *out)
{
    size_t k;
    int rc;
    if (n >= BPE_RUN_MIN && bpe_is_run(p, n)) {
        rc = bpe_run_merge(tok, p[0], n, out);
        if (rc != BPE_RUN_DECLINED)
            return rc;
    }
    if (n >= tok->long_min || medium_to_long(tok, n)) {
        rc = bpe_long_merge(tok, &s->scratch, p, n, out);
        if (rc != BPE_LONG_DECLINED)
            return rc;
    }
    if ((rc = bpe_ids_reserve(out, n)) != BPE_OK ||
        (rc = bpe_merge_piece(tok, &s->scratch, p, n, out->ids + out->len, &k)) != BPE_OK)
        return rc;
    out->len += k;
    return BPE_OK;
}

/* Appends the ids of one nonempty piece.  hash: bpe_hash_bytes(p, n) when the caller already
 * has it (only when wants_hash), else NULL. */
static int encode_piece(const bpe_tokenizer *tok, bpe_slot *s, const uint8_t *p, size_t n,
                        const uint64_t *hash, bpe_ids *out)
{
    uint32_t *dst;
    uint64_t h = 0;
    size_t k, start;
    int rc, hashed = 0;
    if (tok->model != NULL)
        return bpe_model_piece(tok, s, p, n, out);   /* model options: model.c */
    /* room for a whole token or a cached piece's ids (at most one a byte, and the cache holds
     * pieces of fewer than PIECE_ROOM bytes); merge_piece makes the room of a merge */
    if ((rc = bpe_ids_reserve(out, n < PIECE_ROOM ? n : PIECE_ROOM)) != BPE_OK)
        return rc;
    dst = out->ids + out->len;
    if (n == 1) {
        if ((dst[0] = tok->byte_id[p[0]]) == BPE_NO_ID)
            return BPE_ERR_NOBYTE;
        out->len++;
        return BPE_OK;
    }
    if (hash != NULL) {
        h = *hash;
        hashed = 1;
    }
    if (tok->ignore_merges) {
        /* a piece that is a token is emitted whole: one lookup, and it never takes a cache
         * entry (most pieces of prose are whole tokens; the cache keeps the others) */
        uint32_t id;
        if (!hashed)
            h = bpe_hash_bytes(p, n);
        hashed = 1;
        if ((id = bpe_ordinary_lookup(tok, p, n, h)) != BPE_NO_ID) {
            dst[0] = id;
            out->len++;
            return BPE_OK;
        }
    }
    if (s->cache != NULL && n < BPE_CACHE_MAX_PIECE) {
        const uint32_t *hit;
        if (!hashed)
            h = bpe_hash_bytes(p, n);
        hashed = 1;
        if ((hit = bpe_cache_get(s->cache, p, n, h, &k)) != NULL) {
            memcpy(dst, hit, k * sizeof *dst);
            out->len += k;
            return BPE_OK;
        }
    }
    start = out->len;
    if ((rc = merge_piece(tok, s, p, n, out)) != BPE_OK)
        return rc;
    if (hashed && s->cache != NULL && n < BPE_CACHE_MAX_PIECE)
        bpe_cache_put(s->cache, p, n, h, out->ids + start, out->len - start);
    return BPE_OK;
}

static int cancelled(const int *cancel)
{
    return cancel != NULL && __atomic_load_n(cancel, __ATOMIC_RELAXED) != 0;
}

/* A piece found by the pre-tokenizer and not yet encoded (see encode_segment). */
typedef struct pending {
    size_t start, end;   /* its bytes: seg[start..end) */
    uint64_t hash;       /* bpe_hash_bytes of them, when has_hash */
    int has_hash;        /* 1 if wants_hash: hash is set and its table slots were prefetched */
} pending;

/* Records the piece seg[start..end) in *q; hashes it and prefetches the table slots its
 * lookups will read first: the whole-token table's, and the cache's (wasted when the piece is
 * a token, but the cache is probed for every other piece, and its slot was a miss too). */
static void pend(const bpe_tokenizer *tok, const bpe_slot *s, const uint8_t *seg,
                 size_t start, size_t end, pending *q)
{
    size_t n = end - start;
    q->start = start;
    q->end = end;
    q->has_hash = wants_hash(tok, s, n);
    if (!q->has_hash)
        return;
    q->hash = bpe_hash_bytes(seg + start, n);
    if (tok->ignore_merges)
        bpe_ordinary_prefetch(tok, q->hash);
    if (s->cache != NULL && n < BPE_CACHE_MAX_PIECE)
        bpe_cache_prefetch(s->cache, q->hash);
}

/* Pre-tokenizes one segment (text between special tokens) and encodes its pieces.
 *
 * The pieces are found LOOKAHEAD ahead of the one being encoded, and each is hashed when it is
 * found, with a prefetch of its slot of the whole-token table (or of the cache when merges are
 * not ignored).  Those tables are megabytes and a piece's slot is a cache miss: fetched this
 * way it arrives while the pieces before it are encoded, instead of stalling the lookup.
 * LOOKAHEAD / 2 pieces later, when that slot has arrived, a slot holding a long token of the
 * piece's hash has the token's bytes prefetched too: comparing them was the next miss
 * (o200k English 4% faster, cl100k 8%, measured in one process turn about).  The pieces and
 * their order are unchanged.  16 pieces ahead rather than 4 made o200k and cl100k 1.5-5.7%
 * faster on new text (fresh processes turn about, new 4 MB slices: their tables of 4 and 8
 * MB are further away than 4 pieces cover) and left GPT-2 (2 MB) within the noise (0.97-1.03x
 * over its rows and runs); 32 and 64 were no better than 16. */
#define LOOKAHEAD 16   /* a power of two */
static int encode_segment(const bpe_tokenizer *tok, bpe_slot *s, const uint8_t *seg, size_t len,
                          bpe_ids *out, const int *cancel)
{
    pending q[LOOKAHEAD];
    size_t pos = 0, found = 0, done = 0;
    for (;;) {
        const pending *x;
        int rc;
        while (pos < len && found - done < LOOKAHEAD) {
            size_t end = bpe_pretok_next(tok->pattern, seg, len, pos);
            if (end <= pos || end > len)
                return BPE_ERR_ARG;   /* a broken pre-tokenizer; never loop forever */
            pend(tok, s, seg, pos, end, &q[found++ % LOOKAHEAD]);
            pos = end;
        }
        if (done == found)
            return BPE_OK;
        if (tok->ignore_merges && found - done > LOOKAHEAD / 2) {
            const pending *later = &q[(done + LOOKAHEAD / 2) % LOOKAHEAD];
            if (later->has_hash)   /* its whole-token slot has arrived: a long token's bytes
                                      are the next miss */
                bpe_ordinary_prefetch_bytes(tok, later->hash);
        }
        x = &q[done++ % LOOKAHEAD];
        rc = encode_piece(tok, s, seg + x->start, x->end - x->start,
                          x->has_hash ? &x->hash : NULL, out);
        if (rc != BPE_OK)
            return rc;
        if (done % CANCEL_EVERY == 0 && cancelled(cancel))
            return BPE_ERR_CANCELLED;
    }
}

/* The special-token modes as two masks for the matcher. */
typedef struct masks {
    uint8_t *allowed;      /* allowed[i] = 1 if token i is emitted as a special token */
    uint8_t *disallowed;   /* disallowed[i] = 1 if token i must not occur */
    int any_allowed, any_disallowed;
    uint8_t buf[256];      /* storage when n_special <= 128 */
} masks;

static int masks_init(masks *m, const bpe_tokenizer *tok, const uint8_t *mode)
{
    size_t n = tok->n_special, i;
    m->any_allowed = m->any_disallowed = 0;
    m->allowed = m->disallowed = NULL;
    if (mode == NULL || n == 0)
        return BPE_OK;
    m->allowed = 2 * n <= sizeof m->buf ? m->buf : malloc(2 * n);
    if (m->allowed == NULL)
        return BPE_ERR_NOMEM;
    m->disallowed = m->allowed + n;
    for (i = 0; i < n; i++) {
        m->allowed[i] = mode[i] == BPE_SPECIAL_ALLOWED;
        m->disallowed[i] = mode[i] == BPE_SPECIAL_DISALLOWED;
        m->any_allowed |= m->allowed[i];
        m->any_disallowed |= m->disallowed[i];
    }
    return BPE_OK;
}

static void masks_free(masks *m)
{
    if (m->allowed != NULL && m->allowed != m->buf)
        free(m->allowed);
}

static int encode_masked(const bpe_tokenizer *tok, bpe_slot *s, const uint8_t *text,
                         size_t len, const masks *m, bpe_ids *out, size_t *info,
                         const int *cancel)
{
    size_t pos = 0, start, index;
    int rc;
    if (m->any_disallowed &&
        bpe_special_find(tok->matcher, text, len, 0, m->disallowed, &start, &index)) {
        if (info)
            *info = index;
        return BPE_ERR_DISALLOWED;
    }
    while (m->any_allowed &&
           bpe_special_find(tok->matcher, text, len, pos, m->allowed, &start, &index)) {
        if ((rc = encode_segment(tok, s, text + pos, start - pos, out, cancel)) != BPE_OK)
            return rc;
        if ((rc = bpe_ids_reserve(out, 1)) != BPE_OK)
            return rc;
        out->ids[out->len++] = tok->special_ids[index];
        pos = start + bpe_special_len(tok->matcher, index);
        if (cancelled(cancel))   /* segments may be too short for encode_segment's look */
            return BPE_ERR_CANCELLED;
    }
    return encode_segment(tok, s, text + pos, len - pos, out, cancel);
}

int bpe_encode_work(const bpe_tokenizer *tok, bpe_work *w, const uint8_t *text, size_t len,
                    const uint8_t *special_mode, bpe_ids *out, size_t *info,
                    const int *cancel)
{
    size_t old = out->len;
    masks m;
    int rc;
    if ((rc = bpe_check_mode(tok, special_mode)) != BPE_OK ||
        (rc = masks_init(&m, tok, special_mode)) != BPE_OK)
        return rc;
    bpe_model_begin_call(tok, w->slot);
    rc = encode_masked(tok, w->slot, text, len, &m, out, info, cancel);
    masks_free(&m);
    if (rc != BPE_OK)
        out->len = old;
    return rc;
}

int bpe_check_encode_args(const bpe_tokenizer *tok, const uint8_t *text, size_t len,
                          const bpe_ids *out)
{
    if (tok == NULL || out == NULL || (text == NULL && len))
        return BPE_ERR_ARG;
    if (tok->pattern == BPE_PATTERN_EXTERNAL)
        return BPE_ERR_ARG;
    return BPE_OK;
}

int bpe_encode(const bpe_tokenizer *tok, const uint8_t *text, size_t len,
               const uint8_t *special_mode, bpe_ids *out, size_t *info)
{
    return bpe_encode_cancellable(tok, text, len, special_mode, NULL, out, info);
}

void bpe_ids_presize(bpe_ids *out, size_t n)
{
    if (n >= PRESIZE_MIN)
        (void)bpe_ids_reserve(out, n / 3);   /* a hint: without it the ids grow as they come */
}

int bpe_encode_cancellable(const bpe_tokenizer *tok, const uint8_t *text, size_t len,
                           const uint8_t *special_mode, const int *cancel, bpe_ids *out,
                           size_t *info)
{
    bpe_work w;
    int rc = bpe_check_encode_args(tok, text, len, out);
    if (rc != BPE_OK || len == 0)
        return rc;
    bpe_ids_presize(out, len);
    bpe_work_open(tok, &w);
    rc = bpe_encode_work(tok, &w, text, len, special_mode, out, info, cancel);
    bpe_work_close(&w);
    return rc;
}

size_t bpe_stable_prefix(const bpe_tokenizer *tok, const uint8_t *text, size_t len,
                         const uint8_t *special_mode)
{
    const uint8_t *mode = tok->n_special ? special_mode : NULL;
    size_t pos = 0, start, index, hold;
    /* a character cut short at the end may become a letter (or anything) with more bytes */
    len = bpe_utf8_complete_prefix(text, len);
    if (mode == NULL)
        return bpe_pretok_safe_cut(tok->pattern, text, len);
    /* Every special token of nonzero mode bounds a segment; one that starts before `hold`
     * (the first place where a token could begin if more text came) is final. */
    for (;;) {
        hold = pos + bpe_special_hold(tok->matcher, text + pos, len - pos, mode);
        if (!bpe_special_find(tok->matcher, text, len, pos, mode, &start, &index) ||
            start >= hold)
            break;
        pos = start + bpe_special_len(tok->matcher, index);
    }
    return pos + bpe_pretok_safe_cut(tok->pattern, text + pos, hold - pos);
}

int bpe_encode_prefix(const bpe_tokenizer *tok, const uint8_t *text, size_t len,
                      const uint8_t *special_mode, int final, bpe_ids *out,
                      size_t *consumed, size_t *info)
{
    size_t cut;
    int rc = bpe_check_encode_args(tok, text, len, out);
    if (rc == BPE_OK && consumed == NULL)
        rc = BPE_ERR_ARG;
    if (rc == BPE_OK)
        rc = bpe_check_mode(tok, special_mode);
    if (rc != BPE_OK)
        return rc;
    *consumed = 0;
    cut = final ? len : bpe_stable_prefix(tok, text, len, special_mode);
    if (cut > 0 && (rc = bpe_encode(tok, text, cut, special_mode, out, info)) != BPE_OK)
        return rc;
    *consumed = cut;
    return BPE_OK;
}

int bpe_encode_pieces(const bpe_tokenizer *tok, const uint8_t *text,
                      const size_t *piece_ends, size_t n_pieces, bpe_ids *out)
{
    size_t old, prev = 0, i;
    bpe_work w;
    int rc = BPE_OK;
    if (tok == NULL || out == NULL || (n_pieces && (piece_ends == NULL || text == NULL)))
        return BPE_ERR_ARG;
    for (i = 0; i < n_pieces; i++) {
        if (piece_ends[i] < prev)
            return BPE_ERR_ARG;
        prev = piece_ends[i];
    }
    old = out->len;
    prev = 0;
    bpe_work_open(tok, &w);
    bpe_model_begin_call(tok, w.slot);
    for (i = 0; i < n_pieces && rc == BPE_OK; i++) {
        if (piece_ends[i] > prev)
            rc = encode_piece(tok, w.slot, text + prev, piece_ends[i] - prev, NULL, out);
        prev = piece_ends[i];
    }
    bpe_work_close(&w);
    if (rc != BPE_OK)
        out->len = old;
    return rc;
}

int bpe_decode(const bpe_tokenizer *tok, const uint32_t *ids, size_t n, bpe_bytes *out,
               size_t *bad_index)
{
    size_t total = 0, i;
    uint8_t *dst;
    int rc;
    if (tok == NULL || out == NULL || (ids == NULL && n))
        return BPE_ERR_ARG;
    for (i = 0; i < n; i++) {
        if (ids[i] >= tok->id_limit || tok->by_id[ids[i]].len == 0) {
            if (bad_index)
                *bad_index = i;
            return BPE_ERR_ID;
        }
        total += tok->by_id[ids[i]].len;
    }
    if ((rc = bpe_bytes_reserve(out, total)) != BPE_OK)
        return rc;
    dst = out->data + out->len;
    for (i = 0; i < n; i++) {
        const bpe_token_ref *r = &tok->by_id[ids[i]];
        memcpy(dst, tok->bytes + r->off, r->len);
        dst += r->len;
    }
    out->len += total;
    return BPE_OK;
}
