"""CFFI builder (out-of-line API mode) for the C core in csrc/.

The cdef is the part of the public header csrc/bpe.h between the CDEF-BEGIN and CDEF-END
markers, so the declarations Python sees are the ones C compiles against.  Every csrc/*.c file
is compiled into the extension `bpe_cffi._bpe_cffi`.

Environment:
  BPE_CFFI_SANITIZE=1   build with -fsanitize=address,undefined (see scripts/sanitize.sh)
  BPE_CFFI_DEBUG=1      build with -O0 -g
"""
import os
import re
from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
CSRC = HERE / "csrc"


def read_cdef() -> str:
    header = (CSRC / "bpe.h").read_text(encoding="utf-8")
    m = re.search(r"/\* CDEF-BEGIN \*/(.*?)/\* CDEF-END \*/", header, re.S)
    if not m:
        raise RuntimeError("csrc/bpe.h has no CDEF-BEGIN/CDEF-END section")
    return m.group(1)


def compile_args() -> list:
    args = ["-std=c99", "-pthread", "-Wall", "-Wextra", "-Wno-unused-parameter",
            "-D_GNU_SOURCE", "-fvisibility=hidden"]
    if os.environ.get("BPE_CFFI_SANITIZE"):
        args += ["-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined",
                 "-fno-sanitize-recover=undefined"]
    elif os.environ.get("BPE_CFFI_DEBUG"):
        args += ["-O0", "-g"]
    else:
        # Aligned functions and loops: without them the speed of the hot loops followed the
        # code size of unrelated files (an edit to longpiece.c moved the pre-tokenizer's
        # ascii_word_o200k by 0x1f0 bytes and made o200k prose ~20% slower).
        args += ["-O3", "-falign-functions=64", "-falign-loops=32"]
    return args


def link_args() -> list:
    args = ["-pthread"]
    if os.environ.get("BPE_CFFI_SANITIZE"):
        args += ["-fsanitize=address,undefined"]
    return args


ffibuilder = FFI()
ffibuilder.cdef(read_cdef())
ffibuilder.set_source(
    "bpe_cffi._bpe_cffi",
    '#include "bpe.h"',
    sources=sorted(str(p.relative_to(HERE)) for p in CSRC.glob("*.c")),
    # headers too: a build tree left by an earlier install is rebuilt when only a header
    # changed (setuptools compares the output with its sources and depends)
    depends=sorted(str(p.relative_to(HERE)) for p in CSRC.glob("*.h")),
    include_dirs=[str(CSRC.relative_to(HERE))],
    extra_compile_args=compile_args(),
    extra_link_args=link_args(),
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=False)
