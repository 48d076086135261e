/* Optional compiled record walk for storage.record_validation (issues 20 and 32: produce-path CPU).
 *
 * walk(buf, pos, end, count, need_keys) -> list[int] | None
 *
 * Walks `count` v2 records in buf[pos:end] with exactly the acceptance rules of the pure-Python
 * walk (storage.record_validation.walk_records): returns the indexes of keyless records when
 * `need_keys` (else an empty list) if the records are valid, and None if they are not. It builds
 * no error message: on None the caller reruns the Python walk, which raises Kafka's exact
 * InvalidRecordError, so the two can never disagree on a message, only (if this file had a bug)
 * on a verdict, which tests/unit/test_record_walk_equivalence.py pins over a corpus.
 *
 * Walker(count, need_keys): the same walk over a records section fed in chunks (feed(chunk) ->
 * bool, then finish() -> the same list | None), for compressed batches walked as they decompress.
 *
 * Building it is optional (setup.py: Extension(optional=True)); without a compiler the package
 * installs without it and record_validation uses the Python walk.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* Zigzag varint of at most `max_bytes` bytes at *pos, not reaching `bound`. 0 if malformed. */
static inline int read_varint(const uint8_t *d, Py_ssize_t *pos, Py_ssize_t bound, int max_bytes,
                              int64_t *out)
{
    uint64_t raw = 0;
    Py_ssize_t p = *pos;
    int shift = 0;
    for (int k = 0; k < max_bytes; k++, p++, shift += 7) {
        if (p >= bound)
            return 0;
        uint8_t b = d[p];
        if (shift < 64)
            raw |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *pos = p + 1;
            *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            return 1;
        }
    }
    return 0;
}

/* One record at *pos, record index `i`: 1 if valid (then *pos is past it and *keyless says whether
 * it has no key), 0 if invalid, -1 if the buffer ends before the record does (its length varint or
 * its body reaches past `end`). Touches no Python object. */
static inline int walk_one(const uint8_t *d, Py_ssize_t *ppos, Py_ssize_t end, int64_t i, int *keyless)
{
    int64_t v;
    Py_ssize_t pos = *ppos;
    /* record length: a varint cut by `end` may be a valid one continued past it */
    {
        uint64_t raw = 0;
        int shift = 0, k = 0;
        for (;; k++, shift += 7) {
            if (k >= 5)
                return 0;
            if (pos + k >= end)
                return -1;
            uint8_t b = d[pos + k];
            raw |= (uint64_t)(b & 0x7F) << shift;
            if (!(b & 0x80))
                break;
        }
        pos += k + 1;
        v = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
    }
    if (v < 0)
        return 0;
    if (v > (int64_t)(end - pos))
        return -1;
    Py_ssize_t stop = pos + (Py_ssize_t)v;
    if (pos >= stop)  /* attributes byte (its value is not checked, as in Kafka for v2) */
        return 0;
    pos += 1;
    if (!read_varint(d, &pos, stop, 10, &v))  /* timestamp delta: only its extent matters */
        return 0;
    if (!read_varint(d, &pos, stop, 5, &v) || v != i)  /* offset delta == record index */
        return 0;
    if (!read_varint(d, &pos, stop, 5, &v))  /* key length */
        return 0;
    *keyless = 0;
    if (v >= 0) {
        if (v > (int64_t)(stop - pos))
            return 0;
        pos += (Py_ssize_t)v;
    } else if (v == -1) {
        *keyless = 1;
    } else {
        return 0;
    }
    if (!read_varint(d, &pos, stop, 5, &v))  /* value length */
        return 0;
    if (v >= 0) {
        if (v > (int64_t)(stop - pos))
            return 0;
        pos += (Py_ssize_t)v;
    } else if (v != -1) {
        return 0;
    }
    int64_t headers;
    if (!read_varint(d, &pos, stop, 5, &headers) || headers < 0)
        return 0;
    for (int64_t h = 0; h < headers; h++) {
        if (!read_varint(d, &pos, stop, 5, &v) || v < 0)  /* header key length */
            return 0;
        if (v > (int64_t)(stop - pos))
            return 0;
        pos += (Py_ssize_t)v;
        if (!read_varint(d, &pos, stop, 5, &v))  /* header value length */
            return 0;
        if (v >= 0) {
            if (v > (int64_t)(stop - pos))
                return 0;
            pos += (Py_ssize_t)v;
        } else if (v != -1) {
            return 0;
        }
    }
    if (pos != stop)
        return 0;
    *ppos = pos;
    return 1;
}

/* 1 if valid; counts keyless records in *nkeyless and, when `keyless` is not NULL, stores their
 * indexes there, at most `cap` of them (the caller sized it from a first pass; the cap keeps a
 * buffer changed between the passes from writing past it). Touches no Python object. */
static int walk_core(const uint8_t *d, Py_ssize_t pos, Py_ssize_t end, int64_t count,
                     int64_t *keyless, Py_ssize_t cap, Py_ssize_t *nkeyless)
{
    Py_ssize_t nk = 0;
    for (int64_t i = 0; i < count; i++) {
        int kl;
        if (pos >= end)
            return 0;
        if (walk_one(d, &pos, end, i, &kl) != 1)  /* here a record cut by `end` is invalid */
            return 0;
        if (kl) {
            if (keyless && nk < cap)
                keyless[nk] = i;
            nk++;
        }
    }
    *nkeyless = nk;
    return pos == end;
}

/* Records sections from this size on are walked without the GIL (offloaded compressed batches
 * run on executor threads; the loop thread keeps serving meanwhile). */
#define NOGIL_BYTES (64 * 1024)

static PyObject *walk(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer view;
    Py_ssize_t pos, end;
    long long count;
    int need_keys;
    if (!PyArg_ParseTuple(args, "y*nnLp:walk", &view, &pos, &end, &count, &need_keys))
        return NULL;
    if (pos < 0 || end < pos || end > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "walk: bad range");
        return NULL;
    }
    const uint8_t *d = (const uint8_t *)view.buf;
    Py_ssize_t nk = 0;
    int ok;
    if (end - pos >= NOGIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        ok = walk_core(d, pos, end, (int64_t)count, NULL, 0, &nk);
        Py_END_ALLOW_THREADS
    } else {
        ok = walk_core(d, pos, end, (int64_t)count, NULL, 0, &nk);
    }
    if (!ok) {
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    if (!need_keys || nk == 0) {
        PyBuffer_Release(&view);
        return PyList_New(0);
    }
    int64_t *idx = PyMem_Malloc(sizeof(int64_t) * (size_t)nk);
    if (idx == NULL) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    Py_ssize_t nk2 = 0;
    if (!walk_core(d, pos, end, (int64_t)count, idx, nk, &nk2) || nk2 != nk) {
        /* the buffer changed between the passes: let the Python walk decide */
        PyMem_Free(idx);
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    PyBuffer_Release(&view);
    PyObject *out = PyList_New(nk);
    if (out == NULL) {
        PyMem_Free(idx);
        return NULL;
    }
    for (Py_ssize_t k = 0; k < nk; k++) {
        PyObject *n = PyLong_FromLongLong(idx[k]);
        if (n == NULL) {
            Py_DECREF(out);
            PyMem_Free(idx);
            return NULL;
        }
        PyList_SET_ITEM(out, k, n);
    }
    PyMem_Free(idx);
    return out;
}

/* --- the streaming walk: records section fed chunk by chunk ------------------------------------
 *
 * Walker(count, need_keys): feed(chunk) -> bool (False once the records are invalid), then
 * finish() -> list[int] | None, with walk()'s verdict over the concatenation of the chunks. A
 * compressed batch is validated as it is decompressed: each chunk is walked and dropped, so the
 * decompressed section is never joined into one buffer. Records wholly inside a chunk take
 * walk_one (the whole-buffer walk's code); a record that straddles chunks is walked byte by byte by
 * the state machine below, which applies the same rules (each field bounded by the record's
 * length, key and value bodies skipped without being copied), then the fast path resumes. */

enum { S_LEN, S_ATTR, S_TS, S_DELTA, S_KEYLEN, S_VALLEN, S_HCOUNT, S_HKEYLEN, S_HVALLEN, S_SKIP };

typedef struct {
    PyObject_HEAD
    int64_t count;
    int64_t i;            /* index of the record being walked */
    int need_keys;
    int failed;
    int state;            /* S_LEN at a record boundary */
    int after_skip;       /* the state that follows S_SKIP */
    uint64_t vraw;        /* a varint cut by a chunk boundary: its bytes so far */
    int vshift, vn;
    int64_t rec_left;     /* bytes of the current record's body not consumed yet */
    int64_t skip_left;    /* bytes of a key/value/header body still to skip */
    int64_t headers_left;
    int64_t *keyless;     /* indexes of keyless records (need_keys) */
    Py_ssize_t nk, kcap;
} Walker;

static int walker_keyless(Walker *w, int64_t i)
{
    if (!w->need_keys)
        return 1;
    if (w->nk == w->kcap) {
        Py_ssize_t ncap = w->kcap ? 2 * w->kcap : 64;
        int64_t *k = PyMem_Realloc(w->keyless, sizeof(int64_t) * (size_t)ncap);
        if (k == NULL)
            return 0;
        w->keyless = k;
        w->kcap = ncap;
    }
    w->keyless[w->nk++] = i;
    return 1;
}

/* A record's fields are all read: it must end here. */
static inline int record_done(Walker *w)
{
    if (w->rec_left != 0)
        return 0;
    w->i++;
    w->state = S_LEN;
    return 1;
}

/* After a length field `v` of a body (key, value, header key/value), skip it and go on to `next`. */
static inline void skip_then(Walker *w, int64_t v, int next)
{
    if (v > 0) {
        w->skip_left = v;
        w->after_skip = next;
        w->state = S_SKIP;
    } else {
        w->state = next;
    }
}

/* A field is complete with value v: check it and move to the next state. 0 if invalid. */
static int field_done(Walker *w, int64_t v)
{
    switch (w->state) {
    case S_LEN:
        if (v < 0)
            return 0;
        w->rec_left = v;
        w->state = S_ATTR;
        return 1;
    case S_TS:
        w->state = S_DELTA;
        return 1;
    case S_DELTA:
        if (v != w->i)
            return 0;
        w->state = S_KEYLEN;
        return 1;
    case S_KEYLEN:
        if (v >= 0) {
            if (v > w->rec_left)
                return 0;
            skip_then(w, v, S_VALLEN);
        } else if (v == -1) {
            if (!walker_keyless(w, w->i))
                return -1;
            w->state = S_VALLEN;
        } else {
            return 0;
        }
        return 1;
    case S_VALLEN:
        if (v >= 0) {
            if (v > w->rec_left)
                return 0;
            skip_then(w, v, S_HCOUNT);
        } else if (v == -1) {
            w->state = S_HCOUNT;
        } else {
            return 0;
        }
        return 1;
    case S_HCOUNT:
        if (v < 0)
            return 0;
        w->headers_left = v;
        if (v == 0)
            return record_done(w);
        w->state = S_HKEYLEN;
        return 1;
    case S_HKEYLEN:
        if (v < 0 || v > w->rec_left)
            return 0;
        skip_then(w, v, S_HVALLEN);
        return 1;
    case S_HVALLEN:
        if (v >= 0) {
            if (v > w->rec_left)
                return 0;
        } else if (v != -1) {
            return 0;
        }
        if (--w->headers_left == 0) {
            if (v > 0) {
                skip_then(w, v, S_LEN);  /* record_done once skipped */
                return 1;
            }
            return record_done(w);
        }
        skip_then(w, v > 0 ? v : 0, S_HKEYLEN);
        return 1;
    }
    return 0;
}

/* Walk d[0:n] from the walker's state. 1 if still valid, 0 if invalid, -1 on a Python error. */
static int walker_feed(Walker *w, const uint8_t *d, Py_ssize_t n)
{
    Py_ssize_t pos = 0;
    while (pos < n) {
        if (w->state == S_LEN && w->vn == 0) {
            if (w->i >= w->count)
                return 0;  /* bytes after the last record */
            int kl;
            int r = walk_one(d, &pos, n, w->i, &kl);
            if (r == 0)
                return 0;
            if (r == 1) {
                if (kl && !walker_keyless(w, w->i))
                    return -1;
                w->i++;
                continue;
            }
            /* r == -1: the record continues in the next chunk; walk it byte by byte */
        }
        if (w->state == S_SKIP) {
            int64_t take = w->skip_left;
            if (take > (int64_t)(n - pos))
                take = (int64_t)(n - pos);
            pos += (Py_ssize_t)take;
            w->skip_left -= take;
            w->rec_left -= take;
            if (w->skip_left == 0) {
                if (w->after_skip == S_LEN) {  /* the last header value was the end of the record */
                    if (!record_done(w))
                        return 0;
                } else {
                    w->state = w->after_skip;
                }
            }
            continue;
        }
        if (w->state != S_LEN) {
            if (w->rec_left <= 0)
                return 0;  /* a field reaches past the record's end */
            w->rec_left--;
        }
        uint8_t b = d[pos++];
        if (w->state == S_ATTR) {
            w->state = S_TS;
            continue;
        }
        int max_bytes = w->state == S_TS ? 10 : 5;
        if (w->vshift < 64)
            w->vraw |= (uint64_t)(b & 0x7F) << w->vshift;
        w->vshift += 7;
        w->vn++;
        if (b & 0x80) {
            if (w->vn >= max_bytes)
                return 0;
            continue;
        }
        int64_t v = (int64_t)(w->vraw >> 1) ^ -(int64_t)(w->vraw & 1);
        w->vraw = 0;
        w->vshift = w->vn = 0;
        int r = field_done(w, v);
        if (r != 1)
            return r;
    }
    return 1;
}

static int Walker_init(Walker *w, PyObject *args, PyObject *kwds)
{
    long long count;
    int need_keys;
    static char *kwlist[] = {"count", "need_keys", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "Lp:Walker", kwlist, &count, &need_keys))
        return -1;
    PyMem_Free(w->keyless);
    w->keyless = NULL;
    w->nk = w->kcap = 0;
    w->count = count;
    w->need_keys = need_keys;
    w->i = 0;
    w->failed = count < 0;
    w->state = S_LEN;
    w->vraw = 0;
    w->vshift = w->vn = 0;
    w->rec_left = w->skip_left = w->headers_left = 0;
    return 0;
}

static void Walker_dealloc(Walker *w)
{
    PyMem_Free(w->keyless);
    Py_TYPE(w)->tp_free((PyObject *)w);
}

static PyObject *Walker_feed(Walker *w, PyObject *arg)
{
    if (w->failed)
        Py_RETURN_FALSE;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    int r = walker_feed(w, (const uint8_t *)view.buf, view.len);
    PyBuffer_Release(&view);
    if (r < 0)
        return PyErr_NoMemory();
    if (r == 0)
        w->failed = 1;
    return PyBool_FromLong(r);
}

static PyObject *Walker_finish(Walker *w, PyObject *Py_UNUSED(ignored))
{
    if (w->failed || w->i != w->count || w->state != S_LEN || w->vn != 0)
        Py_RETURN_NONE;
    PyObject *out = PyList_New(w->nk);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t k = 0; k < w->nk; k++) {
        PyObject *n = PyLong_FromLongLong(w->keyless[k]);
        if (n == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, k, n);
    }
    return out;
}

static PyMethodDef walker_methods[] = {
    {"feed", (PyCFunction)Walker_feed, METH_O,
     "feed(chunk) -> False once the records are invalid (then every later feed is ignored)"},
    {"finish", (PyCFunction)Walker_finish, METH_NOARGS,
     "finish() -> keyless record indexes (empty unless need_keys), or None if the records are invalid"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject WalkerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "storage._recwalk.Walker",
    .tp_doc = "Walker(count, need_keys): the record walk over a records section fed in chunks.",
    .tp_basicsize = sizeof(Walker),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Walker_init,
    .tp_dealloc = (destructor)Walker_dealloc,
    .tp_methods = walker_methods,
};

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS,
     "walk(buf, pos, end, count, need_keys) -> keyless record indexes, or None if the records are invalid"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "storage._recwalk",
    .m_doc = "Compiled v2 record walk (see storage.record_validation).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__recwalk(void)
{
    if (PyType_Ready(&WalkerType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&WalkerType);
    if (PyModule_AddObject(m, "Walker", (PyObject *)&WalkerType) < 0) {
        Py_DECREF(&WalkerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
