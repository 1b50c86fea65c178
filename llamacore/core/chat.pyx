# llama.cpp's chat layer (common/chat.h, declared in includes/chat.pxd): a model's chat templates
# rendered by llama.cpp's own Jinja engine, with the tool-call grammar, triggers and parser each
# model family needs, and the parser that turns generated text back into content, reasoning and
# tool calls (whole or partial, as it streams). Messages and tools cross as JSON text in OpenAI's
# shapes, exactly as llama-server hands them over.
_REASONING_FORMATS = ("none", "auto", "deepseek", "deepseek-legacy")
_TRIGGER_KINDS = {lc.COMMON_GRAMMAR_TRIGGER_TYPE_TOKEN: "token", lc.COMMON_GRAMMAR_TRIGGER_TYPE_WORD: "word",
                  lc.COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN: "pattern",
                  lc.COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN_FULL: "pattern_full"}


cdef str _text(const string & s):
    return s.decode("utf-8", "replace")


cdef string _bytes(object text):
    return text.encode("utf-8", "surrogatepass")


cdef lc.common_json _json_of(object value) except *:
    cdef string text = _bytes(json.dumps(value, ensure_ascii=False))
    cdef lc.common_json parsed
    with nogil:
        parsed = lc.common_json.parse(text)
    return parsed


cdef lc.common_reasoning_format _reasoning_format(str name) except *:
    if name not in _REASONING_FORMATS:
        raise ValueError(f"reasoning_format must be one of {', '.join(_REASONING_FORMATS)}, not {name!r}")
    return lc.common_reasoning_format_from_name(_bytes(name))


lc.common_log_set_verbosity_thold(-1)     # common/'s own log (unparsed-output warnings): the callers report


def _error(exc):
    """A C++ exception (converted by Cython to RuntimeError and the like) as the ValueError it is:
    the template, messages or tools could not be used."""
    return ValueError(str(exc))


cdef class ChatTemplates:
    """A model's chat templates (its default and any named variants, such as tool_use), compiled by
    llama.cpp's Jinja engine.

    With a `model`, its GGUF templates and BOS/EOS texts are used unless `template` (Jinja source)
    overrides them; without one, `template` is required. A template that does not compile raises
    ValueError with the engine's message. Rendering is thread-safe and releases the GIL.
    """

    def __cinit__(self):
        self.ptr = NULL

    def __init__(self, Model model=None, str template="", str bos_token="", str eos_token=""):
        if model is None and not template:
            raise ValueError("a chat template is needed when no model is given")
        if model is not None and model.ptr == NULL:
            raise ValueError("the model is closed")
        cdef const llama.llama_model * m = model.ptr if model is not None else NULL
        cdef string src = _bytes(template)
        cdef string bos = _bytes(bos_token)
        cdef string eos = _bytes(eos_token)
        try:
            with nogil:
                self.ptr = lc.common_chat_templates_init(m, src, bos, eos).release()
        except Exception as exc:
            raise _error(exc) from None

    def __dealloc__(self):
        if self.ptr != NULL:
            lc.common_chat_templates_free(self.ptr)
            self.ptr = NULL

    def source(self, str variant=""):
        """The Jinja source of the default template, or of a named variant ("" when there is none)."""
        return _text(lc.common_chat_templates_source(self.ptr, _bytes(variant)))

    @property
    def explicit(self):
        """Whether the template was given rather than read from the model."""
        return lc.common_chat_templates_was_explicit(self.ptr)

    @property
    def supports_thinking(self):
        """Whether the template renders differently with enable_thinking on and off."""
        return lc.common_chat_templates_support_enable_thinking(self.ptr)

    @property
    def caps(self):
        """What the template can render, as llama-server's /props reports it (supports_tools, ...)."""
        return {_text(k): bool(v) for k, v in lc.common_chat_templates_get_caps(self.ptr)}

    def apply(self, list messages not None, *, list tools=None, str tool_choice="auto",
              parallel_tool_calls=None, bint add_generation_prompt=True, continue_final_message=None,
              str reasoning_format="auto", bint enable_thinking=True, dict template_kwargs=None,
              json_schema=None, str grammar="", bint add_bos=False, bint add_eos=False):
        """Render `messages` (OpenAI chat messages; image parts already replaced by
        {"type": "media_marker", "text": marker}) with `tools` (OpenAI tools) offered.

        `tool_choice` is auto, required or none; `parallel_tool_calls` defaults to what the
        template supports; `continue_final_message` (True, "content" or "reasoning_content")
        leaves the last assistant message open; `template_kwargs` are extra template variables
        (values any JSON). Returns ChatParams: the prompt, and the grammar, triggers, stops and
        parser of the answer. ValueError when the messages, tools or template cannot be used.
        """
        cdef lc.common_chat_templates_inputs inputs
        cdef lc.common_chat_params out
        try:
            inputs.messages = lc.common_chat_msgs_parse_oaicompat(_json_of(messages))
            inputs.tools = lc.common_chat_tools_parse_oaicompat(_json_of(tools or []))
            inputs.tool_choice = lc.common_chat_tool_choice_parse_oaicompat(_bytes(tool_choice))
        except Exception as exc:
            raise _error(exc) from None
        if parallel_tool_calls is None:
            parallel_tool_calls = self.caps.get("supports_parallel_tool_calls", False)
        inputs.parallel_tool_calls = bool(parallel_tool_calls)
        inputs.add_generation_prompt = add_generation_prompt
        if continue_final_message is not None:
            inputs.continue_final_message = lc.common_chat_continuation_parse(_json_of(continue_final_message))
        inputs.use_jinja = True
        inputs.reasoning_format = _reasoning_format(reasoning_format)
        inputs.enable_thinking = enable_thinking
        for key, value in (template_kwargs or {}).items():
            inputs.chat_template_kwargs[_bytes(key)] = _bytes(json.dumps(value, ensure_ascii=False))
        if json_schema is not None:
            inputs.json_schema = _bytes(json.dumps(json_schema, ensure_ascii=False))
        inputs.grammar = _bytes(grammar)
        inputs.add_bos = add_bos
        inputs.add_eos = add_eos
        try:
            with nogil:
                out = lc.common_chat_templates_apply(self.ptr, inputs)
        except Exception as exc:
            raise _error(exc) from None
        cdef ChatParams params = ChatParams.__new__(ChatParams)
        params.c = out
        params.prompt = _text(out.prompt)
        return params


cdef class ChatParams:
    """What rendering a conversation gives: the prompt, and how to constrain and read the answer.

    `grammar` (GBNF, "" for none) constrains tool calls; when `grammar_lazy` it applies only from
    the first of `grammar_triggers` ((kind, value, token): kind is word, pattern, pattern_full or
    token). `preserved_tokens` are special tokens the answer's text keeps; `additional_stops` end
    it; `generation_prompt` is what the prompt opened the answer with (such as "<think>").
    """

    @property
    def format(self):
        return _text(string(lc.common_chat_format_name(self.c.format)))

    @property
    def grammar(self):
        return _text(self.c.grammar)

    @property
    def grammar_lazy(self):
        return self.c.grammar_lazy

    @property
    def grammar_triggers(self):
        return [(_TRIGGER_KINDS[t.type], _text(t.value), t.token) for t in self.c.grammar_triggers]

    @property
    def preserved_tokens(self):
        return [_text(t) for t in self.c.preserved_tokens]

    @property
    def additional_stops(self):
        return [_text(t) for t in self.c.additional_stops]

    @property
    def generation_prompt(self):
        return _text(self.c.generation_prompt)

    @property
    def supports_thinking(self):
        return self.c.supports_thinking

    @property
    def thinking_start_tag(self):
        return _text(self.c.thinking_start_tag)

    @property
    def thinking_end_tags(self):
        return [_text(t) for t in self.c.thinking_end_tags]

    @property
    def has_parser(self):
        """Whether the answer has a format to parse (tool calls, reasoning); False for plain content."""
        return not self.c.parser.empty()


def regex_escape(str text not None):
    """`text` as a regular expression that matches it literally, as llama.cpp escapes a trigger word."""
    return _text(lc.regex_escape(_bytes(text)))


cdef class ChatParser:
    """Reads a model's answer as llama.cpp does: content, reasoning_content and tool calls, from the
    text generated so far (partial) or all of it.

    `update(text)` appends generated text and returns the changes since the last call, as
    (reasoning_delta, content_delta, tool_index, tool_id, tool_name, arguments_delta) tuples
    (tool_index -1 when the change is not a tool call's): a tool call's id and name come first,
    then its arguments as they grow. Markup that may still turn out to be a tool call is held back.
    `finish()` parses the whole answer; one that does not match the format comes back whole as
    content. `new_id` makes tool call ids for calls the model gave none.
    """

    def __init__(self, ChatParams params not None, *, str reasoning_format="auto", bint parse_tool_calls=True,
                 bint continuation=False, new_id=None):
        self.params = lc.common_chat_parser_params(params.c)
        self.params.reasoning_format = _reasoning_format(reasoning_format)
        self.params.parse_tool_calls = parse_tool_calls
        self.params.is_continuation = continuation
        self.new_id = new_id
        self.failed = False
        try:
            if not params.c.parser.empty():
                with nogil:
                    self.params.parser.load(params.c.parser)
            if continuation:
                # the prefill is not an answer's delta
                self.msg = lc.common_chat_parse(string(), True, self.params)
        except Exception as exc:
            raise _error(exc) from None

    cdef void _assign_ids(self, lc.common_chat_msg & msg) except *:
        """Each call keeps the id it first had (llama-server's ensure_tool_call_ids_set): the model's,
        else one from new_id. Without new_id a call has no id until the model's is parsed."""
        cdef size_t i
        for i in range(msg.tool_calls.size()):
            if self.ids.size() <= i:
                given = _text(msg.tool_calls[i].id)
                if not given and self.new_id is None:
                    break
                self.ids.push_back(_bytes(given or self.new_id()))
            msg.tool_calls[i].id = self.ids[i]

    def update(self, str added not None):
        """Append generated text; the deltas it adds to the message (see the class)."""
        cdef lc.common_chat_msg new_msg
        self.generated.append(_bytes(added))
        try:
            with nogil:
                new_msg = lc.common_chat_parse(self.generated, True, self.params)
        except Exception:
            return []                   # not parseable yet: nothing to send until more text comes
        if new_msg.empty():
            return []
        return self._advance(new_msg)

    cdef list _advance(self, lc.common_chat_msg & new_msg):
        """Make `new_msg` the message so far: its ids kept, and the deltas from the previous one."""
        self._assign_ids(new_msg)
        cdef vector[lc.common_chat_msg_diff] diffs = lc.common_chat_msg_diff.compute_diffs(self.msg, new_msg)
        self.msg = new_msg
        return [_diff(d) for d in diffs]

    def finish(self):
        """Parse the whole answer: the deltas still to send, as update() gives them. An answer that
        does not match the format is all content (`failed` is then True)."""
        cdef lc.common_chat_msg new_msg
        try:
            with nogil:
                new_msg = lc.common_chat_parse(self.generated, False, self.params)
        except Exception:
            self.failed = True             # new_msg is still empty: the parse threw before assigning it
            new_msg.role = b"assistant"
            new_msg.content = self.generated
        return self._advance(new_msg)

    @property
    def text(self):
        """The generated text so far."""
        return _text(self.generated)

    @property
    def message(self):
        """The message parsed so far: {"role", "content", "reasoning_content"?, "tool_calls"?} in
        OpenAI's shape (tool call arguments as JSON text)."""
        return json.loads(_text(self.msg.to_json_oaicompat(False).dump_safe(-1)))


cdef tuple _diff(const lc.common_chat_msg_diff & d):
    cdef Py_ssize_t index = -1 if d.tool_call_index == <size_t> -1 else <Py_ssize_t> d.tool_call_index
    return (_text(d.reasoning_content_delta), _text(d.content_delta), index, _text(d.tool_call_delta.id),
            _text(d.tool_call_delta.name), _text(d.tool_call_delta.arguments))
