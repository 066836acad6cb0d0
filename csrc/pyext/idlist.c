/*
 * idlist.c - bpe_cffi._idlist, a small CPython extension that turns token ids held by C into
 * Python lists of ints quickly.
 *
 * Why it exists.  The encoder itself is the CFFI module (the C files of csrc/), but CFFI can
 * only hand Python a buffer of uint32, and making one int object per id from it
 * (memoryview.tolist, ffi.unpack) allocates every int: about as long as encoding the text.
 * Python ints are immutable, so one object per id value can be shared by every list: this
 * module builds a list from the objects of a cache list (cache[i] is the int i), pinned so
 * that taking them costs no reference count (see "Pinned ints"), and only allocates ints
 * for ids beyond the cache.
 *
 * Data structure and invariants.  `cache` is a Python list owned by bpe_cffi/_idcache.py with
 * cache[i] == i for every index; it only grows, by extend_cache, and every int in it is
 * pinned before it is added.  Every function here runs with the GIL held and reads the
 * cache's items and length once per call (collect_batch: once per group, as it lets the GIL
 * go while it waits), so growth by another thread in between is safe.  Ids are read from
 * raw addresses that the caller (bpe_cffi/tokenizer.py) got from C buffers it keeps alive
 * for the duration of the call; this module is private for that reason.
 *
 * Garbage collection.  A list of ints cannot be part of a reference cycle, yet CPython tracks
 * every list for its cycle collector, which then walks each id list item by item at every
 * collection of the generation it is in: a client holding thousands of id lists spent a
 * third of its time there.  So the id lists made here are untracked (PyObject_GC_UnTrack, as
 * CPython does itself for tuples and dicts of atomic values).  They are ordinary lists; the
 * one difference is that a cycle made later THROUGH such a list (appending the list to
 * itself, or an object referring back to it) is not found by the collector and stays in
 * memory until broken by hand.
 *
 * Texts in: text_units tells encode_batch where each str keeps its characters, for C to read
 * them in place, and copies the caller's list in the same pass to hold them; join_utf8
 * writes the UTF-8 of a list of str end to end (a long non-ASCII text for encode, the
 * daemon's str requests), without a bytes object per text.
 *
 * Ids in: u32_ids checks and packs the ids given to decode, as operator.index reads them.
 *
 * For the daemon (bpe_cffi/daemon/server.py): join_utf8_bytes lays out texts that arrived as
 * UTF-8 bytes, checking them as strictly as Python's decoder, and pack_batch_reply writes an
 * encode_batch reply (a msgpack map) straight from the ids C returned; ids_from_le_bytes is
 * the client's side, packed ids back into a list.
 *
 * For loading vocabularies: parse_tiktoken (tiktoken_file.c) reads a .tiktoken file.  For
 * short texts: encode_str (one_call.c) encodes a str and makes its list in one call, and
 * decode_ids decodes a short list of ids.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../utf8_char.h"
#include "idlist.h"
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Pinned ints: references taken without a count.
 *
 * A list of n ids holds n references.  Taken one by one, each would be a write to the
 * int's reference count: a random access into the ~40 bytes * vocabulary of cached ints,
 * most of them cache misses once the vocabulary outgrows L2 (about half the time of making
 * a list).  But the cached ints live as long as the process (the cache never shrinks), so
 * their counts need not be kept at all: extend_cache pins each int before the cache shows
 * it, and a list then stores the pointer and leaves the int untouched.
 *   - Python 3.12+ (PEP 683): pinned means immortal.  The interpreter's own reference
 *     operations leave an immortal object's count alone, so every count stays exact.
 *   - Before 3.12: pinned means a count of 2**60.  Dropping a list still takes one from
 *     each of its ints, so a pinned count drifts down by the references taken here without
 *     a count; it would take 2**60 of them to reach zero (decades at a billion a second).
 *   - Builds without the GIL (free-threaded), or whose headers name no immortal count, or
 *     compiled with -DIDLIST_COUNT_REFS: nothing is pinned (PIN_COUNT undefined) and
 *     references are counted one by one.
 * sys.getrefcount of a cached int shows the pinned count, not its users.  Ids beyond the
 * cache are new ints, owned by their list. */
#if !defined(Py_GIL_DISABLED) && !defined(IDLIST_COUNT_REFS)
#if PY_VERSION_HEX < 0x030C0000
#define PIN_COUNT ((Py_ssize_t)1 << 60)
#elif defined(_Py_IMMORTAL_REFCNT)
#define PIN_COUNT _Py_IMMORTAL_REFCNT
#elif defined(_Py_IMMORTAL_INITIAL_REFCNT)
#define PIN_COUNT ((Py_ssize_t)_Py_IMMORTAL_INITIAL_REFCNT)
#endif
#endif

/* The cache list's items, read once the GIL is held (the list may grow between calls, and
 * while collect_batch waits without the GIL, so its items may move). */
typedef struct cached_ints {
    PyObject *const *items;
    Py_ssize_t n;
} cached_ints;

static cached_ints cached_now(PyObject *cache)
{
    cached_ints c;
    c.items = ((PyListObject *)cache)->ob_item;
    c.n = PyList_GET_SIZE(cache);
    return c;
}

/* A reference to the int `id` for a list item (see "Pinned ints"), or NULL with an
 * exception. */
static PyObject *id_object(const cached_ints *c, uint32_t id)
{
    if ((Py_ssize_t)id < c->n) {
        PyObject *o = c->items[id];
#if !defined(PIN_COUNT)
        Py_INCREF(o);
#endif
        return o;
    }
    return PyLong_FromUnsignedLong(id);
}

/* extend_cache(cache, limit): appends the pinned ints len(cache) .. limit - 1 to cache. */
static PyObject *extend_cache(PyObject *self, PyObject *args)
{
    PyObject *cache;
    Py_ssize_t limit, i;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!n", &PyList_Type, &cache, &limit))
        return NULL;
    for (i = PyList_GET_SIZE(cache); i < limit; i++) {
        PyObject *o = PyLong_FromSsize_t(i);
        int rc;
        if (o == NULL)
            return NULL;
#if defined(PIN_COUNT)
        Py_SET_REFCNT(o, PIN_COUNT);     /* pinned before any list can see it */
        rc = PyList_Append(cache, o);
#else
        rc = PyList_Append(cache, o);
        Py_DECREF(o);
#endif
        if (rc < 0)
            return NULL;
    }
    Py_RETURN_NONE;
}

/* The array of a new list of n items, filled by the caller: a list made empty and given
 * an array from PyMem_Malloc, which is what the list frees, instead of PyList_New(n), which
 * zeroes an array only to have it overwritten (making 30K lists of 2M ids took ~20% less
 * time).  Free-threaded builds allocate list arrays their own way: PyList_New there. */
#if defined(Py_GIL_DISABLED)
static PyObject **new_list_items(PyObject **out, Py_ssize_t n)
{
    return (*out = PyList_New(n)) != NULL ? ((PyListObject *)*out)->ob_item : NULL;
}

/* Nothing to do: the items not set are still PyList_New's NULLs, which the list skips. */
static void set_list_items(PyObject *out, PyObject **items, Py_ssize_t n)
{
    (void)out;
    (void)items;
    (void)n;
}
#else
static PyObject **new_list_items(PyObject **out, Py_ssize_t n)
{
    PyObject **items = NULL;
    if ((*out = PyList_New(0)) == NULL)
        return NULL;
    if ((size_t)n > (size_t)PY_SSIZE_T_MAX / sizeof *items ||   /* as PyList_New checks */
        (items = PyMem_Malloc((size_t)n * sizeof *items)) == NULL) {
        Py_CLEAR(*out);
        PyErr_NoMemory();
    }
    return items;
}

/* Hands items to out, of which the first n are set. */
static void set_list_items(PyObject *out, PyObject **items, Py_ssize_t n)
{
    ((PyListObject *)out)->ob_item = items;
    ((PyListObject *)out)->allocated = n;
    Py_SET_SIZE(out, n);
}
#endif

/* Sets items[i] to the cached int of ids[i] from i = 0 on, up to n or the first id beyond
 * the cache; returns that index.  With pinned ints a store per id, nothing else: the
 * restrict pointers tell the compiler that the stores change neither the ids nor the
 * cache, which it then keeps in registers instead of reading them again for every id (one
 * list of 2M ids: 2.9 -> 2.7 ms, medians of 40).  Stores that bypass the cache (movnti)
 * were tried: 22% faster for that one list, twice as slow for 29.6K lists of ~70 ids. */
static Py_ssize_t fill_cached(PyObject **restrict items, const uint32_t *restrict ids,
                              Py_ssize_t n, const cached_ints *c)
{
#if defined(PIN_COUNT)
    PyObject *const *restrict table = c->items;
    const Py_ssize_t limit = c->n;
    Py_ssize_t i;
    for (i = 0; i < n && (Py_ssize_t)ids[i] < limit; i++)
        items[i] = table[ids[i]];
    return i;
#else
    (void)items;
    (void)ids;
    (void)n;
    (void)c;
    return 0;                         /* counted references: id_object does it all */
#endif
}

/* A new list of the n ids at ids[0..n), or NULL with an exception. */
static PyObject *make_list(const uint32_t *ids, Py_ssize_t n, const cached_ints *c)
{
    const cached_ints cached = *c;   /* a local copy: the stores below cannot change it */
    PyObject *out, **items;
    Py_ssize_t i;
    if (n == 0) {
        if ((out = PyList_New(0)) != NULL)
            PyObject_GC_UnTrack(out);
        return out;
    }
    if ((items = new_list_items(&out, n)) == NULL)
        return NULL;
    for (i = fill_cached(items, ids, n, &cached); i < n; i++)
        if ((items[i] = id_object(&cached, ids[i])) == NULL)
            break;
    set_list_items(out, items, i);
    if (i < n) {
        Py_DECREF(out);   /* and the ints made so far */
        return NULL;
    }
    PyObject_GC_UnTrack(out);   /* only ints: see "Garbage collection" above */
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

PyObject *bpe_py_ids_list(const uint32_t *ids, Py_ssize_t n, PyObject *cache)
{
    cached_ints c;
    if (check_cache(cache) < 0)
        return NULL;
    c = cached_now(cache);
    return make_list(ids, n, &c);
}

/* ids_list(address, n, cache) -> list of the n uint32 ids at address. */
static PyObject *ids_list(PyObject *self, PyObject *args)
{
    unsigned long long address;
    Py_ssize_t n;
    PyObject *cache;
    cached_ints c;
    (void)self;
    if (!PyArg_ParseTuple(args, "KnO", &address, &n, &cache) || check_cache(cache) < 0)
        return NULL;
    if (n < 0 || (n > 0 && address == 0)) {
        PyErr_SetString(PyExc_ValueError, "bad id buffer");
        return NULL;
    }
    c = cached_now(cache);
    return make_list((const uint32_t *)(uintptr_t)address, n, &c);
}

/* The cyclic collector paused while a run of lists is made (see "Garbage collection"):
 * each new list counts towards its threshold, and tens of thousands of them ran full
 * collections over everything the process tracks (about doubling encode_batch's time).
 * Paused and resumed while this thread holds the GIL, which nothing in between lets go (no
 * collection runs, so no finalizer): no other thread ever sees the collector off, and a
 * gc.disable() made elsewhere is never undone.  gc_pause returns whether it was on. */
#if PY_VERSION_HEX >= 0x030A0000
static int gc_pause(void)
{
    return PyGC_Disable();
}

static void gc_resume(int was_on)
{
    if (was_on)
        PyGC_Enable();
}
#else
/* Before 3.10 there is no C API for it: the gc module's isenabled, disable and enable, which
 * do the same.  An exception already set (gc_resume after a failure) is kept aside meanwhile;
 * should one of the calls fail itself, the collector is left as it is. */
static int gc_call(const char *method, int *result)
{
    PyObject *type, *value, *trace, *gc, *r = NULL;
    int ok;
    PyErr_Fetch(&type, &value, &trace);
    if ((gc = PyImport_ImportModule("gc")) != NULL) {
        r = PyObject_CallMethod(gc, method, NULL);
        Py_DECREF(gc);
    }
    ok = r != NULL;
    if (ok && result != NULL)
        *result = PyObject_IsTrue(r) == 1;
    Py_XDECREF(r);
    PyErr_Clear();
    PyErr_Restore(type, value, trace);
    return ok ? 0 : -1;
}

static int gc_pause(void)
{
    int on = 0;
    if (gc_call("isenabled", &on) < 0 || !on)
        return 0;
    return gc_call("disable", NULL) == 0;
}

static void gc_resume(int was_on)
{
    if (was_on)
        gc_call("enable", NULL);
}
#endif

static int place_lists_now(PyObject *out, Py_ssize_t at, const uint32_t *ids,
                           const size_t *ends, Py_ssize_t n_texts, const cached_ints *c);

/* Lists of the ids of texts [0, n_texts) of a buffer: text k's ids are
 * ids[ends[k-1] .. ends[k]) (ends[-1] = 0), put at out[at + k], the collector paused; -1
 * with an exception when the ends go backwards or a list cannot be made. */
static int place_lists(PyObject *out, Py_ssize_t at, const uint32_t *ids, const size_t *ends,
                       Py_ssize_t n_texts, const cached_ints *c)
{
    int was_on = gc_pause(), rc;
    rc = place_lists_now(out, at, ids, ends, n_texts, c);
    gc_resume(was_on);
    return rc;
}

static int place_lists_now(PyObject *out, Py_ssize_t at, const uint32_t *ids,
                           const size_t *ends, Py_ssize_t n_texts, const cached_ints *c)
{
    Py_ssize_t k;
    size_t start = 0;
    for (k = 0; k < n_texts; k++) {
        PyObject *part, *old;
        if (ends[k] < start || (ends[k] > start && ids == NULL) ||
            ends[k] - start > (size_t)PY_SSIZE_T_MAX) {
            PyErr_SetString(PyExc_ValueError, "id ends go backwards");
            return -1;
        }
        part = make_list(ids + start, (Py_ssize_t)(ends[k] - start), c);
        if (part == NULL)
            return -1;
        old = PyList_GET_ITEM(out, at + k);     /* NULL unless a group came twice */
        PyList_SET_ITEM(out, at + k, part);
        Py_XDECREF(old);
        start = ends[k];
    }
    return 0;
}

/* ids_lists(address, ends_address, n_texts, cache) -> n_texts lists: text k's ids are
 * ids[ends[k-1] .. ends[k]) (ends[-1] = 0), ends being size_t values at ends_address. */
static PyObject *ids_lists(PyObject *self, PyObject *args)
{
    unsigned long long address, ends_address;
    Py_ssize_t n_texts;
    PyObject *cache, *out;
    cached_ints c;
    (void)self;
    if (!PyArg_ParseTuple(args, "KKnO", &address, &ends_address, &n_texts, &cache) ||
        check_cache(cache) < 0)
        return NULL;
    if (n_texts < 0 || (n_texts > 0 && ends_address == 0)) {
        PyErr_SetString(PyExc_ValueError, "bad id buffer");
        return NULL;
    }
    if ((out = PyList_New(n_texts)) == NULL)
        return NULL;
    c = cached_now(cache);
    if (place_lists(out, 0, (const uint32_t *)(uintptr_t)address,
                    (const size_t *)(uintptr_t)ends_address, n_texts, &c) < 0)
        Py_CLEAR(out);
    return out;
}

/* ---- a whole batch job collected here (bpe_cffi Tokenizer.encode_batch) ----------------- */

/* The C core's bpe_batch_poll and bpe_batch_step (csrc/bpe.h), reached through addresses
 * the caller got from CFFI: this extension does not link the core. */
typedef struct bpe_batch_job bpe_batch_job;
typedef int (*batch_next_fn)(bpe_batch_job *job, size_t *first, size_t *count,
                             const uint32_t **ids, const size_t **id_ends, size_t *info);

#define BATCH_PENDING (-1)   /* nothing finished yet (BPE_BATCH_PENDING) */

/* The job's next finished group: one already finished is taken holding the GIL (poll);
 * else the GIL is let go for one step, which encodes a group meanwhile or waits for one, and
 * may still find nothing (BATCH_PENDING: the caller looks at signals and asks again).  A
 * busy Python thread holds the GIL for up to the switch interval each time it is asked
 * back, so asking once per group made encode_batch(num_threads=1) 8x slower beside such a
 * thread: without workers a step encodes about 1 MiB. */
static int next_group(batch_next_fn poll, batch_next_fn step, bpe_batch_job *job,
                      size_t *first, size_t *count, const uint32_t **ids,
                      const size_t **id_ends, size_t *info)
{
    int rc = poll(job, first, count, ids, id_ends, info);
    if (rc != BATCH_PENDING)
        return rc;
    Py_BEGIN_ALLOW_THREADS
    rc = step(job, first, count, ids, id_ends, info);
    Py_END_ALLOW_THREADS
    return rc;
}

/* Whether the collection of the youngest generation is due, asked with the collector paused
 * (so that the calls below, which allocate, cannot run it themselves and leave it never seen
 * due); was_on: whether it was on.  YOUNG_DUE when it was on, has a threshold, and the count
 * of allocations since its last run has passed it (gc_pause holds it off while lists are
 * made, so their allocations run it up); YOUNG_NOT_YET when that count has not passed it
 * yet; YOUNG_OFF when automatic collection is off (disabled, threshold 0, or a gc module
 * that is not CPython's as we know it); -1 with an exception.  When due, *generation is the
 * generation to collect: 1 when the middle one's count (young collections since its last)
 * has reached its threshold, so that the collection due next would be of it; else 0. */
enum { YOUNG_NOT_YET, YOUNG_DUE, YOUNG_OFF };

static int young_collection_due(PyObject *gc, int was_on, int *generation)
{
    PyObject *count, *limit;
    int due = -1;
    *generation = 0;
    if (!was_on)
        return YOUNG_OFF;
    count = PyObject_CallMethod(gc, "get_count", NULL);
    limit = PyObject_CallMethod(gc, "get_threshold", NULL);
    if (count != NULL && limit != NULL && PyTuple_Check(count) && PyTuple_Check(limit) &&
        PyTuple_GET_SIZE(count) > 1 && PyTuple_GET_SIZE(limit) > 1) {
        long n = PyLong_AsLong(PyTuple_GET_ITEM(count, 0));
        long t = PyLong_AsLong(PyTuple_GET_ITEM(limit, 0));
        long n1 = PyLong_AsLong(PyTuple_GET_ITEM(count, 1));
        long t1 = PyLong_AsLong(PyTuple_GET_ITEM(limit, 1));
        if (!PyErr_Occurred()) {
            due = t <= 0 ? YOUNG_OFF : n > t ? YOUNG_DUE : YOUNG_NOT_YET;
            *generation = n1 >= t1;
        }
    } else if (!PyErr_Occurred()) {
        due = YOUNG_OFF;
    }
    Py_XDECREF(count);
    Py_XDECREF(limit);
    return due;
}

/* Runs the collection of the youngest generation if it is due (gc.collect(0), or
 * gc.collect(1): see below): 1 when it ran or automatic collection is off (nothing more to
 * look for), 0 when it is not due yet, -1 with an exception.
 *
 * Why.  The lists collect_batch makes run that collection up (see gc_pause).  It used to
 * run at the call's first allocation after the last group, where it walked the result list
 * item by item (29.6K lists, each a cache miss or two: 0.8-1.0 ms of the yardstick's 40 ms
 * call) while no thread had anything else to do; run before the last eighth of the texts
 * instead, it still walked seven eighths of them.  collect_batch asks after every group
 * until it has run: it comes due after the first few groups, while the result list holds
 * only their lists, and it moves that list to an older generation, so the collection that
 * comes due by the end (the lists made after) does not walk it.  Unless that one is of the
 * middle generation, where the result list now is: about one collection in ten is (the
 * default threshold), and one at the end walked the whole list in about one call in five
 * (0.7-1.4 ms).  So when the collection due now would make the next one of the middle
 * generation, the middle one is collected now (gc.collect(1)), while the list is short, and
 * the next is young.  It runs once, when one would have run anyway (the same collections,
 * in another order): none that the allocations had not made due, none while the collector
 * is off. */
static int collect_young_if_due(void)
{
    PyObject *gc, *done;
    int was_on = gc_pause(), due = -1, generation = 0;
    if ((gc = PyImport_ImportModule("gc")) != NULL)
        due = young_collection_due(gc, was_on, &generation);
    gc_resume(was_on);
    if (gc == NULL)
        return -1;
    if (due == YOUNG_DUE) {
        done = PyObject_CallMethod(gc, "collect", "i", generation);
        due = done != NULL ? YOUNG_DUE : -1;
        Py_XDECREF(done);
    }
    Py_DECREF(gc);
    return due < 0 ? -1 : due != YOUNG_NOT_YET;
}

/* -1 with an exception unless every item of out was set. */
static int check_complete(PyObject *out)
{
    Py_ssize_t k;
    for (k = 0; k < PyList_GET_SIZE(out); k++)
        if (PyList_GET_ITEM(out, k) == NULL) {
            PyErr_SetString(PyExc_SystemError, "batch job ended with texts missing");
            return -1;
        }
    return 0;
}

/* Puts None in place of held's items first .. first + count - 1, dropping its references
 * to those texts.  collect_batch does it for each group whose texts the job says no
 * encoder reads any more, while the workers still encode: the thread waiting for
 * encode_batch used to drop them all after the job, a write to every str, most out of the
 * cache by then (29.6K strs of 8 MB of English: 1-2 ms with both cores otherwise idle). */
static void release_texts(PyObject *held, size_t first, size_t count)
{
    size_t k;
    for (k = first; k < first + count; k++) {
        PyObject *old = PyList_GET_ITEM(held, (Py_ssize_t)k);
        Py_INCREF(Py_None);
        PyList_SET_ITEM(held, (Py_ssize_t)k, Py_None);
        Py_XDECREF(old);
    }
}

/* collect_batch(step_address, poll_address, job_address, n_texts, cache[, held]) ->
 * (lists, 0, 0), or (None, error code, failing text) when the job reports an error: every
 * group of a started job, each list made as soon as its group is done.  held: None, or the
 * list of the n_texts texts that the caller holds for the job, whose items are let go (see
 * release_texts) as their groups come in.  Signals (Ctrl-C) are looked at after each group
 * and each step: an exception propagates.  The caller finishes the job, also after an
 * exception. */
static PyObject *collect_batch(PyObject *self, PyObject *args)
{
    unsigned long long step_address, poll_address, job_address;
    Py_ssize_t n_texts;
    PyObject *cache, *out, *held = Py_None;
    int rc = 0, young_done = 0;
    size_t first = 0, count = 0, info = 0;
    const uint32_t *ids = NULL;
    const size_t *id_ends = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "KKKnO|O", &step_address, &poll_address, &job_address,
                          &n_texts, &cache, &held) || check_cache(cache) < 0)
        return NULL;
    if (step_address == 0 || poll_address == 0 || job_address == 0 || n_texts < 0 ||
        (held != Py_None && !(PyList_CheckExact(held) && PyList_GET_SIZE(held) == n_texts))) {
        PyErr_SetString(PyExc_ValueError, "bad batch job");
        return NULL;
    }
    if ((out = PyList_New(n_texts)) == NULL)
        return NULL;
    for (;;) {
        cached_ints c;
        if (!young_done && (young_done = collect_young_if_due()) < 0)
            break;
        rc = next_group((batch_next_fn)(uintptr_t)poll_address,
                        (batch_next_fn)(uintptr_t)step_address,
                        (bpe_batch_job *)(uintptr_t)job_address,
                        &first, &count, &ids, &id_ends, &info);
        if (rc == BATCH_PENDING) {
            if (PyErr_CheckSignals() < 0)   /* Ctrl-C: the caller's finish stops the workers */
                break;
            continue;
        }
        if (rc != 0 || count == 0)
            break;
        c = cached_now(cache);   /* it may have grown while the GIL was free */
        if (first > (size_t)n_texts || count > (size_t)n_texts - first) {
            PyErr_SetString(PyExc_SystemError, "batch group out of range");
            break;
        }
        if (place_lists(out, (Py_ssize_t)first, ids, id_ends, (Py_ssize_t)count, &c) < 0)
            break;
        if (held != Py_None && info == 1 && (size_t)PyList_GET_SIZE(held) >= first + count)
            release_texts(held, first, count);   /* no encoder reads them any more */
        if (PyErr_CheckSignals() < 0)
            break;
    }
    if (rc == 0 && count == 0 && !PyErr_Occurred() && check_complete(out) == 0)
        return Py_BuildValue("(Nii)", out, 0, 0);
    Py_DECREF(out);
    if (rc == 0 || PyErr_Occurred())
        return NULL;
    return Py_BuildValue("(Oin)", Py_None, rc, (Py_ssize_t)info);
}

/* The little-endian uint32 at p (any alignment). */
static uint32_t le32_at(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* ids_from_le_bytes(data, cache) -> list of the little-endian uint32 ids packed in data
 * (a bytes-like object whose length is a multiple of 4). */
static PyObject *ids_from_le_bytes(PyObject *self, PyObject *args)
{
    Py_buffer view;
    PyObject *cache, *out = NULL;
    Py_ssize_t n, i = 0;
    (void)self;
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
    if ((out = PyList_New(n)) != NULL) {
        const unsigned char *p = view.buf;
        const cached_ints c = cached_now(cache);
        PyObject **items = ((PyListObject *)out)->ob_item;
        for (i = 0; i < n; i++, p += 4)
            if ((items[i] = id_object(&c, le32_at(p))) == NULL)
                break;
        if (i < n)
            Py_CLEAR(out);
        else
            PyObject_GC_UnTrack(out);
    }
    PyBuffer_Release(&view);
    return out;
}

/* ---- ids in: a list of ids as uint32 for C (Tokenizer.decode) ---------------------------- */

/* The id at position k as a uint32 in *out, taken as operator.index takes it (an int, a bool,
 * numpy's ints; not a float, Decimal or Fraction, which C's conversion would have cut to an
 * int); -1 with TypeError or ValueError naming the item and k. */
static int id_value(PyObject *o, Py_ssize_t k, uint32_t *out)
{
    PyObject *index;
    unsigned long v;
    if (!PyLong_CheckExact(o) && !PyIndex_Check(o)) {
        PyErr_Format(PyExc_TypeError, "token id %R at position %zd is not an int", o, k);
        return -1;
    }
    Py_INCREF(o);                  /* __index__ may run code that drops the list's item */
    index = PyNumber_Index(o);
    v = index != NULL ? PyLong_AsUnsignedLong(index) : 0;
    if (index != NULL && ((v == (unsigned long)-1 && PyErr_Occurred()) || v > 0xFFFFFFFFUL)) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "unknown token id %S at position %zd", index, k);
    }
    Py_DECREF(o);
    Py_XDECREF(index);
    if (PyErr_Occurred())
        return -1;
    *out = (uint32_t)v;
    return 0;
}

/* u32_ids(list or tuple) -> bytearray of the uint32 of every item (see id_value). */
static PyObject *u32_ids(PyObject *self, PyObject *seq)
{
    Py_ssize_t n, k;
    PyObject *out;
    uint32_t *dst;
    (void)self;
    if (!PyList_Check(seq) && !PyTuple_Check(seq)) {
        PyErr_SetString(PyExc_TypeError, "ids must be a list or tuple");
        return NULL;
    }
    n = PySequence_Fast_GET_SIZE(seq);
    if (n > PY_SSIZE_T_MAX / 4)
        return PyErr_NoMemory();
    if ((out = PyByteArray_FromStringAndSize(NULL, n * 4)) == NULL)
        return NULL;
    dst = (uint32_t *)(void *)PyByteArray_AS_STRING(out);
    for (k = 0; k < n; k++) {
        /* the size and items are read again each time: __index__ may change the list */
        PyObject *o;
        if (k >= PySequence_Fast_GET_SIZE(seq)) {
            PyErr_SetString(PyExc_RuntimeError, "the ids changed size while read");
            Py_DECREF(out);
            return NULL;
        }
        o = PySequence_Fast_GET_ITEM(seq, k);
        if (PyLong_CheckExact(o)) {
            unsigned long v = PyLong_AsUnsignedLong(o);
            if (!(v == (unsigned long)-1 && PyErr_Occurred()) && v <= 0xFFFFFFFFUL) {
                dst[k] = (uint32_t)v;
                continue;
            }
            PyErr_Clear();
        }
        if (id_value(o, k, &dst[k]) < 0) {
            Py_DECREF(out);
            return NULL;
        }
    }
    return out;
}

/* ---- texts in as bytes: checked to be UTF-8 and laid end to end -------------------------- */

/* 1 if p[0..n) is well-formed UTF-8 by the rules of Python's strict decoder (no overlong
 * form, no surrogate U+D800..U+DFFF, nothing above U+10FFFF, no cut sequence), else 0.
 * Runs of ASCII are checked 8 bytes at a time. */
static int utf8_well_formed(const unsigned char *p, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    while (i < n) {
        unsigned c = p[i], c1;
        if (c < 0x80) {
            uint64_t w;
            if (n - i >= 8 && (memcpy(&w, p + i, 8), (w & 0x8080808080808080ULL) == 0))
                i += 8;
            else
                i++;
            continue;
        }
        if (c < 0xC2 || c > 0xF4)           /* a continuation byte, an overlong 2-byte lead */
            return 0;                        /* (C0, C1) or a lead beyond U+10FFFF */
        if (c < 0xE0) {
            if (n - i < 2 || (p[i + 1] & 0xC0) != 0x80)
                return 0;
            i += 2;
            continue;
        }
        if (c < 0xF0) {
            if (n - i < 3 || ((c1 = p[i + 1]) & 0xC0) != 0x80 || (p[i + 2] & 0xC0) != 0x80)
                return 0;
            if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 >= 0xA0))
                return 0;                    /* overlong, or a surrogate */
            i += 3;
            continue;
        }
        if (n - i < 4 || ((c1 = p[i + 1]) & 0xC0) != 0x80 || (p[i + 2] & 0xC0) != 0x80 ||
            (p[i + 3] & 0xC0) != 0x80)
            return 0;
        if ((c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 >= 0x90))
            return 0;                        /* overlong, or above U+10FFFF */
        i += 4;
    }
    return 1;
}

/* What join_items needs of one kind of item: its UTF-8 length, or -1 when the item cannot
 * take the fast path; and a writer of that UTF-8 at out (room up to limit). */
typedef Py_ssize_t (*item_length_fn)(PyObject *item);
typedef char *(*item_write_fn)(PyObject *item, char *out, const char *limit);

/* The running total of length(item) over the list texts, as a new bytes object of
 * len(texts) size_t values in *ends_out.  Returns 1 when done; 0 (and no object) when an
 * item's length is -1 or the total would overflow; -1 with an exception when texts is not a
 * list or memory runs out. */
static int running_ends(PyObject *texts, item_length_fn length, PyObject **ends_out)
{
    Py_ssize_t n, k, total = 0;
    size_t *ends;
    *ends_out = NULL;
    if (!PyList_CheckExact(texts)) {
        PyErr_SetString(PyExc_TypeError, "texts must be a list");
        return -1;
    }
    n = PyList_GET_SIZE(texts);
    if ((*ends_out = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(size_t))) == NULL)
        return -1;
    ends = (size_t *)PyBytes_AS_STRING(*ends_out);
    for (k = 0; k < n; k++) {
        Py_ssize_t len = length(PyList_GET_ITEM(texts, k));
        if (len < 0 || total > PY_SSIZE_T_MAX - len) {
            Py_CLEAR(*ends_out);
            return 0;
        }
        total += len;
        ends[k] = (size_t)total;
    }
    return 1;
}

/* The last of n running ends (0 when n is 0). */
static Py_ssize_t total_of(PyObject *ends_obj)
{
    Py_ssize_t n = PyBytes_GET_SIZE(ends_obj) / (Py_ssize_t)sizeof(size_t);
    return n ? (Py_ssize_t)((const size_t *)PyBytes_AS_STRING(ends_obj))[n - 1] : 0;
}

/* (joined, ends) for the list texts, or None when an item's length is -1: one pass to size,
 * one to write, no object per item.  ends is a bytes object of len(texts) size_t values, the
 * end of each item's bytes in joined.  The shared body of join_utf8 and join_utf8_bytes. */
static PyObject *join_items(PyObject *texts, item_length_fn length, item_write_fn write)
{
    Py_ssize_t k, total;
    PyObject *joined, *ends_obj, *result;
    char *out;
    int got = running_ends(texts, length, &ends_obj);
    if (got <= 0) {
        if (got < 0)
            return NULL;
        Py_RETURN_NONE;
    }
    total = total_of(ends_obj);
    if ((joined = PyBytes_FromStringAndSize(NULL, total)) == NULL) {
        Py_DECREF(ends_obj);
        return NULL;
    }
    out = PyBytes_AS_STRING(joined);
    for (k = 0; k < PyList_GET_SIZE(texts); k++)   /* the GIL is held: the list cannot change */
        out = write(PyList_GET_ITEM(texts, k), out, PyBytes_AS_STRING(joined) + total);
    result = PyTuple_Pack(2, joined, ends_obj);
    Py_DECREF(joined);
    Py_DECREF(ends_obj);
    return result;
}

/* The length of a bytes item that is well-formed UTF-8, else -1. */
static Py_ssize_t utf8_bytes_length(PyObject *b)
{
    if (!PyBytes_CheckExact(b) ||
        !utf8_well_formed((const unsigned char *)PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b)))
        return -1;
    return PyBytes_GET_SIZE(b);
}

static char *copy_bytes(PyObject *b, char *out, const char *limit)
{
    (void)limit;
    memcpy(out, PyBytes_AS_STRING(b), (size_t)PyBytes_GET_SIZE(b));
    return out + PyBytes_GET_SIZE(b);
}

/* join_utf8_bytes(texts) -> (joined, ends) or None.  texts: a list of bytes; joined: the
 * items end to end; ends: as join_utf8's.  None when an item is not exactly bytes or is not
 * well-formed UTF-8: the caller then takes its slower path, which also reports the bad
 * item. */
static PyObject *join_utf8_bytes(PyObject *self, PyObject *texts)
{
    (void)self;
    return join_items(texts, utf8_bytes_length, copy_bytes);
}

/* ---- replies out: an encode_batch reply packed as msgpack, straight from C's ids -------- */

/* Writes the msgpack header of an unsigned int, array or bin (type: 'u', 'a' or 'b') of value
 * or length v at out (NULL: only counts); returns its length in bytes.  The shortest form,
 * as msgpack-python's packer chooses it. */
static size_t msgpack_header(int type, uint64_t v, unsigned char *out)
{
    unsigned char buf[9];
    size_t n;
    int i, width;
    if (type == 'u' && v < 0x80) {
        buf[0] = (unsigned char)v;
        n = 1;
    } else if (type == 'a' && v < 16) {
        buf[0] = (unsigned char)(0x90 | v);
        n = 1;
    } else {
        if (type == 'u')
            width = v < 0x100 ? 1 : v < 0x10000 ? 2 : v < 0x100000000ULL ? 4 : 8;
        else if (type == 'a')
            width = v < 0x10000 ? 2 : 4;
        else
            width = v < 0x100 ? 1 : v < 0x10000 ? 2 : 4;
        if (type == 'u')
            buf[0] = (unsigned char)(width == 1 ? 0xcc : width == 2 ? 0xcd
                                     : width == 4 ? 0xce : 0xcf);
        else if (type == 'a')
            buf[0] = (unsigned char)(width == 2 ? 0xdc : 0xdd);
        else
            buf[0] = (unsigned char)(width == 1 ? 0xc4 : width == 2 ? 0xc5 : 0xc6);
        for (i = 0; i < width; i++)
            buf[1 + i] = (unsigned char)(v >> (8 * (width - 1 - i)));
        n = 1 + (size_t)width;
    }
    if (out != NULL)
        memcpy(out, buf, n);
    return n;
}

/* pack_batch_reply(packed_id, ids_address, ends_address, first, count) -> bytes: the msgpack
 * map {"id": <packed_id>, "ok": true, "n": [...], "ids": [bin, ...]} of texts first ..
 * first + count - 1 of an encode_batch whose uint32 ids are at ids_address, text k's being
 * ids[ends[k-1] .. ends[k]) (ends[-1] = 0; size_t values at ends_address).  Each bin holds
 * its text's ids as they lie in memory (little-endian on the hosts the daemon uses this on).
 * Byte for byte what msgpack-python packs for the same dict, in one allocation. */
static PyObject *pack_batch_reply(PyObject *self, PyObject *args)
{
    static const char k_id[] = "\xa2id", k_ok[] = "\xa2ok\xc3", k_n[] = "\xa1n";
    static const char k_ids[] = "\xa3ids";
    Py_buffer idv;
    unsigned long long ids_address, ends_address;
    Py_ssize_t first, count, k;
    const uint32_t *ids;
    const size_t *ends;
    size_t start, a, total;
    PyObject *out = NULL;
    unsigned char *w;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*KKnn", &idv, &ids_address, &ends_address, &first, &count))
        return NULL;
    ids = (const uint32_t *)(uintptr_t)ids_address;
    ends = (const size_t *)(uintptr_t)ends_address;
    if (first < 0 || count < 0 || (count > 0 && ends == NULL)) {
        PyErr_SetString(PyExc_ValueError, "bad reply range");
        goto done;
    }
    start = first > 0 ? ends[first - 1] : 0;
    total = 1 + 3 + (size_t)idv.len + 4 + 2 + msgpack_header('a', (uint64_t)count, NULL) +
            4 + msgpack_header('a', (uint64_t)count, NULL);
    for (k = 0, a = start; k < count; k++) {
        size_t b = ends[first + k], n;
        if (b < a || (b > a && ids == NULL) || b - a > 0x3fffffffu) {
            PyErr_SetString(PyExc_ValueError, "id ends go backwards or a text is too long");
            goto done;
        }
        n = b - a;
        total += msgpack_header('u', n, NULL) + msgpack_header('b', 4 * (uint64_t)n, NULL) +
                 4 * n;
        a = b;
    }
    if ((out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total)) == NULL)
        goto done;
    w = (unsigned char *)PyBytes_AS_STRING(out);
    *w++ = 0x84;
    memcpy(w, k_id, 3);
    w += 3;
    memcpy(w, idv.buf, (size_t)idv.len);
    w += idv.len;
    memcpy(w, k_ok, 4);
    w += 4;
    memcpy(w, k_n, 2);
    w += 2;
    w += msgpack_header('a', (uint64_t)count, w);
    for (k = 0, a = start; k < count; a = ends[first + k], k++)
        w += msgpack_header('u', ends[first + k] - a, w);
    memcpy(w, k_ids, 4);
    w += 4;
    w += msgpack_header('a', (uint64_t)count, w);
    for (k = 0, a = start; k < count; k++) {
        size_t n = ends[first + k] - a;
        w += msgpack_header('b', 4 * (uint64_t)n, w);
        if (n > 0)
            memcpy(w, ids + a, 4 * n);
        w += 4 * n;
        a = ends[first + k];
    }
done:
    PyBuffer_Release(&idv);
    return out;
}

/* ---- texts in: the UTF-8 of a list of str, laid end to end ------------------------------ */

/* How many of the n Latin-1 characters at p take two UTF-8 bytes (those >= 0x80). */
static Py_ssize_t extra_ucs1(const Py_UCS1 *p, Py_ssize_t n)
{
    Py_ssize_t i = 0, extra = 0;
#if defined(__SSE2__)
    for (; i + 16 <= n; i += 16)
        extra += __builtin_popcount(
            (unsigned)_mm_movemask_epi8(_mm_loadu_si128((const __m128i *)(p + i))));
#endif
    for (; i < n; i++)
        extra += p[i] >> 7;
    return extra;
}

/* Adds to *len the extra UTF-8 bytes of the n UCS-2 characters at p (one for >= 0x80, two
 * for >= 0x800); returns 1 if one of them is a surrogate (no UTF-8 exists), else 0. */
static int extra_ucs2(const Py_UCS2 *p, Py_ssize_t n, Py_ssize_t *len)
{
    Py_ssize_t i = 0, extra = 0;
    int surrogates = 0;
#if defined(__SSE2__)
    /* unsigned compares by flipping the sign bit; lane counters hold at most 2 per round,
     * so they are summed every 4096 rounds, long before an int16 could overflow */
    const __m128i sign = _mm_set1_epi16((short)0x8000);
    const __m128i over7f = _mm_set1_epi16((short)(0x7F ^ 0x8000));
    const __m128i over7ff = _mm_set1_epi16((short)(0x7FF ^ 0x8000));
    const __m128i high5 = _mm_set1_epi16((short)0xF800), sur = _mm_set1_epi16((short)0xD800);
    __m128i bad = _mm_setzero_si128();
    while (i + 8 <= n) {
        __m128i count = _mm_setzero_si128();
        int16_t lanes[8];
        int rounds, k;
        for (rounds = 0; rounds < 4096 && i + 8 <= n; rounds++, i += 8) {
            __m128i v = _mm_loadu_si128((const __m128i *)(p + i));
            __m128i x = _mm_xor_si128(v, sign);
            count = _mm_sub_epi16(count, _mm_cmpgt_epi16(x, over7f));
            count = _mm_sub_epi16(count, _mm_cmpgt_epi16(x, over7ff));
            bad = _mm_or_si128(bad, _mm_cmpeq_epi16(_mm_and_si128(v, high5), sur));
        }
        _mm_storeu_si128((__m128i *)lanes, count);
        for (k = 0; k < 8; k++)
            extra += lanes[k];
    }
    surrogates = _mm_movemask_epi8(bad) != 0;
#endif
    for (; i < n; i++) {
        Py_UCS2 c = p[i];
        extra += (c >= 0x80) + (c >= 0x800);
        surrogates |= (c & 0xF800) == 0xD800;
    }
    *len += extra;
    return surrogates;
}

/* extra_ucs2 for UCS-4 characters (three extra bytes for >= 0x10000). */
static int extra_ucs4(const Py_UCS4 *p, Py_ssize_t n, Py_ssize_t *len)
{
    Py_ssize_t i, extra = 0;
    int surrogates = 0;
    for (i = 0; i < n; i++) {
        Py_UCS4 c = p[i];
        extra += (c >= 0x80) + (c >= 0x800) + (c >= 0x10000);
        surrogates |= (c & 0x1FF800) == 0xD800;
    }
    *len += extra;
    return surrogates;
}

/* The UTF-8 length of s, or -1 if it holds a surrogate code point (one loop per storage
 * kind: PyUnicode_READ's switch per character costs more than the counting).  The extra bytes
 * (beyond one per character) are counted 16 or 8 characters at a time where SSE2 is there:
 * most non-ASCII text (English with curly quotes, CJK) is 2-byte kind. */
static Py_ssize_t utf8_length(PyObject *s)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    const void *data = PyUnicode_DATA(s);
    if (PyUnicode_IS_ASCII(s))
        return n;
    if (PyUnicode_KIND(s) == PyUnicode_1BYTE_KIND)
        return n + extra_ucs1(data, n);
    if (PyUnicode_KIND(s) == PyUnicode_2BYTE_KIND)
        return extra_ucs2(data, n, &n) ? -1 : n;
    return extra_ucs4(data, n, &n) ? -1 : n;
}

/* Appends the UTF-8 of code point c (not a surrogate) at out; returns the end. */
static char *put_utf8(Py_UCS4 c, char *out)
{
    return (char *)bpe_put_utf8(c, (uint8_t *)out);
}

/* The UTF-8 of the n Latin-1 characters at p, written at out; returns the end.  Blocks of
 * 16 ASCII characters are copied whole where SSE2 is there. */
static char *write_ucs1(const Py_UCS1 *p, Py_ssize_t n, char *out)
{
    Py_ssize_t i = 0, end;
    while (i < n) {
#if defined(__SSE2__)
        for (; i + 16 <= n; i += 16, out += 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)(p + i));
            if (_mm_movemask_epi8(v) != 0)
                break;
            _mm_storeu_si128((__m128i *)out, v);
        }
#endif
        for (end = i + 16 < n ? i + 16 : n; i < end; i++) {
            if (p[i] < 0x80) {
                *out++ = (char)p[i];
            } else {
                *out++ = (char)(0xC0 | (p[i] >> 6));
                *out++ = (char)(0x80 | (p[i] & 0x3F));
            }
        }
    }
    return out;
}

/* write_ucs1 for UCS-2 characters (no surrogates), with room up to `limit` in the output:
 * blocks of 8 ASCII characters are packed to bytes whole where SSE2 is there; other blocks
 * go through bpe_put_bmp_wide while 8 of its 3-byte stores fit before limit. */
static char *write_ucs2(const Py_UCS2 *p, Py_ssize_t n, char *out, const char *limit)
{
    Py_ssize_t i = 0, end;
#if defined(__SSE2__)
    const __m128i high = _mm_set1_epi16((short)0xFF80);
#endif
    while (i < n) {
#if defined(__SSE2__)
        for (; i + 8 <= n; i += 8, out += 8) {
            __m128i v = _mm_loadu_si128((const __m128i *)(p + i));
            __m128i ascii = _mm_cmpeq_epi16(_mm_and_si128(v, high), _mm_setzero_si128());
            if (_mm_movemask_epi8(ascii) != 0xFFFF)
                break;
            _mm_storel_epi64((__m128i *)out, _mm_packus_epi16(v, v));
        }
#endif
        end = i + 8 < n ? i + 8 : n;
        if (limit - out >= 3 * 8) {
            for (; i < end; i++)
                out = (char *)bpe_put_bmp_wide(p[i], (uint8_t *)out);
        } else {
            for (; i < end; i++)
                out = p[i] < 0x80 ? (*out = (char)p[i], out + 1) : put_utf8(p[i], out);
        }
    }
    return out;
}

/* Writes the UTF-8 of s (no surrogates: utf8_length checked) at out, which has room up to
 * limit; returns the end. */
static char *write_utf8(PyObject *s, char *out, const char *limit)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(s), i;
    const void *data = PyUnicode_DATA(s);
    if (PyUnicode_IS_ASCII(s)) {
        memcpy(out, data, (size_t)n);
        return out + n;
    }
    if (PyUnicode_KIND(s) == PyUnicode_1BYTE_KIND)
        return write_ucs1(data, n, out);
    if (PyUnicode_KIND(s) == PyUnicode_2BYTE_KIND)
        return write_ucs2(data, n, out, limit);
    for (i = 0; i < n; i++) {
        Py_UCS4 c = ((const Py_UCS4 *)data)[i];
        out = c < 0x80 ? (*out = (char)c, out + 1) : put_utf8(c, out);
    }
    return out;
}

/* The UTF-8 length of an item that is exactly a str without surrogates, else -1. */
static Py_ssize_t str_utf8_length(PyObject *s)
{
    return PyUnicode_CheckExact(s) ? utf8_length(s) : -1;
}

/* join_utf8(texts) -> (joined, ends) or None.  texts: a list; joined: the UTF-8 of its
 * items end to end (bytes); ends: a bytes object of len(texts) size_t values, the end of
 * each item's bytes in joined.  None when an item is not exactly a str or holds a surrogate
 * code point: the caller then takes its slower path, which also reports bad items.  One pass
 * to size, one to copy: no bytes object per text. */
static PyObject *join_utf8(PyObject *self, PyObject *texts)
{
    (void)self;
    return join_items(texts, str_utf8_length, write_utf8);
}

/* The number of characters of an exact, ready str, else -1. */
static Py_ssize_t str_units(PyObject *s)
{
    if (!PyUnicode_CheckExact(s))
        return -1;
#if PY_VERSION_HEX < 0x030C0000
    if (!PyUnicode_IS_READY(s))
        return -1;
#endif
    return PyUnicode_GET_LENGTH(s);
}

/* How a str keeps its characters, as the C core's BPE_TEXT_* values (csrc/bpe.h; this
 * extension does not include it, tests/test_idlist.py checks that they agree): an ASCII str's
 * bytes are its UTF-8 (BPE_TEXT_UTF8, 0), any other is stored one code unit of 1, 2 or 4
 * bytes per character (BPE_TEXT_LATIN1, _UCS2, _UCS4 are those widths). */
static char str_kind(PyObject *s)
{
    return PyUnicode_IS_ASCII(s) ? 0 : (char)PyUnicode_KIND(s);
}

/* How far ahead text_units asks for the str objects it is about to read: a batch's strs are
 * scattered over megabytes, most of them out of the cache, and this all happens before any
 * encoder thread starts (29.6K documents of 8 MB of English in encode_batch: 0.75 ms in two
 * passes without, 0.5 ms in one pass with, medians of 12 calls). */
#define PREFETCH_AHEAD 16
#if defined(__GNUC__)
#define PREFETCH(p) __builtin_prefetch(p)
#else
#define PREFETCH(p) ((void)(p))
#endif

/* Fills starts, kinds and the running ends of the n items of texts, and, when copy is not
 * NULL, copy[k] with a new reference to item k; 0 when an item is not an exact, ready str or
 * the total length would pass PY_SSIZE_T_MAX (one str many times over can): running_ends'
 * checks, in the one pass text_units makes.  The copy's references are taken in the same
 * pass because each is a write to a str that pass reads anyway: a list(texts) before it
 * met every str out of the cache a second time (29.6K documents of 8 MB of English: list()
 * 0.5-1.2 ms and text_units 0.5-0.8 ms in the yardstick's process). */
static int fill_units(PyObject *texts, Py_ssize_t n, PyObject **copy, const void **starts,
                      size_t *ends, char *kinds)
{
    PyObject *const *items = ((PyListObject *)texts)->ob_item;
    Py_ssize_t k, total = 0;
    for (k = 0; k < n; k++) {
        PyObject *t = items[k];
        Py_ssize_t len;
        if (k + PREFETCH_AHEAD < n)
            PREFETCH(items[k + PREFETCH_AHEAD]);
        if ((len = str_units(t)) < 0 || total > PY_SSIZE_T_MAX - len)
            return 0;
        if (copy != NULL) {
            Py_INCREF(t);
            copy[k] = t;
        }
        total += len;
        ends[k] = (size_t)total;
        starts[k] = PyUnicode_DATA(t);
        kinds[k] = str_kind(t);
    }
    return 1;
}

/* text_units(texts, own) -> (held, starts, ends, kinds) or None: where each str of the list
 * texts keeps its characters, for bpe_batch_start to read them in place (its encoders write
 * the UTF-8 of the non-ASCII ones, in parallel).  held: the list of the strs that the
 * caller must hold while C reads them: texts itself when own is true (a list nothing else
 * sees or changes), else a copy made in the same pass (the caller's list may be changed by
 * another thread while C reads without the GIL).  starts: a bytes object of len(held)
 * addresses; ends: the running total of the texts' lengths in characters (size_t values);
 * kinds: one str_kind byte per text.  None when an item is not exactly a str.  One pass over
 * the strs (the list cannot change meanwhile: the GIL is held throughout).
 * held is untracked by the cycle collector: it holds only strs, which refer to nothing, so
 * it cannot be in a cycle (CPython untracks tuples of such items the same way), and a
 * collection during the batch then skips its 29.6K-odd strs, each a cache miss (1.6-4 ms of
 * a 50 ms call in the yardstick, against 0.5-1.4 ms without them).  A list of texts that
 * is not all strs is left as it was. */
static PyObject *text_units(PyObject *self, PyObject *args)
{
    Py_ssize_t n;
    PyObject *texts, *held, *starts_obj, *ends_obj, *kinds_obj, *result = NULL;
    int own;
    (void)self;
    if (!PyArg_ParseTuple(args, "Op", &texts, &own))
        return NULL;
    if (!PyList_CheckExact(texts)) {
        PyErr_SetString(PyExc_TypeError, "texts must be a list");
        return NULL;
    }
    n = PyList_GET_SIZE(texts);
    if (own)
        Py_INCREF(texts);
    held = own ? texts : PyList_New(n);     /* a copy's items: NULL until set */
    starts_obj = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(void *));
    ends_obj = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(size_t));
    kinds_obj = PyBytes_FromStringAndSize(NULL, n);
    if (held != NULL && starts_obj != NULL && ends_obj != NULL && kinds_obj != NULL) {
        if (fill_units(texts, n, own ? NULL : ((PyListObject *)held)->ob_item,
                       (const void **)PyBytes_AS_STRING(starts_obj),
                       (size_t *)PyBytes_AS_STRING(ends_obj), PyBytes_AS_STRING(kinds_obj))) {
            PyObject_GC_UnTrack(held);
            result = PyTuple_Pack(4, held, starts_obj, ends_obj, kinds_obj);
        } else {
            Py_INCREF(Py_None);
            result = Py_None;
        }
    }
    Py_XDECREF(held);
    Py_XDECREF(starts_obj);
    Py_XDECREF(ends_obj);
    Py_XDECREF(kinds_obj);
    return result;
}

/* str_storage(text) -> (address, kind) of an exact str's characters: kind as str_kind (0 when
 * they are ASCII, which is their UTF-8, else the width of the code units CPython stores),
 * len(text) of them; None for anything else.  The caller encodes straight from there instead
 * of copying the text; it holds `text` for as long as it reads the address (a str never
 * changes or moves). */
static PyObject *str_storage(PyObject *self, PyObject *text)
{
    (void)self;
    if (str_units(text) < 0)
        Py_RETURN_NONE;
    return Py_BuildValue("(Ni)", PyLong_FromVoidPtr(PyUnicode_DATA(text)), (int)str_kind(text));
}

static PyMethodDef methods[] = {
    {"join_utf8", join_utf8, METH_O, "join_utf8(list of str) -> (bytes, size_t ends) or None"},
    {"str_storage", str_storage, METH_O, "str_storage(str) -> (address, kind) or None"},
    {"text_units", text_units, METH_VARARGS,
     "text_units(list of str, own) -> (held list, starts, ends, kinds) or None"},
    {"ids_list", ids_list, METH_VARARGS, "ids_list(address, n, cache) -> list"},
    {"ids_lists", ids_lists, METH_VARARGS,
     "ids_lists(address, ends_address, n_texts, cache) -> list of lists"},
    {"extend_cache", extend_cache, METH_VARARGS,
     "extend_cache(cache, limit): append the pinned ints len(cache) .. limit - 1"},
    {"collect_batch", collect_batch, METH_VARARGS,
     "collect_batch(step_address, poll_address, job_address, n_texts, cache[, held]) -> "
     "(lists or None, rc, info)"},
    {"u32_ids", u32_ids, METH_O, "u32_ids(list or tuple of ids) -> bytearray of uint32"},
    {"ids_from_le_bytes", ids_from_le_bytes, METH_VARARGS,
     "ids_from_le_bytes(data, cache) -> list"},
    {"join_utf8_bytes", join_utf8_bytes, METH_O,
     "join_utf8_bytes(list of bytes) -> (bytes, size_t ends) or None"},
    {"pack_batch_reply", pack_batch_reply, METH_VARARGS,
     "pack_batch_reply(packed_id, ids_address, ends_address, first, count) -> bytes"},
    {"encode_str", (PyCFunction)(void (*)(void))bpe_py_encode_str, METH_FASTCALL,
     "encode_str(text, keep, tokenizer, mode, encode, ids_free, cache) -> list, (rc, info) "
     "or None (see one_call.c)"},
    {"decode_ids", (PyCFunction)(void (*)(void))bpe_py_decode_ids, METH_FASTCALL,
     "decode_ids(ids, keep, tokenizer, decode, bytes_free, errors) -> bytes or str, "
     "(rc, index) or None (see one_call.c)"},
    {"parse_tiktoken", bpe_py_parse_tiktoken, METH_O,
     "parse_tiktoken(data) -> {rank: token bytes} or None (see tiktoken_file.c)"},
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
