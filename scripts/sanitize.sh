#!/usr/bin/env bash
# sanitize.sh - run the C core under AddressSanitizer + UndefinedBehaviorSanitizer.
#
# Usage (from anywhere, inside the venv where bpe_cffi is installed with `pip install -e .`):
#     scripts/sanitize.sh                       # whole suite: python -m pytest -q tests
#     scripts/sanitize.sh tests/test_c_core.py  # a subset; extra args go to pytest
#     SANITIZE_SKIP_PYTEST=1 scripts/sanitize.sh   # only the leak check of the C core
#     SANITIZE_SKIP_DRIVER=1 scripts/sanitize.sh    # only the pytest run
#
# What it does:
#   1. LeakSanitizer-clean check of the C core alone: compiles csrc/*.c together with a small C
#      driver (below) with -fsanitize=address,undefined and runs it with detect_leaks=1.  The
#      driver builds tokenizers (both rules, special tokens), encodes (single, prefix, pieces,
#      batch on 3 threads, one large text cut into parts, file on 2 threads), decodes, hits the
#      error paths and frees it all.
#   2. Rebuilds the CFFI extension in place with BPE_CFFI_SANITIZE=1 (see build_ffi.py) and
#      runs pytest with the ASan runtime preloaded into Python (LD_PRELOAD), leak detection off
#      there (CPython's own allocations are noisy), every UBSan finding fatal.
#      The id-list helper extension (csrc/pyext/idlist.c) is compiled with the same flags.
#   3. Always rebuilds the normal optimised extension at exit (and puts the helper's optimised
#      build back), so the worktree is left as found.
# Exit status: nonzero if the build, the driver or any test fails, or a sanitizer reports.
# Needs gcc (or CC=clang with its own runtime path in ASAN_LIB) and the libasan runtime.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
CC="${CC:-gcc}"
ASAN_LIB="${ASAN_LIB:-$($CC -print-file-name=libasan.so)}"
PY="${PYTHON:-python}"
FLAGS="-std=c99 -pthread -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -O1 -g \
 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined"

rebuild_normal() {
    echo "== sanitize.sh: rebuilding the normal extension" >&2
    (cd "$ROOT" && env -u BPE_CFFI_SANITIZE "$PY" build_ffi.py >/dev/null 2>&1) || true
}

# ---- 1. the C core alone, with leak detection -------------------------------------------------
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"; rebuild_normal' EXIT
cat > "$WORK/driver.c" <<'EOF'
/* Exercises the public API on a synthetic vocabulary; returns nonzero on a wrong result. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bpe.h"

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "driver: check failed line %d: %s\n", \
    __LINE__, #c); return 1; } } while (0)

/* bpe_encode_file into a new file at out_path (the caller's descriptor, as Python passes). */
static int encode_to(bpe_tokenizer *tok, const char *in_path, const char *out_path, int width,
                     const uint8_t *mode, bpe_progress *prog, uint64_t *n_tok, size_t *info)
{
    FILE *out = fopen(out_path, "wb");
    int rc;
    if (out == NULL)
        return -1;
    rc = bpe_encode_file(tok, in_path, fileno(out), width, mode, 2, prog, n_tok, info);
    fclose(out);
    return rc;
}

static int run(int rule)
{
    uint8_t bytes[1024];
    size_t offs[300], n = 0, pos = 0, i, bad = 0, info = 0, consumed = 0;
    uint32_t ids[300], merges[] = {'a', 'a', 'b', 'c', 256, 'a'};
    const char *extra[] = {"aa", "bc", "aaa"};
    const char *special = "<|end|><|end|><|end|>";
    size_t soffs[] = {0, 7, 21};
    uint32_t sids[] = {900, 901};
    uint8_t mode[] = {BPE_SPECIAL_ALLOWED, BPE_SPECIAL_ALLOWED};
    bpe_spec spec;
    bpe_tokenizer *tok = NULL;
    bpe_ids out = {0}, outs[3];
    bpe_bytes dec = {0};
    const char *text = "aaaa bc <|end|><|end|><|end|> aaab \xff end <|en";
    const uint8_t *texts[3];
    size_t lens[3];
    uint64_t n_tok = 0;
    bpe_progress prog = {0};
    FILE *f;
    for (i = 0; i < 256; i++) {
        bytes[pos] = (uint8_t)i; offs[n] = pos++; ids[n] = (uint32_t)i; n++;
    }
    for (i = 0; i < 3; i++) {
        memcpy(bytes + pos, extra[i], strlen(extra[i])); offs[n] = pos; pos += strlen(extra[i]);
        ids[n] = (uint32_t)(256 + i); n++;
    }
    offs[n] = pos;
    memset(&spec, 0, sizeof spec);
    spec.rule = rule; spec.pattern = BPE_PATTERN_GPT2; spec.ignore_merges = rule;
    spec.cache_capacity = 4;
    spec.n_tokens = n; spec.token_bytes = bytes; spec.token_offsets = offs; spec.token_ids = ids;
    spec.n_merges = rule == BPE_RULE_MERGES ? 3 : 0; spec.merges = merges;
    spec.n_special = 2; spec.special_bytes = (const uint8_t *)special;
    spec.special_offsets = soffs; spec.special_ids = sids;
    CHECK(bpe_tokenizer_new(&spec, &tok, &bad) == BPE_OK);
    CHECK(bpe_encode(tok, (const uint8_t *)text, strlen(text), mode, &out, &info) == BPE_OK);
    CHECK(out.len > 5 && out.ids[0] == 256 && out.ids[1] == 256);
    CHECK(bpe_decode(tok, out.ids, out.len, &dec, &bad) == BPE_OK);
    CHECK(dec.len == strlen(text) && memcmp(dec.data, text, dec.len) == 0);
    out.len = 0;
    CHECK(bpe_encode_prefix(tok, (const uint8_t *)text, strlen(text), mode, 0, &out, &consumed,
                            &info) == BPE_OK);
    CHECK(consumed <= strlen(text) - 4);
    for (i = 0; i < 3; i++) {
        texts[i] = (const uint8_t *)text; lens[i] = strlen(text) - i;
        memset(&outs[i], 0, sizeof outs[i]);
    }
    CHECK(bpe_encode_batch(tok, 3, texts, lens, mode, 3, outs, &info) == BPE_OK);
    for (i = 0; i < 3; i++) bpe_ids_free(&outs[i]);
    mode[0] = BPE_SPECIAL_DISALLOWED;
    CHECK(bpe_encode(tok, (const uint8_t *)text, strlen(text), mode, &out, &info) ==
          BPE_ERR_DISALLOWED && info == 0);
    CHECK(bpe_encode_batch(tok, 3, texts, lens, mode, 3, outs, &info) == BPE_ERR_DISALLOWED);
    for (i = 0; i < 3; i++) bpe_ids_free(&outs[i]);
    mode[0] = BPE_SPECIAL_ALLOWED;
    {   /* the collected batch: whole, finished early, and failing in the middle */
        size_t n = 30000, tl = strlen(text), k, first, count, total = 0, one_end;
        uint8_t *joined = malloc(n * tl);
        size_t *ends = malloc(n * sizeof *ends);
        const uint32_t *ids;
        const size_t *id_ends;
        bpe_batch_job *job;
        CHECK(joined != NULL && ends != NULL);
        for (k = 0; k < n; k++) {
            memcpy(joined + k * tl, text, tl);
            ends[k] = (k + 1) * tl;
        }
        CHECK(bpe_batch_start(tok, n, joined, NULL, ends, NULL, mode, 3, &job) == BPE_OK);
        while (bpe_batch_next(job, &first, &count, &ids, &id_ends, &info) == BPE_OK && count)
            total += count;
        CHECK(total == n);
        bpe_batch_finish(job);
        CHECK(bpe_batch_start(tok, n, joined, NULL, ends, NULL, mode, 3, &job) == BPE_OK);
        CHECK(bpe_batch_next(job, &first, &count, &ids, &id_ends, &info) == BPE_OK && count);
        bpe_batch_finish(job);                     /* workers still running */
        mode[0] = BPE_SPECIAL_DISALLOWED;
        CHECK(bpe_batch_start(tok, n, joined, NULL, ends, NULL, mode, 3, &job) == BPE_OK);
        while (bpe_batch_next(job, &first, &count, &ids, &id_ends, &info) == BPE_OK && count)
            ;
        CHECK(info == 0);
        bpe_batch_finish(job);
        mode[0] = BPE_SPECIAL_ALLOWED;
        /* ONE text of 1.35 MB (prose-like, a special token every ~1 KB): cut into parts,
         * joined, returned once; then finished early, and failing */
        for (k = 0; k < n * tl; k++)
            joined[k] = (uint8_t)("hello world, aaaa bc. "[k % 22]);
        for (k = 1000; k + 7 < n * tl; k += 1013)
            memcpy(joined + k, "<|end|>", 7);
        joined[5000] = 0xff;
        one_end = n * tl;
        {
            size_t cuts[8];
            bpe_bytes window = {0};
            CHECK(bpe_text_cuts(tok, joined, one_end, BPE_TEXT_UTF8, mode, 512 * 1024, cuts, 8,
                                &window) >= 1);
            bpe_bytes_free(&window);
        }
        CHECK(bpe_batch_start(tok, 1, joined, NULL, &one_end, NULL, mode, 3, &job) == BPE_OK);
        total = 0;
        while (bpe_batch_next(job, &first, &count, &ids, &id_ends, &info) == BPE_OK && count)
            total += count;
        CHECK(total == 1);
        bpe_batch_finish(job);
        CHECK(bpe_batch_start(tok, 1, joined, NULL, &one_end, NULL, mode, 3, &job) == BPE_OK);
        bpe_batch_finish(job);                     /* parts still running */
        mode[0] = BPE_SPECIAL_DISALLOWED;
        CHECK(bpe_batch_start(tok, 1, joined, NULL, &one_end, NULL, mode, 3, &job) == BPE_OK);
        CHECK(bpe_batch_next(job, &first, &count, &ids, &id_ends, &info) ==
              BPE_ERR_DISALLOWED && info == 0);
        bpe_batch_finish(job);
        mode[0] = BPE_SPECIAL_ALLOWED;
        free(ends);
        free(joined);
    }
    {   /* texts read where they lie, in each storage kind; the last has no character */
        static const uint8_t latin1[] = {'c', 'a', 'f', 0xE9, ' ', 'x'};
        static const uint16_t ucs2[] = {'a', 0xD83D, 0xDE00, ' ', 0xDC00, 'b'};
        static const uint32_t ucs4[] = {'z', 0x1F600, ' ', 0x4E2D};
        static const uint32_t bad[] = {'q', 0x110000};
        const uint8_t *starts[4] = {latin1, (const uint8_t *)ucs2, (const uint8_t *)ucs4,
                                    (const uint8_t *)bad};
        size_t ends[4] = {6, 12, 16, 18}, first, count, total = 0;
        uint8_t kinds[4] = {BPE_TEXT_LATIN1, BPE_TEXT_UCS2, BPE_TEXT_UCS4, BPE_TEXT_UCS4};
        const uint32_t *ids;
        const size_t *id_ends;
        bpe_batch_job *job;
        int rc;
        CHECK(bpe_batch_start(tok, 3, NULL, starts, ends, kinds, mode, 2, &job) == BPE_OK);
        while (bpe_batch_next(job, &first, &count, &ids, &id_ends, &info) == BPE_OK && count)
            total += count;
        CHECK(total == 3);
        bpe_batch_finish(job);
        CHECK(bpe_batch_start(tok, 4, NULL, starts, ends, kinds, mode, 2, &job) == BPE_OK);
        while ((rc = bpe_batch_next(job, &first, &count, &ids, &id_ends, &info)) == BPE_OK &&
               count)
            ;
        CHECK(rc == BPE_ERR_TEXT && info == 3);
        bpe_batch_finish(job);
    }
    CHECK((f = fopen("in.txt", "wb")) != NULL);
    for (i = 0; i < 20000; i++) fputs(text, f);
    fclose(f);
    CHECK(encode_to(tok, "in.txt", "out.bin", 2, mode, &prog, &n_tok, &info) == BPE_OK);
    CHECK(n_tok > 20000 && prog.done == prog.total);
    prog.cancel = 1;
    CHECK(encode_to(tok, "in.txt", "out2.bin", 4, mode, &prog, &n_tok, &info) ==
          BPE_ERR_CANCELLED);
    CHECK(encode_to(tok, "missing.txt", "out2.bin", 4, mode, NULL, &n_tok, &info) ==
          BPE_ERR_IO);
    {
        uint32_t unknown = 5000;
        CHECK(bpe_decode(tok, &unknown, 1, &dec, &bad) == BPE_ERR_ID && bad == 0);
    }
    bpe_ids_free(&out);
    bpe_bytes_free(&dec);
    bpe_tokenizer_free(tok);
    ids[n - 1] = ids[1];   /* duplicate id: an error path that must not leak */
    CHECK(bpe_tokenizer_new(&spec, &tok, &bad) == BPE_ERR_VOCAB && tok == NULL);
    return 0;
}

/* The model options (model.c): char-level, suffix, unk, byte fallback, dropout; then a prefix
 * that breaks a merge (an error path after the model is allocated). */
static int run_model(void)
{
    uint8_t bytes[300];
    size_t offs[300], n = 0, i, bad = 0, info = 0;
    uint32_t ids[300], merges[] = {'a', 'a', 'b', 'c'};
    const char *text = "aaaa bc \xc3\xa9\xe2\x82\xac aaab end", *texts[3];
    size_t lens[3];
    bpe_spec spec;
    bpe_tokenizer *tok = NULL;
    bpe_ids out = {0}, outs[3];
    uint64_t n_tok = 0;
    FILE *f;
    for (i = 0; i < 128; i++) {
        bytes[n] = (uint8_t)i; offs[n] = n; ids[n] = (uint32_t)i; n++;
    }
    memcpy(bytes + n, "aabc", 4); offs[n] = n; offs[n + 1] = n + 2; offs[n + 2] = n + 4;
    ids[n] = 128; ids[n + 1] = 129; n += 2;
    memset(&spec, 0, sizeof spec);
    spec.rule = BPE_RULE_MERGES; spec.pattern = BPE_PATTERN_GPT2; spec.cache_capacity = 4;
    spec.n_tokens = n; spec.token_bytes = bytes; spec.token_offsets = offs; spec.token_ids = ids;
    spec.n_merges = 2; spec.merges = merges;
    spec.char_level = 1; spec.byte_fallback = 1; spec.has_unk = 1; spec.unk_id = 'u';
    spec.fuse_unk = 1; spec.dropout = 0.5; spec.seed = 42;
    spec.word_suffix = (const uint8_t *)"d"; spec.word_suffix_len = 1;
    CHECK(bpe_tokenizer_new(&spec, &tok, &bad) == BPE_OK);
    CHECK(bpe_encode(tok, (const uint8_t *)text, strlen(text), NULL, &out, &info) == BPE_OK);
    CHECK(out.len > 5);
    for (i = 0; i < 3; i++) {
        texts[i] = text; lens[i] = strlen(text) - i;
        memset(&outs[i], 0, sizeof outs[i]);
    }
    CHECK(bpe_encode_batch(tok, 3, (const uint8_t *const *)texts, lens, NULL, 3, outs, &info)
          == BPE_OK);
    for (i = 0; i < 3; i++) bpe_ids_free(&outs[i]);
    CHECK((f = fopen("in_model.txt", "wb")) != NULL);
    for (i = 0; i < 20000; i++) fputs(text, f);
    fclose(f);
    CHECK(encode_to(tok, "in_model.txt", "out_model.bin", 2, NULL, NULL, &n_tok, &info) ==
          BPE_OK);
    bpe_ids_free(&out);
    bpe_tokenizer_free(tok);
    spec.subword_prefix = (const uint8_t *)"zz"; spec.subword_prefix_len = 2;
    CHECK(bpe_tokenizer_new(&spec, &tok, &bad) == BPE_ERR_MERGE && tok == NULL);
    return 0;
}

int main(void)
{
    return run(BPE_RULE_MERGES) || run(BPE_RULE_TIKTOKEN) || run_model();
}
EOF
if [ -z "${SANITIZE_SKIP_DRIVER:-}" ]; then
    echo "== sanitize.sh: C core leak check ($CC)" >&2
    $CC $FLAGS -Icsrc "$WORK/driver.c" csrc/*.c -o "$WORK/driver"
    (cd "$WORK" && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
        UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ./driver)
    echo "== sanitize.sh: C core leak check passed" >&2
fi
[ -n "${SANITIZE_SKIP_PYTEST:-}" ] && exit 0

# ---- 2. the extension under the sanitizers, driven by pytest --------------------------------
# The id-list helper (csrc/pyext/idlist.c) too, built in THIS tree's bpe_cffi/ (not where an
# import finds it: in a second worktree that is the editable install's tree, which other
# processes use): the optimised one, if any, is kept aside and put back at exit, else the
# sanitized one is removed at exit.
IDLIST="$ROOT/bpe_cffi/_idlist$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
echo "== sanitize.sh: building the sanitized extension" >&2
CC="$CC" BPE_CFFI_SANITIZE=1 "$PY" build_ffi.py >/dev/null
if [ -e "$IDLIST" ]; then
    cp "$IDLIST" "$WORK/idlist.so"
    trap 'cp "$WORK/idlist.so" "$IDLIST"; rm -rf "$WORK"; rebuild_normal' EXIT
else
    trap 'rm -f "$IDLIST"; rm -rf "$WORK"; rebuild_normal' EXIT
fi
PYINC="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
$CC $FLAGS -shared -fPIC -I"$PYINC" csrc/pyext/idlist.c csrc/pyext/tiktoken_file.c \
    csrc/pyext/one_call.c -o "$IDLIST"
[ $# -eq 0 ] && set -- tests
echo "== sanitize.sh: pytest $* under ASan/UBSan" >&2
LD_PRELOAD="$ASAN_LIB" \
ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:allocator_may_return_null=1" \
UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
    "$PY" -m pytest -q -p no:cacheprovider --capture=sys "$@"
# (--capture=sys: pytest must not capture fd 2, or a sanitizer report is lost with the abort)
