/*
 * tiktoken_file.c - parse_tiktoken of bpe_cffi._idlist: the vocabulary of a .tiktoken file in
 * tiktoken's own layout, {rank: token bytes}, made in one pass over the file's bytes.
 *
 * The layout: every line is a token in base64, one space, its rank in decimal, a newline
 * (the last line's newline may be missing).  The Python reader of bpe_cffi/formats.py takes
 * 0.25 s over o200k_base's 200K lines (a base64 call, an int and a dict entry each, plus the
 * checks); this makes the same dict in a few hundredths.
 *
 * It accepts only what the line by line reader of formats.py accepts and reads the same
 * way: base64 of the standard alphabet with exact padding (as binascii.a2b_base64 with
 * strict_mode), a non-empty token, a rank below 2^32 - 1 given once.  On anything else
 * (another layout, a bad line) it returns None, and formats.py reads the file line by line,
 * which either gives the same dict or names the line that is wrong.  Duplicate tokens are
 * left for formats.py to find, as for the other reader.
 */
#include <string.h>

#include "idlist.h"

#define RANK_LIMIT 4294967295u   /* 2^32 - 1, the first rank refused */

/* The 6-bit value of a base64 character, or -1. */
static int sextet(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Decodes the n characters of s (n a multiple of 4, '=' padding only as the last one or two)
 * into out (room for n / 4 * 3 bytes).  Returns the length, or -1 on a bad character or
 * padding. */
static Py_ssize_t decode_base64(const unsigned char *s, Py_ssize_t n, unsigned char *out)
{
    Py_ssize_t i, len = 0;
    if (n == 0 || n % 4 != 0)
        return -1;
    for (i = 0; i < n; i += 4) {
        int pad = (s[i + 3] == '=') + (s[i + 2] == '=' && s[i + 3] == '=');
        int a = sextet(s[i]), b = sextet(s[i + 1]);
        int c = pad >= 2 ? 0 : sextet(s[i + 2]), d = pad >= 1 ? 0 : sextet(s[i + 3]);
        if ((pad && i + 4 != n) || a < 0 || b < 0 || c < 0 || d < 0)
            return -1;
        out[len++] = (unsigned char)(a << 2 | b >> 4);
        if (pad < 2)
            out[len++] = (unsigned char)((b & 15) << 4 | c >> 2);
        if (pad < 1)
            out[len++] = (unsigned char)((c & 3) << 6 | d);
    }
    return len;
}

/* The rank in s[0..n): decimal digits only, below RANK_LIMIT; -1 otherwise. */
static int64_t parse_rank(const unsigned char *s, Py_ssize_t n)
{
    int64_t v = 0;
    Py_ssize_t i;
    if (n == 0)
        return -1;
    for (i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
        if (v >= RANK_LIMIT)
            return -1;
    }
    return v;
}

/* Adds the line s[0..n) (no newline) to vocab.  Returns 1 if added, 0 if the line is not of
 * the layout or repeats a rank, -1 on a Python error. */
static int add_line(PyObject *vocab, const unsigned char *s, Py_ssize_t n, unsigned char *work)
{
    const unsigned char *space = memchr(s, ' ', (size_t)n);
    Py_ssize_t b64_len, len, before;
    int64_t rank;
    PyObject *key, *token;
    int rc;
    if (space == NULL)
        return 0;
    b64_len = space - s;
    if ((rank = parse_rank(space + 1, n - b64_len - 1)) < 0 ||
        (len = decode_base64(s, b64_len, work)) < 0)
        return 0;
    if ((key = PyLong_FromLongLong(rank)) == NULL)
        return -1;
    if ((token = PyBytes_FromStringAndSize((const char *)work, len)) == NULL) {
        Py_DECREF(key);
        return -1;
    }
    before = PyDict_GET_SIZE(vocab);
    rc = PyDict_SetItem(vocab, key, token);
    Py_DECREF(key);
    Py_DECREF(token);
    if (rc < 0)
        return -1;
    return PyDict_GET_SIZE(vocab) > before;   /* else the rank was there already */
}

/* Fills vocab from the lines of data[0..n).  1: done; 0: not of the layout; -1: error. */
static int add_lines(PyObject *vocab, const unsigned char *data, Py_ssize_t n,
                     unsigned char *work)
{
    Py_ssize_t at = 0;
    while (at < n) {
        const unsigned char *nl = memchr(data + at, '\n', (size_t)(n - at));
        Py_ssize_t end = nl ? nl - data : n;
        int rc = add_line(vocab, data + at, end - at, work);
        if (rc <= 0)
            return rc;
        at = end + 1;
    }
    return 1;
}

PyObject *bpe_py_parse_tiktoken(PyObject *self, PyObject *raw)
{
    Py_buffer view;
    PyObject *vocab;
    unsigned char *work;
    int rc;
    (void)self;
    if (PyObject_GetBuffer(raw, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    /* a token's bytes are fewer than its line's characters, so one line's room is enough */
    work = PyMem_Malloc((size_t)view.len + 1);
    vocab = PyDict_New();
    if (work == NULL || vocab == NULL) {
        PyMem_Free(work);
        Py_XDECREF(vocab);
        PyBuffer_Release(&view);
        return work == NULL ? PyErr_NoMemory() : NULL;
    }
    rc = add_lines(vocab, view.buf, view.len, work);
    PyMem_Free(work);
    PyBuffer_Release(&view);
    if (rc <= 0) {
        Py_DECREF(vocab);
        if (rc < 0)
            return NULL;
        Py_RETURN_NONE;
    }
    return vocab;
}
