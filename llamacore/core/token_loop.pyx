# TokenLoop: one sequence's generation loop in C. Each step samples a token, checks it (end of
# generation, stop strings, the token budget, the end of the context), appends its text and
# decodes it, without returning to Python; Python gets the tokens and their text in chunks.

_FINISH = {1: "eog", 2: "stop", 3: "length"}
cdef enum:
    _GRAMMAR_EXHAUSTED = 4          # _loop: a grammar stage gave up past the work limit


@cython.auto_pickle(False)
cdef class TokenLoop:
    """Generates tokens for sequence `seq_id` of `ctx` after a decode whose last output row holds
    the logits that the first token is sampled from; the next decoded token goes at `pos`.

    `run(n)` samples up to `n` tokens. It ends early, and for good (`finish`), at an
    end-of-generation token (unless `ignore_eos`), at a stop string (UTF-8 bytes matched across
    tokens), at `max_tokens`, or when the context has no room. That last token is sampled but
    not decoded: nothing samples after it (as llama-cpp-python). Every other token is decoded
    before the next is sampled, so `pos` is where the context's tokens end.

    The GIL is released for the whole of a run; `Context.abort()` stops it between tokens or
    inside a decode. A failed decode ends the run with the tokens so far; the next run raises.
    """

    def __init__(self, Context ctx not None, Sampler sampler not None, int pos, int max_tokens, *,
                 int seq_id=0, bint ignore_eos=False, stops=()):
        sampler._check_chain()
        ctx._check_seq(seq_id, False)
        if not 0 <= pos <= ctx.n_ctx_seq:
            raise ValueError(f"pos={pos} is outside the context (each sequence holds {ctx.n_ctx_seq} positions)")
        if max_tokens < 0:
            raise ValueError(f"max_tokens must be >= 0, got {max_tokens}")
        self.ctx = ctx
        self.sampler = sampler
        self.batch = Batch(1)
        self.seq_id = seq_id
        self.pos = pos
        self.remaining = max_tokens
        self.ignore_eos = ignore_eos
        self.finish = None if max_tokens else "length"
        self.error = 0
        cdef size_t longest = 0
        cdef bytes encoded
        for stop in stops:
            encoded = stop.encode() if isinstance(stop, str) else bytes(stop)
            if encoded:
                self.stops.push_back(encoded)
                longest = max(longest, len(encoded))
        self.keep = longest - 1 if longest else 0

    def run(self, int n):
        """Sample up to `n` more tokens: (tokens, the UTF-8 bytes of their text). An
        end-of-generation token is among the tokens, its text is not."""
        cdef vector[llama_token] tokens
        cdef string text
        cdef int rc = self.error
        cdef int why
        cdef int start = self.pos
        if rc:
            self.error = 0
            self.finish = "error"
            self.ctx._raise_failed(rc, 1, False)
        if self.finish is not None or n <= 0:
            return [], b""
        if self.ctx._n_outputs == 0:
            raise IndexError("no logits to sample from: the last decode produced none")
        self.ctx.abort_state.requested = False
        _error_mark()
        with nogil:
            why = self._loop(n, &tokens, &text, &rc)
        if rc != 0:
            self.error = rc
            self.ctx._n_outputs = 0
        elif self.pos > start:
            self.ctx._n_outputs = 1
        if why == _GRAMMAR_EXHAUSTED:
            self.finish = "grammar"
            raise _grammar_budget_error()
        if why:
            self.finish = _FINISH[why]
        return tokens, text

    cdef int _loop(self, int n, vector[llama_token] * tokens, string * text, int * rc) noexcept nogil:
        """Returns 0 (more to come, or a failed decode in `rc`) or the finish code."""
        cdef llama.llama_context * cctx = self.ctx.ptr
        cdef const llama.llama_vocab * vocab = self.ctx.model.vocab
        cdef llama.llama_batch * b = &self.batch.b
        cdef llama_token token
        cdef char buf[128]
        cdef int32_t got
        cdef vector[char] big
        while n > 0:
            token = self._sample()
            if self.sampler.grammar_exhausted():
                return _GRAMMAR_EXHAUSTED
            tokens.push_back(token)
            n -= 1
            self.remaining -= 1
            if not self.ignore_eos and llama.llama_vocab_is_eog(vocab, token):
                return 1
            got = llama.llama_token_to_piece(vocab, token, buf, sizeof(buf), 0, False)
            if got >= 0:
                text.append(buf, got)
                self.window.append(buf, got)
            else:
                big.resize(-got)
                got = llama.llama_token_to_piece(vocab, token, big.data(), big.size(), 0, False)
                text.append(big.data(), max(got, 0))
                self.window.append(big.data(), max(got, 0))
            if self._stopped():
                return 2
            if self.remaining <= 0 or self.pos >= self.ctx.n_ctx_seq:
                return 3
            if self.ctx.abort_state.requested:
                rc[0] = 2
                return 0
            b.n_tokens = 1
            b.token[0] = token
            b.pos[0] = self.pos
            b.n_seq_id[0] = 1
            b.seq_id[0][0] = self.seq_id
            b.logits[0] = 1
            rc[0] = llama.llama_decode(cctx, b[0])
            if rc[0] != 0:
                return 0
            self.pos += 1
        return 0

    cdef llama_token _sample(self) noexcept nogil:
        """The chain's token from the last output row. A greedy-only chain takes the first maximum
        itself (SIMD, includes/argmax.h): llama.cpp's greedy stage first copies every logit into a
        candidate array, ~0.1 ms for 32k tokens."""
        if self.sampler.argmax_only:
            return llamacore_argmax(llama.llama_get_logits_ith(self.ctx.ptr, -1), self.ctx.model.n_vocab)
        return llama.llama_sampler_sample(self.sampler.chain, self.ctx.ptr, -1)

    cdef bint _stopped(self) noexcept nogil:
        """Whether the text now holds a stop string; keeps only the tail a stop could start in (a
        stop wholly inside that tail would have been found when its last byte came)."""
        cdef size_t k
        if self.stops.empty():
            self.window.clear()
            return False
        for k in range(self.stops.size()):
            if self.window.find(self.stops[k]) != npos:
                return True
        if self.window.size() > self.keep:
            self.window.erase(0, self.window.size() - self.keep)
        return False
