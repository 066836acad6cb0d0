/*
 * errors.c - error messages and the version string.
 *
 * Every fallible function in the library returns one of the BPE_ERR_* codes of bpe.h; this
 * file is the one place that turns a code into words.  No state: safe from any thread.
 */
#include "bpe.h"

#define BPE_VERSION_STRING "0.1.0"

const char *bpe_version(void)
{
    return BPE_VERSION_STRING;
}

const char *bpe_strerror(int code)
{
    switch (code) {
    case BPE_OK: return "success";
    case BPE_ERR_NOMEM: return "out of memory";
    case BPE_ERR_ARG: return "invalid argument";
    case BPE_ERR_VOCAB: return "inconsistent vocabulary (duplicate id or bytes, or empty token)";
    case BPE_ERR_MERGE:
        return "a merge names an unknown token or makes a token not in the vocabulary";
    case BPE_ERR_ID: return "unknown token id";
    case BPE_ERR_DISALLOWED: return "text contains a disallowed special token";
    case BPE_ERR_IO: return "input/output error";
    case BPE_ERR_CANCELLED: return "cancelled";
    case BPE_ERR_THREAD: return "could not start a thread";
    case BPE_ERR_TOOBIG: return "size too large";
    case BPE_ERR_NOBYTE: return "a byte of the text has no token in the vocabulary";
    case BPE_ERR_TEXT: return "a text has a code point above U+10FFFF";
    default: return "unknown error";
    }
}
