/*
 * one_call.c - functions of bpe_cffi._idlist that do a short job of the CFFI module in one
 * call: encode_str, a short str to its list of ids (Tokenizer.encode / encode_ordinary), and
 * decode_ids, a short list of ids to its bytes or text (decode_bytes / decode).
 *
 * Why.  Encoding a sentence takes the C encoder well under a microsecond, but the Python
 * path around it (two cdata allocations, a pointer cast, the CFFI call, the list, freeing the
 * buffer) took over a microsecond more: a 5-character text cost 2.2 us where tiktoken's
 * encode_ordinary costs 1.2.  Here the str's characters are read in place (ASCII) or encoded
 * to UTF-8 once, the encoder of the CFFI module is called through its address, and the list
 * is made from the ids it returns.  Decoding likewise: 46 ids took 2.2 us through Python
 * (a dict lookup per id) against tiktoken's 1.6.
 *
 * The tokenizer is passed as its address, with `keep`, the cdata that owns it: the
 * argument holds a reference for the whole call, so a close() in another thread frees the
 * tokenizer only after this call returns (see Tokenizer.close).  Texts of at least
 * RELEASE_GIL_MIN bytes are encoded with the GIL released, so that Python threads encoding
 * at once run in parallel; shorter ones take less time than letting it go would.  Callers
 * use these for texts shorter than a few kilobytes and lists of at most MAX_SHORT_IDS ids:
 * longer ones go through the CFFI calls (which can be cancelled with Ctrl-C).
 *
 * What they return: the result; (rc, info) when the C function fails (the caller raises, as
 * for the CFFI call); None for an argument they leave to the caller's general path: a text
 * that is not an exact str or has a lone surrogate, which UTF-8 cannot hold (the general
 * path makes it U+FFFD, as tiktoken does); ids that are not a list of plain ints in uint32
 * (the general path names the bad one), or too many.
 */
#include "idlist.h"

#include "../bpe.h"

#define RELEASE_GIL_MIN 256
#define MAX_SHORT_IDS 1024

typedef int (*encode_fn)(const bpe_tokenizer *tok, const uint8_t *text, size_t len,
                         const uint8_t *special_mode, bpe_ids *out, size_t *info);
typedef void (*ids_free_fn)(bpe_ids *ids);
typedef int (*decode_fn)(const bpe_tokenizer *tok, const uint32_t *ids, size_t n,
                         bpe_bytes *out, size_t *bad_index);
typedef void (*bytes_free_fn)(bpe_bytes *b);

/* The address an int argument holds; 0 (and an exception) for anything else. */
static uintptr_t address_arg(PyObject *arg)
{
    unsigned long long a = PyLong_Check(arg) ? PyLong_AsUnsignedLongLong(arg) : 0;
    if (a == (unsigned long long)-1 && PyErr_Occurred())
        return 0;
    if (a == 0 && !PyErr_Occurred())
        PyErr_SetString(PyExc_TypeError, "encode_str: an address is needed");
    return (uintptr_t)a;
}

/* The UTF-8 of text: its own characters when they are ASCII (*holder NULL), else a bytes
 * object put in *holder.  NULL with no exception for a text UTF-8 cannot hold. */
static const char *text_utf8(PyObject *text, Py_ssize_t *len, PyObject **holder)
{
    *holder = NULL;
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(text) < 0)
        return NULL;
#endif
    if (PyUnicode_IS_ASCII(text)) {
        *len = PyUnicode_GET_LENGTH(text);
        return (const char *)PyUnicode_DATA(text);
    }
    if ((*holder = PyUnicode_AsUTF8String(text)) == NULL) {
        if (PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
            PyErr_Clear();                       /* a lone surrogate */
        return NULL;
    }
    *len = PyBytes_GET_SIZE(*holder);
    return PyBytes_AS_STRING(*holder);
}

PyObject *bpe_py_encode_str(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    const bpe_tokenizer *tok;
    const uint8_t *mode;
    encode_fn encode;
    ids_free_fn ids_free;
    PyObject *holder, *out;
    const char *data;
    Py_ssize_t len;
    bpe_ids ids = {NULL, 0, 0};
    size_t info = 0;
    int rc;
    (void)self;
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "encode_str takes 7 arguments");
        return NULL;
    }
    if (!PyUnicode_CheckExact(args[0]))
        Py_RETURN_NONE;
    tok = (const bpe_tokenizer *)address_arg(args[2]);
    mode = args[3] == Py_None ? NULL : (const uint8_t *)address_arg(args[3]);
    encode = (encode_fn)address_arg(args[4]);
    ids_free = (ids_free_fn)address_arg(args[5]);
    if (tok == NULL || (mode == NULL && args[3] != Py_None) || encode == NULL ||
        ids_free == NULL)
        return NULL;
    if ((data = text_utf8(args[0], &len, &holder)) == NULL) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    if (len >= RELEASE_GIL_MIN) {
        Py_BEGIN_ALLOW_THREADS
        rc = encode(tok, (const uint8_t *)data, (size_t)len, mode, &ids, &info);
        Py_END_ALLOW_THREADS
    } else {
        rc = encode(tok, (const uint8_t *)data, (size_t)len, mode, &ids, &info);
    }
    Py_XDECREF(holder);
    out = rc == 0 ? bpe_py_ids_list(ids.ids, (Py_ssize_t)ids.len, args[6])
                  : Py_BuildValue("(in)", rc, (Py_ssize_t)info);
    ids_free(&ids);
    return out;
}

/* The ids of a list of at most MAX_SHORT_IDS exact ints in uint32, into ids[]; -1 when it
 * is not such a list (no exception). */
static Py_ssize_t plain_ids(PyObject *list, uint32_t *ids)
{
    Py_ssize_t n, i;
    if (!PyList_CheckExact(list) || (n = PyList_GET_SIZE(list)) > MAX_SHORT_IDS)
        return -1;
    for (i = 0; i < n; i++) {
        PyObject *o = PyList_GET_ITEM(list, i);
        unsigned long v;
        if (!PyLong_CheckExact(o))
            return -1;
        v = PyLong_AsUnsignedLong(o);
        if ((v == (unsigned long)-1 && PyErr_Occurred()) || v > UINT32_MAX) {
            PyErr_Clear();
            return -1;
        }
        ids[i] = (uint32_t)v;
    }
    return n;
}

/* decode_ids(ids, keep, tokenizer, decode, bytes_free, errors): the bytes of the ids
 * (errors None) or their text decoded from UTF-8 with `errors` (a str, as bytes.decode
 * takes it); (rc, index of the bad id) when bpe_decode fails; None for ids it leaves to the
 * caller. */
PyObject *bpe_py_decode_ids(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    uint32_t ids[MAX_SHORT_IDS];
    const bpe_tokenizer *tok;
    decode_fn decode;
    bytes_free_fn bytes_free;
    const char *errors = NULL;
    bpe_bytes out = {NULL, 0, 0};
    size_t bad = 0;
    Py_ssize_t n;
    PyObject *result;
    int rc;
    (void)self;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "decode_ids takes 6 arguments");
        return NULL;
    }
    if (args[5] != Py_None && (errors = PyUnicode_AsUTF8(args[5])) == NULL)
        return NULL;
    if ((n = plain_ids(args[0], ids)) < 0)
        Py_RETURN_NONE;
    tok = (const bpe_tokenizer *)address_arg(args[2]);
    decode = (decode_fn)address_arg(args[3]);
    bytes_free = (bytes_free_fn)address_arg(args[4]);
    if (tok == NULL || decode == NULL || bytes_free == NULL)
        return NULL;
    rc = n == 0 ? 0 : decode(tok, ids, (size_t)n, &out, &bad);
    if (rc != 0)
        result = Py_BuildValue("(in)", rc, (Py_ssize_t)bad);
    else if (errors == NULL)
        result = PyBytes_FromStringAndSize((const char *)out.data, (Py_ssize_t)out.len);
    else
        result = PyUnicode_DecodeUTF8((const char *)out.data, (Py_ssize_t)out.len, errors);
    bytes_free(&out);
    return result;
}
