/*
 * train_words.c - the word table of the trainer: distinct pre-tokens with their counts.
 *
 * Data structure: an open-addressing hash table (linear probing, capacity a power of two,
 * load factor <= 1/2) of slots {hash, count, offset, len}; a word of up to 8 bytes is kept in
 * the slot itself (in offset, zero padded), a longer one in an append-only arena at
 * [offset, offset + len).  Each counting thread owns one table, so no
 * locking; at the end the tables are combined into one (train_words_merge_into).
 *
 * Invariants: a slot is empty iff hash == 0 (train_hash_bytes never returns 0); no two
 * slots hold the same bytes; counts are 64-bit and only grow.  The table's memory grows with
 * the number and length of distinct words, never with the amount of text counted.
 */
#include <stdlib.h>
#include <string.h>

#include "train.h"

#define INITIAL_CAPACITY 1024

/* A fast 64-bit hash of short byte strings: 8 bytes at a time, a multiply-xorshift mix.
 * Performance note: pre-tokens are mostly 2-10 bytes, so one or two rounds. */
uint64_t train_hash_bytes(const uint8_t *p, size_t len)
{
    const uint64_t m = 0x9E3779B97F4A7C15ull;
    uint64_t h = 0x243F6A8885A308D3ull ^ (len * m);
    while (len >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        h = (h ^ v) * m;
        h ^= h >> 29;
        p += 8;
        len -= 8;
    }
    if (len) {
        uint64_t v = 0;
        memcpy(&v, p, len);
        h = (h ^ v ^ ((uint64_t)len << 56)) * m;
        h ^= h >> 29;
    }
    h = (h ^ (h >> 32)) * 0xD6E8FEB86659FD93ull;
    h ^= h >> 32;
    return h ? h : 1;
}

void train_words_init(train_words *w)
{
    memset(w, 0, sizeof *w);
}

void train_words_free(train_words *w)
{
    if (w == NULL)
        return;
    free(w->slots);
    free(w->arena);
    memset(w, 0, sizeof *w);
}

static int grow_slots(train_words *w)
{
    size_t cap = w->capacity ? w->capacity * 2 : INITIAL_CAPACITY;
    train_word_slot *slots = calloc(cap, sizeof *slots);
    if (slots == NULL)
        return BPE_ERR_NOMEM;
    for (size_t i = 0; i < w->capacity; i++) {
        train_word_slot *s = &w->slots[i];
        if (s->hash == 0)
            continue;
        size_t j = s->hash & (cap - 1);
        while (slots[j].hash != 0)
            j = (j + 1) & (cap - 1);
        slots[j] = *s;
    }
    free(w->slots);
    w->slots = slots;
    w->capacity = cap;
    return BPE_OK;
}

static int arena_append(train_words *w, const uint8_t *p, size_t len, uint64_t *offset)
{
    if (w->arena_len + len > w->arena_cap) {
        size_t cap = w->arena_cap ? w->arena_cap : 1 << 16;
        while (cap < w->arena_len + len)
            cap *= 2;
        uint8_t *a = realloc(w->arena, cap);
        if (a == NULL)
            return BPE_ERR_NOMEM;
        w->arena = a;
        w->arena_cap = cap;
    }
    memcpy(w->arena + w->arena_len, p, len);
    *offset = w->arena_len;
    w->arena_len += len;
    return BPE_OK;
}

/* Adds count to the word with this hash and bytes, inserting it if new. */
static int add_hashed(train_words *w, uint64_t h, const uint8_t *p, size_t len, uint64_t count)
{
    if (len > UINT32_MAX)
        return BPE_ERR_TOOBIG;
    if ((w->n + 1) * 2 > w->capacity) {
        int rc = grow_slots(w);
        if (rc != BPE_OK)
            return rc;
    }
    size_t mask = w->capacity - 1;
    size_t j = h & mask;
    uint64_t inline_key = 0;
    if (len <= 8)
        memcpy(&inline_key, p, len);
    for (;;) {
        train_word_slot *s = &w->slots[j];
        if (s->hash == 0)
            break;
        if (s->hash == h && s->len == len &&
            (len <= 8 ? s->offset == inline_key : memcmp(w->arena + s->offset, p, len) == 0)) {
            s->count += count;
            return BPE_OK;
        }
        j = (j + 1) & mask;
    }
    uint64_t offset = inline_key;
    if (len > 8) {
        int rc = arena_append(w, p, len, &offset);
        if (rc != BPE_OK)
            return rc;
    }
    train_word_slot *s = &w->slots[j];
    s->hash = h;
    s->count = count;
    s->offset = offset;
    s->len = (uint32_t)len;
    w->n++;
    return BPE_OK;
}

int train_words_add(train_words *w, const uint8_t *p, size_t len, uint64_t count)
{
    return add_hashed(w, train_hash_bytes(p, len), p, len, count);
}

int train_words_merge_into(train_words *dst, const train_words *src)
{
    for (size_t i = 0; i < src->capacity; i++) {
        const train_word_slot *s = &src->slots[i];
        if (s->hash == 0)
            continue;
        int rc = add_hashed(dst, s->hash, train_slot_bytes(src, s), s->len, s->count);
        if (rc != BPE_OK)
            return rc;
    }
    return BPE_OK;
}
