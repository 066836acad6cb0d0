/* tiktoken_file.h - parse_tiktoken, a function of bpe_cffi._idlist (see tiktoken_file.c). */
#ifndef BPE_PYEXT_TIKTOKEN_FILE_H
#define BPE_PYEXT_TIKTOKEN_FILE_H

#include <Python.h>

/* parse_tiktoken(bytes-like) -> {rank: token bytes}, or None when the data is not entirely
 * in tiktoken's layout (the caller then reads it line by line). */
PyObject *bpe_py_parse_tiktoken(PyObject *self, PyObject *raw);

#endif
