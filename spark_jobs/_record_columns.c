/* Optional compiled decoder of v2 records into Arrow column buffers, for the Spark source's raw
 * reader (spark_jobs/raw_reader.py, issue 32: no Python object per record).
 *
 * Columns() accumulates records; add(buf, pos, end, count, base_offset, base_timestamp,
 * log_append_time, lo, hi) decodes the `count` records of one batch's (decompressed) records
 * section buf[pos:end] and appends those whose offset o has lo <= o < hi: offset, timestamp in
 * microseconds (base_timestamp + the record's delta, or log_append_time for every record when it is
 * >= 0), timestamp type (0 CreateTime, 1 LogAppendTime), key and value. Keys and values go into
 * Arrow binary layouts: int32 offsets, one data buffer, a validity bitmap (bit set = not null).
 * Record headers are skipped. add() returns how many records it appended and raises ValueError on
 * a malformed record (nothing of that batch is kept then). finish() returns
 * (n, offsets, timestamps_us, ts_types, key_validity or None, key_offsets, key_data,
 *  value_validity or None, value_offsets, value_data) as bytes objects and starts over.
 *
 * encode_records() is the other direction, for the Spark sink's raw writer (spark_jobs/raw_writer.py):
 * Arrow key and value columns into v2 records, split by partition (see its comment below).
 *
 * Building it is optional (setup.py: Extension(optional=True)); without it the source reads through
 * librdkafka, as it does on executors that only received the shipped zip.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    char *p;
    Py_ssize_t len, cap;
} Buf;

static int buf_reserve(Buf *b, Py_ssize_t extra)
{
    if (b->len + extra <= b->cap)
        return 1;
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) {
        if (cap > PY_SSIZE_T_MAX / 2) {
            PyErr_NoMemory();
            return 0;
        }
        cap *= 2;
    }
    char *p = PyMem_Realloc(b->p, (size_t)cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return 0;
    }
    b->p = p;
    b->cap = cap;
    return 1;
}

static inline int buf_put(Buf *b, const void *src, Py_ssize_t n)
{
    if (!buf_reserve(b, n))
        return 0;
    memcpy(b->p + b->len, src, (size_t)n);
    b->len += n;
    return 1;
}

/* A binary column: int32 offsets (n + 1 of them), data, validity bits. */
typedef struct {
    Buf offsets, data, valid;
    int any_null;
} BinCol;

typedef struct {
    PyObject_HEAD
    Py_ssize_t n;
    Buf offsets, stamps, types;
    BinCol key, value;
} Columns;

static void bin_free(BinCol *c)
{
    PyMem_Free(c->offsets.p);
    PyMem_Free(c->data.p);
    PyMem_Free(c->valid.p);
    memset(c, 0, sizeof(*c));
}

static void columns_reset(Columns *self)
{
    PyMem_Free(self->offsets.p);
    PyMem_Free(self->stamps.p);
    PyMem_Free(self->types.p);
    memset(&self->offsets, 0, sizeof(Buf));
    memset(&self->stamps, 0, sizeof(Buf));
    memset(&self->types, 0, sizeof(Buf));
    bin_free(&self->key);
    bin_free(&self->value);
    self->n = 0;
}

static void Columns_dealloc(Columns *self)
{
    columns_reset(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Zigzag varint of at most `max_bytes` bytes at *pos, not reaching `bound`. 0 if malformed. The
 * same reader as storage/_recwalk.c's: the two extensions are built and shipped apart (design.md
 * keeps spark_jobs, which executors receive, off the broker's storage package), so neither includes
 * the other's code. */
static inline int read_varint(const uint8_t *d, Py_ssize_t *pos, Py_ssize_t bound, int max_bytes, int64_t *out)
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

/* Append one key or value (len -1: null) of record number `row` (0-based over the whole builder). */
static int bin_append(BinCol *c, Py_ssize_t row, const uint8_t *src, int64_t len)
{
    if (row % 8 == 0) {
        uint8_t zero = 0;
        if (!buf_put(&c->valid, &zero, 1))
            return 0;
    }
    if (len >= 0) {
        c->valid.p[row / 8] |= (char)(1u << (row % 8));
        if (!buf_put(&c->data, src, (Py_ssize_t)len))
            return 0;
    } else {
        c->any_null = 1;
    }
    if (c->data.len > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "more than 2 GiB of keys or values in one Arrow batch");
        return 0;
    }
    int32_t end = (int32_t)c->data.len;
    return buf_put(&c->offsets, &end, 4);
}

/* Undo the rows appended since `n0` (a malformed record later in the same batch). */
static void truncate_rows(Columns *self, Py_ssize_t n0, Py_ssize_t key_len, Py_ssize_t value_len)
{
    self->n = n0;
    self->offsets.len = n0 * 8;
    self->stamps.len = n0 * 8;
    self->types.len = n0 * 4;
    BinCol *cols[2] = {&self->key, &self->value};
    Py_ssize_t lens[2] = {key_len, value_len};
    for (int i = 0; i < 2; i++) {
        BinCol *c = cols[i];
        c->offsets.len = (n0 + 1) * 4;
        c->data.len = lens[i];
        c->valid.len = (n0 + 7) / 8;
        if (n0 % 8 && c->valid.len)  /* clear the bits of the dropped rows in the last byte */
            c->valid.p[c->valid.len - 1] &= (char)((1u << (n0 % 8)) - 1);
    }
}

static PyObject *Columns_add(Columns *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos, end;
    long long count, base_offset, base_ts, lat, lo, hi;
    if (!PyArg_ParseTuple(args, "y*nnLLLLLL", &view, &pos, &end, &count, &base_offset, &base_ts, &lat, &lo, &hi))
        return NULL;
    const uint8_t *d = (const uint8_t *)view.buf;
    PyObject *result = NULL;
    if (pos < 0 || end > view.len || pos > end) {
        PyErr_SetString(PyExc_ValueError, "records section outside the buffer");
        goto done;
    }
    if (self->key.offsets.len == 0) {  /* first row ever: the leading 0 offsets */
        int32_t zero = 0;
        if (!buf_put(&self->key.offsets, &zero, 4) || !buf_put(&self->value.offsets, &zero, 4))
            goto done;
    }
    Py_ssize_t n0 = self->n, key0 = self->key.data.len, value0 = self->value.data.len;
    int32_t ts_type = lat >= 0 ? 1 : 0;
    long long added = 0;
    for (long long i = 0; i < count; i++) {
        int64_t len, ts_delta, off_delta, klen, vlen;
        if (!read_varint(d, &pos, end, 5, &len) || len < 0 || len > (int64_t)(end - pos))
            goto malformed;
        Py_ssize_t stop = pos + (Py_ssize_t)len;
        if (pos >= stop)
            goto malformed;
        pos += 1;  /* attributes */
        if (!read_varint(d, &pos, stop, 10, &ts_delta) || !read_varint(d, &pos, stop, 5, &off_delta))
            goto malformed;
        if (!read_varint(d, &pos, stop, 5, &klen) || klen < -1 || klen > (int64_t)(stop - pos))
            goto malformed;
        const uint8_t *key = d + pos;
        if (klen > 0)
            pos += (Py_ssize_t)klen;
        if (!read_varint(d, &pos, stop, 5, &vlen) || vlen < -1 || vlen > (int64_t)(stop - pos))
            goto malformed;
        const uint8_t *value = d + pos;
        long long offset = base_offset + off_delta;
        pos = stop;  /* headers skipped: the record's length says where it ends */
        if (offset < lo || offset >= hi)
            continue;
        int64_t stamp_us = (lat >= 0 ? lat : base_ts + ts_delta) * 1000;
        Py_ssize_t row = self->n;
        if (!buf_put(&self->offsets, &offset, 8) || !buf_put(&self->stamps, &stamp_us, 8)
            || !buf_put(&self->types, &ts_type, 4) || !bin_append(&self->key, row, key, klen)
            || !bin_append(&self->value, row, value, vlen)) {
            truncate_rows(self, n0, key0, value0);
            goto done;
        }
        self->n++;
        added++;
    }
    result = PyLong_FromLongLong(added);
    goto done;
malformed:
    truncate_rows(self, n0, key0, value0);
    PyErr_SetString(PyExc_ValueError, "malformed record in a fetched batch");
done:
    PyBuffer_Release(&view);
    return result;
}

static PyObject *take(Buf *b)
{
    return PyBytes_FromStringAndSize(b->p ? b->p : "", b->len);
}

static PyObject *Columns_finish(Columns *self, PyObject *Py_UNUSED(ignored))
{
    if (self->key.offsets.len == 0) {
        int32_t zero = 0;
        if (!buf_put(&self->key.offsets, &zero, 4) || !buf_put(&self->value.offsets, &zero, 4))
            return NULL;
    }
    PyObject *kv = self->key.any_null ? take(&self->key.valid) : Py_NewRef(Py_None);
    PyObject *vv = self->value.any_null ? take(&self->value.valid) : Py_NewRef(Py_None);
    PyObject *out = Py_BuildValue("(nNNNNNNNNN)", self->n, take(&self->offsets), take(&self->stamps),
                                  take(&self->types), kv, take(&self->key.offsets), take(&self->key.data), vv,
                                  take(&self->value.offsets), take(&self->value.data));
    columns_reset(self);
    return out;
}

static PyObject *Columns_rows(Columns *self, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromSsize_t(self->n);
}

static PyMethodDef columns_methods[] = {
    {"add", (PyCFunction)Columns_add, METH_VARARGS,
     "add(buf, pos, end, count, base_offset, base_timestamp, log_append_time, lo, hi) -> records appended"},
    {"finish", (PyCFunction)Columns_finish, METH_NOARGS,
     "finish() -> (n, offsets, timestamps_us, ts_types, key_validity, key_offsets, key_data, "
     "value_validity, value_offsets, value_data); the builder starts over"},
    {"rows", (PyCFunction)Columns_rows, METH_NOARGS, "rows() -> records held"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ColumnsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "spark_jobs._record_columns.Columns",
    .tp_doc = "Columns(): v2 records decoded into Arrow column buffers.",
    .tp_basicsize = sizeof(Columns),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)Columns_dealloc,
    .tp_methods = columns_methods,
};

/* --- the sink's encoder ------------------------------------------------------------------------
 *
 * encode_records(value_validity, value_offsets, value_data, value_first,
 *                key_validity, key_offsets, key_data, key_first, n, partitions, null_partition,
 *                max_bytes[, headers[, row_headers]]) -> [(partition, count, records), ...]
 *
 * Encodes n rows of Arrow binary columns (buffers as Arrow holds them: validity bitmap or None,
 * int32 offsets, data; *_first = the array's slice offset) as v2 records, timestamp delta 0, offset
 * deltas from 0 within each chunk, each ending with ``headers``: the record's headers section as
 * bytes, the same for every row (its varint count, then each header; default b"\0", no headers).
 * ``row_headers`` (optional, or None): a Spark sink's headers column, list<struct<key, value>>, as
 * (list_validity, list_offsets, list_first, struct_count, struct_validity, struct_first,
 *  key_validity, key_offsets, key_data, key_first, value_validity, value_offsets, value_data,
 *  value_first): each row's own headers come first, then the fixed ones; a null list is no
 * headers, a null value length -1, a null entry or key a ValueError (Kafka has no null header
 * keys). A row goes to partition
 * (murmur2(key) & 0x7fffffff) % partitions (Java's default partitioner, librdkafka's murmur2) when
 * it has a key, else to null_partition. Each partition's rows become chunks of at most max_bytes of
 * records (a record larger than that is a chunk of its own), returned in row order per partition.
 * Key buffers may all be None (no key column). The caller adds each chunk's batch header.
 */
static uint32_t kafka_murmur2(const uint8_t *d, Py_ssize_t len)
{
    const uint32_t m = 0x5bd1e995u;
    uint32_t h = 0x9747b28cu ^ (uint32_t)len;
    Py_ssize_t i, n4 = len / 4;
    for (i = 0; i < n4; i++) {
        const uint8_t *q = d + i * 4;
        uint32_t k = (uint32_t)q[0] | ((uint32_t)q[1] << 8) | ((uint32_t)q[2] << 16) | ((uint32_t)q[3] << 24);
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    const uint8_t *t = d + (len & ~(Py_ssize_t)3);
    switch (len % 4) {
    case 3:
        h ^= (uint32_t)t[2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)t[1] << 8;
        /* fall through */
    case 1:
        h ^= (uint32_t)t[0];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

static inline int zz_len(int64_t v)
{
    uint64_t u = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    int n = 1;
    while (u >= 0x80) {
        u >>= 7;
        n++;
    }
    return n;
}

static inline char *zz_put(char *p, int64_t v)
{
    uint64_t u = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    while (u >= 0x80) {
        *p++ = (char)((u & 0x7f) | 0x80);
        u >>= 7;
    }
    *p++ = (char)u;
    return p;
}

/* A length-prefixed field of a record: the zigzag varint length (-1: null), then the bytes. */
static inline char *zz_bytes(char *p, const uint8_t *d, int32_t len)
{
    p = zz_put(p, len);
    if (len > 0) {
        memcpy(p, d, (size_t)len);
        p += len;
    }
    return p;
}

typedef struct {
    Buf buf;
    Py_ssize_t count;
} Chunk;

/* One Arrow binary column as the encoder reads it. */
typedef struct {
    Py_buffer valid, offs, data;
    int has_valid, present;
    Py_ssize_t first;
} ArrowBin;

static int arrow_bin_open(ArrowBin *c, PyObject *valid, PyObject *offs, PyObject *data, Py_ssize_t first,
                          Py_ssize_t n)
{
    memset(c, 0, sizeof(*c));
    c->first = first;
    if (offs == Py_None)
        return 1; /* no such column */
    if (PyObject_GetBuffer(offs, &c->offs, PyBUF_SIMPLE) < 0)
        return 0;
    c->present = 1;
    if (PyObject_GetBuffer(data, &c->data, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&c->offs);
        c->present = 0;
        return 0;
    }
    if (valid != Py_None) {
        if (PyObject_GetBuffer(valid, &c->valid, PyBUF_SIMPLE) < 0) {
            PyBuffer_Release(&c->offs);
            PyBuffer_Release(&c->data);
            c->present = 0;
            return 0;
        }
        c->has_valid = 1;
    }
    if (first < 0 || c->offs.len < (first + n + 1) * 4 ||
        (c->has_valid && c->valid.len * 8 < first + n)) {
        PyErr_SetString(PyExc_ValueError, "Arrow buffers shorter than the rows");
        return 0;
    }
    return 1;
}

static void arrow_bin_close(ArrowBin *c)
{
    if (c->present) {
        PyBuffer_Release(&c->offs);
        PyBuffer_Release(&c->data);
    }
    if (c->has_valid)
        PyBuffer_Release(&c->valid);
    c->present = c->has_valid = 0;
}

/* Row i's bytes: 1 and (*p, *len) when not null, 0 when null, -1 (exception set) when out of range. */
static inline int arrow_bin_get(const ArrowBin *c, Py_ssize_t i, const uint8_t **p, int32_t *len)
{
    Py_ssize_t j = c->first + i;
    if (c->has_valid && !((((const uint8_t *)c->valid.buf)[j >> 3] >> (j & 7)) & 1))
        return 0;
    const int32_t *o = (const int32_t *)c->offs.buf;
    int32_t a = o[j], b = o[j + 1];
    if (a < 0 || b < a || b > c->data.len) {
        PyErr_SetString(PyExc_ValueError, "Arrow offsets outside the data buffer");
        return -1;
    }
    *p = (const uint8_t *)c->data.buf + a;
    *len = b - a;
    return 1;
}

/* A headers column (list<struct<key, value>>) as the encoder reads it. */
typedef struct {
    int present, has_lvalid, has_svalid;
    Py_buffer lvalid, loffs, svalid;
    Py_ssize_t lfirst, scount, sfirst;
    ArrowBin key, val;
} RowHeaders;

static void row_headers_close(RowHeaders *h)
{
    if (h->present)
        PyBuffer_Release(&h->loffs);
    if (h->has_lvalid)
        PyBuffer_Release(&h->lvalid);
    if (h->has_svalid)
        PyBuffer_Release(&h->svalid);
    arrow_bin_close(&h->key);
    arrow_bin_close(&h->val);
    h->present = h->has_lvalid = h->has_svalid = 0;
}

static int row_headers_open(RowHeaders *h, PyObject *spec, Py_ssize_t n)
{
    memset(h, 0, sizeof(*h));
    if (spec == NULL || spec == Py_None)
        return 1;
    PyObject *lv, *lo, *sv, *kv, *ko, *kd, *vv, *vo, *vd;
    Py_ssize_t kfirst, vfirst;
    if (!PyArg_ParseTuple(spec, "OOnnOnOOOnOOOn;row_headers: a tuple of 14 buffers and offsets", &lv, &lo,
                          &h->lfirst, &h->scount, &sv, &h->sfirst, &kv, &ko, &kd, &kfirst, &vv, &vo, &vd, &vfirst))
        return 0;
    if (PyObject_GetBuffer(lo, &h->loffs, PyBUF_SIMPLE) < 0)
        return 0;
    h->present = 1;
    if (lv != Py_None) {
        if (PyObject_GetBuffer(lv, &h->lvalid, PyBUF_SIMPLE) < 0)
            return 0;
        h->has_lvalid = 1;
    }
    if (sv != Py_None) {
        if (PyObject_GetBuffer(sv, &h->svalid, PyBUF_SIMPLE) < 0)
            return 0;
        h->has_svalid = 1;
    }
    if (h->lfirst < 0 || h->scount < 0 || h->sfirst < 0 || h->loffs.len < (h->lfirst + n + 1) * 4 ||
        (h->has_lvalid && h->lvalid.len * 8 < h->lfirst + n) ||
        (h->has_svalid && h->svalid.len * 8 < h->sfirst + h->scount)) {
        PyErr_SetString(PyExc_ValueError, "headers column buffers shorter than the rows");
        return 0;
    }
    if (!arrow_bin_open(&h->key, kv, ko, kd, kfirst, h->scount) || !arrow_bin_open(&h->val, vv, vo, vd, vfirst, h->scount))
        return 0;
    if (!h->key.present || !h->val.present) {
        PyErr_SetString(PyExc_ValueError, "the headers column needs key and value buffers");
        return 0;
    }
    return 1;
}

/* Row i's entries [*a, *b) of the headers column: 1, or 0 with an exception set. */
static int row_headers_range(const RowHeaders *h, Py_ssize_t i, int32_t *a, int32_t *b)
{
    Py_ssize_t j = h->lfirst + i;
    *a = *b = 0;
    if (h->has_lvalid && !((((const uint8_t *)h->lvalid.buf)[j >> 3] >> (j & 7)) & 1))
        return 1; /* a null list: no headers of its own */
    const int32_t *o = (const int32_t *)h->loffs.buf;
    if (o[j] < 0 || o[j + 1] < o[j] || o[j + 1] > h->scount) {
        PyErr_SetString(PyExc_ValueError, "headers column offsets outside its entries");
        return 0;
    }
    *a = o[j];
    *b = o[j + 1];
    return 1;
}

/* Entry e's key and value (value length -1: null): 1, or 0 with an exception set. */
static int row_header_get(const RowHeaders *h, int32_t e, const uint8_t **kp, int32_t *klen, const uint8_t **vp,
                          int32_t *vlen)
{
    Py_ssize_t s = h->sfirst + e;
    if (h->has_svalid && !((((const uint8_t *)h->svalid.buf)[s >> 3] >> (s & 7)) & 1)) {
        PyErr_SetString(PyExc_ValueError, "a null entry in the headers column");
        return 0;
    }
    int r = arrow_bin_get(&h->key, e, kp, klen);
    if (r <= 0) {
        if (r == 0)
            PyErr_SetString(PyExc_ValueError, "a header with a null key (Kafka has no null header keys)");
        return 0;
    }
    r = arrow_bin_get(&h->val, e, vp, vlen);
    if (r < 0)
        return 0;
    if (r == 0) {
        *vp = NULL;
        *vlen = -1;
    }
    return 1;
}

static PyObject *flush_chunk(PyObject *out, Chunk *ch, Py_ssize_t partition)
{
    PyObject *t = Py_BuildValue("(nnN)", partition, ch->count, take(&ch->buf));
    PyMem_Free(ch->buf.p);
    memset(ch, 0, sizeof(*ch));
    if (t == NULL || PyList_Append(out, t) < 0) {
        Py_XDECREF(t);
        return NULL;
    }
    Py_DECREF(t);
    return out;
}

static PyObject *encode_records(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *vv, *vo, *vd, *kv, *ko, *kd;
    Py_ssize_t vfirst, kfirst, n, partitions, null_partition, max_bytes;
    const char *hb = "";
    Py_ssize_t hlen = 1; /* b"\0": no headers */
    PyObject *row_spec = NULL;
    if (!PyArg_ParseTuple(args, "OOOnOOOnnnnn|y#O", &vv, &vo, &vd, &vfirst, &kv, &ko, &kd, &kfirst, &n, &partitions,
                          &null_partition, &max_bytes, &hb, &hlen, &row_spec))
        return NULL;
    if (n < 0 || partitions <= 0 || null_partition < 0 || null_partition >= partitions || max_bytes <= 0 ||
        hlen < 1) {
        PyErr_SetString(PyExc_ValueError, "bad row count, partition count, null partition, max_bytes or headers");
        return NULL;
    }
    /* The fixed section's count and items, for rows that have headers of their own too. */
    uint64_t fixed_u = 0;
    Py_ssize_t fixed_at = 0;
    for (int shift = 0;; shift += 7) {
        if (fixed_at >= hlen || shift > 28) {
            PyErr_SetString(PyExc_ValueError, "bad headers section (its count)");
            return NULL;
        }
        uint8_t byte = (uint8_t)hb[fixed_at++];
        fixed_u |= (uint64_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80))
            break;
    }
    int64_t fixed_count = (int64_t)(fixed_u >> 1) ^ -(int64_t)(fixed_u & 1);
    if (fixed_count < 0) {
        PyErr_SetString(PyExc_ValueError, "bad headers section (a negative count)");
        return NULL;
    }
    const char *fixed_items = hb + fixed_at;
    Py_ssize_t fixed_len = hlen - fixed_at;
    RowHeaders rh;
    ArrowBin val, key;
    memset(&key, 0, sizeof(key));
    memset(&val, 0, sizeof(val));
    if (!row_headers_open(&rh, row_spec, n)) {
        row_headers_close(&rh);
        return NULL;
    }
    PyObject *out = NULL;
    Chunk *chunks = NULL;
    if (!arrow_bin_open(&val, vv, vo, vd, vfirst, n))
        goto done;
    if (!val.present) {
        PyErr_SetString(PyExc_ValueError, "a value column is required");
        goto done;
    }
    if (!arrow_bin_open(&key, kv, ko, kd, kfirst, n))
        goto done;
    chunks = PyMem_Calloc((size_t)partitions, sizeof(Chunk));
    out = PyList_New(0);
    if (chunks == NULL || out == NULL) {
        PyErr_NoMemory();
        Py_CLEAR(out);
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint8_t *vp = NULL, *kp = NULL;
        int32_t vlen = -1, klen = -1;
        int r = arrow_bin_get(&val, i, &vp, &vlen);
        if (r < 0)
            goto fail;
        if (r == 0)
            vlen = -1;
        Py_ssize_t part = null_partition;
        if (key.present) {
            r = arrow_bin_get(&key, i, &kp, &klen);
            if (r < 0)
                goto fail;
            if (r == 0)
                klen = -1;
            else
                part = (Py_ssize_t)((kafka_murmur2(kp, klen) & 0x7fffffffu) % (uint32_t)partitions);
        }
        /* The headers section: the fixed one, or the row's own headers followed by the fixed ones. */
        int32_t ha = 0, hz = 0;
        Py_ssize_t hsize = hlen;
        if (rh.present) {
            if (!row_headers_range(&rh, i, &ha, &hz))
                goto fail;
            if (hz > ha) {
                hsize = zz_len(fixed_count + (hz - ha)) + fixed_len;
                for (int32_t e = ha; e < hz; e++) {
                    const uint8_t *hkp, *hvp;
                    int32_t hkl, hvl;
                    if (!row_header_get(&rh, e, &hkp, &hkl, &hvp, &hvl))
                        goto fail;
                    hsize += zz_len(hkl) + hkl + zz_len(hvl) + (hvl > 0 ? hvl : 0);
                }
            }
        }
        Chunk *ch = &chunks[part];
        int64_t od = ch->count;
        Py_ssize_t body = 1 + 1 + zz_len(od) + zz_len(klen) + (klen > 0 ? klen : 0) + zz_len(vlen) +
                          (vlen > 0 ? vlen : 0) + hsize;
        Py_ssize_t size = zz_len(body) + body;
        if (ch->count > 0 && ch->buf.len + size > max_bytes) {
            if (flush_chunk(out, ch, part) == NULL)
                goto fail;
            od = 0;
            body = 1 + 1 + 1 + zz_len(klen) + (klen > 0 ? klen : 0) + zz_len(vlen) + (vlen > 0 ? vlen : 0) + hsize;
            size = zz_len(body) + body;
        }
        if (!buf_reserve(&ch->buf, size))
            goto fail;
        char *p = ch->buf.p + ch->buf.len;
        p = zz_put(p, body);
        *p++ = 0; /* attributes */
        *p++ = 0; /* timestamp delta 0 */
        p = zz_put(p, od);
        p = zz_bytes(p, kp, klen);
        p = zz_bytes(p, vp, vlen);
        if (hz > ha) {
            p = zz_put(p, fixed_count + (hz - ha));
            for (int32_t e = ha; e < hz; e++) {
                const uint8_t *hkp, *hvp;
                int32_t hkl, hvl;
                row_header_get(&rh, e, &hkp, &hkl, &hvp, &hvl); /* checked when sizing the record */
                p = zz_bytes(p, hkp, hkl);
                p = zz_bytes(p, hvp, hvl);
            }
            memcpy(p, fixed_items, (size_t)fixed_len);
            p += fixed_len;
        } else {
            memcpy(p, hb, (size_t)hlen); /* the fixed headers section (b"\0": none) */
            p += hlen;
        }
        ch->buf.len = p - ch->buf.p;
        ch->count++;
    }
    for (Py_ssize_t part = 0; part < partitions; part++)
        if (chunks[part].count > 0 && flush_chunk(out, &chunks[part], part) == NULL)
            goto fail;
    goto done;
fail:
    Py_CLEAR(out);
done:
    if (chunks != NULL) {
        for (Py_ssize_t part = 0; part < partitions; part++)
            PyMem_Free(chunks[part].buf.p);
        PyMem_Free(chunks);
    }
    arrow_bin_close(&val);
    arrow_bin_close(&key);
    row_headers_close(&rh);
    return out;
}

static PyMethodDef module_methods[] = {
    {"encode_records", encode_records, METH_VARARGS,
     "encode_records(value_validity, value_offsets, value_data, value_first, key_validity, key_offsets, "
     "key_data, key_first, n, partitions, null_partition, max_bytes[, headers[, row_headers]]) -> "
     "[(partition, count, records), ...]"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "spark_jobs._record_columns",
    .m_doc = "Compiled decoder of v2 records into Arrow column buffers (spark_jobs.raw_reader) and the "
             "sink's encoder of Arrow columns into v2 records (spark_jobs.raw_writer).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__record_columns(void)
{
    if (PyType_Ready(&ColumnsType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Columns", (PyObject *)&ColumnsType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
