# Declarations from llama.cpp's common/chat.h (and what its signatures name from common/json.h,
# common/common.h and common/peg-parser.h), mirrored plainly: the chat layer llamacore binds
# (vendor/common/CMakeLists.txt builds it). Only what llamacore calls is declared; the C++
# compiler checks them against the real headers. Functions that throw are declared `except +`.
from libc.stdint cimport int64_t
from libcpp cimport bool as cbool
from libcpp.map cimport map as cppmap
from libcpp.string cimport string
from libcpp.vector cimport vector

from llamacore.includes.llama cimport llama_model, llama_token


cdef extern from "json.h" nogil:
    cdef cppclass common_json:
        @staticmethod
        common_json parse(const string & text) except +
        string dump(int indent) except +
        string dump_safe(int indent) except +


cdef extern from "common.h" nogil:
    enum common_reasoning_format:
        COMMON_REASONING_FORMAT_NONE
        COMMON_REASONING_FORMAT_AUTO
        COMMON_REASONING_FORMAT_DEEPSEEK_LEGACY
        COMMON_REASONING_FORMAT_DEEPSEEK

    enum common_grammar_trigger_type:
        COMMON_GRAMMAR_TRIGGER_TYPE_TOKEN
        COMMON_GRAMMAR_TRIGGER_TYPE_WORD
        COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN
        COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN_FULL

    cdef cppclass common_grammar_trigger:
        common_grammar_trigger_type type
        string value
        llama_token token

    string regex_escape(const string & s) except +


cdef extern from "peg-parser.h" nogil:
    cdef cppclass common_peg_arena:
        cbool empty()
        void load(const string & data) except +


cdef extern from "chat.h" nogil:
    cdef cppclass common_chat_tool_call:
        string name
        string arguments
        string id

    cdef cppclass common_chat_msg:
        string role
        string content
        vector[common_chat_tool_call] tool_calls
        string reasoning_content
        common_json to_json_oaicompat(cbool concat_typed_text) except +
        cbool empty()

    cdef cppclass common_chat_msg_diff:
        string reasoning_content_delta
        string content_delta
        size_t tool_call_index
        common_chat_tool_call tool_call_delta

        @staticmethod
        vector[common_chat_msg_diff] compute_diffs(const common_chat_msg & msg_prv,
                                                   const common_chat_msg & msg_new) except +

    cdef cppclass common_chat_tool:
        pass

    enum common_chat_tool_choice:
        COMMON_CHAT_TOOL_CHOICE_AUTO
        COMMON_CHAT_TOOL_CHOICE_REQUIRED
        COMMON_CHAT_TOOL_CHOICE_NONE

    enum common_chat_format:
        COMMON_CHAT_FORMAT_CONTENT_ONLY

    enum common_chat_continuation:
        COMMON_CHAT_CONTINUATION_NONE
        COMMON_CHAT_CONTINUATION_AUTO
        COMMON_CHAT_CONTINUATION_REASONING
        COMMON_CHAT_CONTINUATION_CONTENT

    cdef cppclass common_chat_templates_inputs:
        vector[common_chat_msg] messages
        string grammar
        string json_schema
        cbool add_generation_prompt
        common_chat_continuation continue_final_message
        cbool use_jinja
        vector[common_chat_tool] tools
        common_chat_tool_choice tool_choice
        cbool parallel_tool_calls
        common_reasoning_format reasoning_format
        cbool enable_thinking
        cppmap[string, string] chat_template_kwargs
        cbool add_bos
        cbool add_eos
        cbool force_pure_content

    cdef cppclass common_chat_params:
        common_chat_format format
        string prompt
        string grammar
        cbool grammar_lazy
        string generation_prompt
        cbool supports_thinking
        string thinking_start_tag
        vector[string] thinking_end_tags
        vector[common_grammar_trigger] grammar_triggers
        vector[string] preserved_tokens
        vector[string] additional_stops
        string parser

    cdef cppclass common_chat_parser_params:
        common_chat_format format
        common_reasoning_format reasoning_format
        cbool reasoning_in_content
        string generation_prompt
        cbool parse_tool_calls
        cbool is_continuation
        cbool echo
        common_peg_arena parser
        common_chat_parser_params()
        common_chat_parser_params(const common_chat_params & chat_params)

    cdef struct common_chat_templates

    void common_chat_templates_free(common_chat_templates * tmpls)
    # returns a std::unique_ptr with a deleter that calls common_chat_templates_free
    cdef cppclass common_chat_templates_ptr:
        common_chat_templates * get()
        common_chat_templates * release()
    common_chat_templates_ptr common_chat_templates_init(const llama_model * model,
                                                         const string & chat_template_override,
                                                         const string & bos_token_override,
                                                         const string & eos_token_override) except +
    cbool common_chat_templates_was_explicit(const common_chat_templates * tmpls)
    string common_chat_templates_source(const common_chat_templates * tmpls, const string & variant) except +
    common_chat_params common_chat_templates_apply(const common_chat_templates * tmpls,
                                                   const common_chat_templates_inputs & inputs) except +
    const char * common_chat_format_name(common_chat_format format)
    common_chat_msg common_chat_parse(const string & input, cbool is_partial,
                                      const common_chat_parser_params & params) except +
    const char * common_reasoning_format_name(common_reasoning_format format)
    common_reasoning_format common_reasoning_format_from_name(const string & format) except +
    common_chat_tool_choice common_chat_tool_choice_parse_oaicompat(const string & tool_choice) except +
    cbool common_chat_templates_support_enable_thinking(const common_chat_templates * chat_templates)
    vector[common_chat_msg] common_chat_msgs_parse_oaicompat(const common_json & messages) except +
    vector[common_chat_tool] common_chat_tools_parse_oaicompat(const common_json & tools) except +
    common_chat_continuation common_chat_continuation_parse(const common_json & value) except +
    cppmap[string, cbool] common_chat_templates_get_caps(const common_chat_templates * chat_templates) except +


cdef extern from "log.h" nogil:
    void common_log_set_verbosity_thold(int verbosity)      # messages above it are dropped unformatted
