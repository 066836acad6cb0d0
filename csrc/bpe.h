/*
 * bpe.h - the public C API of bpe_cffi.
 *
 * Everything between CDEF-BEGIN and CDEF-END is also the CFFI cdef (build_ffi.py reads it),
 * so that part holds only what cffi's parser accepts: plain declarations, integer #defines,
 * no #include and no #if.  Internal headers (pretok.h, special.h, ...) are never seen by
 * Python.
 *
 * Conventions, for every function below:
 *   - The return value is an error code: BPE_OK (0) on success, a BPE_ERR_* value otherwise;
 *     bpe_strerror(code) gives a message.  On error, outputs are left empty (freeable).
 *   - Nothing here aborts, exits or prints.
 *   - A bpe_tokenizer is immutable once built; any number of threads may encode with it at
 *     once.  Free it only when no call is using it.
 *   - Memory returned in a bpe_ids / bpe_bytes belongs to the caller, who releases it with
 *     bpe_ids_free / bpe_bytes_free (both accept NULL and empty buffers).
 */
#ifndef BPE_H
#define BPE_H

#include <stddef.h>
#include <stdint.h>

/* CDEF-BEGIN */

/* ---- errors and version ------------------------------------------------------------ */

#define BPE_OK 0
#define BPE_ERR_NOMEM 1        /* an allocation failed */
#define BPE_ERR_ARG 2          /* an argument is invalid (NULL, out of range, bad enum) */
#define BPE_ERR_VOCAB 3        /* vocabulary inconsistent: duplicate id or bytes, empty token */
#define BPE_ERR_MERGE 4        /* a merge names an unknown id, or its result is not a token */
#define BPE_ERR_ID 5           /* a token id that the tokenizer does not know */
#define BPE_ERR_DISALLOWED 6   /* the text contains a disallowed special token */
#define BPE_ERR_IO 7           /* reading or writing a file failed; errno says why */
#define BPE_ERR_CANCELLED 8    /* the caller set progress->cancel */
#define BPE_ERR_THREAD 9       /* a thread could not be started */
#define BPE_ERR_TOOBIG 10      /* a size overflows (text > 4 GiB per piece, too many ids) */
#define BPE_ERR_NOBYTE 11      /* a byte of the text has no token (a tiktoken vocab lacking
                                  single bytes; merge-list ones drop such bytes, as HF) */
#define BPE_ERR_TEXT 12        /* a text has a code point above U+10FFFF (bpe_batch_start's
                                  UCS-4 texts) */

const char *bpe_strerror(int code);

/* The version compiled into the library; Python checks it against bpe_cffi.__version__. */
const char *bpe_version(void);

/* ---- shared buffers ----------------------------------------------------------------- */

typedef struct bpe_ids {
    uint32_t *ids;   /* token ids; malloc'd, owned by whoever holds the struct */
    size_t len;      /* ids in use */
    size_t cap;      /* ids allocated */
} bpe_ids;

typedef struct bpe_bytes {
    uint8_t *data;   /* bytes; malloc'd, owned by whoever holds the struct */
    size_t len;      /* bytes in use */
    size_t cap;      /* bytes allocated */
} bpe_bytes;

void bpe_ids_free(bpe_ids *ids);      /* frees ids->ids and zeroes the struct; NULL is fine */
void bpe_bytes_free(bpe_bytes *b);    /* frees b->data and zeroes the struct; NULL is fine */

/* Progress and cancellation of a long call.  C writes done/total/phase (plain aligned
 * 64-bit stores, read by a Python thread for the progress bar); Python writes cancel, and
 * the C call returns BPE_ERR_CANCELLED soon after it becomes nonzero (within ~0.1 s). */
typedef struct bpe_progress {
    uint64_t done;    /* units finished: bytes read, or merges made */
    uint64_t total;   /* units expected; 0 when unknown */
    int phase;        /* BPE_PHASE_* */
    int cancel;       /* set nonzero by the caller to stop the call */
} bpe_progress;

#define BPE_PHASE_READ 0     /* reading and counting / encoding bytes */
#define BPE_PHASE_MERGE 1    /* training: merges */

#define BPE_MAX_THREADS 256  /* the most threads any call uses, whatever n_threads asks */

/* The cores this process may run on (its CPU affinity set: taskset, a container's cpuset;
 * else the online cores), lowered to its cgroup's CPU quota when that is smaller (a
 * container's --cpus), at least 1 and at most BPE_MAX_THREADS: the thread count of a call
 * whose n_threads is 0.  See cores.c. */
int bpe_cores_available(void);

/* The CPU quota of this process's cgroup (the smallest on the way up to the root), in cores
 * rounded up, or 0 when there is none or it cannot be read.  prefix ("" or NULL for this
 * system) is put before every path read (/proc/self/cgroup, /proc/self/mountinfo, the
 * cgroup files): the tests' made-up file trees.  Never fails otherwise. */
int bpe_cgroup_cpu_limit(const char *prefix);

/* Gives the heap's free memory back to the operating system (glibc: malloc_trim(0), see
 * trim.c); 1 when some was, 0 when none was or this C library cannot.  Never fails; safe
 * while other threads run, but its time grows with the heap: for quiet moments. */
int bpe_heap_trim(void);

/* ---- the tokenizer ------------------------------------------------------------------ */

/* Which pair merges first. */
#define BPE_RULE_MERGES 0    /* a ranked merge list (GPT-2 merges.txt, trained merges) */
#define BPE_RULE_TIKTOKEN 1  /* tiktoken: the adjacent pair whose concatenation is the
                                lowest-ranked token; rank == token id */

/* How text is split into pieces before BPE. */
#define BPE_PATTERN_EXTERNAL 0  /* the caller splits (any regex, in Python) */
#define BPE_PATTERN_GPT2 1      /* r50k/p50k/gpt2 */
#define BPE_PATTERN_CL100K 2
#define BPE_PATTERN_O200K 3

typedef struct bpe_tokenizer bpe_tokenizer;

/* Everything a tokenizer is built from.  Arrays are read during bpe_tokenizer_new only. */
typedef struct bpe_spec {
    int rule;                      /* BPE_RULE_* */
    int pattern;                   /* BPE_PATTERN_* */
    int ignore_merges;             /* 1: a piece that is itself a token is emitted whole */
    size_t cache_capacity;         /* word-cache entries per thread; 0 disables the cache */

    size_t n_tokens;               /* ordinary tokens */
    const uint8_t *token_bytes;    /* all token bytes, concatenated */
    const size_t *token_offsets;   /* n_tokens + 1 offsets into token_bytes */
    const uint32_t *token_ids;     /* id of each token; for BPE_RULE_TIKTOKEN also its rank */

    size_t n_merges;               /* BPE_RULE_MERGES only; rank = index */
    const uint32_t *merges;        /* 2 * n_merges ids: left, right; the result is the token
                                      whose bytes are left's then right's */

    size_t n_special;              /* special tokens, matched in text before splitting */
    const uint8_t *special_bytes;
    const size_t *special_offsets; /* n_special + 1 */
    const uint32_t *special_ids;

    /* Model options (HF BPE's; model.c).  All zero = off: the byte-level model above.  Token
     * strings below mean token bytes: the UTF-8 of a character-level token, the raw bytes of
     * a byte-level one.  Only with BPE_RULE_MERGES (BPE_ERR_ARG otherwise). */
    int char_level;                /* 1: a piece's initial symbols are its UTF-8 characters
                                      (each looked up as a token), not its bytes */
    int byte_fallback;             /* 1: a symbol with no token becomes the tokens "<0xNN>" of
                                      its bytes, when all of them exist */
    int has_unk;                   /* 1: unk_id is the unknown token */
    uint32_t unk_id;               /* an ordinary token standing for a symbol with no token */
    int fuse_unk;                  /* 1: consecutive unknown symbols become one unk_id */
    double dropout;                /* BPE-dropout probability in [0, 1]; 0: off */
    uint64_t seed;                 /* seeds the dropout generators (see model.c) */
    const uint8_t *subword_prefix; /* put before every symbol but a piece's first, and cut
                                      from the right part of every merge; NULL: none */
    size_t subword_prefix_len;
    const uint8_t *word_suffix;    /* put after a piece's last symbol; NULL: none */
    size_t word_suffix_len;
} bpe_spec;

/* Builds a tokenizer.  On BPE_ERR_VOCAB / BPE_ERR_MERGE, *bad_index (if not NULL) is the index
 * of the offending token or merge.  *out is NULL on error. */
int bpe_tokenizer_new(const bpe_spec *spec, bpe_tokenizer **out, size_t *bad_index);

/* Frees the tokenizer and every per-thread cache it made.  NULL is fine. */
void bpe_tokenizer_free(bpe_tokenizer *tok);

/* Largest id + 1 over ordinary and special tokens. */
uint32_t bpe_tokenizer_id_limit(const bpe_tokenizer *tok);

/* The word cache of work slot `slot` (a single-threaded caller uses slot 0): the entries it
 * holds and its capacity now (it grows when pieces it emptied out keep returning; see
 * cache.c).  Both 0 when the slot has no cache (yet).  For tests and diagnostics: read only
 * while no call uses the tokenizer. */
void bpe_tokenizer_cache_size(const bpe_tokenizer *tok, size_t slot, size_t *count,
                              size_t *capacity);

/* Gives the BPE-dropout generators a new seed and starts their call count again (for a
 * forked child, which would otherwise draw its parent's stream).  No-op without dropout.
 * Calls running meanwhile use the old seed or the new one. */
void bpe_tokenizer_reseed(bpe_tokenizer *tok, uint64_t seed);

/* 1 once the tables of the long-piece search (longpiece.c) are built for this tokenizer,
 * else 0 (not yet, being built, or a vocabulary the search does not support).  They are
 * built at the first piece of BPE_CFFI_LONG_PIECE bytes (default 4096), or once 1 MiB of
 * pieces of 64 bytes or more has needed merging (encode.c).  For tests and diagnostics. */
int bpe_long_tables_ready(const bpe_tokenizer *tok);

/* The bytes of a token (ordinary or special); BPE_ERR_ID if unknown.  The pointer stays
 * valid as long as the tokenizer. */
int bpe_token_bytes(const bpe_tokenizer *tok, uint32_t id, const uint8_t **bytes, size_t *len);

/* The id of the token with exactly these bytes, BPE_ERR_ID if there is none. */
int bpe_token_id(const bpe_tokenizer *tok, const uint8_t *bytes, size_t len, uint32_t *id);

/* special_mode, for the encode functions: NULL treats every special token as ordinary text;
 * otherwise an array of n_special bytes, one per special token in spec order: */
#define BPE_SPECIAL_TEXT 0        /* encode it as ordinary text */
#define BPE_SPECIAL_ALLOWED 1     /* emit its id */
#define BPE_SPECIAL_DISALLOWED 2  /* fail with BPE_ERR_DISALLOWED */

/* Encodes UTF-8 text (pattern must not be EXTERNAL) and appends the ids to *out.
 * On BPE_ERR_DISALLOWED, *info is the index of the special token found. */
int bpe_encode(const bpe_tokenizer *tok, const uint8_t *text, size_t len,
               const uint8_t *special_mode, bpe_ids *out, size_t *info);

/* bpe_encode that stops with BPE_ERR_CANCELLED (out->len restored) soon after *cancel
 * becomes nonzero; it is looked at every few thousand pieces (a single piece of many
 * megabytes is finished first).  cancel may be NULL: never. */
int bpe_encode_cancellable(const bpe_tokenizer *tok, const uint8_t *text, size_t len,
                           const uint8_t *special_mode, const int *cancel, bpe_ids *out,
                           size_t *info);

/* Streaming form: encodes the longest prefix of text whose ids cannot change whatever text
 * follows, appends its ids to *out and sets *consumed to its length.  With final != 0 the
 * text is the end of the stream and all of it is encoded (same as bpe_encode). */
int bpe_encode_prefix(const bpe_tokenizer *tok, const uint8_t *text, size_t len,
                      const uint8_t *special_mode, int final, bpe_ids *out,
                      size_t *consumed, size_t *info);

/* Encodes pieces the caller already split (any pattern, no special-token matching):
 * piece i is text[piece_ends[i-1] .. piece_ends[i]), with piece_ends[-1] = 0. */
int bpe_encode_pieces(const bpe_tokenizer *tok, const uint8_t *text,
                      const size_t *piece_ends, size_t n_pieces, bpe_ids *out);

/* Encodes n texts on up to n_threads threads (0: one per core); outs[i] gets the ids of
 * texts[i], the same as bpe_encode.  On error, *info is the index of the failing text. */
int bpe_encode_batch(const bpe_tokenizer *tok, size_t n, const uint8_t *const *texts,
                     const size_t *lens, const uint8_t *special_mode, int n_threads,
                     bpe_ids *outs, size_t *info);

/* The same as bpe_encode_batch for n texts laid end to end in one buffer: text i is
 * data[ends[i-1] .. ends[i]) (ends[-1] = 0).  All ids are appended to *out, text after
 * text, and out_ends[i] (an array of n from the caller) is the end of text i's ids in
 * out->ids.  One buffer each way, so a caller pays two offsets per text instead of a
 * pointer, a length and a buffer to free.  Decreasing ends are BPE_ERR_ARG.  On error *out
 * keeps its length on entry and *info names the failing text. */
int bpe_encode_batch_flat(const bpe_tokenizer *tok, size_t n, const uint8_t *data,
                          const size_t *ends, const uint8_t *special_mode, int n_threads,
                          bpe_ids *out, size_t *out_ends, size_t *info);

/* A batch collected while it is encoded (batch_stream.c): bpe_batch_start cuts the texts
 * into groups of consecutive texts and starts n_threads - 1 worker threads (0: one per core,
 * fewer for small batches).  The texts are either laid end to end as for
 * bpe_encode_batch_flat (starts and kinds NULL), or text i lies at starts[i] (data unused)
 * with ends[i] - ends[i - 1] code units: bytes of UTF-8 when kinds is NULL, else of the
 * storage kinds[i] says (BPE_TEXT_*, below; an encoder turns such a text into UTF-8 itself:
 * a high surrogate followed by a low one is the character they make in UTF-16, any other
 * surrogate is U+FFFD, as bpe_cffi's Python layer and tiktoken encode a str; a code point
 * above U+10FFFF fails the text with BPE_ERR_TEXT).  Whatever is given must stay alive and
 * unchanged until bpe_batch_finish (a text: until its group is returned with *info 1).
 * With worker threads, a text of 1 MiB or more is cut into parts that the threads share
 * (bpe_text_cuts, below), and returned as its own group once they are all encoded.  Each
 * bpe_batch_next returns a finished group, in the order groups finish (NOT input order: place
 * them by *first): its texts first .. first + count - 1, their ids back to back in *ids, and
 * the end of each text's ids in *id_ends (count entries), and *info is 1 when no encoder reads
 * those texts any more (the caller may let them go before bpe_batch_finish), else 0 (an
 * encoder may still read them: a group the calling thread encoded a second time, see
 * batch_stream.c); *count is 0 once every group was returned.  While no group is finished the
 * calling thread encodes one itself (with no worker, about 1 MiB).  The pointers are valid
 * until the next call.  An error (the smallest failing text of the batch in *info, as
 * bpe_encode_batch) is returned instead of any further group and ends the batch; groups
 * returned before it may lie after the failing text.  bpe_batch_finish stops and joins the
 * workers and frees everything; call it exactly once per started job (NULL is fine), also
 * after an error or an early exit. */
#define BPE_TEXT_UTF8 0     /* bytes of UTF-8 (an ASCII text too) */
#define BPE_TEXT_LATIN1 1   /* one byte per character, U+0000..U+00FF */
#define BPE_TEXT_UCS2 2     /* one uint16_t per character (2-aligned) */
#define BPE_TEXT_UCS4 4     /* one uint32_t per character (4-aligned), up to U+10FFFF */

typedef struct bpe_batch_job bpe_batch_job;

int bpe_batch_start(const bpe_tokenizer *tok, size_t n, const uint8_t *data,
                    const uint8_t *const *starts, const size_t *ends, const uint8_t *kinds,
                    const uint8_t *special_mode, int n_threads, bpe_batch_job **out);

/* bpe_batch_start in two calls, for a caller that has work of its own to do before the texts
 * are ready: bpe_batch_open makes a job without texts and starts its worker threads at once
 * (n_threads - 1 of them, 0: one per core, no more than n_texts - 1), which get ready and
 * wait; bpe_batch_begin gives the texts (as bpe_batch_start takes them) and wakes them (and
 * starts more, up to n_threads - 1, when a text is large enough to be cut into parts).
 * bpe_batch_begin is called at most once; after it fails, or instead of it, only
 * bpe_batch_cancel and bpe_batch_finish (which every opened job needs) may follow. */
int bpe_batch_open(const bpe_tokenizer *tok, int n_threads, size_t n_texts,
                   bpe_batch_job **out);
int bpe_batch_begin(bpe_batch_job *job, size_t n, const uint8_t *data,
                    const uint8_t *const *starts, const size_t *ends, const uint8_t *kinds,
                    const uint8_t *special_mode);
int bpe_batch_next(bpe_batch_job *job, size_t *first, size_t *count, const uint32_t **ids,
                   const size_t **id_ends, size_t *info);
void bpe_batch_finish(bpe_batch_job *job);

/* Where a text of n code units of `kind` (BPE_TEXT_*) may be cut into parts of about
 * part_units units, such that the parts encoded separately under special_mode give the ids
 * of the whole text (batch_cut.c says why): writes at most max_cuts unit offsets, increasing,
 * each in (0, n), to cuts and returns how many (0: none found; then the text is encoded
 * whole).  scratch holds UTF-8 windows (grown as needed; the caller frees it with
 * bpe_bytes_free).  Never fails.  bpe_batch_start uses it; exported for tests. */
size_t bpe_text_cuts(const bpe_tokenizer *tok, const uint8_t *units, size_t n, int kind,
                     const uint8_t *special_mode, size_t part_units, size_t *cuts,
                     size_t max_cuts, bpe_bytes *scratch);

/* bpe_encode_cancellable of one text of n code units of `kind` (BPE_TEXT_*, as for
 * bpe_batch_start: surrogates as there, BPE_ERR_TEXT above U+10FFFF), without its UTF-8 ever
 * made whole: it is converted and encoded a part at a time, cut where bpe_text_cuts cuts
 * (encode_units.c).  The ids are those of bpe_encode of the text's UTF-8. */
int bpe_encode_units(const bpe_tokenizer *tok, const uint8_t *units, size_t n, int kind,
                     const uint8_t *special_mode, const int *cancel, bpe_ids *out,
                     size_t *info);

/* bpe_batch_next without waiting or encoding: a group already finished, the error or the
 * end as bpe_batch_next would return them, or BPE_BATCH_PENDING (*count 0) when nothing is
 * ready yet (call bpe_batch_next then).  For a caller that holds a lock it should not hold
 * long, Python's GIL: it polls holding it, and lets it go only for bpe_batch_next. */
#define BPE_BATCH_PENDING -1
int bpe_batch_poll(bpe_batch_job *job, size_t *first, size_t *count, const uint32_t **ids,
                   const size_t **id_ends, size_t *info);

/* One step of bpe_batch_next: a finished group, the error or the end as bpe_batch_next
 * would return them, else, after encoding one group of the job's (with no worker thread,
 * up to about 1 MiB of groups) or waiting for one to be published, what is ready then, or
 * BPE_BATCH_PENDING (*count 0).  A caller that looks for signals between calls (Python's,
 * for Ctrl-C) sees one within a step: bpe_batch_next itself returns only with a group for
 * the caller, which the parts of a cut text, encoded one after another, are not. */
int bpe_batch_step(bpe_batch_job *job, size_t *first, size_t *count, const uint32_t **ids,
                   const size_t **id_ends, size_t *info);

/* Stops a started job, from any thread (Ctrl-C while another thread collects it): its
 * encoders stop within a moment and bpe_batch_next / bpe_batch_poll return
 * BPE_ERR_CANCELLED (unless every group was already returned).  bpe_batch_finish is still
 * called, by the collecting thread, once it is back. */
void bpe_batch_cancel(bpe_batch_job *job);

/* The size of a started job's texts: the sum of their code units times their width. */
size_t bpe_batch_size(const bpe_batch_job *job);

/* Encodes the file in_path into the open file descriptor out_fd (written from its current
 * position, never closed here) as a flat array of little-endian token ids of id_width bytes
 * (2 or 4), in parallel chunks cut where cutting cannot change the ids.  Bytes that are not
 * UTF-8 are replaced by U+FFFD as Python's errors="replace" does.  progress may be NULL.  On
 * success *n_tokens is the number of ids written.  On error what was written stays: the
 * caller decides what becomes of the output (BPE_ERR_IO leaves errno set). */
int bpe_encode_file(const bpe_tokenizer *tok, const char *in_path, int out_fd, int id_width,
                    const uint8_t *special_mode, int n_threads, bpe_progress *progress,
                    uint64_t *n_tokens, size_t *info);

/* Appends the bytes of ids to *out.  On BPE_ERR_ID, *bad_index is the index of the id. */
int bpe_decode(const bpe_tokenizer *tok, const uint32_t *ids, size_t n, bpe_bytes *out,
               size_t *bad_index);

/* ---- pre-tokenizer (exposed for tests and for the trainer's Python fallback) ------------ */

/* Splits text with a built-in pattern; appends the end offset of each piece to *ends
 * (as uint32 when the text is < 4 GiB; BPE_ERR_TOOBIG otherwise). */
int bpe_pretokenize(int pattern, const uint8_t *text, size_t len, bpe_ids *ends);

/* The largest cut position <= len at which the text may be split in two without changing
 * the pieces (and so the ids) of a built-in pattern, whatever text follows len; 0 if there
 * is none.  A UTF-8 sequence cut off at len counts as part of what follows. */
size_t bpe_pretok_safe_cut(int pattern, const uint8_t *text, size_t len);

/* ---- trainer (filled in by the trainer issue) ----------------------------------------- */

/* TRAINER-API-BEGIN */

/* A BPE trainer: count pre-tokens (from files, or given by the caller), then learn merges.
 * Semantics (documented in full in bpe_cffi/train.py): the text is split on the special
 * tokens, each segment is pre-tokenized, pre-tokens are counted as UTF-8 bytes; each step
 * merges the pair with the highest count (every adjacent position counts), ties going to the
 * greatest (left bytes, right bytes); occurrences merge left to right without overlap.  The
 * result is the same for every n_threads and block_size.  With char_level the initial
 * tokens are characters (see bpe_cffi/train.py for the alphabet, prefix and suffix rules). */
typedef struct bpe_trainer bpe_trainer;

typedef struct bpe_trainer_config {
    int pattern;                   /* BPE_PATTERN_*; EXTERNAL: words come only from
                                      bpe_trainer_add_words */
    size_t vocab_size;             /* ids wanted in all: 256 bytes + merges + specials */
    uint64_t min_frequency;        /* stop when the best count is below it; 0: no minimum */
    int n_threads;                 /* worker threads; 0: one per core */
    size_t block_size;             /* bytes read per block; 0: 4 MiB (tests use tiny ones) */
    size_t parallel_words;         /* a merge touching at least this many words per thread
                                      runs on threads; 0: 2048 (tests use 1) */
    size_t long_word;              /* words of at least this many bytes are merged by
                                      position, not by scanning; 0: 64 (tests use 2) */
    size_t n_special;              /* special tokens: never merged across, not learned */
    const uint8_t *special_bytes;
    const size_t *special_offsets; /* n_special + 1 */
    /* Options (issue #6); all zero gives the byte-level trainer above unchanged. */
    size_t max_token_length;       /* 0: no limit; else a merge whose token would cover more
                                      than this many units (bytes; characters when char_level)
                                      is never counted nor made */
    int char_level;                /* 1: the initial symbols are the characters of the words
                                      (UTF-8), not bytes; the fields below apply */
    int has_limit_alphabet;        /* char_level: keep only the limit_alphabet most frequent
                                      characters (the initial ones first); others are dropped */
    size_t limit_alphabet;
    const uint32_t *initial_alphabet; /* char_level: code points always in the alphabet */
    size_t n_initial_alphabet;
    const uint8_t *prefix;         /* char_level: continuing_subword_prefix (UTF-8), put before */
    size_t prefix_len;             /*   every symbol that is not first in its word; 0: none */
    const uint8_t *suffix;         /* char_level: end_of_word_suffix (UTF-8), put after a */
    size_t suffix_len;             /*   word's last character; 0: none */
} bpe_trainer_config;

/* Makes a trainer.  BPE_ERR_ARG if vocab_size < 256 + n_special (byte-level) or < n_special
 * (char_level), an unknown pattern, an empty special token, a char-level option without
 * char_level, an initial_alphabet code point that is not a Unicode scalar value,
 * limit_alphabet < n_initial_alphabet, or a prefix or suffix that is not valid UTF-8.  The
 * option arrays are copied.  *out is NULL on error; free it with bpe_trainer_free. */
int bpe_trainer_new(const bpe_trainer_config *config, bpe_trainer **out);

/* Frees the trainer; NULL is fine. */
void bpe_trainer_free(bpe_trainer *trainer);

/* Reads and counts a whole file (built-in patterns only; BPE_ERR_ARG for EXTERNAL) on the
 * trainer's threads.  Bytes that are not UTF-8 are replaced by U+FFFD as Python's
 * errors="replace" does; a file is its own text (no pre-token spans two files).  Adds the
 * bytes read to progress->done (progress may be NULL; total is set to the file size if 0).
 * BPE_ERR_IO with errno set when the file cannot be opened or read; BPE_ERR_CANCELLED. */
int bpe_trainer_count_file(bpe_trainer *trainer, const char *path, bpe_progress *progress);

/* Adds n pre-tokens counted by the caller: word i is bytes[offsets[i] .. offsets[i+1])
 * (non-empty) and occurs counts[i] times.  Words may repeat; counts add up.  With char_level
 * a word that is not valid UTF-8 is BPE_ERR_ARG (and nothing of this call is added). */
int bpe_trainer_add_words(bpe_trainer *trainer, const uint8_t *bytes, const size_t *offsets,
                          const uint64_t *counts, size_t n);

/* Learns the merges (once; later calls are BPE_ERR_ARG).  Sets progress->phase to
 * BPE_PHASE_MERGE, done = merges made, total = merges wanted.  BPE_ERR_CANCELLED. */
int bpe_trainer_merge(bpe_trainer *trainer, bpe_progress *progress);

/* Number of distinct pre-tokens counted so far. */
size_t bpe_trainer_n_words(const bpe_trainer *trainer);

/* The result after bpe_trainer_merge: the ordinary tokens (id 0..n-1) as their bytes back to
 * back in *token_bytes with n + 1 offsets in *token_offsets (uint32), and 3 ids per merge
 * (left, right, result) in *merges, all appended to the caller's buffers.  The special
 * tokens follow the ordinary ones (ids n .. n + n_special - 1) and are not listed. */
int bpe_trainer_result(const bpe_trainer *trainer, bpe_bytes *token_bytes,
                       bpe_ids *token_offsets, bpe_ids *merges);

/* TRAINER-API-END */

/* CDEF-END */

#endif /* BPE_H */
