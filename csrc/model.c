/*
 * model.c - BPE of one piece under HuggingFace's BPE model options: character-level symbols,
 * continuing-subword prefix, end-of-word suffix, unknown token (fused or not), byte fallback
 * and BPE-dropout.  Used only by tokenizers built with some option on, or whose byte-level
 * merge-list vocabulary lacks a single-byte token (tok->model != NULL); the plain byte-level
 * path of merge.c is untouched.
 *
 * Initial symbols.  A piece is cut into units: its bytes (byte-level) or its UTF-8 characters
 * (char_level).  Unit k is looked up as the token prefix + unit + suffix, where the prefix is
 * present unless k is the first unit and the suffix only when k is the last.  Found: one
 * symbol.  Not found: with byte_fallback, the tokens "<0xNN>" of every byte of that lookup
 * string (prefix and suffix included, as HF does; for byte-level tokens the bytes of the
 * GPT-2 alphabet characters standing for the raw bytes), if all of them exist; else, with an
 * unknown token, one unk symbol, kept pending so that with fuse_unk the next unknown units
 * join it; else the unit is dropped.  A pending unk is emitted before the next symbol found
 * as a token, but not before byte-fallback symbols (HF emits those first; we match it).
 *
 * Data structure.  Symbols are an array-backed doubly linked list (bpe_sym of merge.h): a
 * merge rewrites the left symbol (new id, len += right's len) and unlinks the right one,
 * marking it dead with len = 0.  Candidate merges sit in a binary min-heap keyed by
 * rank << 32 | left index (lowest rank first, leftmost on ties).  Entries are never deleted;
 * on pop, an entry is applied only if its left symbol is alive, has a right neighbour, and
 * that pair of ids still merges into the entry's new id (HF's check, by ids).  After a merge
 * the pairs (previous, merged) and (merged, next) are pushed if they merge.
 *
 * Dropout (HF's Word::merge_all).  Every popped entry, live or dead, draws u uniform in
 * [0, 1) from the call's generator; if u < dropout the entry goes to a skip list, otherwise
 * the skip list is pushed back into the heap and the entry is handled as above.  So at 1
 * nothing merges and at 0 this is plain BPE.  Invariant: skipped entries are outside the
 * heap until the next entry that is not skipped; when the heap empties they are discarded.
 * With dropout the word cache and the ignore_merges shortcut are bypassed, as in HF.
 *
 * Generator.  Each encode call (bpe_model_begin_call) seeds its slot's state from the
 * tokenizer's seed and a per-tokenizer call counter (atomic), through splitmix64; every draw
 * is one splitmix64 step, u = top 24 bits / 2^24 (an f32 in [0, 1), like HF's gen::<f32>).
 * So a tokenizer made with the same seed gives the same ids for the same sequence of calls
 * on one thread; concurrent calls each get their own stream.  bpe_tokenizer_reseed starts
 * a new stream (Python does it in a forked child of a tokenizer whose seed was random).
 */
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "tokenizer.h"

typedef struct bpe_model_entry {
    uint64_t key;      /* rank << 32 | index of the left symbol */
    uint32_t new_id;   /* the id the pair merges into */
} entry;

/* ---- building -------------------------------------------------------------------------- */

static int copy_bytes(const uint8_t *src, size_t n, uint8_t **dst, size_t *len)
{
    *dst = NULL;
    *len = 0;
    if (n == 0)
        return BPE_OK;
    if (src == NULL)
        return BPE_ERR_ARG;
    if ((*dst = malloc(n)) == NULL)
        return BPE_ERR_NOMEM;
    memcpy(*dst, src, n);
    *len = n;
    return BPE_OK;
}

/* GPT-2's byte -> character alphabet: printable Latin-1 bytes but space stand for
 * themselves, the other 68 get U+0100.. in byte order.  Stores each character's UTF-8. */
static void build_mapped(bpe_model *m)
{
    unsigned extra = 0, b;
    for (b = 0; b < 256; b++) {
        int keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        unsigned cp = keep ? b : 256 + extra++;
        if (cp < 0x80) {
            m->mapped[b][0] = (uint8_t)cp;
            m->mapped_len[b] = 1;
        } else {
            m->mapped[b][0] = (uint8_t)(0xC0 | (cp >> 6));
            m->mapped[b][1] = (uint8_t)(0x80 | (cp & 0x3F));
            m->mapped_len[b] = 2;
        }
    }
}

static void build_fallback(bpe_model *m, const bpe_tokenizer *tok)
{
    static const char hex[] = "0123456789ABCDEF";
    uint8_t name[6] = {'<', '0', 'x', 0, 0, '>'};
    unsigned b;
    for (b = 0; b < 256; b++) {
        name[3] = (uint8_t)hex[b >> 4];
        name[4] = (uint8_t)hex[b & 15];
        m->fallback_id[b] = bpe_ordinary_lookup(tok, name, 6, bpe_hash_bytes(name, 6));
    }
}

static int any_option(const bpe_spec *sp)
{
    return sp->char_level || sp->byte_fallback || sp->has_unk || sp->dropout != 0.0 ||
           sp->subword_prefix_len || sp->word_suffix_len;
}

/* 1 if a byte-level merge-list vocabulary has no token for some single byte.  HF's BPE
 * model drops such a byte (no unk_token): model.c does, where merge.c's plain path could only
 * fail (BPE_ERR_NOBYTE, which stays for tiktoken vocabularies, as tiktoken has no rule). */
static int lacks_a_byte(const bpe_spec *sp, const bpe_tokenizer *tok)
{
    unsigned b;
    if (sp->rule != BPE_RULE_MERGES || sp->char_level)
        return 0;
    for (b = 0; b < 256; b++)
        if (tok->byte_id[b] == BPE_NO_ID)
            return 1;
    return 0;
}

int bpe_model_new(const bpe_spec *sp, bpe_tokenizer *tok)
{
    bpe_model *m;
    int rc;
    tok->model = NULL;
    if (!any_option(sp) && !lacks_a_byte(sp, tok))
        return BPE_OK;
    if (sp->rule != BPE_RULE_MERGES || !(sp->dropout >= 0.0 && sp->dropout <= 1.0))
        return BPE_ERR_ARG;   /* (the second test also rejects NaN) */
    if (sp->has_unk && (sp->unk_id >= tok->id_limit || tok->by_id[sp->unk_id].len == 0 ||
                        tok->is_special[sp->unk_id] == 1))
        return BPE_ERR_ARG;
    if ((m = calloc(1, sizeof *m)) == NULL)
        return BPE_ERR_NOMEM;
    tok->model = m;
    m->char_level = sp->char_level != 0;
    m->byte_fallback = sp->byte_fallback != 0;
    m->fuse_unk = sp->fuse_unk != 0;
    m->unk_id = sp->has_unk ? sp->unk_id : BPE_NO_ID;
    m->dropout = (float)sp->dropout;
    m->seed = sp->seed;
    if ((rc = copy_bytes(sp->subword_prefix, sp->subword_prefix_len, &m->prefix,
                         &m->prefix_len)) != BPE_OK ||
        (rc = copy_bytes(sp->word_suffix, sp->word_suffix_len, &m->suffix,
                         &m->suffix_len)) != BPE_OK)
        return rc;
    build_mapped(m);
    build_fallback(m, tok);
    return BPE_OK;
}

void bpe_model_free(bpe_model *m)
{
    if (m == NULL)
        return;
    free(m->prefix);
    free(m->suffix);
    free(m);
}

size_t bpe_model_prefix_len(const bpe_tokenizer *tok)
{
    return tok->model ? tok->model->prefix_len : 0;
}

void bpe_model_scratch_free(bpe_model_scratch *s)
{
    if (s == NULL)
        return;
    free(s->syms);
    free(s->heap);
    free(s->skip);
    free(s->key);
    memset(s, 0, sizeof *s);
}

/* ---- the generator ------------------------------------------------------------------------ */

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void bpe_model_begin_call(const bpe_tokenizer *tok, bpe_slot *slot)
{
    bpe_model *m = tok->model;
    uint64_t k, st;
    if (m == NULL || m->dropout == 0.0f)
        return;
    k = __atomic_fetch_add(&m->calls, 1, __ATOMIC_RELAXED);
    st = __atomic_load_n(&m->seed, __ATOMIC_RELAXED);
    st ^= splitmix64(&st) ^ (k * 0xD1B54A32D192ED03ull);
    slot->rng = splitmix64(&st);
}

void bpe_tokenizer_reseed(bpe_tokenizer *tok, uint64_t seed)
{
    bpe_model *m = tok != NULL ? tok->model : NULL;
    if (m == NULL)
        return;
    __atomic_store_n(&m->seed, seed, __ATOMIC_RELAXED);
    __atomic_store_n(&m->calls, 0, __ATOMIC_RELAXED);
}

/* 1 if the popped merge is to be skipped. */
static int drop(const bpe_model *m, bpe_slot *slot)
{
    float u = (float)(splitmix64(&slot->rng) >> 40) * (1.0f / 16777216.0f);
    return u < m->dropout;
}

/* ---- initial symbols ----------------------------------------------------------------------- */

/* The symbols being built: a growing array in the scratch, count n, a pending unk. */
typedef struct builder {
    bpe_model_scratch *s;
    size_t n;            /* symbols so far */
    uint32_t unk_len;    /* bytes of the pending unk symbol; 0: none pending */
} builder;

static int add_symbol(builder *b, uint32_t id, uint32_t len)
{
    bpe_sym *y;
    if (b->n >= UINT32_MAX - 1)
        return BPE_ERR_TOOBIG;
    if (b->n == b->s->sym_cap &&
        bpe_grow_array((void **)&b->s->syms, &b->s->sym_cap, b->n + 1,
                       sizeof *b->s->syms) != BPE_OK)
        return BPE_ERR_NOMEM;
    y = &b->s->syms[b->n];
    y->id = id;
    y->len = len;
    y->prev = b->n ? (uint32_t)(b->n - 1) : BPE_SYM_NONE;
    y->next = BPE_SYM_NONE;
    if (b->n)
        b->s->syms[b->n - 1].next = (uint32_t)b->n;
    b->n++;
    return BPE_OK;
}

static int flush_unk(builder *b, const bpe_model *m)
{
    uint32_t len = b->unk_len;
    b->unk_len = 0;
    return len ? add_symbol(b, m->unk_id, len) : BPE_OK;
}

/* Byte fallback of the lookup string k[0..kn): 1 if every "<0xNN>" exists (then the symbols
 * are added and *rc is the result), 0 if one is missing (nothing added). */
static int fallback(builder *b, const bpe_model *m, const uint8_t *k, size_t kn, int *rc)
{
    size_t i, j;
    *rc = BPE_OK;
    for (i = 0; i < kn; i++) {
        if (m->char_level) {
            if (m->fallback_id[k[i]] == BPE_NO_ID)
                return 0;
        } else {
            for (j = 0; j < m->mapped_len[k[i]]; j++)
                if (m->fallback_id[m->mapped[k[i]][j]] == BPE_NO_ID)
                    return 0;
        }
    }
    for (i = 0; i < kn && *rc == BPE_OK; i++) {
        if (m->char_level)
            *rc = add_symbol(b, m->fallback_id[k[i]], 1);
        else
            for (j = 0; j < m->mapped_len[k[i]] && *rc == BPE_OK; j++)
                *rc = add_symbol(b, m->fallback_id[m->mapped[k[i]][j]], 1);
    }
    return 1;
}

/* A unit without a token: byte fallback, else the unknown token, else nothing. */
static int unknown_unit(builder *b, const bpe_model *m, const uint8_t *k, size_t kn,
                        size_t unit_len)
{
    int rc;
    if (m->byte_fallback && fallback(b, m, k, kn, &rc))
        return rc;
    if (m->unk_id == BPE_NO_ID)
        return BPE_OK;
    if (b->unk_len && m->fuse_unk) {
        b->unk_len += (uint32_t)unit_len;
        return BPE_OK;
    }
    if ((rc = flush_unk(b, m)) != BPE_OK)
        return rc;
    b->unk_len = (uint32_t)unit_len;
    return BPE_OK;
}

/* Length of the UTF-8 character at p[0..n) (n > 0); a bad lead byte counts as one. */
static size_t unit_length(const bpe_model *m, const uint8_t *p, size_t n)
{
    size_t k;
    if (!m->char_level || p[0] < 0xC0)
        return 1;
    k = p[0] < 0xE0 ? 2 : p[0] < 0xF0 ? 3 : 4;
    return k < n ? k : n;
}

/* The lookup string of unit p[0..u) of a piece: prefix (unless first) + unit + suffix (if
 * last), in the scratch key buffer, or the unit itself when nothing is added. */
static int lookup_key(bpe_model_scratch *s, const bpe_model *m, const uint8_t *p, size_t u,
                      int first, int last, const uint8_t **k, size_t *kn)
{
    size_t pl = first ? 0 : m->prefix_len, sl = last ? m->suffix_len : 0;
    if (pl == 0 && sl == 0) {
        *k = p;
        *kn = u;
        return BPE_OK;
    }
    if (bpe_grow_array((void **)&s->key, &s->key_cap, pl + u + sl, 1) != BPE_OK)
        return BPE_ERR_NOMEM;
    if (pl)
        memcpy(s->key, m->prefix, pl);
    memcpy(s->key + pl, p, u);
    if (sl)
        memcpy(s->key + pl + u, m->suffix, sl);
    *k = s->key;
    *kn = pl + u + sl;
    return BPE_OK;
}

static int init_symbols(const bpe_tokenizer *tok, bpe_model_scratch *s, const uint8_t *p,
                        size_t n, size_t *n_syms)
{
    const bpe_model *m = tok->model;
    builder b = {s, 0, 0};
    size_t i = 0;
    int rc = BPE_OK;
    while (i < n && rc == BPE_OK) {
        size_t u = unit_length(m, p + i, n - i), kn;
        const uint8_t *k;
        uint32_t id;
        if ((rc = lookup_key(s, m, p + i, u, i == 0, i + u == n, &k, &kn)) != BPE_OK)
            break;
        id = bpe_ordinary_lookup(tok, k, kn, bpe_hash_bytes(k, kn));
        if (id != BPE_NO_ID) {
            if ((rc = flush_unk(&b, m)) == BPE_OK)
                rc = add_symbol(&b, id, (uint32_t)u);
        } else {
            rc = unknown_unit(&b, m, k, kn, u);
        }
        i += u;
    }
    if (rc == BPE_OK)
        rc = flush_unk(&b, m);
    *n_syms = b.n;
    return rc;
}

/* ---- the heap ----------------------------------------------------------------------------- */

static void sift_up(entry *h, size_t i)
{
    entry x = h[i];
    while (i > 0 && h[(i - 1) / 2].key > x.key) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = x;
}

static void sift_down(entry *h, size_t n, size_t i)
{
    entry x = h[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && h[c + 1].key < h[c].key)
            c++;
        if (h[c].key >= x.key)
            break;
        h[i] = h[c];
        i = c;
    }
    h[i] = x;
}

static int push(bpe_model_scratch *s, size_t *hn, entry e)
{
    if (*hn == s->heap_cap &&
        bpe_grow_array((void **)&s->heap, &s->heap_cap, *hn + 1, sizeof *s->heap) != BPE_OK)
        return BPE_ERR_NOMEM;
    s->heap[*hn] = e;
    sift_up(s->heap, (*hn)++);
    return BPE_OK;
}

static entry pop(bpe_model_scratch *s, size_t *hn)
{
    entry top = s->heap[0];
    s->heap[0] = s->heap[--*hn];
    if (*hn > 0)
        sift_down(s->heap, *hn, 0);
    return top;
}

/* Pushes the pair starting at symbol i (whose right neighbour exists) if it merges. */
static int push_pair(const bpe_tokenizer *tok, bpe_model_scratch *s, size_t *hn, uint32_t i)
{
    const bpe_pair_entry *e = bpe_pair_find(tok, s->syms[i].id, s->syms[s->syms[i].next].id);
    entry x;
    if (e == NULL)
        return BPE_OK;
    x.key = ((uint64_t)e->rank << 32) | i;
    x.new_id = e->new_id;
    return push(s, hn, x);
}

/* Puts the skipped entries back into the heap. */
static int unskip(bpe_model_scratch *s, size_t *hn, size_t *sn)
{
    size_t i;
    int rc = BPE_OK;
    for (i = 0; i < *sn && rc == BPE_OK; i++)
        rc = push(s, hn, s->skip[i]);
    *sn = 0;
    return rc;
}

/* Applies the popped entry top if it is live (see the file comment). */
static int apply(const bpe_tokenizer *tok, bpe_model_scratch *s, size_t *hn, entry top)
{
    uint32_t i = (uint32_t)top.key;
    const bpe_sym *l = &s->syms[i];
    const bpe_pair_entry *e;
    int rc = BPE_OK;
    if (l->len == 0 || l->next == BPE_SYM_NONE)
        return BPE_OK;
    e = bpe_pair_find(tok, l->id, s->syms[l->next].id);
    if (e == NULL || e->new_id != top.new_id)
        return BPE_OK;
    bpe_sym_absorb_right(s->syms, i, top.new_id);
    if (l->prev != BPE_SYM_NONE)
        rc = push_pair(tok, s, hn, l->prev);
    if (rc == BPE_OK && l->next != BPE_SYM_NONE)
        rc = push_pair(tok, s, hn, i);
    return rc;
}

static int merge_all(const bpe_tokenizer *tok, bpe_slot *slot, size_t n_syms)
{
    const bpe_model *m = tok->model;
    bpe_model_scratch *s = &slot->mscratch;
    size_t hn = 0, sn = 0, i;
    int rc = BPE_OK, dropping = m->dropout != 0.0f;
    for (i = 0; i + 1 < n_syms && rc == BPE_OK; i++)
        rc = push_pair(tok, s, &hn, (uint32_t)i);
    while (hn > 0 && rc == BPE_OK) {
        entry top = pop(s, &hn);
        if (dropping && drop(m, slot)) {
            if (sn == s->skip_cap &&
                bpe_grow_array((void **)&s->skip, &s->skip_cap, sn + 1,
                               sizeof *s->skip) != BPE_OK)
                return BPE_ERR_NOMEM;
            s->skip[sn++] = top;
            continue;
        }
        if (sn && (rc = unskip(s, &hn, &sn)) != BPE_OK)
            break;
        rc = apply(tok, s, &hn, top);
    }
    return rc;
}

/* ---- one piece ------------------------------------------------------------------------------ */

/* Merges p[0..n) and appends the ids of the live symbols to out. */
static int merge_piece(const bpe_tokenizer *tok, bpe_slot *slot, const uint8_t *p, size_t n,
                       bpe_ids *out, size_t *k)
{
    bpe_model_scratch *s = &slot->mscratch;
    size_t n_syms, i;
    uint32_t *dst;
    int rc;
    if ((rc = init_symbols(tok, s, p, n, &n_syms)) != BPE_OK ||
        (rc = merge_all(tok, slot, n_syms)) != BPE_OK)
        return rc;
    if ((rc = bpe_ids_reserve(out, n_syms)) != BPE_OK)
        return rc;
    dst = out->ids + out->len;
    *k = 0;
    for (i = 0; n_syms && i != BPE_SYM_NONE; i = s->syms[i].next)
        dst[(*k)++] = s->syms[i].id;
    return BPE_OK;
}

int bpe_model_piece(const bpe_tokenizer *tok, bpe_slot *slot, const uint8_t *p, size_t n,
                    bpe_ids *out)
{
    int cached = tok->model->dropout == 0.0f, rc;
    uint64_t h = 0;
    size_t k;
    if (cached) {
        const uint32_t *hit;
        uint32_t id;
        h = bpe_hash_bytes(p, n);
        if (tok->ignore_merges && (id = bpe_ordinary_lookup(tok, p, n, h)) != BPE_NO_ID) {
            if ((rc = bpe_ids_reserve(out, 1)) != BPE_OK)
                return rc;
            out->ids[out->len++] = id;
            return BPE_OK;
        }
        if (slot->cache != NULL && n < BPE_CACHE_MAX_PIECE &&
            (hit = bpe_cache_get(slot->cache, p, n, h, &k)) != NULL) {
            if ((rc = bpe_ids_reserve(out, k)) != BPE_OK)
                return rc;
            memcpy(out->ids + out->len, hit, k * sizeof *hit);
            out->len += k;
            return BPE_OK;
        }
    }
    if ((rc = merge_piece(tok, slot, p, n, out, &k)) != BPE_OK)
        return rc;
    if (cached && slot->cache != NULL && k >= 1 && k <= n)
        bpe_cache_put(slot->cache, p, n, h, out->ids + out->len, k);
    out->len += k;
    return BPE_OK;
}
