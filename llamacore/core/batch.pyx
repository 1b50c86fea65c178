# Batch: tokens (or embeddings) of one or more sequences submitted to one llama_decode call.
# Capacity is fixed at creation; adding past it raises instead of writing out of bounds.


cdef class Batch:
    """Up to `capacity` tokens, each with a position, its sequence ids and an output flag.

    `embd > 0` makes an embeddings batch (rows of `embd` floats instead of token ids).
    """

    def __cinit__(self, int capacity, int embd=0, int n_seq_max=1):
        self.allocated = False
        if capacity <= 0:
            raise ValueError(f"batch capacity must be positive, got {capacity}")
        if embd < 0 or n_seq_max <= 0:
            raise ValueError("embd must be >= 0 and n_seq_max > 0")
        self.b = llama.llama_batch_init(capacity, embd, n_seq_max)
        self.allocated = True
        self.capacity = capacity
        self.embd = embd
        self.n_seq_max = n_seq_max
        self.b.n_tokens = 0

    def __dealloc__(self):
        if self.allocated:
            llama.llama_batch_free(self.b)
            self.allocated = False

    def __len__(self):
        return self.b.n_tokens

    @property
    def n_tokens(self):
        return self.b.n_tokens

    def clear(self):
        self.b.n_tokens = 0

    @cython.boundscheck(False)
    @cython.wraparound(False)
    cdef int _push(self, llama_token token, llama_pos pos, llama_seq_id seq_id, bint logits) except -1:
        cdef int i = self.b.n_tokens
        if i >= self.capacity:
            raise IndexError(f"batch is full ({self.capacity} tokens)")
        if self.b.token == NULL:
            raise TypeError("this is an embeddings batch; use add_embedding()")
        self.b.token[i] = token
        self.b.pos[i] = pos
        self.b.n_seq_id[i] = 1
        self.b.seq_id[i][0] = seq_id
        self.b.logits[i] = logits
        self.b.n_tokens = i + 1
        return 0

    def add(self, int token, int pos, seq_ids=0, bint logits=False):
        """Append one token at `pos` belonging to `seq_ids` (an int or a sequence of ints)."""
        cdef int i = self.b.n_tokens
        if isinstance(seq_ids, int):
            self._push(token, pos, seq_ids, logits)
            return
        ids = list(seq_ids)
        if not 0 < len(ids) <= self.n_seq_max:
            raise ValueError(f"a token needs 1 to {self.n_seq_max} sequence ids, got {len(ids)}")
        self._push(token, pos, ids[0], logits)
        for k, s in enumerate(ids):
            self.b.seq_id[i][k] = s
        self.b.n_seq_id[i] = len(ids)

    def add_sequence(self, tokens, int pos0, int seq_id, bint logits_last=True, bint logits_all=False):
        """Append `tokens` of one sequence at positions pos0, pos0+1, ...; output for the last one."""
        cdef Py_ssize_t n = len(tokens)
        cdef Py_ssize_t k
        if self.b.n_tokens + n > self.capacity:
            raise IndexError(f"{n} tokens do not fit: batch holds {self.b.n_tokens} of {self.capacity}")
        for k in range(n):
            self._push(tokens[k], pos0 + k, seq_id, logits_all or (logits_last and k == n - 1))

    def add_embedding(self, values, int pos, int seq_id=0, bint logits=False):
        """Append one row of `embd` floats (an input embedding instead of a token id)."""
        cdef int i = self.b.n_tokens
        if self.b.embd == NULL:
            raise TypeError("this is a token batch; create Batch(capacity, embd=N) for embeddings")
        if i >= self.capacity:
            raise IndexError(f"batch is full ({self.capacity} rows)")
        cdef float[::1] row = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
        if row.shape[0] != self.embd:
            raise ValueError(f"embedding row has {row.shape[0]} values, expected {self.embd}")
        memcpy(&self.b.embd[i * self.embd], &row[0], self.embd * sizeof(float))
        self.b.pos[i] = pos
        self.b.n_seq_id[i] = 1
        self.b.seq_id[i][0] = seq_id
        self.b.logits[i] = logits
        self.b.n_tokens = i + 1

    @cython.boundscheck(False)
    @cython.wraparound(False)
    def add_embeddings(self, rows, int pos0, int seq_id=0, bint logits_last=False):
        """Append the rows of a 2-D array (n, embd) at positions pos0, pos0+1, ... of one sequence;
        output for the last row when `logits_last`."""
        if self.b.embd == NULL:
            raise TypeError("this is a token batch; create Batch(capacity, embd=N) for embeddings")
        cdef const float[:, ::1] values = np.ascontiguousarray(rows, dtype=np.float32)
        cdef Py_ssize_t n = values.shape[0], k
        cdef int i = self.b.n_tokens
        if values.shape[1] != self.embd:
            raise ValueError(f"embedding rows have {values.shape[1]} values, expected {self.embd}")
        if i + n > self.capacity:
            raise IndexError(f"{n} rows do not fit: batch holds {i} of {self.capacity}")
        if n == 0:
            return
        memcpy(&self.b.embd[i * self.embd], &values[0, 0], n * self.embd * sizeof(float))
        for k in range(n):
            self.b.pos[i + k] = pos0 + k
            self.b.n_seq_id[i + k] = 1
            self.b.seq_id[i + k][0] = seq_id
            self.b.logits[i + k] = logits_last and k == n - 1
        self.b.n_tokens = i + n

    def set_logits(self, int index, bint value=True):
        """Request (or drop) the output row of token `index`."""
        if not 0 <= index < self.b.n_tokens:
            raise IndexError(f"batch index {index} out of range ({self.b.n_tokens} tokens)")
        self.b.logits[index] = value

    def output_indices(self):
        """Batch indices whose logits/embeddings will be computed."""
        return [i for i in range(self.b.n_tokens) if self.b.logits[i]]
