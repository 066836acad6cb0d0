/*
 * utf8.c - UTF-8 validation, replacement of invalid bytes, and block-boundary trimming.
 *
 * Well-formed UTF-8 (Unicode Table 3-7): a character is one of
 *     00..7F
 *     C2..DF 80..BF
 *     E0 A0..BF 80..BF  |  E1..EC 80..BF 80..BF  |  ED 80..9F 80..BF  |  EE..EF 80..BF 80..BF
 *     F0 90..BF 80..BF 80..BF  |  F1..F3 80..BF x3  |  F4 80..8F 80..BF 80..BF
 * so overlongs (C0, C1, E0 80..9F, F0 80..8F), surrogates (ED A0..BF) and code points above
 * U+10FFFF (F4 90.., F5..FF) are all invalid.  The only state is "which byte range may come
 * next", given by lead_range() for the second byte and 80..BF for the others.
 *
 * Replacement follows Python's bytes.decode("utf-8", errors="replace"): each MAXIMAL SUBPART of
 * an ill-formed sequence (the longest prefix of a well-formed sequence found at that point, or
 * else one byte) becomes one U+FFFD.
 *
 * bpe_utf8_from_units writes the UTF-8 of characters stored one code unit each, as CPython
 * keeps a str (Latin-1, UCS-2 or UCS-4 by its widest character): 00..7F take one byte,
 * ..7FF two, ..FFFF three, the rest four.  Surrogates D800..DFFF have no UTF-8 of their own:
 * a high one (D800..DBFF) followed by a low one (DC00..DFFF) is the character the two make in
 * UTF-16, and any other becomes U+FFFD.  That is what bpe_cffi's Python layer does with a str
 * holding lone surrogates (UTF-16 with surrogatepass, decoded with errors="replace"), and
 * what tiktoken does.
 */
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <stdlib.h>
#include <string.h>

#include "buffers.h"
#include "utf8.h"
#include "utf8_char.h"

/* For a lead byte: the sequence length (0: not a lead byte) and the allowed range of the
 * second byte. */
static int lead_info(uint8_t b, uint8_t *lo, uint8_t *hi)
{
    *lo = 0x80;
    *hi = 0xBF;
    if (b < 0x80) return 1;
    if (b < 0xC2) return 0;
    if (b < 0xE0) return 2;
    if (b < 0xF0) {
        if (b == 0xE0) *lo = 0xA0;
        if (b == 0xED) *hi = 0x9F;
        return 3;
    }
    if (b < 0xF5) {
        if (b == 0xF0) *lo = 0x90;
        if (b == 0xF4) *hi = 0x8F;
        return 4;
    }
    return 0;
}

/* How many bytes from buf[i] form a valid prefix of a well-formed sequence (at least 1 for a
 * lead byte, 0 for a byte that cannot start one), and in *need the full length it needs. */
static size_t valid_prefix(const uint8_t *buf, size_t len, size_t i, size_t *need)
{
    uint8_t lo, hi;
    int n = lead_info(buf[i], &lo, &hi);
    *need = (size_t)n;
    if (n <= 1) return (size_t)n;
    size_t k = 1;
    if (i + 1 >= len || buf[i + 1] < lo || buf[i + 1] > hi) return k;
    for (k = 2; k < (size_t)n; k++)
        if (i + k >= len || buf[i + k] < 0x80 || buf[i + k] > 0xBF) return k;
    return k;
}

/* Length of the valid UTF-8 run starting at buf[i]. */
static size_t valid_run(const uint8_t *buf, size_t len, size_t i)
{
    size_t start = i;
    while (i < len) {
        /* ASCII, 8 bytes at a time */
        while (i + 8 <= len) {
            uint64_t w;
            memcpy(&w, buf + i, 8);
            if (w & 0x8080808080808080ULL) break;
            i += 8;
        }
        if (i >= len) break;
        if (buf[i] < 0x80) {
            i++;
            continue;
        }
        size_t need, got = valid_prefix(buf, len, i, &need);
        if (need == 0 || got < need) break;
        i += need;
    }
    return i - start;
}

/* See utf8.h.  Scans back over at most 3 trailing bytes for the start of an incomplete
 * sequence; it is kept back only if every byte so far is valid (more bytes could complete
 * it).  A sequence that is already invalid cannot be completed, so it stays in the prefix. */
size_t bpe_utf8_complete_prefix(const uint8_t *buf, size_t len)
{
    for (size_t k = 1; k <= 3 && k <= len; k++) {
        size_t p = len - k;
        uint8_t b = buf[p];
        if (b >= 0x80 && b < 0xC0) continue;              /* continuation: look further back */
        size_t need, got = valid_prefix(buf, len, p, &need);
        if (need > k && got == k) return p;               /* valid so far, incomplete */
        return len;
    }
    return len;
}

/* See utf8.h. */
int bpe_utf8_valid(const uint8_t *buf, size_t len)
{
    return valid_run(buf, len, 0) == len;
}

/* See utf8.h.  On BPE_ERR_NOMEM, *out keeps its previous length (its buffer may have grown). */
int bpe_utf8_replace_invalid(const uint8_t *buf, size_t len, bpe_bytes *out)
{
    static const uint8_t fffd[3] = {0xEF, 0xBF, 0xBD};
    if (!out || (!buf && len)) return BPE_ERR_ARG;
    size_t start_len = out->len, i = 0;
    if (bpe_bytes_reserve(out, len) != BPE_OK) return BPE_ERR_NOMEM;
    while (i < len) {
        size_t run = valid_run(buf, len, i);
        if (bpe_bytes_reserve(out, run + 3) != BPE_OK) {
            out->len = start_len;
            return BPE_ERR_NOMEM;
        }
        memcpy(out->data + out->len, buf + i, run);
        out->len += run;
        i += run;
        if (i >= len) break;
        size_t need, got = valid_prefix(buf, len, i, &need);
        memcpy(out->data + out->len, fffd, 3);                 /* one U+FFFD per maximal */
        out->len += 3;                                         /* subpart (>= 1 byte)    */
        i += got ? got : 1;
    }
    return BPE_OK;
}

/* The units from u[*i] on that are not ASCII (two bytes of UTF-8 each), up to the next
 * ASCII one or the end, written at o; returns the end. */
static uint8_t *latin1_wide_run(const uint8_t *u, size_t n, size_t *i, uint8_t *o)
{
    size_t j = *i;
    for (; j < n && u[j] >= 0x80; j++, o += 2) {
        o[0] = (uint8_t)(0xC0 | u[j] >> 6);
        o[1] = (uint8_t)(0x80 | (u[j] & 0x3F));
    }
    *i = j;
    return o;
}

/* Sixteen units at a time (SSE2): they are stored as they are, and the run of ASCII ones
 * they start with is kept; the units after it, up to the next ASCII one, go one at a time
 * (latin1_wide_run).  o has room for 2 bytes a unit, so the 16 bytes stored always fit. */
static uint8_t *latin1_to_utf8(const uint8_t *u, size_t n, uint8_t *o)
{
    size_t i = 0;
#if defined(__SSE2__)
    while (i + 16 <= n) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(u + i));
        unsigned wide = (unsigned)_mm_movemask_epi8(v);    /* bit k: unit k is not ASCII */
        size_t k;
        _mm_storeu_si128((__m128i *)(void *)o, v);
        if (wide == 0) {
            i += 16;
            o += 16;
            continue;
        }
        k = (size_t)__builtin_ctz(wide);            /* the ASCII units before the first other */
        i += k;
        o += k;
        o = latin1_wide_run(u, n, &i, o);
    }
#endif
    while (i < n) {
        if (u[i] < 0x80)
            *o++ = u[i++];
        else
            o = latin1_wide_run(u, n, &i, o);
    }
    return o;
}

/* Writes at o the UTF-8 of the character that starts with code unit c (at most U+10FFFF),
 * given the unit after it (next; has_next 0 at the end of the text), and returns the end;
 * *units is how many units it took.  A high surrogate and a low one after it make one
 * character (2 units); any other surrogate is U+FFFD. */
static uint8_t *put_unit(uint32_t c, uint32_t next, int has_next, size_t *units, uint8_t *o)
{
    *units = 1;
    if ((c & 0xFFFFF800u) == 0xD800) {
        if (c < 0xDC00 && has_next && (next & 0xFFFFFC00u) == 0xDC00) {
            *units = 2;
            c = 0x10000 + ((c - 0xD800) << 10) + (next - 0xDC00);
        } else {
            c = 0xFFFD;
        }
    }
    return bpe_put_utf8(c, o);
}

/* The units from u[*i] on that are not ASCII, up to the next ASCII one or the end, written
 * at o (room for 3 bytes a unit); returns the end.  A surrogate takes put_unit (a pair is
 * one character), any other unit bpe_put_bmp_wide, without a branch on its width. */
static uint8_t *ucs2_wide_run(const uint16_t *u, size_t n, size_t *i, uint8_t *o)
{
    size_t j = *i, step;
    while (j < n && u[j] >= 0x80) {
        if ((u[j] & 0xF800u) != 0xD800) {
            o = bpe_put_bmp_wide(u[j], o);
            j++;
        } else {
            o = put_unit(u[j], j + 1 < n ? u[j + 1] : 0, j + 1 < n, &step, o);
            j += step;
        }
    }
    *i = j;
    return o;
}

/* Eight units at a time (SSE2): their low bytes are stored packed, and the run of ASCII ones
 * they start with is kept (English text in a UCS-2 str is mostly ASCII between its curly
 * quotes and dashes); the units after it, up to the next ASCII one, go one at a time
 * (ucs2_wide_run).  o has room for 3 bytes a unit, so the 8 bytes stored always fit. */
static uint8_t *ucs2_to_utf8(const uint16_t *u, size_t n, uint8_t *o)
{
    size_t i = 0;
#if defined(__SSE2__)
    const __m128i high = _mm_set1_epi16((short)0xFF80);
    while (i + 8 <= n) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(u + i));
        unsigned ascii = (unsigned)_mm_movemask_epi8(
            _mm_cmpeq_epi16(_mm_and_si128(v, high), _mm_setzero_si128()));
        size_t k;
        _mm_storel_epi64((__m128i *)(void *)o, _mm_packus_epi16(v, v));
        if (ascii == 0xFFFF) {
            i += 8;
            o += 8;
            continue;
        }
        k = (size_t)__builtin_ctz(~ascii) / 2;     /* the ASCII units before the first other */
        i += k;
        o += k;
        o = ucs2_wide_run(u, n, &i, o);
    }
#endif
    while (i < n) {
        if (u[i] < 0x80)
            *o++ = (uint8_t)u[i++];
        else
            o = ucs2_wide_run(u, n, &i, o);
    }
    return o;
}

/* NULL at a code point above U+10FFFF. */
static uint8_t *ucs4_to_utf8(const uint32_t *u, size_t n, uint8_t *o)
{
    size_t i = 0, step;
    while (i < n) {
        if (u[i] > 0x10FFFF)
            return NULL;
        o = put_unit(u[i], i + 1 < n ? u[i + 1] : 0, i + 1 < n, &step, o);
        i += step;
    }
    return o;
}

/* See utf8.h. */
int bpe_units_ok(const uint8_t *units, int kind)
{
    if (kind == BPE_TEXT_UTF8 || kind == BPE_TEXT_LATIN1)
        return 1;
    return (kind == BPE_TEXT_UCS2 || kind == BPE_TEXT_UCS4) &&
           (uintptr_t)units % (uintptr_t)kind == 0;
}

/* See utf8.h. */
int bpe_utf8_from_units(const uint8_t *units, size_t n, int kind, bpe_bytes *out)
{
    size_t most = kind == BPE_TEXT_LATIN1 ? 2 : kind == BPE_TEXT_UCS2 ? 3 : 4;
    uint8_t *end;
    int rc;
    if (out == NULL || (units == NULL && n) ||
        (kind != BPE_TEXT_LATIN1 && kind != BPE_TEXT_UCS2 && kind != BPE_TEXT_UCS4))
        return BPE_ERR_ARG;
    if (n > SIZE_MAX / most)
        return BPE_ERR_TOOBIG;
    if (n == 0)
        return BPE_OK;   /* out->data may be NULL: no end to compute */
    if ((rc = bpe_bytes_room(out, n * most)) != BPE_OK)
        return rc;
    if (kind == BPE_TEXT_LATIN1)
        end = latin1_to_utf8(units, n, out->data + out->len);
    else if (kind == BPE_TEXT_UCS2)
        end = ucs2_to_utf8((const uint16_t *)(const void *)units, n, out->data + out->len);
    else
        end = ucs4_to_utf8((const uint32_t *)(const void *)units, n, out->data + out->len);
    if (end == NULL)
        return BPE_ERR_TEXT;
    out->len = (size_t)(end - out->data);
    return BPE_OK;
}
