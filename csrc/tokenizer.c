/*
 * tokenizer.c - building, querying and freeing a bpe_tokenizer.
 *
 * Built once from a bpe_spec, then immutable (see tokenizer.h for the fields):
 *   - every token's bytes copied into one buffer, with an id -> (offset, len) array;
 *   - two bytes -> id hash tables (ordinary tokens, special tokens), open addressing with
 *     linear probing, load <= 1/2, keyed by our own 64-bit hash (tokenizer.h); a slot holds
 *     the bytes of a token of up to BPE_SLOT_INLINE bytes itself, and the offset and length
 *     of a longer one's bytes (bpe_bytes_slot): a lookup reads no by_id entry;
 *   - the pair table (left id, right id) -> (rank, new id), open addressing keyed by a
 *     multiplicative hash of the 64-bit pair, load <= 1/2.  For BPE_RULE_MERGES it holds the
 *     merge list (rank = index; a pair listed twice keeps its LAST rank, as HF does).  For
 *     BPE_RULE_TIKTOKEN it holds, for every token T that merging can form, the one split of T
 *     into two tokens L + R that is ever merged (its "final split", see final_split.c),
 *     mapped to (rank T, id T) with rank == id: merging the lowest-ranked adjacent pair of
 *     tokens is then exactly tiktoken's rule, because every part tiktoken forms is a token.
 *   - pair_bits, two filter bytes per id built from the pair table (a one-hash Bloom filter
 *     per side): bpe_pair_find skips the probe of a pair they rule out.  Some 2 of 5 pair
 *     lookups of merging find nothing, and such a probe of a big table is mostly a cache
 *     miss; on o200k_base and multilingual text the bytes rule out about 2 in 3 of them.
 * The byte buffer, by_id and the three hash tables come from bpe_table_alloc (buffers.c): at
 * megabyte sizes they are asked to live on huge pages, since they are probed at random.
 * The tables of longpiece.c (long_tables) are the exception to immutability: built on first
 * use, see there; so is medium_bytes, the count that decides when medium pieces start using
 * them (encode.c).  Invariants: ids are < id_limit; by_id[id].len == 0 exactly for unknown
 * ids; the tables hold no duplicate keys; the pair table never contains the key
 * BPE_PAIR_EMPTY (ids < 2^31).
 */
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "longpiece.h"
#include "tokenizer.h"

/* Ids index arrays, so the id space must stay proportional to the number of tokens. */
#define ID_SLACK (1u << 20)
#define ID_HARD_LIMIT (1u << 31)

static size_t pow2_at_least(size_t n)
{
    size_t p = 16;
    while (p < n)
        p *= 2;
    return p;
}

/* Writes the long key (tokenizer.h) of a token of len bytes at off into its slot. */
static void set_long_key(bpe_bytes_slot *s, uint32_t off, uint32_t len)
{
    int k;
    for (k = 0; k < 4; k++)
        s->bytes[k] = (uint8_t)(off >> (8 * k));
    for (k = 0; k < 3; k++)
        s->bytes[4 + k] = (uint8_t)(len >> (8 * k));
}

static int table_insert(bpe_bytes_slot *tab, size_t mask, const bpe_tokenizer *tok,
                        uint32_t id)
{
    const bpe_token_ref *r = &tok->by_id[id];
    const uint8_t *p = tok->bytes + r->off;
    uint64_t h = bpe_hash_bytes(p, r->len);
    size_t i = (size_t)h & mask;
    while (tab[i].id != BPE_NO_ID) {
        const bpe_token_ref *o = &tok->by_id[tab[i].id];
        if (tab[i].hash == (uint32_t)h && o->len == r->len &&
            memcmp(tok->bytes + o->off, p, r->len) == 0)
            return 0;   /* the same bytes already have an id */
        i = (i + 1) & mask;
    }
    tab[i].hash = (uint32_t)h;
    tab[i].id = id;
    if (r->len <= BPE_SLOT_INLINE) {
        tab[i].len = (uint8_t)r->len;
        memcpy(tab[i].bytes, p, r->len);
    } else {
        set_long_key(&tab[i], r->off, r->len < BPE_LONG_KEY_FAR ? r->len : BPE_LONG_KEY_FAR);
    }
    return 1;
}

/* Whether slot s (of matching hash) holds the token with the n bytes at p. */
static int slot_holds(const bpe_bytes_slot *s, const bpe_tokenizer *tok, const uint8_t *p,
                      size_t n)
{
    const bpe_token_ref *r;
    size_t k, len;
    if (s->len != 0) {
        if (s->len != n)
            return 0;
        for (k = 0; k < n; k++)
            if (s->bytes[k] != p[k])
                return 0;
        return 1;
    }
    if (n <= BPE_SLOT_INLINE)
        return 0;   /* a token this short would be in its slot */
    len = bpe_long_key_len(s);
    if (len != BPE_LONG_KEY_FAR)
        return len == n && bpe_bytes_equal(tok->bytes + bpe_long_key_off(s), p, n);
    r = &tok->by_id[s->id];
    return r->len == n && bpe_bytes_equal(tok->bytes + r->off, p, n);
}

static uint32_t table_lookup(const bpe_bytes_slot *tab, size_t mask, const bpe_tokenizer *tok,
                             const uint8_t *p, size_t n, uint64_t h)
{
    size_t i = (size_t)h & mask;
    for (;;) {
        const bpe_bytes_slot *s = &tab[i];
        if (s->id == BPE_NO_ID)
            return BPE_NO_ID;
        if (s->hash == (uint32_t)h && slot_holds(s, tok, p, n))
            return s->id;
        i = (i + 1) & mask;
    }
}

uint32_t bpe_ordinary_lookup(const bpe_tokenizer *tok, const uint8_t *p, size_t n, uint64_t h)
{
    return table_lookup(tok->ordinary, tok->ordinary_mask, tok, p, n, h);
}

/* A zeroed array of n (>= 0) items of size bytes from bpe_table_alloc, or NULL. */
static void *table_calloc(size_t n, size_t size)
{
    void *p;
    if (n == 0)
        n = 1;
    if (n > SIZE_MAX / size || (p = bpe_table_alloc(n * size)) == NULL)
        return NULL;
    return memset(p, 0, n * size);
}

static bpe_bytes_slot *new_table(size_t n, size_t *mask)
{
    size_t size = pow2_at_least(2 * n + 1), i;
    bpe_bytes_slot *t = bpe_table_alloc(size * sizeof *t);
    if (t == NULL)
        return NULL;
    memset(t, 0, size * sizeof *t);
    for (i = 0; i < size; i++)
        t[i].id = BPE_NO_ID;
    *mask = size - 1;
    return t;
}

/* Checks the spec's shape and computes id_limit and the total byte count. */
static int check_spec(const bpe_spec *sp, uint32_t *id_limit, size_t *total)
{
    size_t i, n_all = sp->n_tokens + sp->n_special;
    uint64_t lim = 0;
    if (sp->rule != BPE_RULE_MERGES && sp->rule != BPE_RULE_TIKTOKEN)
        return BPE_ERR_ARG;
    if (sp->pattern < BPE_PATTERN_EXTERNAL || sp->pattern > BPE_PATTERN_O200K)
        return BPE_ERR_ARG;
    if ((sp->n_tokens && (!sp->token_bytes || !sp->token_offsets || !sp->token_ids)) ||
        (sp->n_special && (!sp->special_bytes || !sp->special_offsets || !sp->special_ids)) ||
        (sp->n_merges && !sp->merges))
        return BPE_ERR_ARG;
    for (i = 0; i < sp->n_tokens; i++) {
        if (sp->token_offsets[i + 1] < sp->token_offsets[i])
            return BPE_ERR_ARG;
        if ((uint64_t)sp->token_ids[i] + 1 > lim)
            lim = (uint64_t)sp->token_ids[i] + 1;
    }
    for (i = 0; i < sp->n_special; i++) {
        if (sp->special_offsets[i + 1] < sp->special_offsets[i])
            return BPE_ERR_ARG;
        if ((uint64_t)sp->special_ids[i] + 1 > lim)
            lim = (uint64_t)sp->special_ids[i] + 1;
    }
    if (lim > ID_HARD_LIMIT || lim > (uint64_t)n_all * 4 + ID_SLACK)
        return BPE_ERR_TOOBIG;
    *total = (sp->n_tokens ? sp->token_offsets[sp->n_tokens] - sp->token_offsets[0] : 0) +
             (sp->n_special ? sp->special_offsets[sp->n_special] - sp->special_offsets[0] : 0);
    if (*total >= UINT32_MAX)
        return BPE_ERR_TOOBIG;
    *id_limit = (uint32_t)lim;
    return BPE_OK;
}

/* Registers one token (ordinary or special); BPE_ERR_VOCAB on an empty token or a clash. */
static int add_token(bpe_tokenizer *tok, size_t *used, const uint8_t *p, size_t n, uint32_t id,
                     int special)
{
    bpe_token_ref *r = &tok->by_id[id];
    if (n == 0)
        return BPE_ERR_VOCAB;
    if (r->len != 0) {
        /* an id seen before: only a special token repeating an ordinary one is accepted */
        if (!special || tok->is_special[id] || r->len != n ||
            memcmp(tok->bytes + r->off, p, n) != 0)
            return BPE_ERR_VOCAB;
        tok->is_special[id] = 2;
        return BPE_OK;
    }
    memcpy(tok->bytes + *used, p, n);
    r->off = (uint32_t)*used;
    r->len = (uint32_t)n;
    *used += n;
    tok->is_special[id] = (uint8_t)special;
    return BPE_OK;
}

static int add_tokens(bpe_tokenizer *tok, const bpe_spec *sp, size_t *bad)
{
    size_t used = 0, i;
    int rc;
    if ((tok->ordinary = new_table(sp->n_tokens, &tok->ordinary_mask)) == NULL ||
        (tok->special_tab = new_table(sp->n_special, &tok->special_mask)) == NULL)
        return BPE_ERR_NOMEM;
    for (i = 0; i < sp->n_tokens; i++) {
        size_t o = sp->token_offsets[i], n = sp->token_offsets[i + 1] - o;
        uint32_t id = sp->token_ids[i];
        *bad = i;
        if ((rc = add_token(tok, &used, sp->token_bytes + o, n, id, 0)) != BPE_OK)
            return rc;
        if (!table_insert(tok->ordinary, tok->ordinary_mask, tok, id))
            return BPE_ERR_VOCAB;
        if (n == 1)
            tok->byte_id[sp->token_bytes[o]] = id;
    }
    for (i = 0; i < sp->n_special; i++) {
        size_t o = sp->special_offsets[i], n = sp->special_offsets[i + 1] - o;
        uint32_t id = sp->special_ids[i];
        *bad = sp->n_tokens + i;
        if ((rc = add_token(tok, &used, sp->special_bytes + o, n, id, 1)) != BPE_OK)
            return rc;
        if (!table_insert(tok->special_tab, tok->special_mask, tok, id))
            return BPE_ERR_VOCAB;
        tok->special_ids[i] = id;
    }
    return BPE_OK;
}

static void free_pair_table(bpe_tokenizer *tok)
{
    bpe_table_free(tok->pairs, (tok->pair_mask + 1) * sizeof *tok->pairs);
    tok->pairs = NULL;
}

static int new_pair_table(bpe_tokenizer *tok, size_t n)
{
    size_t size = pow2_at_least(2 * n + 1), i;
    int bits = 0;
    while (((size_t)1 << bits) < size)
        bits++;
    tok->pairs = bpe_table_alloc(size * sizeof *tok->pairs);
    if (tok->pairs == NULL)
        return BPE_ERR_NOMEM;
    for (i = 0; i < size; i++)
        tok->pairs[i].key = BPE_PAIR_EMPTY;
    tok->pair_mask = size - 1;
    tok->pair_shift = 64 - bits;
    return BPE_OK;
}

/* Inserts a pair, or gives a present one the new rank (the last insertion wins: HF
 * tokenizers ranks a merge listed twice by its later line; under the tiktoken rule every
 * insertion of a pair carries the same values). */
static void pair_insert(bpe_tokenizer *tok, uint32_t left, uint32_t right, uint32_t rank,
                        uint32_t new_id)
{
    uint64_t key = ((uint64_t)left << 32) | right;
    size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> tok->pair_shift);
    while (tok->pairs[i].key != BPE_PAIR_EMPTY && tok->pairs[i].key != key)
        i = (i + 1) & tok->pair_mask;
    tok->pairs[i].key = key;
    tok->pairs[i].rank = rank;
    tok->pairs[i].new_id = new_id;
}

static int is_ordinary(const bpe_tokenizer *tok, uint32_t id)
{
    return id < tok->id_limit && tok->by_id[id].len != 0 && tok->is_special[id] != 1;
}

static int build_merges(bpe_tokenizer *tok, const bpe_spec *sp, size_t *bad)
{
    uint8_t small[512];
    size_t i, cut = bpe_model_prefix_len(tok);   /* HF: result = left + right[prefix_len:] */
    int rc = new_pair_table(tok, sp->n_merges);
    for (i = 0; rc == BPE_OK && i < sp->n_merges; i++) {
        uint32_t l = sp->merges[2 * i], r = sp->merges[2 * i + 1], id;
        const bpe_token_ref *lr, *rr;
        uint8_t *buf;
        size_t n;
        *bad = i;
        if (!is_ordinary(tok, l) || !is_ordinary(tok, r))
            return BPE_ERR_MERGE;
        lr = &tok->by_id[l];
        rr = &tok->by_id[r];
        if (rr->len < cut)
            return BPE_ERR_MERGE;   /* the right part is shorter than the prefix to cut */
        n = (size_t)lr->len + rr->len - cut;
        buf = n <= sizeof small ? small : malloc(n);
        if (buf == NULL)
            return BPE_ERR_NOMEM;
        memcpy(buf, tok->bytes + lr->off, lr->len);
        memcpy(buf + lr->len, tok->bytes + rr->off + cut, rr->len - cut);
        id = bpe_ordinary_lookup(tok, buf, n, bpe_hash_bytes(buf, n));
        if (buf != small)
            free(buf);
        if (id == BPE_NO_ID)
            return BPE_ERR_MERGE;
        pair_insert(tok, l, r, (uint32_t)i, id);
    }
    return rc;
}

/* ---- the tiktoken rule's pair table: the final splits of final_split.c ---------------- */

static int build_tiktoken(bpe_tokenizer *tok, const bpe_spec *sp)
{
    size_t n = sp->n_tokens, kept, i;
    uint32_t *split;
    int rc;
    if (n > SIZE_MAX / (2 * sizeof *split) ||
        (split = malloc(2 * (n ? n : 1) * sizeof *split)) == NULL)
        return BPE_ERR_NOMEM;
    if ((rc = bpe_final_splits(tok, sp, split, &kept)) == BPE_OK)
        rc = new_pair_table(tok, kept);
    for (i = 0; rc == BPE_OK && i < n; i++)
        if (split[2 * i] != BPE_NO_ID)
            pair_insert(tok, split[2 * i], split[2 * i + 1], sp->token_ids[i], sp->token_ids[i]);
    free(split);
    return rc;
}

/* Fills byte_pairs from the finished pair table (see tokenizer.h). */
static int build_byte_pairs(bpe_tokenizer *tok)
{
    size_t a, b;
    tok->byte_pairs = malloc(65536 * sizeof *tok->byte_pairs);
    if (tok->byte_pairs == NULL)
        return BPE_ERR_NOMEM;
    for (a = 0; a < 256; a++)
        for (b = 0; b < 256; b++) {
            const bpe_pair_entry *e = NULL;
            if (tok->byte_id[a] != BPE_NO_ID && tok->byte_id[b] != BPE_NO_ID)
                e = bpe_pair_find(tok, tok->byte_id[a], tok->byte_id[b]);
            tok->byte_pairs[a << 8 | b].rank = e ? e->rank : UINT32_MAX;
            tok->byte_pairs[a << 8 | b].new_id = e ? e->new_id : BPE_NO_ID;
        }
    return BPE_OK;
}

/* Fills pair_bits from the finished pair table (see tokenizer.h). */
static int build_pair_bits(bpe_tokenizer *tok)
{
    size_t i;
    tok->pair_bits = calloc(tok->id_limit ? tok->id_limit : 1, sizeof *tok->pair_bits);
    if (tok->pair_bits == NULL)
        return BPE_ERR_NOMEM;
    for (i = 0; i <= tok->pair_mask; i++) {
        uint64_t key = tok->pairs[i].key;
        uint32_t a = (uint32_t)(key >> 32), b = (uint32_t)key;
        if (key == BPE_PAIR_EMPTY)
            continue;
        tok->pair_bits[a][0] |= (uint8_t)bpe_pair_bit(b);
        tok->pair_bits[b][1] |= (uint8_t)bpe_pair_bit(a);
    }
    return BPE_OK;
}

/* The shortest piece for longpiece.c: BPE_CFFI_LONG_PIECE (decimal bytes; 0: never) if set
 * to a number, else BPE_LONG_PIECE_DEFAULT.  Read once per tokenizer, at build. */
static size_t long_piece_min(void)
{
    const char *v = getenv("BPE_CFFI_LONG_PIECE");
    char *end;
    unsigned long long n;
    if (v == NULL || *v < '0' || *v > '9')
        return BPE_LONG_PIECE_DEFAULT;
    n = strtoull(v, &end, 10);
    if (*end != '\0')
        return BPE_LONG_PIECE_DEFAULT;
    return n == 0 || n > SIZE_MAX ? SIZE_MAX : (size_t)n;
}

static int build(bpe_tokenizer *tok, const bpe_spec *sp, size_t *bad)
{
    size_t total, i;
    int rc = check_spec(sp, &tok->id_limit, &total);
    if (rc != BPE_OK)
        return rc;
    tok->rule = sp->rule;
    tok->pattern = sp->pattern;
    tok->ignore_merges = sp->ignore_merges != 0;
    tok->cache_capacity = sp->cache_capacity;
    tok->n_special = sp->n_special;
    tok->long_min = long_piece_min();
    for (i = 0; i < 256; i++)
        tok->byte_id[i] = BPE_NO_ID;
    tok->bytes_size = total;
    tok->bytes = bpe_table_alloc(total);
    tok->by_id = table_calloc(tok->id_limit, sizeof *tok->by_id);
    tok->is_special = calloc(tok->id_limit ? tok->id_limit : 1, 1);
    tok->special_ids = malloc((sp->n_special ? sp->n_special : 1) * sizeof *tok->special_ids);
    if (!tok->bytes || !tok->by_id || !tok->is_special || !tok->special_ids)
        return BPE_ERR_NOMEM;
    if ((rc = add_tokens(tok, sp, bad)) != BPE_OK)
        return rc;
    if (sp->n_special &&
        (rc = bpe_special_matcher_new(sp->special_bytes, sp->special_offsets, sp->n_special,
                                      &tok->matcher)) != BPE_OK)
        return rc == BPE_ERR_ARG ? BPE_ERR_VOCAB : rc;
    if ((rc = bpe_model_new(sp, tok)) != BPE_OK)
        return rc;
    rc = sp->rule == BPE_RULE_MERGES ? build_merges(tok, sp, bad) : build_tiktoken(tok, sp);
    if (rc == BPE_OK)
        rc = build_pair_bits(tok);
    return rc == BPE_OK ? build_byte_pairs(tok) : rc;   /* it probes through pair_bits */
}

int bpe_tokenizer_new(const bpe_spec *spec, bpe_tokenizer **out, size_t *bad_index)
{
    bpe_tokenizer *tok;
    size_t bad = 0;
    int rc;
    if (out == NULL)
        return BPE_ERR_ARG;
    *out = NULL;
    if (spec == NULL)
        return BPE_ERR_ARG;
    tok = calloc(1, sizeof *tok);
    if (tok == NULL)
        return BPE_ERR_NOMEM;
    rc = build(tok, spec, &bad);
    if (rc != BPE_OK) {
        if (bad_index && (rc == BPE_ERR_VOCAB || rc == BPE_ERR_MERGE))
            *bad_index = bad;
        bpe_tokenizer_free(tok);
        return rc;
    }
    *out = tok;
    return BPE_OK;
}

void bpe_tokenizer_free(bpe_tokenizer *tok)
{
    size_t i;
    if (tok == NULL)
        return;
    for (i = 0; i < BPE_N_SLOTS; i++)
        bpe_slot_destroy(&tok->slots[i]);
    bpe_special_matcher_free(tok->matcher);
    bpe_model_free(tok->model);
    bpe_table_free(tok->bytes, tok->bytes_size);
    bpe_table_free(tok->by_id, (tok->id_limit ? tok->id_limit : 1) * sizeof *tok->by_id);
    free(tok->is_special);
    bpe_table_free(tok->ordinary, (tok->ordinary_mask + 1) * sizeof *tok->ordinary);
    bpe_table_free(tok->special_tab, (tok->special_mask + 1) * sizeof *tok->special_tab);
    free_pair_table(tok);
    free(tok->pair_bits);
    free(tok->byte_pairs);
    free(tok->special_ids);
    bpe_long_tables_free(tok->long_tables);
    free(tok);
}

uint32_t bpe_tokenizer_id_limit(const bpe_tokenizer *tok)
{
    return tok ? tok->id_limit : 0;
}

int bpe_token_bytes(const bpe_tokenizer *tok, uint32_t id, const uint8_t **bytes, size_t *len)
{
    if (tok == NULL || bytes == NULL || len == NULL)
        return BPE_ERR_ARG;
    if (id >= tok->id_limit || tok->by_id[id].len == 0)
        return BPE_ERR_ID;
    *bytes = tok->bytes + tok->by_id[id].off;
    *len = tok->by_id[id].len;
    return BPE_OK;
}

int bpe_token_id(const bpe_tokenizer *tok, const uint8_t *bytes, size_t len, uint32_t *id)
{
    uint64_t h;
    uint32_t r;
    if (tok == NULL || id == NULL || (bytes == NULL && len))
        return BPE_ERR_ARG;
    h = bpe_hash_bytes(bytes, len);
    r = table_lookup(tok->ordinary, tok->ordinary_mask, tok, bytes, len, h);
    if (r == BPE_NO_ID)
        r = table_lookup(tok->special_tab, tok->special_mask, tok, bytes, len, h);
    if (r == BPE_NO_ID)
        return BPE_ERR_ID;
    *id = r;
    return BPE_OK;
}
