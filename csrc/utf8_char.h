/*
 * utf8_char.h - the UTF-8 of one code point, header-only so that both the C core (utf8.c) and
 * the CPython helper extension (pyext/idlist.c), which do not link each other, write UTF-8
 * with the same code: bpe_put_utf8 for any code point, bpe_put_bmp_wide without a branch
 * for the characters of a UCS-2 str.
 */
#ifndef BPE_UTF8_CHAR_H
#define BPE_UTF8_CHAR_H

#include <stdint.h>

/* Writes the UTF-8 of code point c (not a surrogate, at most U+10FFFF: one to four bytes) at
 * out; returns the end. */
static inline uint8_t *bpe_put_utf8(uint32_t c, uint8_t *out)
{
    if (c < 0x80) {
        *out++ = (uint8_t)c;
    } else if (c < 0x800) {
        *out++ = (uint8_t)(0xC0 | c >> 6);
        *out++ = (uint8_t)(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
        *out++ = (uint8_t)(0xE0 | c >> 12);
        *out++ = (uint8_t)(0x80 | (c >> 6 & 0x3F));
        *out++ = (uint8_t)(0x80 | (c & 0x3F));
    } else {
        *out++ = (uint8_t)(0xF0 | c >> 18);
        *out++ = (uint8_t)(0x80 | (c >> 12 & 0x3F));
        *out++ = (uint8_t)(0x80 | (c >> 6 & 0x3F));
        *out++ = (uint8_t)(0x80 | (c & 0x3F));
    }
    return out;
}

/* Writes the UTF-8 of BMP character c (not a surrogate) at out without a branch on its width:
 * three bytes are stored whatever it takes (the caller leaves room), and the end of its own
 * bytes is returned; the next character overwrites the rest.  Mixed text (CJK with ASCII
 * punctuation, Cyrillic words and spaces) would mispredict a branch per width change. */
static inline uint8_t *bpe_put_bmp_wide(uint32_t c, uint8_t *out)
{
    uint32_t two = c >= 0x80, three = c >= 0x800;
    out[0] = (uint8_t)(three ? 0xE0 | c >> 12 : two ? 0xC0 | c >> 6 : c);
    out[1] = (uint8_t)(0x80 | ((three ? c >> 6 : c) & 0x3F));
    out[2] = (uint8_t)(0x80 | (c & 0x3F));
    return out + 1 + two + three;
}

#endif
