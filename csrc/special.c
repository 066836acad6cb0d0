/*
 * special.c - the special-token matcher: leftmost occurrence, longest at that start.
 *
 * Data structure: a byte trie of the tokens.  Node 0 is the root; an edge (node, byte) ->
 * child lives in one open-addressing hash table keyed by node << 8 | byte, so a step costs one
 * probe whatever the fan-out.  term[node] is the first token (in spec order) that ends at the
 * node, -1 if none; tokens with identical bytes are chained through dup_next.  first[b] is 1
 * when some token starts with byte b, which lets the scan skip most positions without
 * entering the trie (and with a single possible first byte the scan is a memchr).
 *
 * Search: for each start position from left to right, walk the trie as deep as the text
 * allows, remembering the deepest node that ends a selected token; the first start that has
 * one is the answer (leftmost), and its deepest selected token is the longest.  Cost per start
 * is at most the longest token's length, and usually a single table lookup of first[].
 * Invariants: edges only point to nodes created after their parent; node count <= total token
 * bytes + 1; the matcher is immutable after bpe_special_matcher_new.
 */
#include <stdlib.h>
#include <string.h>

#include "bpe.h"
#include "special.h"

#define NO_NODE UINT32_MAX
#define EMPTY_KEY UINT64_MAX

typedef struct edge {
    uint64_t key;       /* parent node << 8 | byte; EMPTY_KEY when free */
    uint32_t child;     /* the child node */
} edge;

struct bpe_special_matcher {
    size_t n;            /* tokens */
    uint8_t *bytes;      /* copy of all token bytes */
    size_t *offsets;     /* n + 1 offsets into bytes */
    size_t max_len;      /* longest token */
    uint8_t first[256];  /* 1 if some token starts with the byte */
    int single_first;    /* the only first byte, or -1 when there are several */
    size_t n_nodes;      /* trie nodes (root included) */
    long *term;          /* n_nodes: first token ending at the node, -1 if none */
    long *dup_next;      /* n: next token with the same bytes, -1 if none */
    edge *edges;         /* edge table, edge_mask + 1 slots */
    size_t edge_mask;
};

static uint64_t edge_key(uint32_t node, uint8_t b)
{
    return ((uint64_t)node << 8) | b;
}

static size_t edge_slot(const bpe_special_matcher *m, uint64_t key)
{
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & m->edge_mask;
}

static uint32_t child(const bpe_special_matcher *m, uint32_t node, uint8_t b)
{
    uint64_t key = edge_key(node, b);
    size_t i = edge_slot(m, key);
    while (m->edges[i].key != EMPTY_KEY) {
        if (m->edges[i].key == key)
            return m->edges[i].child;
        i = (i + 1) & m->edge_mask;
    }
    return NO_NODE;
}

static uint32_t add_child(bpe_special_matcher *m, uint32_t node, uint8_t b)
{
    uint64_t key = edge_key(node, b);
    size_t i = edge_slot(m, key);
    while (m->edges[i].key != EMPTY_KEY) {
        if (m->edges[i].key == key)
            return m->edges[i].child;
        i = (i + 1) & m->edge_mask;
    }
    m->edges[i].key = key;
    m->edges[i].child = (uint32_t)m->n_nodes;
    m->term[m->n_nodes] = -1;
    return (uint32_t)m->n_nodes++;
}

static int alloc_matcher(bpe_special_matcher *m, const uint8_t *bytes, const size_t *offsets,
                         size_t n)
{
    size_t total = offsets[n] - offsets[0], size = 16, i;
    m->n = n;
    m->bytes = malloc(total ? total : 1);
    m->offsets = malloc((n + 1) * sizeof *m->offsets);
    m->term = malloc((total + 1) * sizeof *m->term);
    m->dup_next = malloc((n ? n : 1) * sizeof *m->dup_next);
    while (size < 2 * (total + 1))
        size *= 2;
    m->edges = malloc(size * sizeof *m->edges);
    if (!m->bytes || !m->offsets || !m->term || !m->dup_next || !m->edges)
        return BPE_ERR_NOMEM;
    m->edge_mask = size - 1;
    for (i = 0; i < size; i++)
        m->edges[i].key = EMPTY_KEY;
    if (total)
        memcpy(m->bytes, bytes + offsets[0], total);
    for (i = 0; i <= n; i++)
        m->offsets[i] = offsets[i] - offsets[0];
    m->n_nodes = 1;
    m->term[0] = -1;
    return BPE_OK;
}

static void insert_token(bpe_special_matcher *m, size_t i)
{
    const uint8_t *p = m->bytes + m->offsets[i];
    size_t len = m->offsets[i + 1] - m->offsets[i], k;
    uint32_t node = 0;
    for (k = 0; k < len; k++)
        node = add_child(m, node, p[k]);
    m->dup_next[i] = -1;
    if (m->term[node] < 0) {
        m->term[node] = (long)i;
    } else {
        long t = m->term[node];
        while (m->dup_next[t] >= 0)
            t = m->dup_next[t];
        m->dup_next[t] = (long)i;
    }
    m->first[p[0]] = 1;
    if (len > m->max_len)
        m->max_len = len;
}

int bpe_special_matcher_new(const uint8_t *bytes, const size_t *offsets, size_t n,
                            bpe_special_matcher **out)
{
    bpe_special_matcher *m;
    size_t i;
    int rc, firsts = 0, b;
    if (out == NULL || (n && (bytes == NULL || offsets == NULL)))
        return BPE_ERR_ARG;
    *out = NULL;
    for (i = 0; i < n; i++)
        if (offsets[i + 1] <= offsets[i])
            return BPE_ERR_ARG;
    m = calloc(1, sizeof *m);
    if (m == NULL)
        return BPE_ERR_NOMEM;
    if (n == 0) {
        static const size_t zero = 0;
        rc = alloc_matcher(m, (const uint8_t *)"", &zero, 0);
    } else {
        rc = alloc_matcher(m, bytes, offsets, n);
    }
    if (rc != BPE_OK) {
        bpe_special_matcher_free(m);
        return rc;
    }
    for (i = 0; i < n; i++)
        insert_token(m, i);
    m->single_first = -1;
    for (b = 0; b < 256; b++)
        if (m->first[b]) {
            firsts++;
            m->single_first = b;
        }
    if (firsts != 1)
        m->single_first = -1;
    *out = m;
    return BPE_OK;
}

void bpe_special_matcher_free(bpe_special_matcher *m)
{
    if (m == NULL)
        return;
    free(m->bytes);
    free(m->offsets);
    free(m->term);
    free(m->dup_next);
    free(m->edges);
    free(m);
}

/* The first selected token among those ending at node, or -1. */
static long selected(const bpe_special_matcher *m, uint32_t node, const uint8_t *mode)
{
    long t = m->term[node];
    while (t >= 0 && mode != NULL && !mode[t])
        t = m->dup_next[t];
    return t;
}

/* The longest selected token starting at text[s], or -1. */
static long longest_at(const bpe_special_matcher *m, const uint8_t *text, size_t len, size_t s,
                       const uint8_t *mode)
{
    uint32_t node = 0;
    long best = -1;
    size_t k;
    for (k = s; k < len; k++) {
        long t;
        node = child(m, node, text[k]);
        if (node == NO_NODE)
            break;
        if ((t = selected(m, node, mode)) >= 0)
            best = t;
    }
    return best;
}

int bpe_special_find(const bpe_special_matcher *m, const uint8_t *text, size_t len, size_t pos,
                     const uint8_t *mode, size_t *start, size_t *index)
{
    size_t s;
    if (m == NULL || m->n == 0)
        return 0;
    for (s = pos; s < len; s++) {
        long t;
        if (m->single_first >= 0) {
            const uint8_t *q = memchr(text + s, m->single_first, len - s);
            if (q == NULL)
                return 0;
            s = (size_t)(q - text);
        } else if (!m->first[text[s]]) {
            continue;
        }
        if ((t = longest_at(m, text, len, s, mode)) >= 0) {
            *start = s;
            *index = (size_t)t;
            return 1;
        }
    }
    return 0;
}

/* 1 if text[p..len) is a proper prefix of a selected token. */
static int proper_prefix_at(const bpe_special_matcher *m, const uint8_t *text, size_t len,
                            size_t p, const uint8_t *mode)
{
    uint32_t node = 0;
    size_t k, i, n = len - p;
    for (k = p; k < len; k++)
        if ((node = child(m, node, text[k])) == NO_NODE)
            return 0;
    for (i = 0; i < m->n; i++) {
        size_t tl = m->offsets[i + 1] - m->offsets[i];
        if ((mode == NULL || mode[i]) && tl > n &&
            memcmp(m->bytes + m->offsets[i], text + p, n) == 0)
            return 1;
    }
    return 0;
}

size_t bpe_special_hold(const bpe_special_matcher *m, const uint8_t *text, size_t len,
                        const uint8_t *mode)
{
    size_t p;
    if (m == NULL || m->n == 0 || len == 0)
        return len;
    p = len >= m->max_len ? len - m->max_len + 1 : 0;
    for (; p < len; p++)
        if (m->first[text[p]] && proper_prefix_at(m, text, len, p, mode))
            return p;
    return len;
}

size_t bpe_special_len(const bpe_special_matcher *m, size_t index)
{
    if (m == NULL || index >= m->n)
        return 0;
    return m->offsets[index + 1] - m->offsets[index];
}

size_t bpe_special_max_len(const bpe_special_matcher *m)
{
    return m ? m->max_len : 0;
}
