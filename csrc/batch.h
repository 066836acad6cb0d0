/*
 * batch.h - the per-call thread runner shared by batch.c and encode_file.c.
 */
#ifndef BPE_BATCH_H
#define BPE_BATCH_H

#include <stddef.h>

/* The number of threads to use: n_threads, or bpe_cores_available() when n_threads <= 0, at
 * most BPE_MAX_THREADS and work_items (and at least 1). */
int bpe_thread_count(int n_threads, size_t work_items);

/* Runs fn(ctx) on the calling thread and on n - 1 new threads, and joins them all before
 * returning.  If a thread cannot be started, fewer run (fn must share work dynamically). */
void bpe_run_threads(int n, void (*fn)(void *), void *ctx);

#endif
