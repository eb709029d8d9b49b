# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""A Flight Recorder pickle read straight into columns, without building
its entries as Python objects.

Unpickling a 2,000-entry dump builds some 100,000 Python objects, and
freeing them again costs a third as much; the parser then reads every one
of them back into columns. Here a small pickle machine reads the bytes into
a graph of plain C values (a string is a slice of the input, a list or dict
a run of values in one arena; the memo and its sharing are kept as they
are), the top of the dump is built as Python objects with its ``entries``
left as a :class:`NativeEntries`, and :meth:`Graph.entry_cells` puts each
entry's fields into Arrow buffers in one pass.

It reads untrusted bytes, so every read is bounded by the input's length,
every memo index by the memo, every pop by the stack and its mark, and the
graph is linear in the input (a shared value is shared, never copied). It
knows only the opcodes that torch's picklers write (protocols 2 to 5, no
globals) and only the value types a well-formed dump holds: anything else,
a malformed pickle included, is a :class:`NotNative` or a None, and the
reference (the safe unpickler and the parser's Python and compiled passes
over Python objects) reads the dump and says what is wrong with it.
tests/test_fastpickle.py holds the two to the same results.
"""

cimport cython
from cpython.bytearray cimport PyByteArray_AS_STRING
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, realloc
from libc.string cimport memchr, memcmp, memcpy, memset

from frlake.errors import NotNative

# the sha256 of this file as it was built (setup.py): frlake refuses a build of other sources (native.py)
SOURCE_SHA256 = FRLAKE_SOURCE_SHA256


# The tags of a value. ABSENT: a field an entry does not hold (never on the stack).
cdef enum:
    T_MARK = 0
    T_NONE = 1
    T_FALSE = 2
    T_TRUE = 3
    T_INT = 4
    T_FLOAT = 5
    T_STR = 6
    T_LIST = 7
    T_DICT = 8
    T_TUPLE = 9
    T_ABSENT = 10

# The kinds of entry field the columns are built for (frlake.ingest.columns names each field's kind).
cpdef enum Kind:
    K_INT = 0
    K_FLOAT = 1
    K_BOOL = 2
    K_STR = 3
    K_PAIR = 4
    K_SIZES = 5
    K_DTYPES = 6
    K_FRAMES = 7
    K_REFUSE = 8  # a field of older dumps: an entry that holds it is the reference's

cdef struct Val:
    int64_t a      # INT: the value; FLOAT: its bits; STR: its offset in the input; a container: its node
    int32_t b      # STR: its length in bytes
    uint8_t tag
    uint8_t utf8   # STR: valid UTF-8 without surrogates (what Arrow and the lake store)

cdef struct Node:
    int64_t start  # where its first chunk's values start in the arena
    int64_t size   # values held (a dict holds key, value, key, value ...)
    int32_t first  # its first chunk (-1: none)
    int32_t last
    uint8_t tag

cdef struct Chunk:
    int64_t start  # in the arena of values
    int64_t count
    int64_t next

cdef Val _NOTHING  # where an empty container's values are
cdef Py_ssize_t _INT32_END = 2147483648  # 2**31: Arrow's 32-bit offsets count up to it (a C constant: no Python int)


cdef inline bint _take(Py_ssize_t pos, Py_ssize_t k, Py_ssize_t n, Py_ssize_t *end) noexcept:
    """Whether ``k`` bytes at ``pos`` are read as the reference reads them. The C unpickler reads its
    input in pieces: a frame at once, anything else as asked. A read that starts inside the piece it
    holds and ends past it (an opcode across the end of a frame) takes its bytes from after the piece,
    not from ``pos``: such a pickle is the reference's to read."""
    if k > n - pos:
        return False
    if pos + k > end[0]:
        if pos < end[0]:
            return False
        end[0] = pos + k
    return True


cdef inline uint64_t _le(const uint8_t *p, Py_ssize_t k) noexcept:
    """The unsigned little-endian number in the ``k`` (at most 8) bytes at ``p``."""
    cdef uint64_t x = 0
    cdef Py_ssize_t i
    for i in range(k):
        x |= (<uint64_t>p[i]) << (8 * i)
    return x


cdef bint _decodable(const uint8_t *s, Py_ssize_t n) except -1:
    """Whether pickle can decode the bytes (UTF-8, surrogates allowed)."""
    try:
        PyUnicode_DecodeUTF8(<const char *>s, n, "surrogatepass")
    except UnicodeDecodeError:
        return False
    return True


cdef int _grow(void **data, Py_ssize_t *cap, Py_ssize_t need, size_t size) except -1:
    """Make room for ``need`` items of ``size`` bytes."""
    cdef Py_ssize_t new_cap
    cdef void *p
    if need <= cap[0]:
        return 0
    new_cap = cap[0] * 2 if cap[0] else 64
    while new_cap < need:
        new_cap *= 2
    p = realloc(data[0], <size_t>new_cap * size)
    if p == NULL:
        raise MemoryError()
    data[0] = p
    cap[0] = new_cap
    return 0


cdef bint _utf8(const uint8_t *s, Py_ssize_t n) noexcept nogil:
    """Whether the bytes are UTF-8 as Arrow stores it: no overlong form, no surrogate, nothing past U+10FFFF."""
    cdef Py_ssize_t i = 0
    cdef uint8_t c, c1
    cdef uint64_t word
    while i + 8 <= n:  # eight ASCII bytes at a time; memcpy, as the bytes need not be aligned for a uint64_t
        memcpy(&word, s + i, 8)
        if (word & 0x8080808080808080ULL) != 0:
            break
        i += 8
    while i < n:
        c = s[i]
        if c < 0x80:
            i += 1
        elif c < 0xC2:
            return False
        elif c < 0xE0:
            if i + 1 >= n or (s[i + 1] & 0xC0) != 0x80:
                return False
            i += 2
        elif c < 0xF0:
            if i + 2 >= n:
                return False
            c1 = s[i + 1]
            if (c1 & 0xC0) != 0x80 or (s[i + 2] & 0xC0) != 0x80:
                return False
            if (c == 0xE0 and c1 < 0xA0) or (c == 0xED and c1 >= 0xA0):
                return False
            i += 3
        elif c < 0xF5:
            if i + 3 >= n:
                return False
            c1 = s[i + 1]
            if (c1 & 0xC0) != 0x80 or (s[i + 2] & 0xC0) != 0x80 or (s[i + 3] & 0xC0) != 0x80:
                return False
            if (c == 0xF0 and c1 < 0x90) or (c == 0xF4 and c1 >= 0x90):
                return False
            i += 4
        else:
            return False
    return True


@cython.final
cdef class Graph:
    """One pickle read into values (see the module's doc). ``read`` runs the machine."""
    cdef object data
    cdef const uint8_t *buf
    cdef Py_ssize_t n
    cdef Val *stack
    cdef Py_ssize_t n_stack, cap_stack
    cdef Py_ssize_t *marks
    cdef Py_ssize_t n_marks, cap_marks
    cdef Val *memo
    cdef Py_ssize_t cap_memo, memo_len
    cdef Val *arena
    cdef Py_ssize_t n_arena, cap_arena
    cdef Node *nodes
    cdef Py_ssize_t n_nodes, cap_nodes
    cdef Chunk *chunks
    cdef Py_ssize_t n_chunks, cap_chunks
    cdef Val top
    cdef dict built  # node -> the Python object made of it
    cdef object gathered_buf  # an entry list written in batches, gathered in one run

    def __dealloc__(self):
        free(self.stack); free(self.marks); free(self.memo); free(self.arena); free(self.nodes); free(self.chunks)

    # ---- the machine -------------------------------------------------------------------------------------

    cdef inline int push(self, Val v) except -1:
        if self.n_stack == self.cap_stack:
            _grow(<void **>&self.stack, &self.cap_stack, self.n_stack + 1, sizeof(Val))
        self.stack[self.n_stack] = v
        self.n_stack += 1
        return 0

    cdef inline Py_ssize_t fence(self) noexcept:
        return self.marks[self.n_marks - 1] if self.n_marks else 0

    cdef Val node(self, uint8_t tag) except *:
        cdef Val v
        if self.n_nodes == self.cap_nodes:
            _grow(<void **>&self.nodes, &self.cap_nodes, self.n_nodes + 1, sizeof(Node))
        self.nodes[self.n_nodes].first = -1
        self.nodes[self.n_nodes].last = -1
        self.nodes[self.n_nodes].start = 0
        self.nodes[self.n_nodes].size = 0
        self.nodes[self.n_nodes].tag = tag
        v.tag = tag
        v.a = self.n_nodes
        v.b = 0
        v.utf8 = 0
        self.n_nodes += 1
        return v

    cdef int add(self, int64_t node, Py_ssize_t start, Py_ssize_t count) except -1:
        """Append the stack's values [start, start + count) to a container."""
        cdef int64_t c
        if count <= 0:
            return 0
        _grow(<void **>&self.arena, &self.cap_arena, self.n_arena + count, sizeof(Val))
        memcpy(&self.arena[self.n_arena], &self.stack[start], count * sizeof(Val))
        if self.n_chunks == self.cap_chunks:
            _grow(<void **>&self.chunks, &self.cap_chunks, self.n_chunks + 1, sizeof(Chunk))
        c = self.n_chunks
        self.chunks[c].start = self.n_arena
        self.chunks[c].count = count
        self.chunks[c].next = -1
        self.n_chunks += 1
        self.n_arena += count
        if self.nodes[node].last < 0:
            if c >= _INT32_END - 1:
                raise MemoryError()
            self.nodes[node].first = <int32_t>c
            self.nodes[node].start = self.chunks[c].start
        else:
            self.chunks[self.nodes[node].last].next = c
        self.nodes[node].last = <int32_t>c
        self.nodes[node].size += count
        return 0

    cdef int memo_put(self, Py_ssize_t index) except -2:
        """memo[index] = the top of the stack (above the mark). -1: refused."""
        cdef Py_ssize_t old
        if self.n_stack <= self.fence():
            return -1
        if index < 0 or index > 2 * self.n + 16:  # no real pickle numbers past its own length
            return -1
        if index >= self.cap_memo:
            old = self.cap_memo
            _grow(<void **>&self.memo, &self.cap_memo, index + 1, sizeof(Val))
            memset(&self.memo[old], 0, (self.cap_memo - old) * sizeof(Val))  # tag 0 (MARK): unset
        if self.memo[index].tag == T_MARK:
            self.memo_len += 1
        self.memo[index] = self.stack[self.n_stack - 1]
        return 0

    cdef bint string_keys(self, Py_ssize_t start) noexcept:
        """Whether the stack's keys from ``start`` (key, value, key, value ...) are all strings. The
        reference hashes each key as it sets it, and fails on a list even in a dict it then drops: only
        strings, which hash, are read here."""
        cdef Py_ssize_t i
        for i in range(start, self.n_stack, 2):
            if self.stack[i].tag != T_STR:
                return False
        return True

    cdef int from_mark(self, uint8_t tag) except -2:
        """LIST, DICT, TUPLE: the values since the last mark as a new container. -1: refused."""
        cdef Py_ssize_t x
        cdef Val v
        if not self.n_marks:
            return -1
        x = self.marks[self.n_marks - 1]
        self.n_marks -= 1
        if tag == T_DICT and ((self.n_stack - x) % 2 or not self.string_keys(x)):
            return -1
        v = self.node(tag)
        self.add(v.a, x, self.n_stack - x)
        self.n_stack = x
        self.push(v)
        return 0

    cdef int run(self) except -2:
        """Read the whole pickle: 0, or -1 where the reference must read it."""
        cdef const uint8_t *b = self.buf
        cdef Py_ssize_t n = self.n, pos = 0, x, length, k
        cdef Py_ssize_t end = 0  # where the reference's buffer ends (see _take)
        cdef uint8_t op
        cdef Val v
        cdef uint64_t bits
        v.b = 0
        v.utf8 = 0
        while pos < n:
            if not _take(pos, 1, n, &end):
                return -1
            op = b[pos]
            pos += 1
            if op == 0x80:  # PROTO
                if not _take(pos, 1, n, &end) or b[pos] > 5:
                    return -1
                pos += 1
            elif op == 0x95:  # FRAME: the reference reads the frame at once, and then reads from it
                if not _take(pos, 8, n, &end):
                    return -1
                length = <Py_ssize_t>_le(b + pos, 8)
                pos += 8
                if length < 0 or length > n - pos:
                    return -1
                if pos + length > end:
                    if pos < end:
                        return -1
                    end = pos + length
            elif op == 0x2E:  # STOP
                if self.n_stack <= self.fence() or pos != n:  # bytes after STOP: the reference refuses them
                    return -1
                self.top = self.stack[self.n_stack - 1]
                return 0
            elif op == 0x28:  # MARK
                if self.n_marks == self.cap_marks:
                    _grow(<void **>&self.marks, &self.cap_marks, self.n_marks + 1, sizeof(Py_ssize_t))
                self.marks[self.n_marks] = self.n_stack
                self.n_marks += 1
            elif op == 0x7D:  # EMPTY_DICT
                self.push(self.node(T_DICT))
            elif op == 0x5D:  # EMPTY_LIST
                self.push(self.node(T_LIST))
            elif op == 0x29:  # EMPTY_TUPLE
                self.push(self.node(T_TUPLE))
            elif op == 0x6C:  # LIST
                if self.from_mark(T_LIST) < 0:
                    return -1
            elif op == 0x64:  # DICT
                if self.from_mark(T_DICT) < 0:
                    return -1
            elif op == 0x74:  # TUPLE
                if self.from_mark(T_TUPLE) < 0:
                    return -1
            elif op == 0x85 or op == 0x86 or op == 0x87:  # TUPLE1, TUPLE2, TUPLE3
                k = op - 0x84
                if self.n_stack - k < self.fence():
                    return -1
                v = self.node(T_TUPLE)
                self.add(v.a, self.n_stack - k, k)
                self.n_stack -= k
                self.push(v)
            elif op == 0x61:  # APPEND: value on a list, both above the mark
                if self.n_stack - 2 < self.fence() or self.stack[self.n_stack - 2].tag != T_LIST:
                    return -1
                self.add(self.stack[self.n_stack - 2].a, self.n_stack - 1, 1)
                self.n_stack -= 1
            elif op == 0x65 or op == 0x75:  # APPENDS, SETITEMS: the values since the mark
                if not self.n_marks:
                    return -1
                x = self.marks[self.n_marks - 1]
                self.n_marks -= 1
                if x <= self.fence() or self.stack[x - 1].tag != (T_LIST if op == 0x65 else T_DICT):
                    return -1
                if op == 0x75 and ((self.n_stack - x) % 2 or not self.string_keys(x)):
                    return -1
                self.add(self.stack[x - 1].a, x, self.n_stack - x)
                self.n_stack = x
            elif op == 0x73:  # SETITEM
                if self.n_stack - 3 < self.fence() or self.stack[self.n_stack - 3].tag != T_DICT:
                    return -1
                if not self.string_keys(self.n_stack - 2):
                    return -1
                self.add(self.stack[self.n_stack - 3].a, self.n_stack - 2, 2)
                self.n_stack -= 2
            elif op == 0x4E:  # NONE
                v.tag = T_NONE
                self.push(v)
            elif op == 0x88 or op == 0x89:  # NEWTRUE, NEWFALSE
                v.tag = T_TRUE if op == 0x88 else T_FALSE
                self.push(v)
            elif op == 0x4B:  # BININT1
                if not _take(pos, 1, n, &end):
                    return -1
                v.tag = T_INT
                v.a = b[pos]
                pos += 1
                self.push(v)
            elif op == 0x4D:  # BININT2
                if not _take(pos, 2, n, &end):
                    return -1
                v.tag = T_INT
                v.a = <int64_t>_le(b + pos, 2)
                pos += 2
                self.push(v)
            elif op == 0x4A:  # BININT
                if not _take(pos, 4, n, &end):
                    return -1
                v.tag = T_INT
                v.a = <int32_t><uint32_t>_le(b + pos, 4)
                pos += 4
                self.push(v)
            elif op == 0x8A:  # LONG1: little-endian two's complement, at most 8 bytes here
                if not _take(pos, 1, n, &end):
                    return -1
                length = b[pos]
                pos += 1
                if length > 8 or not _take(pos, length, n, &end):
                    return -1
                bits = _le(b + pos, length)
                if 0 < length < 8 and (b[pos + length - 1] & 0x80):
                    bits |= ~((<uint64_t>1 << (8 * length)) - 1)  # sign-extend
                pos += length
                v.tag = T_INT
                v.a = <int64_t>bits
                self.push(v)
            elif op == 0x47:  # BINFLOAT: big-endian
                if not _take(pos, 8, n, &end):
                    return -1
                bits = 0
                for k in range(8):
                    bits = (bits << 8) | b[pos + k]
                pos += 8
                v.tag = T_FLOAT
                v.a = <int64_t>bits
                self.push(v)
            elif op == 0x8C or op == 0x58 or op == 0x8D:  # SHORT_BINUNICODE, BINUNICODE, BINUNICODE8
                k = 1 if op == 0x8C else 4 if op == 0x58 else 8
                if not _take(pos, k, n, &end):
                    return -1
                bits = _le(b + pos, k)
                pos += k
                if bits > <uint64_t>(n - pos) or bits >= (<uint64_t>1 << 31) or not _take(pos, <Py_ssize_t>bits, n, &end):
                    return -1
                v.tag = T_STR
                v.a = pos
                v.b = <int32_t>bits
                v.utf8 = _utf8(b + pos, <Py_ssize_t>bits)
                if not v.utf8 and not _decodable(b + pos, <Py_ssize_t>bits):  # pickle decodes every string it reads
                    return -1
                pos += <Py_ssize_t>bits
                self.push(v)
                v.utf8 = 0
                v.b = 0
            elif op == 0x94:  # MEMOIZE
                if self.memo_put(self.memo_len) < 0:
                    return -1
            elif op == 0x71 or op == 0x72 or op == 0x68 or op == 0x6A:  # BINPUT, LONG_BINPUT, BINGET, LONG_BINGET
                k = 1 if op == 0x71 or op == 0x68 else 4
                if not _take(pos, k, n, &end):
                    return -1
                x = <Py_ssize_t>_le(b + pos, k)
                pos += k
                if op == 0x71 or op == 0x72:
                    if self.memo_put(x) < 0:
                        return -1
                elif x >= self.cap_memo or self.memo[x].tag == T_MARK:
                    return -1
                else:
                    self.push(self.memo[x])
            else:  # any other opcode (globals, bytes, protocol 0's text forms, POP ...): the reference's
                return -1
        return -1  # no STOP: truncated

    # ---- values as Python objects ------------------------------------------------------------------------

    cdef object py(self, Val v, int depth):
        cdef double f
        cdef int64_t c, k
        cdef Node *node
        if v.tag == T_NONE:
            return None
        if v.tag == T_TRUE:
            return True
        if v.tag == T_FALSE:
            return False
        if v.tag == T_INT:
            return v.a
        if v.tag == T_FLOAT:
            memcpy(&f, &v.a, 8)
            return f
        if v.tag == T_STR:
            return PyUnicode_DecodeUTF8(<const char *>self.buf + v.a, v.b, "surrogatepass")  # as pickle does
        if depth > 64:  # the reference unpickles any depth without recursion
            raise NotNative("nested too deeply for the fast reader")
        found = self.built.get(v.a)
        if found is not None:
            return found
        node = &self.nodes[v.a]
        if v.tag == T_LIST:
            out = []
            self.built[v.a] = out  # before its items: a list may hold itself
            self.extend(out, node, depth)
            return out
        if v.tag == T_DICT:
            out = {}
            self.built[v.a] = out
            c = node.first
            while c >= 0:
                for k in range(self.chunks[c].start, self.chunks[c].start + self.chunks[c].count, 2):
                    key = self.py(self.arena[k], depth + 1)
                    if key == "entries" and depth == 0 and self.arena[k + 1].tag == T_LIST:
                        out[key] = NativeEntries(self, self.arena[k + 1].a)
                    else:
                        out[key] = self.py(self.arena[k + 1], depth + 1)
                c = self.chunks[c].next
            return out
        items = []
        self.extend(items, node, depth)
        out = tuple(items)
        self.built[v.a] = out
        return out

    cdef int extend(self, list out, Node *node, int depth) except -1:
        """Append a list's or tuple's values, as Python objects, to ``out``."""
        cdef int64_t c = node.first, k
        while c >= 0:
            for k in range(self.chunks[c].start, self.chunks[c].start + self.chunks[c].count):
                out.append(self.py(self.arena[k], depth + 1))
            c = self.chunks[c].next
        return 0

    def node_object(self, int64_t node):
        """A container of the graph as Python objects (an entry's frames)."""
        cdef Val v
        if node < 0 or node >= self.n_nodes:
            raise IndexError(node)
        v.tag = self.nodes[node].tag
        v.a = node
        v.b = 0
        v.utf8 = 0
        try:
            return self.py(v, 1)
        except RecursionError:
            raise NotNative("nested too deeply for the fast reader") from None

    # ---- the entries as columns --------------------------------------------------------------------------

    cdef inline Val *items_of(self, int64_t node, Py_ssize_t *count) noexcept:
        """A container's values, where they lie in one run (a list or dict written at once); NULL otherwise."""
        cdef Node *nd = &self.nodes[node]
        count[0] = nd.size
        if nd.size == 0:
            return &_NOTHING
        if nd.first != nd.last:
            return NULL
        return &self.arena[nd.start]

    def entry_cells(self, int64_t entries_node, list names, bytes kinds, Py_ssize_t max_tensors,
                    Py_ssize_t max_dims, Py_ssize_t max_frames, Py_ssize_t max_string):
        """The entries' known fields (``names``, each of its kind in ``kinds``) as Arrow buffers, or None
        where the reference must read them: an entry that is not a dict, a key that is not a known name,
        a key twice, a value of another type than its kind's, a list over its limit, a string over the
        string limit or not storable as UTF-8. Returns ``(n, fields, columns)``: the number of entries,
        of fields they hold, and per name what :func:`_column` builds."""
        cdef Py_ssize_t width = len(names), n, i, j, k, count, at
        cdef Py_ssize_t fields = 0
        cdef Val *entries
        cdef Val *items
        cdef Val *cells
        cdef Val key
        cdef uint64_t seen
        cdef const uint8_t *kind = <const uint8_t *>PyBytes_AS_STRING(kinds)
        cdef int64_t *seen_off
        cdef Py_ssize_t *seen_col
        if width > 64 or PyBytes_GET_SIZE(kinds) != width:
            raise ValueError("at most 64 fields, one kind each")
        name_bytes = [s.encode() for s in names]
        entries = self.items_of(entries_node, &n)
        if entries == NULL:
            # An entry list written in batches (pickle appends 1,000 at a time): gather its values in order.
            entries = self.gathered(entries_node, &n)
        cells_buf = bytearray(n * width * sizeof(Val))
        cells = <Val *>PyByteArray_AS_STRING(cells_buf)
        for i in range(n * width):
            cells[i].tag = T_ABSENT
        keys_buf = bytearray(width * (sizeof(int64_t) + sizeof(Py_ssize_t)))
        seen_off = <int64_t *>PyByteArray_AS_STRING(keys_buf)
        seen_col = <Py_ssize_t *>(PyByteArray_AS_STRING(keys_buf) + width * sizeof(int64_t))
        for j in range(width):
            seen_off[j] = -1
        try:
            for i in range(n):
                if entries[i].tag != T_DICT:
                    return None
                items = self.items_of(entries[i].a, &count)
                if items == NULL:
                    return None
                seen = 0
                for at in range(0, count, 2):
                    key = items[at]
                    if key.tag != T_STR:
                        return None
                    k = at >> 1
                    if k < width and seen_off[k] == key.a:  # the same memoized key as the last entry's
                        j = seen_col[k]
                    else:
                        j = self.field_of(key, name_bytes, width)
                        if j < 0:
                            return None
                        if k < width:
                            seen_off[k] = key.a
                            seen_col[k] = j
                    if seen & (<uint64_t>1 << j):
                        return None
                    seen |= <uint64_t>1 << j
                    cells[j * n + i] = items[at + 1]
                fields += count >> 1
            columns = {}
            for j in range(width):
                built = self.column(cells + j * n, n, kind[j], max_tensors, max_dims, max_frames, max_string)
                if built is None:
                    return None
                columns[names[j]] = built
        finally:
            if self.gathered_buf is not None:
                self.gathered_buf = None
        return n, fields, columns

    cdef Val *gathered(self, int64_t node, Py_ssize_t *count) except NULL:
        cdef Node *nd = &self.nodes[node]
        cdef int64_t c = nd.first
        cdef Py_ssize_t at = 0
        self.gathered_buf = bytearray(max(nd.size, 1) * sizeof(Val))
        cdef Val *out = <Val *>PyByteArray_AS_STRING(self.gathered_buf)
        while c >= 0:
            memcpy(&out[at], &self.arena[self.chunks[c].start], self.chunks[c].count * sizeof(Val))
            at += self.chunks[c].count
            c = self.chunks[c].next
        count[0] = nd.size
        return out

    cdef Py_ssize_t field_of(self, Val key, list name_bytes, Py_ssize_t width) except -2:
        cdef Py_ssize_t j
        cdef bytes name
        for j in range(width):
            name = name_bytes[j]
            if PyBytes_GET_SIZE(name) == key.b and memcmp(PyBytes_AS_STRING(name), self.buf + key.a, key.b) == 0:
                return j
        return -1

    cdef object column(self, Val *col, Py_ssize_t n, uint8_t kind, Py_ssize_t max_tensors, Py_ssize_t max_dims,
                       Py_ssize_t max_frames, Py_ssize_t max_string):
        """One field's column, from its values (``col``: one per entry)."""
        cdef Py_ssize_t i
        cdef Val v
        if kind == K_REFUSE:
            for i in range(n):
                if col[i].tag != T_ABSENT:
                    return None
            return ()
        if kind == K_INT or kind == K_FLOAT or kind == K_BOOL:
            return self.scalars(col, n, kind)
        if kind == K_STR:
            return self.strings(col, n, -1, max_string)
        if kind == K_PAIR:
            for i in range(n):
                v = col[i]
                if v.tag == T_NONE or v.tag == T_ABSENT:
                    continue
                if v.tag != T_TUPLE and v.tag != T_LIST:
                    return None
                if self.nodes[v.a].size != 2 or self.nodes[v.a].first != self.nodes[v.a].last:
                    return None
            first = self.strings(col, n, 0, max_string)
            second = self.strings(col, n, 1, max_string)
            if first is None or second is None:
                return None
            return first, second
        if kind == K_SIZES:
            return self.lists(col, n, True, max_tensors, max_dims, max_string)
        if kind == K_DTYPES:
            return self.lists(col, n, False, max_tensors, max_dims, max_string)
        return self.frames(col, n, max_frames)

    cdef object scalars(self, Val *col, Py_ssize_t n, uint8_t kind):
        """(non-null count, validity or None, data) of an int64, float64 or bool column."""
        cdef Py_ssize_t i, valid = 0
        cdef Val v
        validity = bytearray((n + 7) // 8)
        data = bytearray(8 * n if kind != K_BOOL else (n + 7) // 8)
        cdef uint8_t *ok = <uint8_t *>PyByteArray_AS_STRING(validity)
        cdef int64_t *out = <int64_t *>PyByteArray_AS_STRING(data)
        cdef uint8_t *bits = <uint8_t *>PyByteArray_AS_STRING(data)
        for i in range(n):
            v = col[i]
            if v.tag == T_NONE or v.tag == T_ABSENT:
                continue
            if kind == K_BOOL:
                if v.tag != T_TRUE and v.tag != T_FALSE:
                    return None
                if v.tag == T_TRUE:
                    bits[i >> 3] |= 1 << (i & 7)
            elif v.tag != (T_INT if kind == K_INT else T_FLOAT):
                return None
            else:
                out[i] = v.a
            ok[i >> 3] |= 1 << (i & 7)
            valid += 1
        return valid, (None if valid == n else validity), data

    cdef object strings(self, Val *col, Py_ssize_t n, Py_ssize_t part, Py_ssize_t max_string):
        """(non-null count, validity or None, offsets, data) of a string column; ``part`` >= 0: that item
        of each pair."""
        cdef Py_ssize_t i, valid = 0, total = 0
        cdef Val v
        cdef Py_ssize_t count
        validity = bytearray((n + 7) // 8)
        offsets = bytearray(4 * (n + 1))
        cdef uint8_t *ok = <uint8_t *>PyByteArray_AS_STRING(validity)
        cdef int32_t *off = <int32_t *>PyByteArray_AS_STRING(offsets)
        for i in range(n):
            v = self.cell(col, i, part)
            if v.tag == T_STR:
                if not v.utf8 or v.b > max_string:
                    return None
                total += v.b
                if total >= _INT32_END:
                    return None
                ok[i >> 3] |= 1 << (i & 7)
                valid += 1
            elif v.tag != T_NONE and v.tag != T_ABSENT:
                return None
            off[i + 1] = <int32_t>total
        data = bytearray(total)
        cdef char *out = PyByteArray_AS_STRING(data)
        for i in range(n):
            v = self.cell(col, i, part)
            if v.tag == T_STR:
                memcpy(out + off[i], self.buf + v.a, v.b)
        return valid, (None if valid == n else validity), offsets, data

    cdef inline Val cell(self, Val *col, Py_ssize_t i, Py_ssize_t part) noexcept:
        cdef Val v = col[i]
        if part < 0 or (v.tag != T_TUPLE and v.tag != T_LIST):
            return v
        return self.arena[self.nodes[v.a].start + part]

    cdef object lists(self, Val *col, Py_ssize_t n, bint shapes,
                      Py_ssize_t max_tensors, Py_ssize_t max_dims, Py_ssize_t max_string):
        """Tensor shapes (list of lists of ints) or dtypes (list of strings): (non-null count, null mask or
        None, outer offsets, then for shapes: inner offsets, int64 dims, and for dtypes: the strings'
        offsets and data)."""
        cdef Py_ssize_t i, k, m, valid = 0, items = 0, inner = 0, count, dims
        cdef Val v
        cdef Val *its
        cdef Val *ds
        # First pass: types, limits and sizes.
        for i in range(n):
            v = col[i]
            if v.tag == T_NONE or v.tag == T_ABSENT:
                continue
            if v.tag != T_LIST:
                return None
            its = self.items_of(v.a, &count)
            if its == NULL or count > max_tensors:
                return None
            valid += 1
            items += count
            for k in range(count):
                if shapes:
                    if its[k].tag != T_LIST:
                        return None
                    ds = self.items_of(its[k].a, &dims)
                    if ds == NULL or dims > max_dims:
                        return None
                    for m in range(dims):
                        if ds[m].tag != T_INT:
                            return None
                    inner += dims
                else:
                    if its[k].tag != T_STR or not its[k].utf8 or its[k].b > max_string:
                        return None
                    inner += its[k].b
            if items >= _INT32_END or inner >= _INT32_END:
                return None
        nulls = bytearray((n + 7) // 8)
        outer = bytearray(4 * (n + 1))
        second = bytearray(4 * (items + 1))
        third = bytearray(8 * inner if shapes else inner)
        cdef uint8_t *mask = <uint8_t *>PyByteArray_AS_STRING(nulls)
        cdef int32_t *o1 = <int32_t *>PyByteArray_AS_STRING(outer)
        cdef int32_t *o2 = <int32_t *>PyByteArray_AS_STRING(second)
        cdef int64_t *values = <int64_t *>PyByteArray_AS_STRING(third)
        cdef char *text = PyByteArray_AS_STRING(third)
        cdef Py_ssize_t at = 0, at2 = 0
        for i in range(n):
            v = col[i]
            if v.tag == T_LIST:
                its = self.items_of(v.a, &count)
                for k in range(count):
                    if shapes:
                        ds = self.items_of(its[k].a, &dims)
                        for m in range(dims):
                            values[at2 + m] = ds[m].a
                        at2 += dims
                    else:
                        memcpy(text + at2, self.buf + its[k].a, its[k].b)
                        at2 += its[k].b
                    at += 1
                    o2[at] = <int32_t>at2
            else:
                mask[i >> 3] |= 1 << (i & 7)
            o1[i + 1] = <int32_t>at
        return valid, (None if valid == n else nulls), outer, second, third, items, inner

    cdef object frames(self, Val *col, Py_ssize_t n, Py_ssize_t max_frames):
        """Stacks: (the number of frame lists (one per entry that has one), of frames, the nodes of the
        distinct lists, for each entry the place of its list among them (int32), and the validity of the
        places). Lists are the same when they hold the same frame objects, in order (as the reference
        keys them)."""
        cdef Py_ssize_t i, k, count, lists = 0, depth = 0, other, at, cap = 16, n_distinct = 0
        cdef uint64_t h
        cdef Val v
        cdef Val *its
        cdef Val *prior
        cdef Py_ssize_t prior_count
        places = bytearray(4 * n)
        validity = bytearray((n + 7) // 8)
        cdef int32_t *place = <int32_t *>PyByteArray_AS_STRING(places)
        cdef uint8_t *ok = <uint8_t *>PyByteArray_AS_STRING(validity)
        # The distinct lists by hash: open addressing, a slot holds its list's place + 1 (0: empty). cap, a power
        # of two of 16 or more, keeps each array of the table aligned for its type.
        while cap < 2 * n:
            cap <<= 1
        table = bytearray(cap * (sizeof(uint64_t) + sizeof(int32_t)) + max(n, 1) * sizeof(int64_t))
        cdef uint64_t *hashes = <uint64_t *>PyByteArray_AS_STRING(table)
        cdef int32_t *slots = <int32_t *>(PyByteArray_AS_STRING(table) + cap * sizeof(uint64_t))
        cdef int64_t *found = <int64_t *>(PyByteArray_AS_STRING(table) + cap * (sizeof(uint64_t) + sizeof(int32_t)))
        for i in range(n):
            v = col[i]
            if v.tag == T_NONE or v.tag == T_ABSENT:
                place[i] = -1
                continue
            if v.tag != T_LIST:
                return None
            its = self.items_of(v.a, &count)
            if its == NULL or count > max_frames:
                return None
            ok[i >> 3] |= 1 << (i & 7)
            lists += 1
            depth += count
            h = <uint64_t>count
            for k in range(count):
                if its[k].tag != T_DICT:
                    return None
                h ^= <uint64_t>its[k].a + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2)
                h *= 0xFF51AFD7ED558CCDULL
            at = <Py_ssize_t>(h & <uint64_t>(cap - 1))
            while slots[at] != 0 and hashes[at] != h:
                at = (at + 1) & (cap - 1)
            if slots[at] == 0:
                slots[at] = <int32_t>(n_distinct + 1)
                hashes[at] = h
                found[n_distinct] = v.a
                place[i] = <int32_t>n_distinct
                n_distinct += 1
                continue
            other = slots[at] - 1
            prior = self.items_of(found[other], &prior_count)
            if prior_count != count:
                return None  # two lists with one hash: the reference keys them exactly
            for k in range(count):
                if prior[k].a != its[k].a:
                    return None
            place[i] = <int32_t>other
        distinct = [found[k] for k in range(n_distinct)]
        return lists, depth, distinct, places, validity


class NativeEntries:
    """A dump's ``entries`` list, left in the graph: :func:`frlake.ingest.columns.entry_columns` reads it."""

    __slots__ = ("graph", "node", "length")

    def __init__(self, Graph graph, int64_t node):
        self.graph = graph
        self.node = node
        self.length = graph.nodes[node].size

    def __len__(self):
        return self.length


def read(bytes data):
    """The dump's top object, its ``entries`` a NativeEntries; None where the reference must read it."""
    cdef Graph g = Graph()
    g.data = data
    g.buf = <const uint8_t *>PyBytes_AS_STRING(data)
    g.n = PyBytes_GET_SIZE(data)
    g.built = {}
    if g.run() < 0:
        return None
    try:
        top = g.py(g.top, 0)
    except (NotNative, UnicodeDecodeError, RecursionError):
        return None
    g.built = {}  # the frames are built again when asked, from a fresh memo of objects
    return top if type(top) is dict and type(top.get("entries")) is NativeEntries else None


# ---- a count the file cannot hold -------------------------------------------------------------------------

cdef enum:  # the kinds of frlake.ingest.safeload.KINDS
    A_STOPS = 0
    A_FIXED = 1
    A_LINE = 2
    A_COUNTED = 3
    A_ALLOCATED = 4
    A_FRAME = 5


cdef inline Py_ssize_t _read(Py_ssize_t *pos, Py_ssize_t *end, Py_ssize_t k, Py_ssize_t n) noexcept:
    """Where the C unpickler reads ``k`` bytes from: its piece ``[pos, end)`` when they fit, else the file
    after the piece; -1 past the end."""
    if k <= end[0] - pos[0]:
        pos[0] += k
        return pos[0] - k
    if k > n - end[0]:
        return -1
    end[0] += k
    pos[0] = end[0]
    return pos[0] - k


def overrun(bytes data, bytes kinds, bytes sizes):
    """frlake.ingest.safeload.overrun's walk, in C (``kinds`` and ``sizes``: its tables)."""
    cdef const uint8_t *b = <const uint8_t *>PyBytes_AS_STRING(data)
    cdef const uint8_t *kind = <const uint8_t *>PyBytes_AS_STRING(kinds)
    cdef const uint8_t *size = <const uint8_t *>PyBytes_AS_STRING(sizes)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(data), pos = 0, end = 0, at, start
    cdef const uint8_t *nl
    cdef uint64_t count
    cdef uint8_t op
    if PyBytes_GET_SIZE(kinds) != 256 or PyBytes_GET_SIZE(sizes) != 256:
        raise ValueError("kinds and sizes are tables of 256 opcodes")
    while True:
        at = _read(&pos, &end, 1, n)
        if at < 0:
            return None
        op = b[at]
        if kind[op] == A_STOPS:
            return None
        if kind[op] == A_FIXED:
            if _read(&pos, &end, size[op], n) < 0:
                return None
        elif kind[op] == A_LINE:
            nl = <const uint8_t *>memchr(b + pos, 10, end - pos)
            if nl == NULL:
                nl = <const uint8_t *>memchr(b + end, 10, n - end)
                if nl == NULL:
                    return None
                end = nl - b + 1
            pos = nl - b + 1
        elif kind[op] == A_FRAME:
            start = _read(&pos, &end, 8, n)
            if start < 0 or _le(b + start, 8) > <uint64_t>(n - start):
                return None
            start = _read(&pos, &end, <Py_ssize_t>_le(b + start, 8), n)
            if start < 0:
                return None
            pos = start  # the frame is read at once, then read from its start
        else:
            start = _read(&pos, &end, size[op], n)
            if start < 0:
                return None
            count = _le(b + start, size[op])
            if count > <uint64_t>(n - pos):
                return (at, count, n - pos) if kind[op] == A_ALLOCATED else None
            pos += <Py_ssize_t>count
            if pos > end:
                end = pos
