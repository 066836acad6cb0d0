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
 */
#include <stdlib.h>
#include <string.h>

#include "buffers.h"
#include "utf8.h"

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
