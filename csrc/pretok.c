/*
 * pretok.c - hand-written pre-tokenizers for the three built-in split patterns.
 *
 * Each scanner returns the end of the piece that starts at `pos`, i.e. the end of the match
 * that `regex.finditer(pattern, segment)` finds at pos (the pieces of these patterns tile the
 * segment: every position is covered by some alternative, ending with a bare \s or \s+).  The
 * segment is UTF-8; positions are byte offsets and always fall on character boundaries.
 *
 * Character classes come from unicode_tables.h (generated from the `regex` module itself):
 * UPPER (Lu|Lt), LOWER (Ll), OLET (Lm|Lo), MARK (M), NUM (N), SPACE (regex's \s), OTHER.
 * The scanners work with class BITS (1 << class) so that a pattern's set, e.g. o200k's
 * [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}], is one mask test.  The few characters a pattern names
 * literally (' ', '\r', '\n', '\'', '/') are all ASCII and are compared as bytes.
 *
 * How each regex alternation was turned into straight-line code (first alternative that
 * matches at pos wins; the reasoning for each step is next to the code):
 *   - `\s+(?!\S)` on a whitespace run [pos, e) followed by a non-space: greedy \s+ backs off
 *     one character, so the match is [pos, start of the run's last character) if the run has
 *     two or more characters, and fails for a one-character run.  At the segment end the
 *     whole run matches.  The run is scanned once: no rescanning, linear time.
 *   - `\s*[\r\n]` / `\s*[\r\n]+`: greedy \s* backs off to the LAST \r or \n of the run; the
 *     match ends just after it (no \r/\n follows it inside the run).
 *   - `\s++$`: possessive, so it takes the whole whitespace run; `$` (end, or before a final
 *     "\n") can then only hold at the segment end, since a final "\n" would be in the run.
 *   - o200k's [U]*[W]+ (U = Lu|Lt|Lm|Lo|M, W = Ll|Lm|Lo|M): U* takes the maximal U-run
 *     [p, q); if the character at q is in W (then it is Ll) W+ runs on from q; otherwise U*
 *     backs off to the last W character inside the run and W+ is that single character
 *     (the characters after it are Lu/Lt, not in W).  Only if the run has no W character
 *     does the second alternative [U]+[W]* apply, and it matches exactly the run.
 *
 * Performance: one call per piece, no allocation, no state.  Pieces average ~4-8 bytes, so
 * the cost is dominated by the branch that picks the alternative and by the mispredicted exit
 * of the run loop; the common "word" / " word" pieces of ASCII text therefore take a fast path
 * that finds the end of the ASCII letters 8 bytes at a time (SWAR, below).  Other characters
 * go through bpe_uc_latin1 (a 256-entry class table) or the two-stage table for the rest.
 * Measured with benchmarks/bench_pretok.py: ~20-50x regex.findall on the same text.
 *
 * Invariants: positions never exceed len; a scanner never returns pos (every piece is
 * non-empty); every loop advances by at least one byte, so a segment is split in O(len).
 * A malformed or truncated sequence (the caller promises valid UTF-8, but we never read out of
 * bounds) counts as one OTHER byte.
 */
#include <stdlib.h>
#include <string.h>

#include "bpe.h"
#include "buffers.h"
#include "pretok.h"
#include "unicode_tables.h"
#include "utf8.h"

/* ---- character classes -------------------------------------------------------------------- */

#define B_OTHER (1u << BPE_UC_OTHER)
#define B_UPPER (1u << BPE_UC_UPPER)
#define B_LOWER (1u << BPE_UC_LOWER)
#define B_OLET (1u << BPE_UC_OLET)
#define B_MARK (1u << BPE_UC_MARK)
#define B_NUM (1u << BPE_UC_NUM)
#define B_SPACE (1u << BPE_UC_SPACE)

#define M_L (B_UPPER | B_LOWER | B_OLET)         /* \p{L} */
#define M_O (B_OTHER | B_MARK)                   /* [^\s\p{L}\p{N}] */
#define M_U (B_UPPER | B_OLET | B_MARK)          /* o200k [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] */
#define M_W (B_LOWER | B_OLET | B_MARK)          /* o200k [\p{Ll}\p{Lm}\p{Lo}\p{M}] */

/* Class of a code point (< 0x200000): Latin-1 table, two-stage table, OTHER above U+10FFFF. */
static inline unsigned class_of_cp(uint32_t cp)
{
    if (cp < 256) return bpe_uc_latin1[cp];
    if (cp >= 0x110000) return BPE_UC_OTHER;
    return bpe_uc_stage2[((size_t)bpe_uc_stage1[cp >> BPE_UC_SHIFT] << BPE_UC_SHIFT)
                         | (cp & ((1u << BPE_UC_SHIFT) - 1))];
}

/* Class bit of the non-ASCII character at s[i] (s[i] >= 0x80); *next = the index after it.
 * The length comes from the lead byte alone (the text is valid UTF-8); a stray continuation
 * byte, a lead byte F8..FF or a sequence cut off by len counts as one OTHER byte. */
static unsigned bit_multi(const uint8_t *s, size_t len, size_t i, size_t *next)
{
    uint8_t b = s[i];
    uint32_t cp;
    if (b < 0xE0) {
        if (b < 0xC0 || len - i < 2) goto stray;
        cp = ((uint32_t)(b & 0x1F) << 6) | (s[i + 1] & 0x3F);
        *next = i + 2;
    } else if (b < 0xF0) {
        if (len - i < 3) goto stray;
        cp = ((uint32_t)(b & 0x0F) << 12) | ((uint32_t)(s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
        *next = i + 3;
    } else {
        if (b >= 0xF8 || len - i < 4) goto stray;
        cp = ((uint32_t)(b & 0x07) << 18) | ((uint32_t)(s[i + 1] & 0x3F) << 12)
             | ((uint32_t)(s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
        *next = i + 4;
    }
    return 1u << class_of_cp(cp);
stray:
    *next = i + 1;
    return B_OTHER;
}

/* Class bit of the character at s[i] (i < len); *next = the index after it. */
static inline unsigned bit_at(const uint8_t *s, size_t len, size_t i, size_t *next)
{
    uint8_t b = s[i];
    if (b < 0x80) {
        *next = i + 1;
        return 1u << bpe_uc_latin1[b];
    }
    return bit_multi(s, len, i, next);
}

/* The end of the run of characters whose class bit is in mask, starting at i. */
static inline size_t run(const uint8_t *s, size_t len, size_t i, unsigned mask)
{
    while (i < len) {
        uint8_t b = s[i];
        if (b < 0x80) {
            if (!((1u << bpe_uc_latin1[b]) & mask)) break;
            i++;
        } else {
            size_t n;
            if (!(bit_multi(s, len, i, &n) & mask)) break;
            i = n;
        }
    }
    return i;
}

/* ---- ASCII fast paths ------------------------------------------------------------------------
 * Most pieces of real text are an ASCII word, maybe after a space.  Its end is found 8 bytes at
 * a time with SWAR (the first byte outside a range, by counting trailing zeros), which saves
 * the mispredicted loop exit of a byte loop on every short word.  A fast path stops at the
 * first byte it does not handle; when that is a non-ASCII byte the general code takes over. */

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* The high bit of each byte of w that lies in [lo, hi] (lo <= hi < 0x80), 0 in the others.
 * y has no high bits, so the per-byte additions never carry into the next byte. */
static inline uint64_t bytes_in(uint64_t w, unsigned lo, unsigned hi)
{
    uint64_t y = w & ~HIGHS;
    uint64_t ge_lo = y + ONES * (0x80 - lo);
    uint64_t gt_hi = y + ONES * (0x7F - hi);
    return ge_lo & ~gt_hi & ~w & HIGHS;
}

/* SWAR needs little-endian loads (byte 0 of the text = low byte) and a count-trailing-zeros;
 * elsewhere ascii_run() falls back to its byte loop. */
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define SWAR 1
static inline size_t first_set_byte(uint64_t highs)
{
    return (size_t)__builtin_ctzll(highs) >> 3;
}
#else
#define SWAR 0
#endif

static inline int is_ascii_letter(uint8_t b) { return (unsigned)((b | 0x20) - 'a') < 26u; }
static inline int is_ascii_upper(uint8_t b) { return (unsigned)(b - 'A') < 26u; }
static inline int is_ascii_lower(uint8_t b) { return (unsigned)(b - 'a') < 26u; }

/* The end of the run of bytes in [lo, hi] starting at i, where fold is OR-ed into each byte
 * first (0x20 folds A-Z onto a-z). */
static inline size_t ascii_run(const uint8_t *s, size_t len, size_t i, unsigned fold,
                               unsigned lo, unsigned hi)
{
#if SWAR
    while (i + 8 <= len) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        uint64_t stop = ~bytes_in(w | (ONES * fold), lo, hi) & HIGHS;
        if (stop) return i + first_set_byte(stop);
        i += 8;
    }
#endif
    while (i < len && (unsigned)((s[i] | fold) - lo) <= hi - lo) i++;
    return i;
}

/* The end of the \p{L} run at i. */
static inline size_t run_letters(const uint8_t *s, size_t len, size_t i)
{
    i = ascii_run(s, len, i, 0x20, 'a', 'z');
    if (i < len && s[i] >= 0x80) return run(s, len, i, M_L);
    return i;
}

/* ---- pieces shared by the patterns ---------------------------------------------------------- */

/* The whitespace run starting at pos (s[pos] is whitespace).  Returns its end e; *last is the
 * start of its last character; *crlf is the index just after its last '\r' or '\n' (0 if it
 * has none; a real value is always > pos >= 0 so 0 is unambiguous). */
static size_t space_run(const uint8_t *s, size_t len, size_t pos, size_t *last, size_t *crlf)
{
    size_t i = pos, l = pos, c = 0;
    while (i < len) {
        uint8_t b = s[i];
        size_t n;
        if (b < 0x80) {
            if (bpe_uc_latin1[b] != BPE_UC_SPACE) break;
            if (b == '\n' || b == '\r') c = i + 1;
            n = i + 1;
        } else if (bit_multi(s, len, i, &n) != B_SPACE) {
            break;
        }
        l = i;
        i = n;
    }
    *last = l;
    *crlf = c;
    return i;
}

/* cl100k `'(?i:[sdmt]|ll|ve|re)` and o200k `(?i:'s|'t|'re|'ve|'m|'ll|'d)` are the same set.
 * Case-insensitive in `regex` (simple case folding): s also matches U+017F LATIN SMALL LETTER
 * LONG S (bytes C5 BF); no other character folds to d m t l v e r.  s[i] == '\''.
 * Returns the end of the contraction, or 0 if none starts at i. */
static size_t contraction_ci(const uint8_t *s, size_t len, size_t i)
{
    if (i + 1 >= len) return 0;
    uint8_t c = s[i + 1] | 0x20;
    if (s[i + 1] < 0x80) {
        if (c == 's' || c == 'd' || c == 'm' || c == 't') return i + 2;
        if (i + 2 < len) {
            uint8_t d = s[i + 2] | 0x20;
            if ((c == 'l' && d == 'l') || ((c == 'v' || c == 'r') && d == 'e')) return i + 3;
        }
        return 0;
    }
    if (s[i + 1] == 0xC5 && i + 2 < len && s[i + 2] == 0xBF) return i + 3;   /* 's' as U+017F */
    return 0;
}

/* ---- GPT-2 / r50k / p50k ------------------------------------------------------------------
 * '(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s        */
static size_t next_gpt2(const uint8_t *s, size_t len, size_t pos)
{
    uint8_t b = s[pos];
    if (b == ' ') {                                         /* fast: " word" */
        if (pos + 1 < len && is_ascii_letter(s[pos + 1])) return run_letters(s, len, pos + 2);
    } else if (is_ascii_letter(b)) {                        /* fast: "word" */
        return run_letters(s, len, pos + 1);
    }
    if (b == '\'' && pos + 1 < len) {                       /* case-sensitive contractions */
        uint8_t c = s[pos + 1];
        if (c == 's' || c == 'd' || c == 'm' || c == 't') return pos + 2;
        if (pos + 2 < len) {
            uint8_t d = s[pos + 2];
            if ((c == 'l' && d == 'l') || ((c == 'v' || c == 'r') && d == 'e')) return pos + 3;
        }
    }
    size_t n1, start;
    unsigned k = bit_at(s, len, pos, &n1);
    start = n1;
    if (b == ' ' && n1 < len) {   /* ` ?X++`: a space joins a following L, N or other run */
        size_t n2;
        unsigned k2 = bit_at(s, len, n1, &n2);
        if (k2 != B_SPACE) {
            k = k2;
            start = n2;
        }
    }
    if (k & M_L) return run_letters(s, len, start);
    if (k & B_NUM) return run(s, len, start, B_NUM);
    if (k & M_O) return run(s, len, start, M_O);
    size_t last, crlf, e = space_run(s, len, pos, &last, &crlf);
    if (e == len) return len;                               /* \s++$ */
    if (last > pos) return last;                            /* \s+(?!\S) */
    return e;                                               /* \s */
}

/* ---- cl100k --------------------------------------------------------------------------------
 * '(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+
 * |\s++$|\s*[\r\n]|\s+(?!\S)|\s                                                           */
static size_t crlf_tail(const uint8_t *s, size_t len, size_t i)
{
    while (i < len && (s[i] == '\r' || s[i] == '\n')) i++;
    return i;
}

static size_t num3(const uint8_t *s, size_t len, size_t i)
{
    for (int k = 0; k < 2 && i < len; k++) {       /* the first digit is already consumed */
        size_t n;
        if (!(bit_at(s, len, i, &n) & B_NUM)) break;
        i = n;
    }
    return i;
}

static size_t next_cl100k(const uint8_t *s, size_t len, size_t pos)
{
    uint8_t b = s[pos];
    if (is_ascii_letter(b)) return run_letters(s, len, pos + 1);      /* fast: "word" */
    if (b == ' ' && pos + 1 < len && is_ascii_letter(s[pos + 1]))     /* fast: " word" */
        return run_letters(s, len, pos + 2);
    if (b == '\'') {
        size_t e = contraction_ci(s, len, pos);
        if (e) return e;
    }
    size_t n1;
    unsigned k = bit_at(s, len, pos, &n1);
    if (k & M_L) return run_letters(s, len, n1);
    /* [^\r\n\p{L}\p{N}]?+\p{L}++ : one prefix character, then letters (possessive: no retry) */
    if (!(k & B_NUM) && b != '\r' && b != '\n' && n1 < len) {
        size_t n2;
        if (bit_at(s, len, n1, &n2) & M_L) return run_letters(s, len, n2);
    }
    if (k & B_NUM) return num3(s, len, n1);
    if (b == ' ' && n1 < len) {
        size_t n2;
        if (bit_at(s, len, n1, &n2) & M_O) return crlf_tail(s, len, run(s, len, n2, M_O));
    }
    if (k & M_O) return crlf_tail(s, len, run(s, len, n1, M_O));
    size_t last, crlf, e = space_run(s, len, pos, &last, &crlf);
    if (e == len) return len;                               /* \s++$ */
    if (crlf) return crlf;                                  /* \s*[\r\n] */
    if (last > pos) return last;                            /* \s+(?!\S) */
    return e;                                               /* \s */
}

/* ---- o200k ---------------------------------------------------------------------------------
 * [^\r\n\p{L}\p{N}]?[U]*[W]+C? | [^\r\n\p{L}\p{N}]?[U]+[W]*C? | \p{N}{1,3}
 * | ?[^\s\p{L}\p{N}]+[\r\n/]* | \s*[\r\n]+ | \s+(?!\S) | \s+
 * with U = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}], W = [\p{Ll}\p{Lm}\p{Lo}\p{M}],
 * C = (?i:'s|'t|'re|'ve|'m|'ll|'d)                                                        */

/* The word part starting at p (after any prefix).  Returns the end of [U]*[W]+ (first
 * alternative) or 0 if it cannot match at p; *alt2 = the end of [U]+[W]* or 0. */
static size_t word_o200k(const uint8_t *s, size_t len, size_t p, size_t *alt2)
{
    size_t i = p, last_w = 0;
    unsigned k = 0;
    size_t n = p;
    while (i < len) {
        k = bit_at(s, len, i, &n);
        if (!(k & M_U)) break;
        if (k & M_W) last_w = n;
        i = n;
    }
    *alt2 = i > p ? i : 0;
    if (i < len && (k & B_LOWER)) return run(s, len, n, M_W);
    return last_w;
}

static size_t with_contraction(const uint8_t *s, size_t len, size_t e)
{
    if (e < len && s[e] == '\'') {
        size_t c = contraction_ci(s, len, e);
        if (c) return c;
    }
    return e;
}

/* Fast path for an ASCII word at p: [A-Z]*[a-z]+ or [A-Z]+ (the first alternative's U*W+ on
 * ASCII, else the second's U+), then a contraction.  Returns 0 when the word meets a
 * non-ASCII byte (which might be a letter or a mark that changes the split), so the caller
 * must use the general scanner. */
static size_t ascii_word_o200k(const uint8_t *s, size_t len, size_t p)
{
    size_t q = is_ascii_lower(s[p]) ? p : ascii_run(s, len, p, 0, 'A', 'Z'), e;
    if (q < len && is_ascii_lower(s[q])) e = ascii_run(s, len, q + 1, 0, 'a', 'z');
    else e = q;
    if (e < len && s[e] >= 0x80) return 0;
    return with_contraction(s, len, e);
}

static size_t next_o200k(const uint8_t *s, size_t len, size_t pos)
{
    uint8_t b = s[pos];
    size_t n1, a2, e;
    if (is_ascii_letter(b)) {                                       /* fast: "word" */
        e = ascii_word_o200k(s, len, pos);
        if (e) return e;
    } else if (b == ' ' && pos + 1 < len && is_ascii_letter(s[pos + 1])) {  /* " word" */
        e = ascii_word_o200k(s, len, pos + 1);
        if (e) return e;
    }
    unsigned k = bit_at(s, len, pos, &n1);
    if (k & M_L) {                                  /* no prefix possible: a letter is not one */
        e = word_o200k(s, len, pos, &a2);
        return with_contraction(s, len, e ? e : a2);
    }
    if (!(k & B_NUM) && b != '\r' && b != '\n') {   /* a possible prefix character */
        if (n1 < len) {
            e = word_o200k(s, len, n1, &a2);
            if (e) return with_contraction(s, len, e);          /* alt 1 with the prefix */
            /* alt 1 without the prefix: only a mark can start it, and then W+ is the mark */
            if (k & B_MARK) return with_contraction(s, len, n1);
            if (a2) return with_contraction(s, len, a2);        /* alt 2 with the prefix */
        } else if (k & B_MARK) {
            return n1;
        }
    }
    if (k & B_NUM) return num3(s, len, n1);
    if (b == ' ' && n1 < len) {                     /* ` ?[^\s\p{L}\p{N}]+[\r\n/]*` */
        size_t n2;
        if (bit_at(s, len, n1, &n2) & M_O) e = run(s, len, n2, M_O);
        else e = 0;
        if (e) {
            while (e < len && (s[e] == '\r' || s[e] == '\n' || s[e] == '/')) e++;
            return e;
        }
    }
    if (k & M_O) {
        e = run(s, len, n1, M_O);
        while (e < len && (s[e] == '\r' || s[e] == '\n' || s[e] == '/')) e++;
        return e;
    }
    size_t last, crlf;
    e = space_run(s, len, pos, &last, &crlf);
    if (crlf) return crlf;                                  /* \s*[\r\n]+ */
    if (e == len) return len;                               /* \s+(?!\S) at the end */
    if (last > pos) return last;                            /* \s+(?!\S) */
    return e;                                               /* \s+ */
}

/* ---- public ------------------------------------------------------------------------------- */

size_t bpe_pretok_next(int pattern, const uint8_t *seg, size_t len, size_t pos)
{
    if (pos >= len) return len;
    switch (pattern) {
    case BPE_PATTERN_GPT2: return next_gpt2(seg, len, pos);
    case BPE_PATTERN_CL100K: return next_cl100k(seg, len, pos);
    case BPE_PATTERN_O200K: return next_o200k(seg, len, pos);
    default: return len;
    }
}

/* Appends the end offset of every piece of text[0..len) to *ends (uint32 each).  Errors:
 * BPE_ERR_ARG (unknown pattern, NULL pointers), BPE_ERR_TOOBIG (len >= 4 GiB), BPE_ERR_NOMEM;
 * on error *ends is left as it was on entry. */
int bpe_pretokenize(int pattern, const uint8_t *text, size_t len, bpe_ids *ends)
{
    if (!ends || (!text && len) || pattern < BPE_PATTERN_GPT2 || pattern > BPE_PATTERN_O200K)
        return BPE_ERR_ARG;
    if ((uint64_t)len >= ((uint64_t)1 << 32)) return BPE_ERR_TOOBIG;
    size_t start_len = ends->len, pos = 0;
    while (pos < len) {
        size_t e = bpe_pretok_next(pattern, text, len, pos);
        int rc = bpe_ids_reserve(ends, 1);
        if (rc != BPE_OK) {
            ends->len = start_len;
            return rc;
        }
        ends->ids[ends->len++] = (uint32_t)e;
        pos = e;
    }
    return BPE_OK;
}

/* ---- safe cuts ------------------------------------------------------------------------------
 *
 * A cut at p splits text into text[:p] and text[p:].  It is SAFE when, whatever text follows,
 * pieces(text[:p]) + pieces(text[p:]) == pieces(text).  None of the patterns has a
 * look-behind or ^, so the match at any position depends only on the text from there on: the
 * pieces after p are the same in the suffix as in the whole text as soon as p is a piece
 * boundary of the whole text.  The cut is then safe if also (b) no match that starts before p
 * changes when the text ends at p.  A match attempt starting before p can notice the cut only
 * by reading position p: it asks whether text[p] is in some set (or evaluates $ / (?!\S) at p,
 * which needs whitespace right before p).  So p is safe if
 *   (a) no piece can contain both text[p-1] and text[p], and
 *   (b) text[p-1] is not whitespace, and text[p] is in none of the sets that a match covering
 *       text[p-1] could go on with - then "text[p]" and "end of text" give the same answers.
 * Checked per pattern on the classes of prev = text[p-1] and cur = text[p] (both known: p < len):
 *
 *   GPT-2: every piece other than a contraction or whitespace is ` ?` plus a possessive run of
 *     ONE class among L, N, [^\s\p{L}\p{N}] (= OTHER or MARK), and a space only ever starts a
 *     piece.  So if prev is not whitespace and not '\'' (which could start a contraction
 *     ending after p) and cur is not in prev's run class, the run holding prev ends at p and
 *     reads nothing but "is cur in my class" at p.
 *   cl100k: letters occur only in `[^\r\n\p{L}\p{N}]?+\p{L}++` runs and contractions (which end
 *     on a letter and read nothing after it): prev in L, cur not in L.  Digits occur only in
 *     \p{N}{1,3}: prev in N, cur not in N.  Other characters and marks occur only as the
 *     one-character prefix of a letter run, or in ` ?[^\s\p{L}\p{N}]++[\r\n]*+`: prev in
 *     OTHER/MARK needs cur to be neither a letter, an OTHER/MARK, '\r' nor '\n' - that is, a
 *     digit or whitespace other than \r \n.
 *   o200k: letters occur only in the word alternatives [prefix][U]*[W]+C? / [prefix][U]+[W]*C?,
 *     which can continue only with a letter, a mark (U and W contain M) or the contraction's
 *     '\'' (the prefix class excludes letters): prev in L needs cur not in L, not a mark and
 *     not '\''.  However those alternatives back off inside a run of letters, they only ever
 *     read cur to ask "is it in U / W / '\''", answered "no" by the cut too.  Digits: as
 *     cl100k.  OTHER/MARK prev: word prefix, word mark, or ` ?[^\s\p{L}\p{N}]+[\r\n/]*` (the
 *     tail takes \r \n /): cur must be a digit or whitespace other than \r \n.
 *
 * So a word followed by a space, a newline (after a letter) or punctuation (after a letter),
 * a number next to a non-number, and punctuation followed by a space, are cuts: real text
 * (prose, code, CJK with its punctuation) has one every few characters.  A long run without
 * any of these (one 10 MB word, a long digit string, a whitespace-only stretch) has none.
 */

#define M_RUN_O (B_OTHER | B_MARK)

static int safe_between(int pattern, unsigned prev, uint8_t prev_b, unsigned cur, uint8_t cur_b)
{
    if (prev == B_SPACE || prev_b == '\'') return 0;
    int cur_crlf = cur_b == '\r' || cur_b == '\n';
    switch (pattern) {
    case BPE_PATTERN_GPT2:
        if (prev & M_L) return !(cur & M_L);
        if (prev & B_NUM) return !(cur & B_NUM);
        return !(cur & M_RUN_O);
    case BPE_PATTERN_CL100K:
        if (prev & M_L) return !(cur & M_L);
        if (prev & B_NUM) return !(cur & B_NUM);
        return (cur & B_NUM) || (cur == B_SPACE && !cur_crlf);
    case BPE_PATTERN_O200K:
        if (prev & M_L) return !(cur & (M_L | B_MARK)) && cur_b != '\'';
        if (prev & B_NUM) return !(cur & B_NUM);
        return (cur & B_NUM) || (cur == B_SPACE && !cur_crlf);
    default:
        return 0;
    }
}

/* The start of the character that ends at i (i > 0): back over at most 3 continuation bytes. */
static size_t char_start_before(const uint8_t *s, size_t i)
{
    size_t j = i - 1;
    while (j > 0 && i - j < 4 && (s[j] & 0xC0) == 0x80) j--;
    return j;
}

/* See bpe.h.  The largest p < len at which the rule above holds (scanning back from the end,
 * so the cost is the distance to that cut), or 0. */
size_t bpe_pretok_safe_cut(int pattern, const uint8_t *text, size_t len)
{
    if (!text || pattern < BPE_PATTERN_GPT2 || pattern > BPE_PATTERN_O200K) return 0;
    /* A character cut off at len is part of the unknown continuation: its class is not
     * known yet, so only cuts before it are considered. */
    len = bpe_utf8_complete_prefix(text, len);
    if (len < 2) return 0;
    size_t cur = char_start_before(text, len), nx;
    unsigned cur_k = bit_at(text, len, cur, &nx);
    while (cur > 0) {
        size_t prev = char_start_before(text, cur);
        unsigned prev_k = bit_at(text, len, prev, &nx);
        if (nx == cur && safe_between(pattern, prev_k, text[prev], cur_k, text[cur])) return cur;
        cur = prev;
        cur_k = prev_k;
    }
    return 0;
}
