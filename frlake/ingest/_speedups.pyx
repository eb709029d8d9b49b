# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""Compiled forms of the passes of :mod:`frlake.ingest.columns` that visit
every value of every entry: the entries as columns, one level of nested
lists flattened, tensor dims packed as int64, the entries that share a
stack's frames, and a column of scalars as Arrow buffers.

Each walks the Python objects that the safe unpickler (or ``json``) made,
so it reads no untrusted bytes itself. For well-formed input it returns
exactly what the Python pass returns; for anything else (a value of another
type, a list over its limit, more items than the budget left, an integer
beyond 64 bits) it returns None, and the Python pass, the reference, runs
instead and says what is wrong. tests/test_speedups.py holds the two to
the same results on every dump the tests have.
"""

from cpython.bytearray cimport PyByteArray_AS_STRING
from cpython.dict cimport PyDict_GetItem, PyDict_Next
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE, PyList_New, PyList_SET_ITEM
from cpython.float cimport PyFloat_AS_DOUBLE
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.unicode cimport PyUnicode_AsUTF8AndSize
from cpython.object cimport PyObject, PyTypeObject, Py_TYPE
from cpython.ref cimport Py_INCREF, Py_XDECREF
from libc.stdint cimport int32_t, int64_t, uint64_t, uintptr_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

# the sha256 of this file as it was built (setup.py): frlake refuses a build of other sources (native.py)
SOURCE_SHA256 = FRLAKE_SOURCE_SHA256

cdef object NONE_TYPE = type(None)


def columns(list raw, dict index):
    """The entries (dicts) as one list per known field, by ``index`` (field
    name -> position); the Python types found in each column (NoneType where
    an entry lacks the field); and whether some entry holds a key that is not
    in ``index``. None if an entry is not a dict."""
    cdef Py_ssize_t n = PyList_GET_SIZE(raw), width = len(index), i, j, pos, at
    cdef PyObject *key
    cdef PyObject *value
    cdef PyObject *found
    cdef object entry, col
    cdef bint unknown = False
    for i in range(n):
        if type(<object>PyList_GET_ITEM(raw, i)) is not dict:
            return None
    cols = [[None] * n for _ in range(width)]
    kinds = [set() for _ in range(width)]
    cdef Py_ssize_t *counts = <Py_ssize_t *>malloc(width * sizeof(Py_ssize_t) + 1)
    cdef PyTypeObject **last_type = <PyTypeObject **>malloc(width * sizeof(PyTypeObject *) + 1)
    # The key objects of the previous entry by their place in it, and their columns: a pickle's keys are
    # one memoized str each, in the same order in every entry, so a pointer compare finds the column.
    cdef PyObject **seen_key = <PyObject **>malloc(width * sizeof(PyObject *) + 1)
    cdef Py_ssize_t *seen_col = <Py_ssize_t *>malloc(width * sizeof(Py_ssize_t) + 1)
    if counts == NULL or last_type == NULL or seen_key == NULL or seen_col == NULL:
        free(counts); free(last_type); free(seen_key); free(seen_col)
        raise MemoryError()
    for j in range(width):
        counts[j] = 0
        last_type[j] = NULL
        seen_key[j] = NULL
        seen_col[j] = -1
    try:
        for i in range(n):
            entry = <object>PyList_GET_ITEM(raw, i)
            pos = 0
            at = 0
            while PyDict_Next(entry, &pos, &key, &value):
                if at < width and seen_key[at] == key:
                    j = seen_col[at]
                else:
                    if type(<object>key) is not str:
                        unknown = True
                        continue
                    found = PyDict_GetItem(index, <object>key)
                    if found == NULL:
                        unknown = True
                        continue
                    j = <object>found
                    if at < width:
                        seen_key[at] = key
                        seen_col[at] = j
                at += 1
                col = <object>PyList_GET_ITEM(cols, j)
                Py_INCREF(<object>value)
                Py_XDECREF(PyList_GET_ITEM(col, i))  # the None it replaces
                PyList_SET_ITEM(col, i, <object>value)
                counts[j] += 1
                if Py_TYPE(<object>value) != last_type[j]:
                    last_type[j] = Py_TYPE(<object>value)
                    (<set>kinds[j]).add(<object>last_type[j])
        for j in range(width):
            if counts[j] < n or n == 0:
                (<set>kinds[j]).add(NONE_TYPE)
    finally:
        free(counts); free(last_type); free(seen_key); free(seen_col)
    return cols, kinds, unknown


def flatten(list values, Py_ssize_t max_len, Py_ssize_t allowance):
    """One level of nesting: ``(items, offsets, has_none)`` where every value
    is a list (or None) of at most ``max_len`` items and all of them together
    are at most ``allowance``; ``offsets`` is the Arrow int32 offsets buffer.
    None otherwise."""
    cdef Py_ssize_t n = PyList_GET_SIZE(values), i, k, size, total = 0, at = 0
    cdef bint has_none = False
    cdef object value
    for i in range(n):
        value = <object>PyList_GET_ITEM(values, i)
        if value is None:
            has_none = True
        elif type(value) is list:
            size = PyList_GET_SIZE(value)
            if size > max_len:
                return None
            total += size
            if total > allowance or total >= 2**31:
                return None
        else:
            return None
    items = PyList_New(total)
    offsets = bytearray(4 * (n + 1))
    cdef int32_t *off = <int32_t *>PyByteArray_AS_STRING(offsets)
    cdef object item
    off[0] = 0
    for i in range(n):
        value = <object>PyList_GET_ITEM(values, i)
        if value is not None:
            size = PyList_GET_SIZE(value)
            if at + size > total:  # cannot happen (nothing runs between the passes): never write past the end
                return None
            for k in range(size):
                item = <object>PyList_GET_ITEM(value, k)
                Py_INCREF(item)
                PyList_SET_ITEM(items, at, item)
                at += 1
        off[i + 1] = <int32_t>at
    if at != total:
        return None
    return items, offsets, has_none


def int64s(list values):
    """The values, every one an int (not a bool) within 64 bits, as the bytes
    of an Arrow int64 buffer; None otherwise."""
    cdef Py_ssize_t n = PyList_GET_SIZE(values), i
    cdef int overflow = 0
    cdef object value
    buffer = bytearray(8 * n)
    cdef int64_t *out = <int64_t *>PyByteArray_AS_STRING(buffer)
    for i in range(n):
        value = <object>PyList_GET_ITEM(values, i)
        if type(value) is not int:
            return None
        out[i] = PyLong_AsLongLongAndOverflow(value, &overflow)
        if overflow:
            return None
    return buffer


cdef inline uint64_t _mix(uint64_t h, uint64_t x) noexcept:
    h ^= x + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2)
    return h * 0xFF51AFD7ED558CCDULL


def first_same_frames(list frames):
    """For every entry's frame list (or None), the index of the first entry
    whose list holds the very same frame objects (None: the first None).
    None if a value is neither a list nor None."""
    cdef Py_ssize_t n = PyList_GET_SIZE(frames), i, k, size, other
    cdef uint64_t h
    cdef object value, prior
    cdef PyObject *found
    cdef Py_ssize_t first_none = -1
    cdef dict by_hash = {}
    out = PyList_New(n)
    for i in range(n):
        value = <object>PyList_GET_ITEM(frames, i)
        if value is None:
            if first_none < 0:
                first_none = i
            other = first_none
        elif type(value) is list:
            size = PyList_GET_SIZE(value)
            h = <uint64_t>size
            for k in range(size):
                h = _mix(h, <uint64_t><uintptr_t>PyList_GET_ITEM(value, k))
            key = <object>h
            found = PyDict_GetItem(by_hash, key)
            if found == NULL:
                by_hash[key] = i
                other = i
            else:
                other = <object>found
                prior = <object>PyList_GET_ITEM(frames, other)
                if PyList_GET_SIZE(prior) != size:
                    return None  # two stacks with one hash: the Python pass keys them exactly
                for k in range(size):
                    if PyList_GET_ITEM(prior, k) != PyList_GET_ITEM(value, k):
                        return None
        else:
            return None
        item = <object>other
        Py_INCREF(item)
        PyList_SET_ITEM(out, i, item)
    return out


# The kinds of column :func:`scalars` builds (frlake.ingest.columns maps Arrow types to them).
INT64, FLOAT64, BOOL, STRING = 0, 1, 2, 3


def scalars(list values, int kind):
    """The values (each None or exactly the kind's Python type: int within 64
    bits, float, bool, str that UTF-8 can store) as the buffers of an Arrow
    array of that kind: ``(null_count, validity, data)``, and for a string
    ``(null_count, validity, offsets, data)``; ``validity`` is None when no
    value is None. None for anything else, where Arrow's own conversion runs."""
    cdef Py_ssize_t n = PyList_GET_SIZE(values), i, nulls = 0, size, total = 0
    cdef int overflow = 0
    cdef object value
    cdef type want = (int, float, bool, str)[kind]
    cdef const char *text
    for i in range(n):
        value = <object>PyList_GET_ITEM(values, i)
        if value is None:
            nulls += 1
        elif type(value) is not want:
            return None
    validity = bytearray((n + 7) // 8) if nulls else None
    cdef unsigned char *valid = NULL
    if nulls:
        valid = <unsigned char *>PyByteArray_AS_STRING(validity)
        for i in range(n):
            if <object>PyList_GET_ITEM(values, i) is not None:
                valid[i >> 3] |= 1 << (i & 7)
    if kind == INT64 or kind == FLOAT64:
        data = bytearray(8 * n)
        for i in range(n):
            value = <object>PyList_GET_ITEM(values, i)
            if value is None:
                continue
            if kind == INT64:
                (<int64_t *>PyByteArray_AS_STRING(data))[i] = PyLong_AsLongLongAndOverflow(value, &overflow)
                if overflow:
                    return None
            else:
                (<double *>PyByteArray_AS_STRING(data))[i] = PyFloat_AS_DOUBLE(value)
        return nulls, validity, data
    if kind == BOOL:
        data = bytearray((n + 7) // 8)
        for i in range(n):
            if <object>PyList_GET_ITEM(values, i) is True:
                (<unsigned char *>PyByteArray_AS_STRING(data))[i >> 3] |= 1 << (i & 7)
        return nulls, validity, data
    offsets = bytearray(4 * (n + 1))
    cdef int32_t *off = <int32_t *>PyByteArray_AS_STRING(offsets)
    off[0] = 0
    for i in range(n):  # the lengths first: a string UTF-8 cannot store (a lone surrogate) raises here
        value = <object>PyList_GET_ITEM(values, i)
        if value is not None:
            try:
                PyUnicode_AsUTF8AndSize(value, &size)
            except UnicodeError:
                return None
            total += size
            if total >= 2**31:
                return None
        off[i + 1] = <int32_t>total
    data = bytearray(total)
    cdef char *out = PyByteArray_AS_STRING(data)
    for i in range(n):
        value = <object>PyList_GET_ITEM(values, i)
        if value is not None:
            text = PyUnicode_AsUTF8AndSize(value, &size)
            if off[i] + size != off[i + 1]:  # cannot happen (nothing runs between the passes): never write past the end
                return None
            memcpy(out + off[i], text, size)
    return nulls, validity, offsets, data
