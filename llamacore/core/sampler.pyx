# Sampler: a llama.cpp sampler chain, so token selection runs in C on the context's logits.
# Each add_* appends one stage and returns the sampler, so chains read as one expression.


_SELECTING_STAGES = ("greedy", "dist", "mirostat", "mirostat_v2")
_TRUNCATING_STAGES = ("top_k", "top_p", "min_p", "typical", "xtc", "top_n_sigma")


cdef class Sampler:
    """A chain of llama.cpp samplers, e.g. ``Sampler().top_k(40).top_p(0.95).temp(0.8).dist(42)``.

    A chain must end with a selecting stage (greedy, dist or mirostat) before `sample`.
    """

    def __cinit__(self):
        cdef llama.llama_sampler_chain_params params = llama.llama_sampler_chain_default_params()
        params.no_perf = True
        self.chain = llama.llama_sampler_chain_init(params)
        self.stages = []
        self.n_vocab = 0
        if self.chain == NULL:
            raise MemoryError()

    def __dealloc__(self):
        if self.chain != NULL:
            llama.llama_sampler_free(self.chain)
            self.chain = NULL

    def __repr__(self):
        return f"<Sampler {' -> '.join(self.stages) or 'empty'}>"

    cdef _add(self, llama.llama_sampler * stage, str name):
        if stage == NULL:
            raise ValueError(f"could not create sampler stage {name}: {_errors_since_mark() or 'rejected'}")
        llama.llama_sampler_chain_add(self.chain, stage)   # the chain now owns the stage
        self.stages.append(name)
        self.argmax_only = self.stages == ["greedy"]
        return self

    def greedy(self):
        return self._add(llama.llama_sampler_init_greedy(), "greedy")

    def dist(self, seed=None):
        """Sample from the distribution; seed None picks a random seed."""
        cdef uint32_t s = llama.LLAMA_DEFAULT_SEED if seed is None or seed < 0 else (<uint32_t>(seed & 0xFFFFFFFF))
        return self._add(llama.llama_sampler_init_dist(s), "dist")

    def temp(self, float t):
        return self._add(llama.llama_sampler_init_temp(t), "temp")

    def top_k(self, int k):
        return self._add(llama.llama_sampler_init_top_k(k), "top_k")

    def top_p(self, float p, size_t min_keep=1):
        return self._add(llama.llama_sampler_init_top_p(p, min_keep), "top_p")

    def min_p(self, float p, size_t min_keep=1):
        return self._add(llama.llama_sampler_init_min_p(p, min_keep), "min_p")

    def typical(self, float p, size_t min_keep=1):
        return self._add(llama.llama_sampler_init_typical(p, min_keep), "typical")

    def temp_ext(self, float t, float delta=0.0, float exponent=1.0):
        """Dynamic temperature (llama-server's dynatemp_range and dynatemp_exponent): t +- delta by entropy."""
        return self._add(llama.llama_sampler_init_temp_ext(t, delta, exponent), "temp_ext")

    def xtc(self, float p, float t, size_t min_keep=1, seed=None):
        """Exclude Top Choices: with probability p, drop every token above threshold t but the least likely."""
        cdef uint32_t s = llama.LLAMA_DEFAULT_SEED if seed is None else (<uint32_t>(seed & 0xFFFFFFFF))
        return self._add(llama.llama_sampler_init_xtc(p, t, min_keep, s), "xtc")

    def top_n_sigma(self, float n):
        """Keep the tokens whose logit is within n standard deviations of the largest."""
        return self._add(llama.llama_sampler_init_top_n_sigma(n), "top_n_sigma")

    def dry(self, Model model not None, float multiplier, float base=1.75, int allowed_length=2,
            int penalty_last_n=64, sequence_breakers=("\n", ":", "\"", "*")):
        """Don't Repeat Yourself: penalise tokens that would extend a repetition longer than
        allowed_length, by multiplier * base ** (length - allowed_length); sequence_breakers end one."""
        if penalty_last_n < 0:
            raise ValueError("dry_penalty_last_n must be >= 0 (0 = off)")
        cdef list encoded = [b.encode() for b in sequence_breakers]
        cdef vector[const char *] c_breakers
        for b in encoded:
            c_breakers.push_back(<const char *> b)
        return self._add(llama.llama_sampler_init_dry(model.vocab, multiplier, base, allowed_length, penalty_last_n,
                                                       c_breakers.data(), c_breakers.size()), "dry")

    def mirostat(self, int n_vocab, seed=None, float tau=5.0, float eta=0.1, int m=100):
        """Mirostat 1 (llama-server's mirostat: 1): selects the token, as mirostat_v2 does."""
        cdef uint32_t s = llama.LLAMA_DEFAULT_SEED if seed is None else (<uint32_t>(seed & 0xFFFFFFFF))
        return self._add(llama.llama_sampler_init_mirostat(n_vocab, s, tau, eta, m), "mirostat")

    def mirostat_v2(self, seed=None, float tau=5.0, float eta=0.1):
        cdef uint32_t s = llama.LLAMA_DEFAULT_SEED if seed is None else (<uint32_t>(seed & 0xFFFFFFFF))
        return self._add(llama.llama_sampler_init_mirostat_v2(s, tau, eta), "mirostat_v2")

    def penalties(self, int last_n=64, float repeat=1.0, float frequency=0.0, float presence=0.0):
        """Repetition (multiplicative), frequency and presence (additive) penalties over last_n tokens."""
        if not repeat > 0.0:
            raise ValueError(f"repeat penalty must be > 0, got {repeat}")
        if last_n < -1:
            raise ValueError("last_n must be >= -1 (-1 = whole context)")
        return self._add(llama.llama_sampler_init_penalties(0, last_n, repeat, frequency, presence), "penalties")

    def logit_bias(self, Model model not None, bias):
        """Add bias[token] to the logit of each token ({token_id: bias})."""
        items = list(dict(bias).items())
        cdef vector[llama.llama_logit_bias] arr = vector[llama.llama_logit_bias](len(items))
        for k, (token, value) in enumerate(items):
            model._check_token(int(token))
            arr[k].token = int(token)
            arr[k].bias = float(value)
        self.n_vocab = model.n_vocab
        # llama.cpp copies the array: it need not outlive the call
        return self._add(llama.llama_sampler_init_logit_bias(model.n_vocab, arr.size(), arr.data()), "logit_bias")

    def grammar(self, Model model not None, str grammar, str root="root", trigger_patterns=None, trigger_tokens=None,
                prefill=None):
        """Constrain tokens to a GBNF grammar; ValueError with llama.cpp's reason if it does not parse.

        With `trigger_patterns` (regular expressions) or `trigger_tokens`, the grammar is lazy, as
        llama.cpp's tool-call grammars are: tokens are free until the text matches a pattern (from its
        first group on) or a trigger token is sampled, and constrained from there. `prefill` tokens are
        taken by the grammar first, as if generated: llama.cpp's chat grammars begin with the generation
        prompt that the prompt already ends with (ValueError when the grammar refuses one of them).
        """
        if not grammar.strip():
            raise ValueError("grammar is empty")
        late = [st for st in self.stages if st in _TRUNCATING_STAGES or st in _SELECTING_STAGES]
        if late:
            # after a truncation the grammar may reject every remaining candidate; the selected
            # token is then accepted anyway and llama.cpp aborts the process
            raise ValueError(f"add the grammar before {', '.join(late)}: a grammar must constrain "
                             f"the full candidate list before it is truncated or a token is selected")
        cdef bytes g = grammar.encode()
        cdef bytes r = root.encode()
        cdef const char * g_p = g
        cdef const char * r_p = r
        cdef list patterns = [p.encode() for p in (trigger_patterns or ())]
        cdef vector[const char *] c_patterns
        cdef vector[llama_token] c_tokens
        for p in patterns:
            c_patterns.push_back(<const char *> p)
        for t in (trigger_tokens or ()):
            model._check_token(int(t))
            c_tokens.push_back(int(t))
        cdef list taken = [int(t) for t in (prefill or ())]
        for t in taken:
            model._check_token(t)
        cdef llama.llama_sampler * stage
        _error_mark()
        with nogil:               # a large grammar takes a while to build its first stacks
            if c_patterns.empty() and c_tokens.empty():
                stage = llama.llama_sampler_init_grammar(model.vocab, g_p, r_p)
            else:
                stage = llama.llama_sampler_init_grammar_lazy_patterns(
                    model.vocab, g_p, r_p, c_patterns.data(), c_patterns.size(), c_tokens.data(), c_tokens.size())
        if stage != NULL and taken:
            try:
                _take(stage, taken, model)
            except ValueError:
                llama.llama_sampler_free(stage)
                raise
        self._add(stage, "grammar")
        self.grammars.push_back(stage)
        self.n_vocab = model.n_vocab
        return self

    cdef int _check_chain(self) except -1:
        if self.chain == NULL or not self.stages:
            raise ValueError("sampler chain is empty")
        last = self.stages[-1]
        if last not in _SELECTING_STAGES:
            # llama.cpp asserts (aborts the process) when no stage selected a token
            raise ValueError(f"the sampler chain must end with a selecting stage "
                             f"({', '.join(_SELECTING_STAGES)}), not {last}")
        return 0

    def sample(self, Context ctx not None, int idx=-1):
        """Pick a token from output `idx` of the last decode and accept it into the chain."""
        self._check_chain()
        cdef float * logits = llama.llama_get_logits_ith(ctx.ptr, idx) if ctx._n_outputs else NULL
        if logits == NULL:
            raise IndexError(f"no logits for batch index {idx}")
        cdef llama_token token
        if self.argmax_only:
            # llama.cpp's greedy stage first copies all n_vocab logits into a candidate array
            # (~0.1 ms for 32k tokens); a SIMD argmax picks the same token (first maximum).
            return llamacore_argmax(logits, ctx.model.n_vocab)
        with nogil:
            token = llama.llama_sampler_sample(self.chain, ctx.ptr, idx)
        if self.grammar_exhausted():
            raise _grammar_budget_error()
        return token

    cdef bint grammar_exhausted(self) noexcept nogil:
        """Whether a grammar stage gave up its last operation past the work limit (vendor patch 0017)."""
        cdef size_t i
        for i in range(self.grammars.size()):
            if llama.llama_sampler_grammar_exhausted(self.grammars[i]):
                return True
        return False

    def accept(self, int token):
        """Tell stateful stages (penalties, grammar) about a token chosen elsewhere.

        With a grammar stage the token must be in the vocabulary and allowed by the grammar
        (ValueError otherwise; llama.cpp would abort the process).
        """
        cdef int i
        if self.n_vocab and not 0 <= token < self.n_vocab:
            raise IndexError(f"token id {token} is out of range for a vocabulary of {self.n_vocab}")
        for i, name in enumerate(self.stages):
            if name != "grammar":
                continue
            if not _allows(llama.llama_sampler_chain_get(self.chain, i), token):
                raise ValueError(f"token {token} is not allowed by the grammar at this point")
        llama.llama_sampler_accept(self.chain, token)

    def reset(self):
        llama.llama_sampler_reset(self.chain)

    @property
    def seed(self):
        return llama.llama_sampler_get_seed(self.chain)


cdef bint _allows(llama.llama_sampler * stage, llama.llama_token token):
    """Whether a grammar stage allows `token` next: it applies to a one-candidate list and leaves the
    logit alone, or sets it to -inf."""
    cdef llama.llama_token_data item
    cdef llama.llama_token_data_array one
    item.id = token
    item.logit = 0.0
    item.p = 0.0
    one.data = &item
    one.size = 1
    one.selected = -1
    one.sorted = False
    llama.llama_sampler_apply(stage, &one)
    return item.logit > -1e30


cdef int _take(llama.llama_sampler * stage, list tokens, Model model) except -1:
    """Accept `tokens` into a grammar stage, each checked first: llama.cpp throws (and the process
    aborts) when a grammar accepts a token it does not allow."""
    for t in tokens:
        if not _allows(stage, t):
            raise ValueError(f"the grammar does not allow the prefilled token {t} "
                             f"({model.token_to_piece(t, True)!r})")
        llama.llama_sampler_accept(stage, t)
    return 0


# the default grammar work limit: about 0.15-0.3 s of one core for one operation, some 20 times what a
# JSON schema's grammar needs on a 150k-token vocabulary; LLAMACORE_GRAMMAR_WORK_LIMIT overrides it
DEFAULT_GRAMMAR_WORK_LIMIT = 20_000_000
_grammar_work_limit = 0


def set_grammar_work_limit(int steps):
    """Bound the work of one grammar operation (first stacks, one token's constraint, one accept) in
    steps of llama.cpp's grammar stacks, process-wide; 0 = unbounded. Past it a grammar is refused at
    creation, or ends its generation with GrammarBudgetError (vendor patch 0017)."""
    global _grammar_work_limit
    if steps < 0:
        raise ValueError("the grammar work limit is a number of steps >= 0")
    _grammar_work_limit = steps
    llama.llama_grammar_set_work_limit(steps)


def _grammar_budget_error():
    return GrammarBudgetError(
        f"the grammar took more than {grammar_work_limit()} steps at one token: it is too ambiguous to follow "
        "in bounded time (optional items inside repetitions, e.g. (\"a\"?){0,150}); simplify it")


def _init_grammar_work_limit():
    raw = os.environ.get("LLAMACORE_GRAMMAR_WORK_LIMIT", "")
    set_grammar_work_limit(int(raw) if raw.strip().isdigit() else DEFAULT_GRAMMAR_WORK_LIMIT)


def grammar_work_limit():
    """The current grammar work limit (0: unbounded)."""
    return _grammar_work_limit
