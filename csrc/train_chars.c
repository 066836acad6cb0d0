/*
 * train_chars.c - the alphabet of character-level training (byte_level=False).
 *
 * Data structure (train_alphabet, see train.h): a direct table index[code point] -> kept
 * character + 1 (0x110000 entries, 4.4 MB, only while merging), the table sym[4 * a + kind]
 * -> initial token id, and the initial tokens' strings back to back (bytes/off).
 *
 * The rules (those of HuggingFace's BpeTrainer, with its unordered choices made
 * deterministic):
 *   - A character's frequency is the number of its occurrences in all words, each word
 *     weighted by its count.  A character of initial_alphabet counts as infinitely frequent.
 *   - With limit_alphabet, only that many characters are kept: the most frequent, ties going
 *     to the smaller code point.  (limit_alphabet >= len(initial_alphabet) is checked at
 *     creation, so every initial character is kept.)
 *   - Kept characters get ids 0.. in code point order.
 *   - In a word, a kept character becomes one symbol: the character, preceded by the prefix
 *     unless it is the word's FIRST character, followed by the suffix if it is the word's
 *     LAST character.  First and last refer to the word as counted, before dropping the
 *     characters that are not kept (as HF does); a dropped character just disappears, and its
 *     neighbours become adjacent.
 *   - The decorated symbol strings that occur get the next ids in byte order; a string is one
 *     token however many (character, kind) pairs spell it.
 * Invariants: every id in sym is < n_tokens; strings are unique; a kept character's plain
 * string is token index[cp] - 1.
 */
#include <stdlib.h>
#include <string.h>

#include "train.h"

#define N_CODE_POINTS 0x110000u
#define NO_SYM UINT32_MAX

uint32_t train_utf8_next(const uint8_t *p, size_t n, size_t *used)
{
    uint8_t b = p[0];
    size_t len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    if (len > n)                 /* cannot happen for valid UTF-8; stay in bounds */
        len = 1;
    *used = len;
    if (len == 1)
        return b < 0x80 ? b : 0xFFFD;
    uint32_t c = b & (0x7F >> len);
    for (size_t i = 1; i < len; i++)
        c = c << 6 | (p[i] & 0x3F);
    return c < N_CODE_POINTS ? c : 0xFFFD;
}

/* Writes the UTF-8 of code point c (a scalar value) to out; returns its length. */
static size_t utf8_put(uint32_t c, uint8_t *out)
{
    if (c < 0x80) {
        out[0] = (uint8_t)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (uint8_t)(0xC0 | c >> 6);
        out[1] = (uint8_t)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        out[0] = (uint8_t)(0xE0 | c >> 12);
        out[1] = (uint8_t)(0x80 | (c >> 6 & 0x3F));
        out[2] = (uint8_t)(0x80 | (c & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | c >> 18);
    out[1] = (uint8_t)(0x80 | (c >> 12 & 0x3F));
    out[2] = (uint8_t)(0x80 | (c >> 6 & 0x3F));
    out[3] = (uint8_t)(0x80 | (c & 0x3F));
    return 4;
}

void train_alphabet_free(train_alphabet *a)
{
    if (a == NULL)
        return;
    free(a->index);
    free(a->sym);
    free(a->bytes);
    free(a->off);
    memset(a, 0, sizeof *a);
}

/* ---- choosing the characters ---------------------------------------------------------- */

typedef struct ranked {
    uint64_t freq;
    uint32_t cp;
} ranked;

static int by_freq(const void *x, const void *y)
{
    const ranked *a = x, *b = y;
    if (a->freq != b->freq)
        return a->freq > b->freq ? -1 : 1;
    return a->cp < b->cp ? -1 : a->cp > b->cp;
}

static int by_cp(const void *x, const void *y)
{
    const ranked *a = x, *b = y;
    return a->cp < b->cp ? -1 : a->cp > b->cp;
}

/* freq[cp] over every word (saturating), initial characters set to UINT64_MAX. */
static void count_chars(const bpe_trainer *t, uint64_t *freq)
{
    const train_words *tw = &t->words;
    for (size_t i = 0; i < tw->capacity; i++) {
        const train_word_slot *s = &tw->slots[i];
        if (s->hash == 0)
            continue;
        const uint8_t *p = train_slot_bytes(tw, s);
        for (size_t k = 0, used; k < s->len; k += used) {
            uint32_t cp = train_utf8_next(p + k, s->len - k, &used);
            uint64_t f = freq[cp] + s->count;
            freq[cp] = f < s->count ? UINT64_MAX : f;
        }
    }
    for (size_t i = 0; i < t->n_initial_alphabet; i++)
        freq[t->initial_alphabet[i]] = UINT64_MAX;
}

/* Fills a->index and a->n_alpha; *kept (owned by the caller) lists them by code point. */
static int choose_chars(const bpe_trainer *t, train_alphabet *a, ranked **kept)
{
    uint64_t *freq = calloc(N_CODE_POINTS, sizeof *freq);
    if (freq == NULL)
        return BPE_ERR_NOMEM;
    count_chars(t, freq);
    size_t n = 0;
    for (uint32_t cp = 0; cp < N_CODE_POINTS; cp++)
        n += freq[cp] != 0;
    ranked *r = malloc((n ? n : 1) * sizeof *r);
    if (r == NULL) {
        free(freq);
        return BPE_ERR_NOMEM;
    }
    n = 0;
    for (uint32_t cp = 0; cp < N_CODE_POINTS; cp++)
        if (freq[cp]) {
            r[n].freq = freq[cp];
            r[n++].cp = cp;
        }
    free(freq);
    if (t->has_limit_alphabet && n > t->limit_alphabet) {
        qsort(r, n, sizeof *r, by_freq);
        n = t->limit_alphabet;
        qsort(r, n, sizeof *r, by_cp);
    }
    for (size_t i = 0; i < n; i++)
        a->index[r[i].cp] = (uint32_t)i + 1;
    a->n_alpha = n;
    *kept = r;
    return BPE_OK;
}

/* ---- the decorated symbols ------------------------------------------------------------ */

/* Writes the slot (4 * kept character + kind) of each kept character of word p[0..len) to
 * out, in order; returns how many.  kind has bit 0 when a prefix applies (not the word's
 * first character) and bit 1 when a suffix applies (its last character). */
static size_t word_slots(const train_alphabet *a, const uint8_t *p, size_t len, uint32_t *out)
{
    size_t n = 0, k = 0, used;
    while (k < len) {
        uint32_t cp = train_utf8_next(p + k, len - k, &used);
        int first = k == 0;
        k += used;
        uint32_t ix = a->index[cp];
        if (ix == 0)
            continue;
        unsigned kind = (unsigned)(!first && a->prefix) | (unsigned)(k == len && a->suffix) << 1;
        out[n++] = 4 * (ix - 1) + kind;
    }
    return n;
}

typedef struct deco {
    const uint8_t *p;      /* its string in the scratch buffer */
    size_t len;
    uint32_t slot;         /* 4 * character + kind */
} deco;

static int by_bytes(const void *x, const void *y)
{
    const deco *a = x, *b = y;
    int c = memcmp(a->p, b->p, a->len < b->len ? a->len : b->len);
    if (c)
        return c;
    return a->len < b->len ? -1 : a->len > b->len;
}

/* Marks sym[slot] = 0 for every decorated symbol that some word uses (NO_SYM else). */
static int mark_used(const bpe_trainer *t, train_alphabet *a)
{
    const train_words *tw = &t->words;
    size_t longest = 1;
    for (size_t i = 0; i < tw->capacity; i++)
        if (tw->slots[i].hash && tw->slots[i].len > longest)
            longest = tw->slots[i].len;
    uint32_t *slots = malloc(longest * sizeof *slots);
    if (slots == NULL)
        return BPE_ERR_NOMEM;
    for (size_t i = 0; i < tw->capacity; i++) {
        const train_word_slot *s = &tw->slots[i];
        if (s->hash == 0)
            continue;
        size_t n = word_slots(a, train_slot_bytes(tw, s), s->len, slots);
        for (size_t j = 0; j < n; j++)
            if (slots[j] & 3)
                a->sym[slots[j]] = 0;
    }
    free(slots);
    return BPE_OK;
}

/* The string of kept character ch with kind, written to out; returns its length. */
static size_t symbol_string(const bpe_trainer *t, uint32_t ch, unsigned kind, uint8_t *out)
{
    size_t n = 0;
    if (kind & 1) {
        memcpy(out, t->prefix, t->prefix_len);
        n = t->prefix_len;
    }
    n += utf8_put(ch, out + n);
    if (kind & 2) {
        memcpy(out + n, t->suffix, t->suffix_len);
        n += t->suffix_len;
    }
    return n;
}

/* Appends the token strings: characters in code point order, then the used decorated
 * symbols in byte order (equal strings share one id). */
static int build_tokens(const bpe_trainer *t, train_alphabet *a, const ranked *kept)
{
    size_t n_deco = 0;
    for (size_t i = 0; i < 4 * a->n_alpha; i++)
        n_deco += (i & 3) && a->sym[i] == 0;
    const size_t room = t->prefix_len + 4 + t->suffix_len;
    uint8_t *scratch = malloc(n_deco * room + 1);
    deco *d = malloc((n_deco ? n_deco : 1) * sizeof *d);
    a->bytes = malloc(4 * a->n_alpha + n_deco * room + 1);
    a->off = malloc((a->n_alpha + n_deco + 1) * sizeof *a->off);
    if (scratch == NULL || d == NULL || a->bytes == NULL || a->off == NULL) {
        free(scratch);
        free(d);
        return BPE_ERR_NOMEM;
    }
    size_t len = 0, n = 0;
    a->off[0] = 0;
    for (size_t i = 0; i < a->n_alpha; i++) {
        len += utf8_put(kept[i].cp, a->bytes + len);
        a->sym[4 * i] = (uint32_t)i;
        a->off[++n] = len;
    }
    size_t k = 0;
    for (size_t i = 0; i < 4 * a->n_alpha; i++)
        if ((i & 3) && a->sym[i] == 0) {
            d[k].p = scratch + k * room;
            d[k].len = symbol_string(t, kept[i / 4].cp, (unsigned)(i & 3), scratch + k * room);
            d[k].slot = (uint32_t)i;
            k++;
        }
    qsort(d, n_deco, sizeof *d, by_bytes);
    for (size_t i = 0; i < n_deco; i++) {
        if (i == 0 || by_bytes(&d[i - 1], &d[i]) != 0) {
            memcpy(a->bytes + len, d[i].p, d[i].len);
            len += d[i].len;
            a->off[++n] = len;
        }
        a->sym[d[i].slot] = (uint32_t)(n - 1);
    }
    a->n_tokens = n;
    free(scratch);
    free(d);
    return BPE_OK;
}

int train_alphabet_build(const bpe_trainer *t, train_alphabet *a)
{
    memset(a, 0, sizeof *a);
    a->prefix = t->prefix_len > 0;
    a->suffix = t->suffix_len > 0;
    a->index = calloc(N_CODE_POINTS, sizeof *a->index);
    if (a->index == NULL)
        return BPE_ERR_NOMEM;
    ranked *kept = NULL;
    int rc = choose_chars(t, a, &kept);
    if (rc != BPE_OK)
        return rc;
    a->sym = malloc((4 * a->n_alpha + 1) * sizeof *a->sym);
    if (a->sym == NULL) {
        free(kept);
        return BPE_ERR_NOMEM;
    }
    for (size_t i = 0; i < 4 * a->n_alpha; i++)
        a->sym[i] = NO_SYM;
    rc = mark_used(t, a);
    if (rc == BPE_OK)
        rc = build_tokens(t, a, kept);
    free(kept);
    return rc;
}

size_t train_alphabet_word(const train_alphabet *a, const uint8_t *p, size_t len,
                           uint32_t *out)
{
    size_t n = word_slots(a, p, len, out);
    for (size_t i = 0; i < n; i++)
        out[i] = a->sym[out[i]];
    return n;
}
