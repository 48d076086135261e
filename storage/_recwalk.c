/* Optional compiled record walk for storage.record_validation (issue 20: produce-path CPU).
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

/* 1 if valid; counts keyless records in *nkeyless and, when `keyless` is not NULL, stores their
 * indexes there, at most `cap` of them (the caller sized it from a first pass; the cap keeps a
 * buffer changed between the passes from writing past it). Touches no Python object. */
static int walk_core(const uint8_t *d, Py_ssize_t pos, Py_ssize_t end, int64_t count,
                     int64_t *keyless, Py_ssize_t cap, Py_ssize_t *nkeyless)
{
    int64_t v;
    Py_ssize_t nk = 0;
    for (int64_t i = 0; i < count; i++) {
        if (pos >= end)
            return 0;
        if (!read_varint(d, &pos, end, 5, &v))  /* record length */
            return 0;
        if (v < 0 || v > (int64_t)(end - pos))
            return 0;
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
        if (v >= 0) {
            if (v > (int64_t)(stop - pos))
                return 0;
            pos += (Py_ssize_t)v;
        } else if (v == -1) {
            if (keyless && nk < cap)
                keyless[nk] = i;
            nk++;
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
    return PyModule_Create(&module);
}
