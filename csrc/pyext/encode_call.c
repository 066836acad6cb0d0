/*
 * encode_call.c - encode_str of bpe_cffi._idlist: a short str to its list of ids in one
 * call, for Tokenizer.encode / encode_ordinary.
 *
 * Why.  Encoding a sentence takes the C encoder well under a microsecond, but the Python
 * path around it (two cdata allocations, a pointer cast, the CFFI call, the list, freeing the
 * buffer) took over a microsecond more: a 5-character text cost 2.2 us where tiktoken's
 * encode_ordinary costs 1.2.  Here the str's characters are read in place (ASCII) or encoded
 * to UTF-8 once, the encoder of the CFFI module is called through its address, and the list
 * is made from the ids it returns.
 *
 * The tokenizer is passed as its address, with `keep`, the cdata that owns it: the
 * argument holds a reference for the whole call, so a close() in another thread frees the
 * tokenizer only after this call returns (see Tokenizer.close).  Texts of at least
 * RELEASE_GIL_MIN bytes are encoded with the GIL released, so that Python threads encoding
 * at once run in parallel; shorter ones take less time than letting it go would.  Callers
 * use this for texts shorter than a few kilobytes only: longer ones go through the CFFI
 * call, which can be cancelled with Ctrl-C.
 *
 * Returns the list; (rc, info) when the encoder fails (the caller raises, as for the CFFI
 * call); None when the text is not an exact str or has a lone surrogate, which UTF-8 cannot
 * hold (the caller's own path makes it U+FFFD, as tiktoken does).
 */
#include "idlist.h"

#include "../bpe.h"

#define RELEASE_GIL_MIN 256
#define N_ARGS 7

typedef int (*encode_fn)(const bpe_tokenizer *tok, const uint8_t *text, size_t len,
                         const uint8_t *special_mode, bpe_ids *out, size_t *info);
typedef void (*ids_free_fn)(bpe_ids *ids);

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
    if (nargs != N_ARGS) {
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
