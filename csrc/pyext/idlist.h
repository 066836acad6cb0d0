/* idlist.h - what the files of bpe_cffi._idlist share: idlist.c defines the module and
 * makes id lists; tiktoken_file.c reads .tiktoken files; one_call.c encodes a short str or
 * decodes a short list of ids in one call. */
#ifndef BPE_PYEXT_IDLIST_H
#define BPE_PYEXT_IDLIST_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* A new list of the n ids at ids[0..n), its ints taken from cache (a list whose item i is
 * the int i; see idlist.c), or NULL with an exception. */
PyObject *bpe_py_ids_list(const uint32_t *ids, Py_ssize_t n, PyObject *cache);

/* parse_tiktoken(bytes-like) -> {rank: token bytes}, or None when the data is not entirely
 * in tiktoken's layout (the caller then reads it line by line).  tiktoken_file.c. */
PyObject *bpe_py_parse_tiktoken(PyObject *self, PyObject *raw);

/* encode_str(text, keep, tokenizer, mode, encode, ids_free, cache) and decode_ids(ids, keep,
 * tokenizer, decode, bytes_free, errors): see one_call.c. */
PyObject *bpe_py_encode_str(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *bpe_py_decode_ids(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

#endif
