/*
 * idlist.c - bpe_cffi._idlist, a small CPython extension that turns token ids held by C into
 * Python lists of ints quickly.
 *
 * Why it exists.  The encoder itself is the CFFI module (the C files of csrc/), but CFFI can
 * only hand Python a buffer of uint32, and making one int object per id from it
 * (memoryview.tolist, ffi.unpack) allocates every int: about as long as encoding the text.  Python ints are
 * immutable, so one object per id value can be shared by every list: this module builds a
 * list by taking new references to the objects of a cache list (cache[i] is the int i) and
 * only allocates ints for ids beyond the cache.
 *
 * Data structure and invariants.  `cache` is a Python list owned by bpe_cffi/_idcache.py with
 * cache[i] == i for every index; it only grows.  Every function here runs with the GIL held
 * and reads the cache's length once per call, so growth by another thread between calls is
 * safe.  Ids are read from raw addresses that the caller (bpe_cffi/tokenizer.py) got from C
 * buffers it keeps alive for the duration of the call; this module is private for that
 * reason.
 *
 * Garbage collection.  A list of ints cannot be part of a reference cycle, yet CPython tracks
 * every list for its cycle collector, which then walks each id list item by item at every
 * collection of the generation it is in: a client holding thousands of id lists spent a
 * third of its time there.  So the id lists made here are untracked (PyObject_GC_UnTrack, as
 * CPython does itself for tuples and dicts of atomic values).  They are ordinary lists; the
 * one difference is that a cycle made later THROUGH such a list (appending the list to
 * itself, or an object referring back to it) is not found by the collector and stays in
 * memory until broken by hand.
 *
 * join_utf8 goes the other way: the UTF-8 of a list of str, end to end, for a
 * batch encode, without a bytes object per text.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* A new reference to the int `id`: the cached object when there is one. */
static PyObject *id_object(uint32_t id, PyObject *const *cached, Py_ssize_t n_cached)
{
    if ((Py_ssize_t)id < n_cached) {
        PyObject *o = cached[id];
        Py_INCREF(o);
        return o;
    }
    return PyLong_FromUnsignedLong(id);
}

/* A new list of the n ids at ids[0..n). */
static PyObject *make_list(const uint32_t *ids, Py_ssize_t n, PyObject *cache)
{
    PyObject *const *cached = ((PyListObject *)cache)->ob_item;
    Py_ssize_t n_cached = PyList_GET_SIZE(cache), i;
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (i = 0; i < n; i++) {
        PyObject *o = id_object(ids[i], cached, n_cached);
        if (o == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, o);
    }
    PyObject_GC_UnTrack(out);   /* only ints: see "Garbage collection" above */
    return out;
}

static int check_cache(PyObject *cache)
{
    if (!PyList_CheckExact(cache)) {
        PyErr_SetString(PyExc_TypeError, "cache must be a list");
        return -1;
    }
    return 0;
}

/* ids_list(address, n, cache) -> list of the n uint32 ids at address. */
static PyObject *ids_list(PyObject *self, PyObject *args)
{
    unsigned long long address;
    Py_ssize_t n;
    PyObject *cache;
    if (!PyArg_ParseTuple(args, "KnO", &address, &n, &cache) || check_cache(cache) < 0)
        return NULL;
    if (n < 0 || (n > 0 && address == 0)) {
        PyErr_SetString(PyExc_ValueError, "bad id buffer");
        return NULL;
    }
    return make_list((const uint32_t *)(uintptr_t)address, n, cache);
}

/* ids_lists(address, ends_address, n_texts, cache) -> n_texts lists: text k's ids are
 * ids[ends[k-1] .. ends[k]) (ends[-1] = 0), ends being size_t values at ends_address. */
static PyObject *ids_lists(PyObject *self, PyObject *args)
{
    unsigned long long address, ends_address;
    Py_ssize_t n_texts, k;
    size_t start = 0;
    PyObject *cache, *out;
    const uint32_t *ids;
    const size_t *ends;
    if (!PyArg_ParseTuple(args, "KKnO", &address, &ends_address, &n_texts, &cache) ||
        check_cache(cache) < 0)
        return NULL;
    if (n_texts < 0 || (n_texts > 0 && ends_address == 0)) {
        PyErr_SetString(PyExc_ValueError, "bad id buffer");
        return NULL;
    }
    ids = (const uint32_t *)(uintptr_t)address;
    ends = (const size_t *)(uintptr_t)ends_address;
    if ((out = PyList_New(n_texts)) == NULL)
        return NULL;
    for (k = 0; k < n_texts; k++) {
        PyObject *part;
        if (ends[k] < start || (ends[k] > start && ids == NULL) ||
            ends[k] - start > (size_t)PY_SSIZE_T_MAX) {
            Py_DECREF(out);
            PyErr_SetString(PyExc_ValueError, "id ends go backwards");
            return NULL;
        }
        part = make_list(ids + start, (Py_ssize_t)(ends[k] - start), cache);
        if (part == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, k, part);
        start = ends[k];
    }
    return out;
}

/* ids_from_le_bytes(data, cache) -> list of the little-endian uint32 ids packed in data
 * (a bytes-like object whose length is a multiple of 4). */
static PyObject *ids_from_le_bytes(PyObject *self, PyObject *args)
{
    Py_buffer view;
    PyObject *cache, *out = NULL, *const *cached;
    Py_ssize_t n, i, n_cached;
    if (!PyArg_ParseTuple(args, "y*O", &view, &cache))
        return NULL;
    if (check_cache(cache) < 0 || view.len % 4 != 0) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "packed ids have %zd bytes, not a multiple of 4",
                         view.len);
        PyBuffer_Release(&view);
        return NULL;
    }
    n = view.len / 4;
    cached = ((PyListObject *)cache)->ob_item;
    n_cached = PyList_GET_SIZE(cache);
    if ((out = PyList_New(n)) != NULL) {
        const unsigned char *p = view.buf;
        for (i = 0; i < n; i++, p += 4) {
            uint32_t id = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                          (uint32_t)p[3] << 24;
            PyObject *o = id_object(id, cached, n_cached);
            if (o == NULL) {
                Py_CLEAR(out);
                break;
            }
            PyList_SET_ITEM(out, i, o);
        }
        if (out != NULL)
            PyObject_GC_UnTrack(out);
    }
    PyBuffer_Release(&view);
    return out;
}

/* ---- texts in: the UTF-8 of a list of str, laid end to end ------------------------------ */

/* How many of the n Latin-1 characters at p take two UTF-8 bytes (those >= 0x80). */
static Py_ssize_t extra_ucs1(const Py_UCS1 *p, Py_ssize_t n)
{
    Py_ssize_t i = 0, extra = 0;
#if defined(__SSE2__)
    for (; i + 16 <= n; i += 16)
        extra += __builtin_popcount(
            (unsigned)_mm_movemask_epi8(_mm_loadu_si128((const __m128i *)(p + i))));
#endif
    for (; i < n; i++)
        extra += p[i] >> 7;
    return extra;
}

/* Adds to *len the extra UTF-8 bytes of the n UCS-2 characters at p (one for >= 0x80, two
 * for >= 0x800); returns 1 if one of them is a surrogate (no UTF-8 exists), else 0. */
static int extra_ucs2(const Py_UCS2 *p, Py_ssize_t n, Py_ssize_t *len)
{
    Py_ssize_t i = 0, extra = 0;
    int surrogates = 0;
#if defined(__SSE2__)
    /* unsigned compares by flipping the sign bit; lane counters hold at most 2 per round,
     * so they are summed every 4096 rounds, long before an int16 could overflow */
    const __m128i sign = _mm_set1_epi16((short)0x8000);
    const __m128i over7f = _mm_set1_epi16((short)(0x7F ^ 0x8000));
    const __m128i over7ff = _mm_set1_epi16((short)(0x7FF ^ 0x8000));
    const __m128i high5 = _mm_set1_epi16((short)0xF800), sur = _mm_set1_epi16((short)0xD800);
    __m128i bad = _mm_setzero_si128();
    while (i + 8 <= n) {
        __m128i count = _mm_setzero_si128();
        int16_t lanes[8];
        int rounds, k;
        for (rounds = 0; rounds < 4096 && i + 8 <= n; rounds++, i += 8) {
            __m128i v = _mm_loadu_si128((const __m128i *)(p + i));
            __m128i x = _mm_xor_si128(v, sign);
            count = _mm_sub_epi16(count, _mm_cmpgt_epi16(x, over7f));
            count = _mm_sub_epi16(count, _mm_cmpgt_epi16(x, over7ff));
            bad = _mm_or_si128(bad, _mm_cmpeq_epi16(_mm_and_si128(v, high5), sur));
        }
        _mm_storeu_si128((__m128i *)lanes, count);
        for (k = 0; k < 8; k++)
            extra += lanes[k];
    }
    surrogates = _mm_movemask_epi8(bad) != 0;
#endif
    for (; i < n; i++) {
        Py_UCS2 c = p[i];
        extra += (c >= 0x80) + (c >= 0x800);
        surrogates |= (c & 0xF800) == 0xD800;
    }
    *len += extra;
    return surrogates;
}

/* extra_ucs2 for UCS-4 characters (three extra bytes for >= 0x10000). */
static int extra_ucs4(const Py_UCS4 *p, Py_ssize_t n, Py_ssize_t *len)
{
    Py_ssize_t i, extra = 0;
    int surrogates = 0;
    for (i = 0; i < n; i++) {
        Py_UCS4 c = p[i];
        extra += (c >= 0x80) + (c >= 0x800) + (c >= 0x10000);
        surrogates |= (c & 0x1FF800) == 0xD800;
    }
    *len += extra;
    return surrogates;
}

/* The UTF-8 length of s, or -1 if it holds a surrogate code point (one loop per storage
 * kind: PyUnicode_READ's switch per character costs more than the counting).  The extra bytes
 * (beyond one per character) are counted 16 or 8 characters at a time where SSE2 is there:
 * most non-ASCII text (English with curly quotes, CJK) is 2-byte kind. */
static Py_ssize_t utf8_length(PyObject *s)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    const void *data = PyUnicode_DATA(s);
    if (PyUnicode_IS_ASCII(s))
        return n;
    if (PyUnicode_KIND(s) == PyUnicode_1BYTE_KIND)
        return n + extra_ucs1(data, n);
    if (PyUnicode_KIND(s) == PyUnicode_2BYTE_KIND)
        return extra_ucs2(data, n, &n) ? -1 : n;
    return extra_ucs4(data, n, &n) ? -1 : n;
}

/* Appends the UTF-8 of code point c (not a surrogate) at out; returns the end. */
static char *put_utf8(Py_UCS4 c, char *out)
{
    if (c < 0x80) {
        *out++ = (char)c;
    } else if (c < 0x800) {
        *out++ = (char)(0xC0 | (c >> 6));
        *out++ = (char)(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
        *out++ = (char)(0xE0 | (c >> 12));
        *out++ = (char)(0x80 | ((c >> 6) & 0x3F));
        *out++ = (char)(0x80 | (c & 0x3F));
    } else {
        *out++ = (char)(0xF0 | (c >> 18));
        *out++ = (char)(0x80 | ((c >> 12) & 0x3F));
        *out++ = (char)(0x80 | ((c >> 6) & 0x3F));
        *out++ = (char)(0x80 | (c & 0x3F));
    }
    return out;
}

/* The UTF-8 of the n Latin-1 characters at p, written at out; returns the end.  Blocks of
 * 16 ASCII characters are copied whole where SSE2 is there. */
static char *write_ucs1(const Py_UCS1 *p, Py_ssize_t n, char *out)
{
    Py_ssize_t i = 0, end;
    while (i < n) {
#if defined(__SSE2__)
        for (; i + 16 <= n; i += 16, out += 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)(p + i));
            if (_mm_movemask_epi8(v) != 0)
                break;
            _mm_storeu_si128((__m128i *)out, v);
        }
#endif
        for (end = i + 16 < n ? i + 16 : n; i < end; i++) {
            if (p[i] < 0x80) {
                *out++ = (char)p[i];
            } else {
                *out++ = (char)(0xC0 | (p[i] >> 6));
                *out++ = (char)(0x80 | (p[i] & 0x3F));
            }
        }
    }
    return out;
}

/* Writes the UTF-8 of BMP character c (not a surrogate) at out without a branch on its width:
 * three bytes are stored whatever it takes (the caller leaves room), and the end of its
 * own bytes is returned; the next character overwrites the rest.  Mixed text (CJK with ASCII
 * punctuation, Cyrillic words and spaces) would mispredict a branch per width change. */
static char *put_bmp_wide(unsigned c, char *out)
{
    unsigned two = c >= 0x80, three = c >= 0x800;
    out[0] = (char)(three ? 0xE0 | c >> 12 : two ? 0xC0 | c >> 6 : c);
    out[1] = (char)(0x80 | ((three ? c >> 6 : c) & 0x3F));
    out[2] = (char)(0x80 | (c & 0x3F));
    return out + 1 + two + three;
}

/* write_ucs1 for UCS-2 characters (no surrogates), with room up to `limit` in the output:
 * blocks of 8 ASCII characters are packed to bytes whole where SSE2 is there; other blocks
 * go through put_bmp_wide while 8 of its 3-byte stores fit before limit. */
static char *write_ucs2(const Py_UCS2 *p, Py_ssize_t n, char *out, const char *limit)
{
    Py_ssize_t i = 0, end;
#if defined(__SSE2__)
    const __m128i high = _mm_set1_epi16((short)0xFF80);
#endif
    while (i < n) {
#if defined(__SSE2__)
        for (; i + 8 <= n; i += 8, out += 8) {
            __m128i v = _mm_loadu_si128((const __m128i *)(p + i));
            __m128i ascii = _mm_cmpeq_epi16(_mm_and_si128(v, high), _mm_setzero_si128());
            if (_mm_movemask_epi8(ascii) != 0xFFFF)
                break;
            _mm_storel_epi64((__m128i *)out, _mm_packus_epi16(v, v));
        }
#endif
        end = i + 8 < n ? i + 8 : n;
        if (limit - out >= 3 * 8) {
            for (; i < end; i++)
                out = put_bmp_wide(p[i], out);
        } else {
            for (; i < end; i++)
                out = p[i] < 0x80 ? (*out = (char)p[i], out + 1) : put_utf8(p[i], out);
        }
    }
    return out;
}

/* Writes the UTF-8 of s (no surrogates: utf8_length checked) at out, which has room up to
 * limit; returns the end. */
static char *write_utf8(PyObject *s, char *out, const char *limit)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(s), i;
    const void *data = PyUnicode_DATA(s);
    if (PyUnicode_IS_ASCII(s)) {
        memcpy(out, data, (size_t)n);
        return out + n;
    }
    if (PyUnicode_KIND(s) == PyUnicode_1BYTE_KIND)
        return write_ucs1(data, n, out);
    if (PyUnicode_KIND(s) == PyUnicode_2BYTE_KIND)
        return write_ucs2(data, n, out, limit);
    for (i = 0; i < n; i++) {
        Py_UCS4 c = ((const Py_UCS4 *)data)[i];
        out = c < 0x80 ? (*out = (char)c, out + 1) : put_utf8(c, out);
    }
    return out;
}

/* join_utf8(texts) -> (joined, ends) or None.  texts: a list; joined: the UTF-8 of its
 * items end to end (bytes); ends: a bytes object of len(texts) size_t values, the end of
 * each item's bytes in joined.  None when an item is not exactly a str or holds a surrogate
 * code point: the caller then takes its slower path, which also reports bad items.  One pass
 * to size, one to copy: no bytes object per text. */
static PyObject *join_utf8(PyObject *self, PyObject *texts)
{
    Py_ssize_t n, k, total = 0;
    PyObject *joined, *ends_obj, *result;
    size_t *ends;
    char *out;
    if (!PyList_CheckExact(texts)) {
        PyErr_SetString(PyExc_TypeError, "texts must be a list");
        return NULL;
    }
    n = PyList_GET_SIZE(texts);
    if ((ends_obj = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(size_t))) == NULL)
        return NULL;
    ends = (size_t *)PyBytes_AS_STRING(ends_obj);
    for (k = 0; k < n; k++) {
        PyObject *s = PyList_GET_ITEM(texts, k);
        Py_ssize_t len = PyUnicode_CheckExact(s) ? utf8_length(s) : -1;
        if (len < 0 || total > PY_SSIZE_T_MAX - len) {
            Py_DECREF(ends_obj);
            Py_RETURN_NONE;
        }
        total += len;
        ends[k] = (size_t)total;
    }
    if ((joined = PyBytes_FromStringAndSize(NULL, total)) == NULL) {
        Py_DECREF(ends_obj);
        return NULL;
    }
    out = PyBytes_AS_STRING(joined);
    for (k = 0; k < n; k++)           /* the list cannot change: the GIL is held throughout */
        out = write_utf8(PyList_GET_ITEM(texts, k), out, PyBytes_AS_STRING(joined) + total);
    result = PyTuple_Pack(2, joined, ends_obj);
    Py_DECREF(joined);
    Py_DECREF(ends_obj);
    return result;
}

static PyMethodDef methods[] = {
    {"join_utf8", join_utf8, METH_O, "join_utf8(list of str) -> (bytes, size_t ends) or None"},
    {"ids_list", ids_list, METH_VARARGS, "ids_list(address, n, cache) -> list"},
    {"ids_lists", ids_lists, METH_VARARGS,
     "ids_lists(address, ends_address, n_texts, cache) -> list of lists"},
    {"ids_from_le_bytes", ids_from_le_bytes, METH_VARARGS,
     "ids_from_le_bytes(data, cache) -> list"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "bpe_cffi._idlist",
    "Fast lists of token ids from C buffers (private to bpe_cffi).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__idlist(void)
{
    return PyModule_Create(&module);
}
