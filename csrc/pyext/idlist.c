/*
 * idlist.c - bpe_cffi._idlist, a small CPython extension that turns token ids held by C into
 * Python lists of ints quickly.
 *
 * Why it exists.  The encoder itself is the CFFI module (csrc/*.c); but CFFI can only hand
 * Python a buffer of uint32, and making one int object per id from it (memoryview.tolist,
 * ffi.unpack) allocates every int: about as long as encoding the text.  Python ints are
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
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

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
    }
    PyBuffer_Release(&view);
    return out;
}

static PyMethodDef methods[] = {
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
