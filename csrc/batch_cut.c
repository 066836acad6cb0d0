/*
 * batch_cut.c - bpe_text_cuts: where one large text of a batch may be cut into parts that
 * threads encode separately, the parts' ids end to end being the text's ids.
 *
 * A cut at p (a code unit offset of the text) is taken only where two things hold, checked on
 * a window of the text's UTF-8 around p (the text itself is never converted whole here: the
 * encoders convert each part in parallel):
 *   1. the pre-tokenizer's rule for a safe cut holds between the characters on either side of
 *      p (bpe_pretok_safe_cut, the rule encode_file and bpe_encode_prefix cut by: it looks at
 *      those two characters only, so a window shows it);
 *   2. when special tokens are matched (a nonzero mode), no occurrence of one overlaps the
 *      L bytes on either side of p, L being the longest special token.  Then no match of the
 *      whole text contains p; every match that starts before p ends L bytes before it, so a
 *      scan of the text before p finds the same ones; none starts within L of p, so the
 *      whole text's next match is the first occurrence from p + L on, which is also the
 *      first match of a scan starting at p.  A disallowed token lies wholly in one part,
 *      whose encoding reports it.
 * So every segment between special tokens is cut only at its own safe cuts, and encoding the
 * parts gives the ids of the whole text.  The window spans SEARCH_UNITS before the goal (the
 * cut is looked for backwards from it) and L + 2 units after; a window holding a surrogate
 * (UCS-2 / UCS-4 texts: a high and a low one make one character, which a window could cut
 * in two) or a code point above U+10FFFF is skipped, and so is a goal with no cut in its
 * window (one 10 MB word): the part then runs on to the next goal.  Cuts only make parts;
 * a text none could be found in is encoded whole, as before this file existed.
 */
#include <string.h>

#include "batch.h"
#include "special.h"
#include "tokenizer.h"
#include "utf8.h"

#define SEARCH_UNITS 4096   /* how far back from a goal a cut is looked for */

/* 1 if the n units of `kind` at u hold a surrogate code point. */
static int has_surrogate(const uint8_t *u, size_t n, int kind)
{
    size_t i;
    for (i = 0; i < n; i++) {
        uint32_t c = kind == BPE_TEXT_UCS2 ? ((const uint16_t *)u)[i]
                                           : ((const uint32_t *)u)[i];
        if (c >= 0xD800 && c <= 0xDFFF)
            return 1;
    }
    return 0;
}

/* 1 if some special token of nonzero mode occurs overlapping text[from .. to). */
static int special_near(const bpe_tokenizer *tok, const uint8_t *mode, const uint8_t *text,
                        size_t len, size_t from, size_t to, size_t longest)
{
    size_t pos = from > longest ? from - longest : 0;
    size_t start, index;
    while (pos < to && bpe_special_find(tok->matcher, text, len, pos, mode, &start, &index)) {
        if (start >= to)
            return 0;
        if (start + bpe_special_len(tok->matcher, index) > from)
            return 1;
        pos = start + 1;       /* occurrences may overlap: the next may reach further */
    }
    return 0;
}

/* The UTF-8 window for the goal unit g of text: units [lo, hi) into *w (for UTF-8 texts the
 * bytes themselves, lo moved to a character start), *g_at the byte offset of unit g in it.
 * 0 when this goal has no usable window. */
static int window(const uint8_t *units, size_t lo, size_t g, size_t hi, int kind,
                  bpe_bytes *scratch, const uint8_t **w, size_t *len, size_t *g_at,
                  size_t *w_lo)
{
    if (kind == BPE_TEXT_UTF8) {
        while (lo < g && (units[lo] & 0xC0) == 0x80)
            lo++;
        *w = units + lo;
        *len = hi - lo;
        *g_at = g - lo;
        *w_lo = lo;
        return 1;
    }
    if (kind != BPE_TEXT_LATIN1 && has_surrogate(units + lo * (size_t)kind, hi - lo, kind))
        return 0;
    scratch->len = 0;
    if (bpe_utf8_from_units(units + lo * (size_t)kind, g - lo, kind, scratch) != BPE_OK)
        return 0;
    *g_at = scratch->len;
    if (bpe_utf8_from_units(units + g * (size_t)kind, hi - g, kind, scratch) != BPE_OK)
        return 0;
    *w = scratch->data;
    *len = scratch->len;
    *w_lo = lo;
    return 1;
}

/* The code units of the first `bytes` bytes of a window (whole characters). */
static size_t units_of(const uint8_t *w, size_t bytes, int kind)
{
    size_t i, n = 0;
    if (kind == BPE_TEXT_UTF8)
        return bytes;
    for (i = 0; i < bytes; i++)
        n += (w[i] & 0xC0) != 0x80;   /* one unit per character: no surrogates here */
    return n;
}

/* The cut for goal g (a unit offset, after `after`), or 0 when none is found. */
static size_t cut_near(const bpe_tokenizer *tok, const uint8_t *mode, const uint8_t *units,
                       size_t n, int kind, size_t after, size_t g, bpe_bytes *scratch)
{
    size_t guard = mode != NULL ? bpe_special_max_len(tok->matcher) : 0;
    size_t lo = g > SEARCH_UNITS && g - SEARCH_UNITS > after ? g - SEARCH_UNITS : after;
    size_t hi = g + guard + 2 < n ? g + guard + 2 : n;
    size_t len, g_at, w_lo, p;
    const uint8_t *w;
    if (lo >= g || !window(units, lo, g, hi, kind, scratch, &w, &len, &g_at, &w_lo))
        return 0;
    p = bpe_pretok_safe_cut(tok->pattern, w, g_at + 1 < len ? g_at + 1 : len);
    while (p > 0 && guard && (p < 2 * guard || special_near(tok, mode, w, len, p - guard,
                                                               p + guard, guard)))
        p = p < 2 * guard ? 0 : bpe_pretok_safe_cut(tok->pattern, w, p);
    if (p == 0)
        return 0;
    p = w_lo + units_of(w, p, kind);
    return p > after && p < n ? p : 0;
}

size_t bpe_text_cuts(const bpe_tokenizer *tok, const uint8_t *units, size_t n, int kind,
                     const uint8_t *special_mode, size_t part_units, size_t *cuts,
                     size_t max_cuts, bpe_bytes *scratch)
{
    const uint8_t *mode;
    size_t k = 0, last = 0, g;
    if (tok == NULL || units == NULL || cuts == NULL || scratch == NULL || part_units == 0 ||
        (kind != BPE_TEXT_UTF8 && kind != BPE_TEXT_LATIN1 && kind != BPE_TEXT_UCS2 &&
         kind != BPE_TEXT_UCS4))
        return 0;
    mode = tok->n_special && special_mode != NULL ? special_mode : NULL;
    for (g = part_units; g + part_units / 2 < n && k < max_cuts; g += part_units) {
        size_t c = cut_near(tok, mode, units, n, kind, last, g, scratch);
        if (c != 0)
            cuts[k++] = last = c;
    }
    return k;
}
